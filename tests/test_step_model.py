"""The step model against CUDA events: on every sample we recorded with CUDA events around each step, the reported
step time is within 5 % of the CUDA-event median, host- and device-bound loops alike (sample_traces/README.md)."""

from __future__ import annotations

import json

import numpy as np
import pytest

import traceanalyzer as ta
from tests.conftest import REPO

SAMPLES = REPO / "sample_traces"
RECORDED = [
    ("gpu_bound/gpu_bound", "device"),
    ("cuda_graph_replay/cuda_graph_replay", "device"),
    ("compiled/compiled", "device"),
    ("cpu_bound/cpu_bound", "host"),
    ("cnn_h200/alexnet_ddp", "host"),
    ("memory_snapshot/train", None),
    ("unfused_ops", None),
    ("fused_ops", None),
    ("sync_stalls", None),
    ("dynamic_shapes/dynamic_shapes", None),
    ("data_loader/data_loader_rank0", None),
    ("data_loader/data_loader_rank1", "host"),
    ("fsdp/fsdp_rank0", None),
    ("fsdp/fsdp_rank1", None),
]
"""Each sample with CUDA-event step times in its meta, and the bound its loop was written to have (None: mixed).
``cuda_graph/`` is left out: its recording script is not kept and its meta does not say which step each CUDA-event
interval belongs to; ``cuda_graph_replay/`` is the documented recording of the same kind of run."""


def _cuda_event_median_ms(meta: dict, steps: list[int]) -> float:
    """The CUDA-event median of the traced steps: the recording scripts' own median, or tracegen's per-step list
    (index = step number, an event recorded at each step boundary)."""
    if "step_body_ms_cuda_events_median_traced" in meta:
        return meta["step_body_ms_cuda_events_median_traced"]
    return float(np.median([meta["step_gpu_ms_cuda_events"][s] for s in steps]))


@pytest.mark.parametrize(("name", "bound"), RECORDED, ids=[n for n, _ in RECORDED])
def test_step_time_is_within_5_percent_of_cuda_events(name, bound):
    trace = ta.load(SAMPLES / f"{name}.json.gz")
    meta = json.loads((SAMPLES / f"{name}.meta.json").read_text())
    steps = trace.steps()
    measured = _cuda_event_median_ms(meta, sorted(steps["step"]))
    assert steps["step_ns"].median() / 1e6 == pytest.approx(measured, rel=0.05)
    if bound:
        assert set(steps["bound"]) == {bound}


def test_device_bound_steps_are_longer_than_their_host_span():
    """On the GPU-bound loop the host runs far ahead: its ProfilerStep spans are ~4 ms, the steps ~18 ms."""
    steps = ta.load(SAMPLES / "gpu_bound" / "gpu_bound.json.gz").steps()
    assert (steps["step_ns"] > 4 * steps["host_ns"]).all()
    assert (steps["device_busy_ns"] <= steps["step_ns"]).all()


def test_device_work_outside_the_window_is_in_no_step_and_the_ledger_says_so():
    trace = ta.load(SAMPLES / "fsdp")
    ledger = trace.ledger()
    outside = ledger.table("outside_steps").frame.set_index("rank")
    assert outside["device_ns"].sum() == ledger.fact("outside_steps_ns").value > 0
    ev = trace.events
    assert (
        ev.loc[ev["kind"].isin(["kernel", "communication", "memcpy", "memset"]) & (ev["step"] == -1), "dur"].sum()
    ) == outside["device_ns"].sum()
    spans = trace.overlap()
    assert (spans["span_ns"].groupby(spans["rank"]).sum() <= trace.steps().groupby("rank")["step_ns"].sum()).all()
