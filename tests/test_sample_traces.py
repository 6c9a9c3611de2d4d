"""Our own bundled traces load, and what their ground truth says comes out."""

from __future__ import annotations

from pathlib import Path

import pytest

import traceanalyzer as ta
from traceanalyzer.schema import NO_ROW, Kind

SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces"


def test_cuda_graph_kernels_are_attributed_to_their_graph_launch():
    t = ta.load(SAMPLES / "cuda_graph" / "cuda_graph.json.gz")
    ev = t.events
    kernels = ev[ev["kind"] == Kind.KERNEL.value]
    launched_by = ev.loc[kernels["launch"], "name"].astype(str)
    graph_kernels = kernels[(launched_by == "cudaGraphLaunch").to_numpy()]
    assert len(graph_kernels) == 48  # 16 per replay, 3 replays
    assert graph_kernels.groupby("step").size().tolist() == [16, 16, 16]
    assert (graph_kernels["launch"] != NO_ROW).all()


def test_fsdp_collectives_carry_their_names_from_record_param_comms():
    t = ta.load(SAMPLES / "fsdp")
    assert t.meta.ranks == [0, 1] and t.meta.world_size == 2
    comm = t.events[t.events["kind"] == Kind.COMMUNICATION.value]
    per_rank = comm[comm["step"] != NO_ROW].groupby(["rank", "collective"], observed=True).size()
    assert per_rank.loc[(0, "_allgather_base")] == 15
    assert per_rank.loc[(0, "_reduce_scatter_base")] == 9


def test_bundled_sample_matches_its_ground_truth():
    t = ta.load(SAMPLES / "unfused_ops.json.gz")
    steps = t.steps()
    assert steps["kernels"].tolist() == [229, 229, 229]
    assert steps["kernel_ns"].median() / 1e6 == pytest.approx(15.54, rel=0.01)
    assert t.hotspots("op_device").loc[0, "name"] == "aten::mm"
