"""Health findings on real H200 traces: idle gaps, launch-bound loops, host syncs, fp32 GEMMs (GROUND_TRUTH.md)."""

from __future__ import annotations

import json
import warnings

import pytest
from conftest import REPO, joined_findings, joined_section, load_shared, shared_path

import traceanalyzer as ta
from traceanalyzer import humanize
from traceanalyzer.analyzers import health, hotspots
from traceanalyzer.cli import main
from traceanalyzer.renderers.document import Display
from traceanalyzer.renderers.text import render as render_text
from traceanalyzer.report import Options
from traceanalyzer.schema import BUSY
from traceanalyzer.section import Unit


def _h200(name: str, file: str | None = None):
    return load_shared("h200", name, file or f"{name}.json.gz")


def _titles(found) -> list[str]:
    return [f.title for f in found]


def test_gpt_train_gpu_busy_and_gaps(gpt_train):
    busy = health.device_busy(gpt_train).iloc[0]
    assert busy["busy_share"] == pytest.approx(0.882, abs=0.001)
    assert busy["large_gaps"] == 38
    assert busy["large_gap_ns"] == pytest.approx(10.3e6, rel=0.01)
    assert busy["largest_gap_ns"] == pytest.approx(1.98e6, rel=0.01)


def test_largest_gaps_say_what_the_host_did(gpt_train):
    gaps = health.idle_gaps(gpt_train, top=5)
    assert gaps["dur_ns"].iloc[0] == pytest.approx(1.98e6, rel=0.01)
    assert gaps["dur_ns"].is_monotonic_decreasing
    assert (gaps["resumed_by"] != "").all() and (gaps["host_during"] != "").all()


def test_a_gap_starts_where_its_device_goes_idle_in_the_event_table(gpt_train):
    """``start_ns`` is an instant on the trace's clock: the end of the device's busy work before the gap, the gap
    free of busy work, the next work starting when it ends; the text report shows it from the trace's start."""
    gaps = health.idle_gaps(gpt_train, top=5)
    events = gpt_train.events
    for gap in gaps.itertuples():
        busy = events[events["kind"].isin(BUSY) & (events["rank"] == gap.rank) & (events["device"] == gap.device)]
        before = busy[busy["ts"] < gap.start_ns]
        assert (before["ts"] + before["dur"]).max() == gap.start_ns
        assert busy.loc[busy["ts"] >= gap.start_ns, "ts"].min() == gap.start_ns + gap.dur_ns
    report = gpt_train.build_report()
    table = next(t for t in report.section("health").tables if t.id == "largest_gaps")
    assert table.unit("start_ns") is Unit.INSTANT
    first = humanize.duration(int(gaps["start_ns"].iloc[0]) - gpt_train.meta.start_ns)
    row = next(line for line in render_text(report, Display(width=200)).splitlines() if first in line)
    assert humanize.duration(int(gaps["dur_ns"].iloc[0])) in row


def test_gpt_train_has_no_sync_finding_beyond_the_profiler_flush(gpt_train):
    stalls = health.sync_stalls(gpt_train)
    assert list(stalls["name"]) == ["cudaDeviceSynchronize"]  # the profiler's own flush, outside every step
    assert len(health.sync_places(gpt_train)) == 0
    assert not [t for t in _titles(joined_findings(health, gpt_train)) if "sync" in t]  # nor in the idle-gap finding


def test_sync_stalls_counts_and_places():
    trace = _h200("sync_stalls")
    stalls = health.sync_stalls(trace)
    assert (stalls["name"] == "cudaStreamSynchronize").sum() == 66
    assert stalls.loc[stalls["name"] == "cudaStreamSynchronize", "sync_ns"].sum() == pytest.approx(15.96e6, rel=0.005)
    copies = health.dtoh_copies(trace).set_index("name")["count"]
    assert copies["Memcpy DtoH (Device -> Pinned)"] == 63
    assert copies["Memcpy DtoH (Device -> Pageable)"] == 3
    places = health.sync_places(trace).set_index("annotation")
    assert places.loc["SYNC_item_grad_norm_per_param", "syncs"] == 48
    assert places.loc["SYNC_tensor_cpu", "syncs"] == 3
    assert (places["idle_after_ns"] > 0).all()
    busy = health.device_busy(trace).iloc[0]
    assert busy["busy_share"] == pytest.approx(0.676, abs=0.001)
    assert busy["large_gaps"] == 32
    assert busy["large_gap_ns"] == pytest.approx(10.39e6, rel=0.005)
    assert busy["largest_gap_ns"] == pytest.approx(1.36e6, rel=0.005)


