"""Hotspot findings on real H200 traces: what dominates step time, pushed only above ~5 % (GROUND_TRUTH.md)."""

from __future__ import annotations

import json
import re

import pytest
from conftest import REPO, joined_findings, joined_section, load_shared

import traceanalyzer as ta
from traceanalyzer.analyzers import hotspots
from traceanalyzer.findings import PUSH_THRESHOLD, Severity
from traceanalyzer.schema import DEVICE
from traceanalyzer.vocabulary import GRAPH_REPLAYED


def test_gpt_train_top_ops_match_key_averages(gpt_train):
    found = joined_findings(hotspots, gpt_train)
    by_name = {f.where["name"]: f for f in found}
    assert [f.where["name"] for f in found[:3]] == ["aten::mm", "aten::mul", "aten::copy_"]
    assert by_name["aten::mm"].evidence["total_ns"] == pytest.approx(52.95e6, rel=0.005)
    assert by_name["aten::mm"].evidence["count"] == 513
    assert by_name["aten::mul"].evidence["total_ns"] == pytest.approx(37.76e6, rel=0.005)
    assert by_name["aten::copy_"].evidence["total_ns"] == pytest.approx(35.34e6, rel=0.005)
    assert [by_name[n].where["category"] for n in ("aten::mm", "aten::mul", "aten::copy_")] == [
        "gemm",
        "elementwise",
        "copy",
    ]
    assert "tensor cores" in by_name["aten::mm"].advice
    assert "torch.compile" in by_name["aten::mul"].advice
    assert ".contiguous()" in by_name["aten::copy_"].advice


def test_hotspots_under_five_percent_are_reported_not_pushed(gpt_train):
    found = [f for f in gpt_train.findings() if f.analyzer == "hotspots"]
    assert found
    for f in found:
        pushed = f.severity in (Severity.HIGH, Severity.MEDIUM)
        assert pushed == f.pushed == (f.step_share >= PUSH_THRESHOLD and not f.covered_by), f.title


def test_a_gemm_hotspot_saving_is_modelled_against_the_peak_and_others_are_not_estimated(gpt_train):
    by_name = {f.where["name"]: f for f in joined_findings(hotspots, gpt_train)}
    mm = by_name["aten::mm"]
    assert mm.basis.value == "modelled" and "80% of its roofline" in mm.model
    assert "compute-bound: the device's dense bf16 peak" in mm.model  # a 1024-wide GEMM: against the peak
    assert 0 < mm.saving_ns < mm.concerns_ns
    assert by_name["aten::mul"].basis.value == "not estimated" and by_name["aten::mul"].saving_ns == 0


def test_many_tiny_calls_rank_by_total():
    trace = load_shared("h200", "launch_bound", "launch_bound.json.gz")
    found = joined_findings(hotspots, trace)
    assert {f.where["name"] for f in found} == {"aten::mul", "aten::add", "aten::sin", "aten::clamp"}
    assert all(f.evidence["count"] == 750 and f.evidence["mean_ns"] < 2000 for f in found)
    assert [f.concerns_ns for f in found] == sorted((f.concerns_ns for f in found), reverse=True)


def test_category_hotspots(gpt_train):
    table = {row["name"]: row for row in gpt_train.hotspots("category").to_dict(orient="records")}
    assert {"gemm", "elementwise", "copy", "attention"} <= set(table)
    assert sum(row["share"] for row in table.values()) == pytest.approx(1.0)


# ---------------------------------------------------------------- graph-replayed work

GRAPHS = REPO / "sample_traces"


@pytest.fixture(scope="module")
def graph_replay() -> tuple[ta.Trace, dict]:
    folder = GRAPHS / "cuda_graph_replay"
    return ta.load(folder / "cuda_graph_replay.json.gz"), json.loads(
        (folder / "cuda_graph_replay.meta.json").read_text()
    )


def test_graph_replayed_work_has_its_own_row_in_the_op_tables(graph_replay):
    trace, _ = graph_replay
    ev = trace.events
    device = ev[ev["kind"].isin(DEVICE)]
    launched = ev["name"].astype(str).reindex(device["launch"].clip(lower=0)).to_numpy()
    replayed = device[(launched == "cudaGraphLaunch") & (device["op"] == -1)]
    ops = trace.hotspots("op_device").set_index("name")
    row = ops.loc[GRAPH_REPLAYED]
    assert len(replayed) == 5 * (49 + 24)  # README: each launch replays 49 kernels and 24 memsets
    assert (row["kind"], row["count"], row["kernels"]) == ("graph", 5, len(replayed))
    assert row["total_ns"] == replayed["dur"].sum()
    assert ops.loc["aten::copy_", "kernels"] == 5  # the eager input copy keeps only its own kernels
    assert ops["total_ns"].sum() == device.loc[(device["op"] != -1) | device.index.isin(replayed.index), "dur"].sum()
    cpu = trace.hotspots("cpu_op").set_index("name").loc[GRAPH_REPLAYED]
    assert cpu["device_self_ns"] == row["total_ns"] and cpu["total_ns"] == 0  # no host op ran it


