"""Memory analysis on real traces: peaks, what holds them, leaks, and the legacy / Ascend formats."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from conftest import H200, REPO, joined_findings, joined_section, load_shared, shared_path

import traceanalyzer as ta
from traceanalyzer.analyzers import memory
from traceanalyzer.report import Options

GIB2 = 2_147_483_648
# every H200 trace but big (gpt_train with 24 steps, same peak; left out to keep this file fast)
H200_WITH_MEMORY = [d.name for d in sorted(H200.iterdir()) if d.is_dir() and d.name != "big"] if H200.exists() else []
ASCEND_LEVEL1 = ("public", "ascend", "msinsight", "pytorch_text", "level1", "rank0_ascend_pt")


def _device_peak(trace):
    peaks = trace.memory().device_peaks
    return peaks.loc[peaks["peak_allocated_bytes"].idxmax()]


def test_memory_peak_is_the_unchunked_fp32_softmax():
    trace = load_shared("h200", "memory_peak")
    peak = _device_peak(trace)
    assert peak["peak_allocated_bytes"] == 4_652_691_456
    assert peak["path"].endswith("layer3.UNCHUNKED_FP32_ATTENTION_SCORES › aten::softmax › aten::_softmax")
    assert peak["path"].startswith("ProfilerStep#2 › forward_eval")
    assert peak["alloc_bytes_at_peak"] == GIB2
    assert "HandBlock_3" in peak["module"]
    # what the trace saw allocated on top of the starting 213 MiB equals the measured one-forward peak
    assert peak["live_traced_bytes"] == 4_429_185_024
    assert peak["allocated_before_trace_bytes"] == 223_506_432


def test_memory_peak_live_blocks_put_the_planted_buffers_first():
    live = load_shared("h200", "memory_peak").memory().live_at_peak
    live = live[live["device"] == 0]
    top = live.head(2)
    assert list(top["bytes"]) == [GIB2, GIB2]
    assert set(top["op_name"]) == {"aten::bmm", "aten::_softmax"}
    assert all("UNCHUNKED_FP32_ATTENTION_SCORES" in p for p in top["path"])
    assert live["bytes"].iloc[2] < GIB2 / 8


def test_memory_peak_finding_advises_sdpa():
    found = [f for f in joined_findings(memory, load_shared("h200", "memory_peak")) if "temporar" in f.title]
    assert len(found) == 1
    assert "scaled_dot_product_attention" in found[0].advice
    assert "UNCHUNKED_FP32_ATTENTION_SCORES" in found[0].where["path"]
    assert found[0].evidence["held_bytes"] == 2 * GIB2


def test_memory_leak_grows_64_mib_per_step_from_layer1_addmm():
    m = load_shared("h200", "memory_leak").memory()
    leak = m.leaking
    assert len(leak) == 1 and leak.iloc[0]["device"] == 0
    assert leak.iloc[0]["growth_per_step_bytes"] == pytest.approx(67_108_864, rel=0.02)
    assert leak.iloc[0]["r2"] > 0.99
    unfreed = m.unfreed[m.unfreed["device"] == 0]
    assert len(unfreed) == 1
    row = unfreed.iloc[0]
    assert (row["op_name"], row["blocks"], row["steps"], row["unfreed_bytes"]) == ("aten::addmm", 6, 6, 6 * 67_108_864)
    assert row["path"].endswith("layer1.mlp_matmul_add_relu › aten::linear › aten::addmm")
    ends = m.step_memory[m.step_memory["device"] == 0]["end_bytes"]
    assert ends.diff().dropna().eq(67_108_864).all()


def test_memory_leak_finding_names_the_op_and_annotation():
    trace = load_shared("h200", "memory_leak")
    leaks = [f for f in joined_findings(memory, trace) if f.title.startswith("Memory leak")]
    assert len(leaks) == 1
    assert leaks[0].where["op"] == "aten::addmm"
    assert "layer1.mlp_matmul_add_relu" in leaks[0].advice
    assert "64.00 MiB" in leaks[0].title


def test_a_leak_is_pushed_with_the_steps_left_until_the_device_is_full():
    """64 MiB a step on a 139.8 GiB H200: the report pushes it (high, not info), says when memory runs out at this
    rate, and points to the code that keeps the tensors."""
    trace = load_shared("h200", "memory_leak")
    leak = next(f for f in trace.findings() if f.id == "memory.leak")
    assert leak.pushed and leak.severity.value == "high"
    peak = _device_peak(trace)
    left = (peak["capacity_bytes"] - peak["peak_allocated_bytes"]) // 67_108_864
    assert leak.evidence["steps_to_out_of_memory"] == pytest.approx(left, rel=0.02)
    assert f"out of memory after about {leak.evidence['steps_to_out_of_memory']:,} more steps at this rate" in (
        leak.title
    )
    assert "scenario_memory_leak" in leak.where["stack"] and "scenario_memory_leak" in leak.advice


def test_a_temporary_that_sets_the_peak_is_pushed_with_the_headroom_left():
    trace = load_shared("h200", "memory_peak")
    found = next(f for f in trace.findings() if f.id == "memory.temporaries")
    assert found.pushed and found.severity.value == "medium"
    peak = _device_peak(trace)
    left = ta.pretty(pd.DataFrame({"bytes": [peak["capacity_bytes"] - peak["peak_allocated_bytes"]]}))["bytes"][0]
    assert f"{left} of" in found.title and "left" in found.title
    assert found.where["stack"] and found.evidence["capacity_bytes"] == peak["capacity_bytes"]


def test_gpt_train_peak_in_log_softmax_backward_and_flat_baseline(gpt_train):
    m = gpt_train.memory()
    peak = _device_peak(gpt_train)
    assert peak["peak_allocated_bytes"] == 18_499_920_384
    assert peak["op"] == "aten::_log_softmax_backward_data"
    assert "LogSoftmaxBackward0" in peak["path"]
    fit = m.leak[m.leak["device"] == 0].iloc[0]
    assert not fit["leak"] and abs(fit["growth_per_step_bytes"]) < 4096
    loss = [f for f in joined_findings(memory, gpt_train) if "temporar" in f.title]
    assert loss and "chunk" in loss[0].advice and "cross-entropy" in loss[0].advice


@pytest.mark.parametrize("name", H200_WITH_MEMORY)
def test_h200_peaks_match_measured_max_memory_allocated_and_no_false_leak(name):
    _assert_peaks_match_meta(shared_path("h200", name), load_shared("h200", name), leaks=int(name == "memory_leak"))


@pytest.mark.parametrize("name", ["cuda_graph", "fsdp"])
def test_bundled_sample_traces_peaks_match_measured_values(name):
    folder = REPO / "sample_traces" / name
    _assert_peaks_match_meta(folder, ta.load(folder), leaks=0)


def _assert_peaks_match_meta(folder, trace, leaks: int) -> None:
    peaks = trace.memory().device_peaks.set_index("rank")
    for meta_file in sorted(folder.glob("*.meta.json")):
        meta = json.loads(meta_file.read_text())
        rank = meta.get("rank", 0)
        assert peaks.loc[rank, "peak_allocated_bytes"] == pytest.approx(
            meta["max_memory_allocated_profiled_loop_B"], rel=0.01
        )
    assert len(trace.memory().leaking) == leaks


def test_timeline_is_decimated_but_keeps_the_peak(monkeypatch):
    trace = load_shared("h200", "memory_leak")
    monkeypatch.setattr(memory.analysis, "TIMELINE_MAX_POINTS", 200)
    analysis = memory.analyze(trace.scoped(rank=0))  # a fresh view: the whole trace's analysis is remembered
    device = analysis.timeline[analysis.timeline["device"] == 0]
    assert len(device) <= 200 < (trace.memory_events["device"] == 0).sum()
    assert device["allocated"].max() == 1_833_546_752
    assert device["ts"].is_monotonic_increasing


def test_legacy_memory_args_trace_loads_with_peak():
    trace = load_shared("public", "torch", "hta", "df_index_resolver")
    assert len(trace.memory_events) == 28_010
    peak = _device_peak(trace)
    assert peak["peak_allocated_bytes"] > 4 << 30 and peak["baseline_known"]
    assert peak["op"] != memory.OUTSIDE_OP
    # this V100 run reserves ~1.9x what it allocates: the allocator advice applies
    assert any("expandable_segments" in f.advice for f in joined_findings(memory, trace))


@pytest.mark.parametrize("sample", ["resnet50_num_workers_0", "resnet50_num_workers_4"])
def test_2021_bytes_only_traces_rebuild_totals_and_say_baseline_unknown(sample):
    trace = load_shared("public", "torch", "kineto_tb_plugin", "samples", sample)
    m = trace.memory()
    peak = _device_peak(trace)
    assert peak["peak_allocated_bytes"] > 1 << 30 and not peak["baseline_known"]
    assert any("baseline" in n for n in m.notes) and any("addresses" in n for n in m.notes)
    assert m.live_at_peak.empty and m.leaking.empty
    section = joined_section(memory, trace, Options())
    assert section.fact("baseline").value.startswith("unknown")


def test_section_is_plain_data_with_peak_live_blocks_and_leak_verdict():
    trace = load_shared("h200", "memory_leak")
    section = joined_section(memory, trace, Options(top=5))
    json.dumps(section.to_dict())
    assert section.fact("peak_allocated_bytes").value == 1_833_546_752
    assert "64.00 MiB per step" in section.fact("leak").value
    live = section.table("live_at_peak").to_dict()["rows"]
    assert len(live) == 5 and live[0]["bytes"] == 67_108_864
    flat = joined_section(memory, load_shared("h200", "memory_peak"), Options())
    assert flat.fact("leak").value.startswith("none")


def test_trace_without_memory_events_has_empty_analysis():
    trace = load_shared("public", "torch", "tracelens", "mi300", "resnet_act_checkpoint.json.gz")
    m = trace.memory()
    assert m.peaks.empty and m.timeline.empty and m.leak.empty
    assert joined_section(memory, trace, Options()) is None and joined_findings(memory, trace) == []


def test_ascend_memory_record_peak_and_op_running_at_it():
    path = shared_path(*ASCEND_LEVEL1)
    trace = load_shared(*ASCEND_LEVEL1)
    record = pd.read_csv(path / "ASCEND_PROFILER_OUTPUT" / "memory_record.csv")
    allocator = record[record["Component"] == "PTA"]
    peak = _device_peak(trace)
    assert peak["peak_allocated_bytes"] == pytest.approx(allocator["Total Allocated(MB)"].max() * 2**20, rel=1e-6)
    assert peak["peak_reserved_bytes"] == pytest.approx(allocator["Total Reserved(MB)"].max() * 2**20, rel=1e-6)
    assert peak["op"].startswith("aten::") and peak["path"].startswith("ProfilerStep#")
    assert not any("addresses" in n for n in trace.memory().notes)  # operator_memory rows pair allocations with frees