def test_sync_finding_names_its_location():
    found = [f for f in joined_findings(health, _h200("sync_stalls")) if "host syncs per step" in f.title]
    assert len(found) == 1
    assert "22 host syncs per step" in found[0].title
    assert found[0].where["annotation"] == "SYNC_item_grad_norm_per_param"
    assert found[0].evidence["dtoh_copies"]["Memcpy DtoH (Device -> Pageable)"] == 3
    assert "pageable" in found[0].advice


def test_cli_lists_the_sync_finding_near_the_top(capsys):
    path = shared_path("h200", "sync_stalls", "sync_stalls.json.gz")
    assert main([str(path), "--format", "json"]) == 0
    titles = [f["title"] for f in json.loads(capsys.readouterr().out)["findings"]]
    top = [i for i, t in enumerate(titles) if "host syncs per step" in t]
    assert top and top[0] < 3, titles
    assert "SYNC_item_grad_norm_per_param" in titles[top[0]]


def test_launch_bound_loop_is_found_with_its_annotation():
    trace = _h200("launch_bound")
    busy = health.device_busy(trace).iloc[0]
    assert busy["busy_share"] == pytest.approx(0.059, abs=0.001)
    loop = health.launch_bound(trace).iloc[0]
    assert loop["annotation"] == "tiny_elementwise_loop"
    assert loop["tiny_kernels"] == 3000 and loop["launch_calls"] == 3000
    assert loop["launch_ns"] == pytest.approx(16.46e6, rel=0.005)
    assert loop["median_kernel_ns"] < 1500 < 5000 < loop["median_launch_ns"]
    found = [f for f in joined_findings(health, trace) if f.title.startswith("Launch-bound")]
    assert len(found) == 1 and "tiny_elementwise_loop" in found[0].title
    assert "CUDA graph" in found[0].advice and "reduce-overhead" in found[0].advice


def test_gpt_train_is_not_launch_bound(gpt_train):
    assert not [t for t in _titles(joined_findings(health, gpt_train)) if t.startswith("Launch-bound")]


def test_fp32_matmul_is_flagged_and_bf16_is_not():
    fp32 = _h200("fp32_matmul")
    found = [f for f in joined_findings(health, fp32) if f.title.startswith("fp32 matrix multiplies")]
    assert len(found) == 1
    per_step = found[0].evidence["fp32_gemm_ns_per_step"]
    assert 55e6 < per_step < 66e6  # GROUND_TRUTH: 59.9 ms of GPU time per step, aten::mm 58.7 ms
    assert found[0].evidence["device_time_share"] > 0.9
    assert found[0].where["ops"] == ["aten::mm"]
    assert "TF32" in found[0].advice and "bf16" in found[0].advice
    gemms = health.fp32_gemms(fp32)
    assert gemms["name"].str.contains("simt_sgemm").any() and gemms["name"].str.contains("_ffma_").any()
    bf16 = _h200("bf16_matmul")
    assert len(health.fp32_gemms(bf16)) == 0
    assert not [t for t in _titles(joined_findings(health, bf16)) if t.startswith("fp32")]


def test_ddp_straggler_sleep_shows_as_the_largest_gaps():
    trace = _h200("ddp_no_overlap", "ddp_no_overlap_rank1.json.gz")
    gaps = health.idle_gaps(trace, top=3)
    assert list((gaps["dur_ns"] / 1e5).round().astype(int)) == [515, 514, 512]
    assert gaps["host_during"].str.contains("sleep|STRAGGLER", case=False).all(), gaps["host_during"].tolist()