def test_graph_launches_are_grouped_per_launch(graph_replay):
    trace, meta = graph_replay
    launches = hotspots.graph_launches(trace)
    kernel_nodes = meta["graph_node_types_in_debug_dump"]["KERNEL"] + meta["graph_node_types_in_debug_dump"]["MEMCPY"]
    assert len(launches) == 5 and sorted(launches["step"]) == [2, 3, 4, 5, 6]
    assert (launches["kernels"] == kernel_nodes).all()  # 48 kernels + the memcpy the trace shows as a kernel
    assert (launches["memsets"] == meta["graph_node_types_in_debug_dump"]["MEMSET"]).all()
    body_ns = 1e6 * min(meta["step_body_ms_cuda_events_traced"])
    assert (launches["device_ns"] < launches["span_ns"]).all() and (launches["span_ns"] < body_ns).all()
    summary = joined_section(hotspots, trace).table("graph_replays").frame.iloc[0]
    assert (summary["launches"], summary["kernels_per_launch"], summary["memsets_per_launch"]) == (5, 49, 24)
    tables = {t["id"]: t for t in trace.report()["sections"]["hotspots"]["tables"]}
    assert tables["graph_replays"]["rows"][0]["launches"] == 5 and "graph node ids" in tables["graph_replays"]["note"]


def test_graph_replayed_work_is_busy_not_idle(graph_replay):
    trace, _ = graph_replay
    replayed = trace.hotspots("op_device").set_index("name").loc[GRAPH_REPLAYED, "total_ns"]
    steps = trace.steps()
    idle = trace.report()["sections"]["health"]["facts"]
    idle_ns = next(f["value"] for f in idle if f["id"] == "idle_in_steps_ns")
    assert idle_ns <= steps["step_ns"].sum() - replayed  # the replay is device work, never counted as idle


def test_cuda_graph_replays_16_kernels_per_launch_as_key_averages_does():
    trace = ta.load(GRAPHS / "cuda_graph" / "cuda_graph.json.gz")
    summary = joined_section(hotspots, trace).table("graph_replays").frame.iloc[0]
    assert (summary["launches"], summary["kernels_per_launch"]) == (3, 16)
    row = trace.hotspots("op_device").set_index("name").loc[GRAPH_REPLAYED]
    assert row["kernels"] == 48
    assert row["total_ns"] == pytest.approx(1.374e6, rel=0.02)  # key_averages: graph_replay 1.374 ms (README)


# ---------------------------------------------------------------- advice by platform and by what the kernel is

CUDA_ADVICE = re.compile(r"CUDA|TF32|tensor core|cuDNN|cuBLAS|reduce-overhead", re.IGNORECASE)


@pytest.mark.parametrize(
    "parts",
    [
        ("public", "ascend", "msinsight", "pytorch_text", "level1", "rank0_ascend_pt"),
        ("public", "ascend", "msinsight", "st_level2_qwen3_4rank"),
    ],
)
def test_ascend_reports_get_no_cuda_advice(parts):
    found = load_shared(*parts).findings()
    assert any(f.analyzer == "hotspots" and f.where.get("category") == "gemm" for f in found)
    assert [(f.title, f.advice) for f in found if CUDA_ADVICE.search(f.advice)] == []


def test_fused_kernels_get_no_fuse_advice():
    trace = ta.load(GRAPHS / "compiled" / "compiled.json.gz")
    found = {f.where["name"]: f for f in joined_findings(hotspots, trace)}
    triton = found["triton_poi_fused_gelu_gelu_backward_view_2"]
    assert "already a fused kernel" in triton.advice and "torch.compile" not in triton.advice
    sdpa = found["aten::_cudnn_attention_backward"]
    assert "already runs a fused attention kernel" in sdpa.advice and "scaled_dot_product" not in sdpa.advice
    discovered = trace.fusion()
    assert not discovered["variant"].str.contains("_fused_adamw_").any()  # the fused optimizer is not a chain
    assert discovered["replacement"].str.contains("outside the compiled region").all()
