"""The step model against CUDA events: on every trace we recorded with CUDA events around each step, each reported
step time, first and last included, is within 2 % of the CUDA-event time, host- and device-bound loops alike
(sample_traces/README.md, ../shared/traces/h200/GROUND_TRUTH.md)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

import traceanalyzer as ta
from tests.conftest import REPO, shared_path

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
``cuda_graph/`` is checked on its own (``test_cuda_graph_replays_end_each_step_where_cuda_events_say``): its events
are recorded after each loop body, not at its top."""


H200_RECORDED = [
    "bf16_matmul/bf16_matmul", "fp32_matmul/fp32_matmul", "fused_ops/fused_ops", "unfused_ops/unfused_ops",
    "gpt_train/gpt_train", "launch_bound/launch_bound", "memory_leak/memory_leak", "memory_peak/memory_peak",
    "sync_stalls/sync_stalls", "ddp_overlap/ddp_overlap_rank0", "ddp_overlap/ddp_overlap_rank1",
    "ddp_no_overlap/ddp_no_overlap_rank0", "ddp_no_overlap/ddp_no_overlap_rank1",
]  # fmt: skip
"""The recordings of ``../shared/traces/h200`` with CUDA-event step times (all but ``big``, too large for a test)."""


def _cuda_event_steps(meta: dict, steps: list[int]) -> tuple[dict[int, float], bool]:
    """Per traced step, its CUDA-event time (ms), and whether the first one is timed from inside the trace.

    ``scripts/record`` marks each loop body (``step_body_ms``) and the start of the next (``step_period_ms``): a
    step's period is what the step time measures, the last step's (no next start) its body plus the loop's median
    time between bodies (``prof.step()``). ``shared/tracegen`` marks after each body, so a step's interval starts
    at the end of the previous body, before ``prof.step()``: the first traced step's starts before the profiler's
    warm-up-to-active switch, which the trace does not hold."""
    if "step_body_ms_cuda_events" in meta:
        body, period = meta["step_body_ms_cuda_events"], meta["step_period_ms_cuda_events"]
        between = float(np.median([period[s] - body[s] for s in steps[:-1]])) if len(steps) > 1 else 0.0
        return {s: period[s] if s != steps[-1] else body[s] + between for s in steps}, True
    if "step_gpu_ms_traced_steps" in meta:
        return dict(zip(steps, meta["step_gpu_ms_traced_steps"], strict=True)), False
    return {s: meta["step_gpu_ms_cuda_events"][s] for s in steps}, False


def _recorded(path) -> tuple[ta.Trace, dict]:
    return ta.load(path.with_name(path.name + ".json.gz")), json.loads(
        path.with_name(path.name + ".meta.json").read_text()
    )


def _assert_steps_match_cuda_events(trace: ta.Trace, meta: dict) -> None:
    steps = trace.steps().set_index("step")["step_ns"] / 1e6
    measured, first_inside = _cuda_event_steps(meta, sorted(steps.index))
    checked = steps.index if first_inside else steps.index[1:]
    for step in checked:
        assert steps[step] == pytest.approx(measured[step], rel=0.02), f"step {step}"
    # a tracegen first step: the step lies inside its CUDA-event interval (never longer by more than 2 %)
    assert steps.iloc[0] <= measured[steps.index[0]] * 1.02


@pytest.mark.parametrize("name", [n for n, _ in RECORDED], ids=[n for n, _ in RECORDED])
def test_every_step_is_within_2_percent_of_cuda_events(name):
    """First and last steps included: a host stall at a step's start is that step's, and the last step ends where
    its own work ends (not its marker's tail, not past the trace)."""
    _assert_steps_match_cuda_events(*_recorded(SAMPLES / name))


@pytest.mark.parametrize("name", H200_RECORDED, ids=H200_RECORDED)
def test_every_h200_step_is_within_2_percent_of_cuda_events(name):
    _assert_steps_match_cuda_events(*_recorded(shared_path("h200", f"{name}.json.gz").with_name(Path(name).name)))


GATE = SAMPLES / "gate"
GATE_RUNS = sorted(str(p.relative_to(GATE)).removesuffix(".meta.json") for p in GATE.glob("*/*.meta.json"))
"""The regression gate's calibration runs (``sample_traces/gate``), each with CUDA events around every step's body."""


@pytest.mark.parametrize("name", GATE_RUNS, ids=GATE_RUNS)
def test_every_gate_step_is_within_2_percent_of_cuda_events(name):
    _assert_steps_match_cuda_events(*_recorded(GATE / name))


def test_cuda_graph_replays_end_each_step_where_cuda_events_say():
    """``cuda_graph/`` (recorded on ``shared/tracegen``'s pattern) marks a CUDA event after each loop body, before
    ``prof.step()``: on the device it fires when the body's work is done, so each interval runs from one step's
    device end to the next's. Every step's device end, the replayed kernels of its ``cudaGraphLaunch`` included,
    is where those events put it (within 2 %, last step included; the first interval starts before the window, so
    the first step is only bounded by it). The step times are cut at the host markers instead (the steps are
    host-bound: a stall at a step's start is that step's), so ``prof.step()`` after a body is in the body's step,
    not in the next interval as these events count it."""
    trace, meta = _recorded(SAMPLES / "cuda_graph" / "cuda_graph")
    steps = trace.steps().set_index("step")
    assert set(steps["bound"]) == {"host"} and (steps["kernels"] == 19).all()
    ends = (steps["device_start_ns"] + steps["device_ns"]) / 1e6
    events = meta["step_gpu_ms_cuda_events"]
    for step in steps.index[1:]:
        assert ends[step] - ends[step - 1] == pytest.approx(events[step], rel=0.02), f"step {step}"
    assert steps["step_ns"].iloc[0] / 1e6 <= events[steps.index[0]] * 1.02


@pytest.mark.parametrize(("name", "bound"), [(n, b) for n, b in RECORDED if b], ids=[n for n, b in RECORDED if b])
def test_a_loop_written_to_be_bound_by_one_side_is_bound_by_it(name, bound):
    assert set(ta.load(SAMPLES / f"{name}.json.gz").steps()["bound"]) == {bound}


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


def test_busy_time_past_a_step_is_clipped_to_it_and_the_ledger_says_how_much(tmp_path):
    """Kernels lasting 1,000 s (every 7th event of sync_stalls) run far past their steps: each step's busy time is
    what falls inside its window, and what was cut off is the ledger's."""
    doc = json.loads(gzip.decompress((SAMPLES / "sync_stalls.json.gz").read_bytes()))
    for i, event in enumerate(doc["traceEvents"]):
        if i % 7 == 0 and isinstance(event, dict) and "dur" in event:
            event["dur"] = 10**9
    (tmp_path / "long.json").write_text(json.dumps(doc))
    trace = ta.load(tmp_path / "long.json", cache=False)
    steps = trace.steps()
    assert (steps["device_busy_ns"] <= steps["step_ns"]).all() and (steps["device_idle_ns"] >= 0).all()
    clipped = trace.ledger().fact("busy_clipped_ns").value
    assert clipped == steps["busy_clipped_ns"].sum() >= 10**12  # at least one 1,000 s kernel cut to its step
    untouched = ta.load(SAMPLES / "sync_stalls.json.gz", cache=False)
    assert untouched.ledger().fact("busy_clipped_ns").value == 0, "a recorded trace's work fits its steps"