def test_no_dynamic_shapes_in_a_fixed_shape_training_loop(gpt_train):
    assert len(health.dynamic_shapes(gpt_train)) == 0


@pytest.mark.parametrize(
    "parts",
    [
        ("public", "torch", "hta", "cpu_only"),
        ("public", "torch", "hta", "mtia_inference_trace"),
        ("public", "torch", "tracelens", "mi300", "gaunernst_bert-small-uncased__1016001.json.gz"),
        ("public", "torch", "tracelens", "mi300", "resnet_act_checkpoint.json.gz"),
        ("public", "torch", "kineto_tb_plugin", "samples", "resnet50_num_workers_0"),
    ],
)
def test_findings_and_sections_never_fail_on_small_public_traces(parts):
    trace = load_shared(*parts)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        found = joined_findings(health, trace) + joined_findings(hotspots, trace)
        joined_section(health, trace, Options())
        trace.hotspots("category")
    assert all(f.saving_ns >= 0 and f.concerns_ns >= 0 for f in found)


def test_big_trace_busy_and_gaps():
    busy = health.device_busy(_h200("big")).iloc[0]
    assert busy["busy_share"] == pytest.approx(0.700, abs=0.001)
    assert busy["large_gaps"] == 1271
    assert busy["largest_gap_ns"] == pytest.approx(9.0e6, rel=0.01)


# ---------------------------------------------------------------- dynamic shapes on a recorded trace

DYNAMIC = REPO / "sample_traces" / "dynamic_shapes"
TENSOR_LIST_OPS = {"aten::cat", "aten::stack"}
"""key_averages(group_by_input_shape=True) keys a TensorList input as no shape; the trace records each tensor's dims."""


@pytest.fixture(scope="module")
def dynamic() -> tuple[ta.Trace, dict]:
    meta = json.loads((DYNAMIC / "dynamic_shapes.meta.json").read_text())
    return ta.load(DYNAMIC / "dynamic_shapes.json.gz"), meta


def _shape_finding(trace):
    found = [f for f in joined_findings(health, trace) if f.title.startswith("Dynamic shapes")]
    assert len(found) <= 1
    return found[0] if found else None


def test_dynamic_shapes_finding_names_the_sequence_length_gemms(dynamic):
    trace, meta = dynamic
    assert len(trace.steps()) == len(meta["seq_len_per_traced_step"]) == 8
    finding = _shape_finding(trace)
    assert finding is not None
    assert finding.where["ops"][:2] == ["aten::mm", "aten::bmm"]  # the ops with the most device time come first
    assert "aten::addmm" in finding.where["ops"] and "aten::mm, aten::bmm" in finding.title
    assert "bucket" in finding.advice and "mark_dynamic" in finding.advice


def test_dynamic_shapes_lists_exactly_the_ops_torch_saw_new_shapes_for_in_every_later_step(dynamic):
    trace, meta = dynamic
    later_steps = len(meta["seq_len_per_traced_step"]) - 1
    truth = meta["aten_input_shapes_by_step"]
    changing = {
        op
        for op, seen in truth.items()
        if seen["distinct_shapes"] >= health.DYNAMIC_SHAPE_MIN and len(seen["new_shapes_by_step"]) == later_steps + 1
    }
    listed = {op["name"] for op in _shape_finding(trace).evidence["ops"]}
    assert {op for op in listed if op.startswith("aten::")} == changing | TENSOR_LIST_OPS
    assert {"aten::mm", "aten::addmm", "aten::bmm", "aten::_softmax", "aten::native_layer_norm"} <= listed


def test_dynamic_shapes_are_costed_and_every_such_op_is_listed(dynamic):
    trace, _ = dynamic
    table = health.dynamic_shapes(trace)
    finding = _shape_finding(trace)
    steps = len(trace.steps())
    assert finding.where["ops"] == table["name"].tolist() and len(table) == 55  # every op, not the first five
    assert "… 50 more" in finding.title
    stalls = int(table["stall_ns"].sum())
    assert finding.saving_ns * steps == pytest.approx(stalls, abs=steps)
    assert finding.concerns_ns * steps == pytest.approx(int(table["device_ns"].sum()) + stalls, abs=steps)
    assert 0 < finding.saving_ns < trace.steps()["step_ns"].median()  # per step, within the step
    assert finding.basis.value == "modelled" and "first calls of new shapes" in finding.model


def test_a_first_call_stall_is_the_first_call_of_a_new_shape_above_the_ops_median(dynamic):
    trace, _ = dynamic
    ev = trace.events
    calls = ev[(ev["name"] == "BmmBackward0") & (ev["step"] >= 0)].sort_values("ts")  # outermost: autograd's node
    first = calls.drop_duplicates("input_dims")
    later = first[first["step"] > calls["step"].min()]
    expected = (later["dur"] - calls["dur"].median()).clip(lower=0).sum()
    row = health.dynamic_shapes(trace).set_index("name").loc["BmmBackward0"]
    assert row["stall_ns"] == pytest.approx(expected, abs=1)
    assert row["stall_ns"] > 50 * calls["dur"].median() * row["new_shapes"]  # cuBLAS re-plans: ms, not µs


def test_one_step_gives_no_dynamic_shape_verdict_on_ascend():
    trace = load_shared("public", "ascend", "msinsight", "pytorch_text", "level1", "rank0_ascend_pt")
    ev = trace.events
    matmuls = ev[(ev["kind"] == "kernel") & ev["name"].astype(str).str.contains("MatMulV2")]
    assert matmuls["input_dims"].nunique() >= health.DYNAMIC_SHAPE_MIN  # AlexNet's layers, in its single step
    assert ev.loc[ev["step"] >= 0, "step"].nunique() == 1
    assert len(health.dynamic_shapes(trace)) == 0 and _shape_finding(trace) is None
    table = next(t for t in joined_section(health, trace, Options()).tables if t.id == "dynamic_shapes")
    assert table.note == "no verdict: needs at least 2 steps, this scope has 1"  # said, not silently empty


def test_dynamic_shapes_counts_equal_key_averages(dynamic):
    trace, meta = dynamic
    grouped = meta["distinct_input_shapes_key_averages"]
    truth = meta["aten_input_shapes_by_step"]
    table = health.dynamic_shapes(trace).set_index("name")
    counted = table.drop(index=list(TENSOR_LIST_OPS))
    assert (counted["shapes"] == [grouped[op] for op in counted.index]).all()
    aten = counted[counted.index.str.startswith("aten::")]
    assert (aten["new_shapes"] == [truth[op]["new_shapes_after_first_step"] for op in aten.index]).all()
    assert table.loc["aten::mm", "shapes"] == 67 and table.loc["aten::mm", "new_shapes"] == 56
    assert (table.loc[list(TENSOR_LIST_OPS), "shapes"] == len(meta["seq_len_per_traced_step"])).all()


def test_dynamic_shapes_leaves_the_constant_shape_pooler_and_optimizer_out(dynamic):
    trace, meta = dynamic
    truth = meta["aten_input_shapes_by_step"]
    constant = {op for op, seen in truth.items() if seen["distinct_shapes"] == 1} - TENSOR_LIST_OPS
    assert {"aten::tanh", "aten::tanh_backward", "aten::_foreach_mul_"} <= constant
    assert not set(health.dynamic_shapes(trace)["name"]) & constant


def test_cli_reports_the_dynamic_shapes_finding(capsys):
    assert main([str(DYNAMIC / "dynamic_shapes.json.gz"), "--format", "json"]) == 0
    titles = [f["title"] for f in json.loads(capsys.readouterr().out)["findings"]]
    assert [t for t in titles if t.startswith("Dynamic shapes") and "aten::mm" in t], titles


def test_no_dynamic_shapes_in_the_fixed_shape_sample():
    trace = ta.load(REPO / "sample_traces" / "unfused_ops.json.gz")
    assert len(health.dynamic_shapes(trace)) == 0
    assert _shape_finding(trace) is None


@pytest.mark.parametrize("name", ["fused_ops", "memory_leak", "big"])
def test_no_dynamic_shapes_in_fixed_shape_h200_traces(name):
    assert len(health.dynamic_shapes(_h200(name))) == 0
