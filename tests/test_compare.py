"""``ta.compare`` and ``traceanalyze compare`` on real pairs of runs, against what their recordings measured."""

from __future__ import annotations

import gzip
import json
import statistics

import orjson
import pytest

import traceanalyzer as ta
from tests.conftest import REPO, load_shared, shared_path
from tests.test_cli import assert_typed, documented, run
from traceanalyzer.analyzers.compare import Status

UNFUSED = ("h200", "unfused_ops")
FUSED = ("h200", "fused_ops")
TRACE_DIFF = ("public", "torch", "hta", "trace_diff")
SAMPLE = REPO / "sample_traces" / "unfused_ops.json.gz"
MS = 1e6


def meta(*parts: str) -> dict:
    return json.loads(shared_path(*parts).read_text())


@pytest.fixture(scope="module")
def fusion() -> ta.Comparison:
    return ta.compare(load_shared(*UNFUSED), load_shared(*FUSED))


def test_fused_ops_step_time_change_matches_the_cuda_event_times(fusion):
    before = meta(*UNFUSED, "unfused_ops.meta.json")["step_gpu_ms_cuda_events"][-3:]  # the 3 profiled steps
    after = meta(*FUSED, "fused_ops.meta.json")["step_gpu_ms_cuda_events"][-3:]
    measured = (statistics.median(after) - statistics.median(before)) * MS  # -9.55 ms
    assert fusion.per_step and fusion.baseline.units == fusion.candidate.units == 3
    assert fusion.metric("step_ns")["delta_ns"] == pytest.approx(measured, rel=0.05)  # ours -9.34 ms


def test_fused_ops_kernel_time_per_step_matches_ground_truth(fusion):
    kernel = fusion.by_kind.set_index("kind").loc["kernel"]
    assert kernel["baseline_ns"] / MS == pytest.approx(15.54, abs=0.02)  # GROUND_TRUTH.md section 4
    assert kernel["candidate_ns"] / MS == pytest.approx(6.08, abs=0.02)
    assert (kernel["baseline_count"], kernel["candidate_count"]) == (229, 149)


def test_kernels_that_fusion_removes_are_gone_and_the_fused_ones_new(fusion):
    """Every kernel in either run's key_averages top list: our time per step is its self device time / 3 steps;
    one listed in only one run is new / gone or fell below the other run's list."""
    kernels = fusion.levels["kernel"].set_index("name")
    lists = {
        side: {r["name"]: r["self_device_time_total_us"] * 1e3 / 3 for r in meta(*parts, f"{parts[1]}.meta.json")[key]}
        for side, parts, key in (
            ("baseline", UNFUSED, "key_averages_top_by_self_device_time"),
            ("candidate", FUSED, "key_averages_top_by_self_device_time"),
        )
    }
    checked = 0
    for side, other in (("baseline", "candidate"), ("candidate", "baseline")):
        for name, per_step in lists[side].items():
            if name not in kernels.index:
                continue  # an op or annotation, not a kernel
            row = kernels.loc[name]
            assert row[f"{side}_ns"] == pytest.approx(per_step, rel=0.01), name
            if name not in lists[other]:
                assert row[f"{other}_ns"] < min(lists[other].values()), name
            checked += 1
    assert checked >= 30
    assert statuses(kernels, "void (anonymous namespace)::softmax_warp_") == {Status.GONE}
    assert statuses(kernels, "cudnn_generated_fort_native_sdpa_sm90_flash_") == {Status.NEW}
    assert kernels.loc["nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_TNT", "status"] == Status.GONE  # mm, no bias
    assert kernels.loc["nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_bias_TNT", "status"] == Status.NEW
    op = fusion.levels["op_device"].set_index("name")["status"]
    assert (op["aten::masked_fill_"], op["aten::bmm"], op["aten::addmm"]) == ("gone", "gone", "new")


def statuses(kernels, prefix: str) -> set[str]:
    """The statuses of the kernels (a table indexed by name) whose names start with prefix."""
    return set(kernels.loc[kernels.index.str.startswith(prefix), "status"])


def _profiler_step_median_ns(path) -> float:
    """Median ProfilerStep duration, read straight from the JSON (µs timestamps)."""
    events = orjson.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    return statistics.median(e["dur"] * 1e3 for e in events if str(e.get("name", "")).startswith("ProfilerStep#"))


def test_hta_trace_diff_pair_a100_eager_vs_v100_compiled():
    """HTA's TraceDiff pair: control is rank 3 of an A100 job, test rank 1 of a V100 job that runs torch.compile'd
    (CompiledFunction). GEMMs run other kernels on the other GPU, and the embedding kernels differ in one template
    argument (2ul vs 5ul): all of those are gone / new, since names are matched exactly."""
    control, test = (shared_path(*TRACE_DIFF, n, f"{n}.json.gz") for n in ("control", "test"))
    diff = ta.compare(load_shared(*TRACE_DIFF, "control"), load_shared(*TRACE_DIFF, "test"))
    step = diff.metric("step_ns")
    assert step["baseline_ns"] == pytest.approx(_profiler_step_median_ns(control), rel=0.001)
    assert step["candidate_ns"] == pytest.approx(_profiler_step_median_ns(test), rel=0.001)
    assert (diff.baseline.units, diff.candidate.units) == (6, 6)
    kernels = diff.levels["kernel"].set_index("name")
    assert statuses(kernels, "ampere_sgemm") == statuses(kernels, "void cutlass::Kernel<cutlass_80") == {Status.GONE}
    assert statuses(kernels, "volta_sgemm") == {Status.NEW}
    forward = "void split_embedding_codegen_forward_unweighted_kernel<float, float, float, long, "
    assert statuses(kernels, forward + "2ul>") == {Status.GONE}
    assert statuses(kernels, forward + "5ul>") == {Status.NEW}
    ops = diff.levels["cpu_op"].set_index("name")["status"]
    assert ops["CompiledFunction"] == ops["CompiledFunctionBackward"] == Status.NEW


@pytest.fixture(scope="module")
def ddp() -> tuple[ta.Trace, ta.Trace]:
    return load_shared("h200", "ddp_no_overlap"), load_shared("h200", "ddp_overlap")


def test_ddp_overlap_hides_communication_that_was_exposed(ddp):
    """No overlap: all NCCL time exposed (rank 0 waits ~99 ms/step for the sleeping rank 1); DDP buckets: ~33 %
    hidden under backward on both ranks (GROUND_TRUTH.md sections 10 and 11)."""
    rank0 = ta.compare(*ddp, rank=0)
    assert rank0.metric("comm_exposed_ns")["baseline_ns"] / MS == pytest.approx(99.3, rel=0.03)
    assert rank0.metric("step_ns")["baseline_ns"] / MS == pytest.approx(122.9, rel=0.01)
    assert rank0.metric("step_ns")["candidate_ns"] / MS == pytest.approx(99.9, rel=0.01)
    for rank in (0, 1):
        diff = ta.compare(*ddp, rank=rank)
        hidden, exposed = diff.metric("comm_hidden_ns"), diff.metric("comm_exposed_ns")
        assert hidden["baseline_ns"] == 0
        share = hidden["candidate_ns"] / (hidden["candidate_ns"] + exposed["candidate_ns"])
        assert share == pytest.approx(0.33, abs=0.03)


def test_ddp_overlap_replaces_75_all_reduces_per_step_by_15_buckets_and_a_broadcast(ddp):
    kernels = ta.compare(*ddp, rank=1).levels["kernel"]
    nccl = {name.split("(")[0]: row for name, row in kernels.set_index("name").iterrows() if name.startswith("nccl")}
    all_reduce = nccl["ncclDevKernel_AllReduce_Sum_f32_RING_LL"]
    assert (all_reduce["baseline_count"], all_reduce["candidate_count"]) == (75, 15)
    broadcast = nccl["ncclDevKernel_Broadcast_RING_LL"]
    assert (broadcast["status"], broadcast["candidate_count"]) == (Status.NEW, 1)


def test_a_trace_compared_with_itself_has_no_change():
    trace = ta.load(SAMPLE)
    diff = ta.compare(trace, trace)
    assert (diff.summary["delta_ns"] == 0).all()
    for table in (diff.by_kind, *diff.levels.values()):
        assert len(table) and (table["delta_ns"] == 0).all()
        assert set(table["status"]) == {Status.SAME.value}
        assert (table["baseline_count"] == table["candidate_count"]).all()


def test_a_run_without_steps_is_compared_over_whole_windows_and_says_so():
    stepless = load_shared("public", "torch", "tracelens", "b200", "eager_trace.json.gz")
    diff = ta.compare(ta.load(SAMPLE), stepless)
    assert not diff.per_step and diff.notes == [
        "no ProfilerStep markers in the candidate: whole windows compared (per rank)"
    ]
    assert (diff.baseline.steps, diff.baseline.units) == (None, 1)
    assert diff.metric("step_ns")["candidate_ns"] == stepless.meta.span_ns
    assert diff.by_kind.set_index("kind").loc["kernel", "baseline_count"] == 3 * 229  # all 3 steps, not per step


def test_compare_json_has_every_documented_key(capsys, tmp_path):
    out = tmp_path / "compare.json"
    code, _, err = run(capsys, "compare", SAMPLE, SAMPLE, "--format", "json", "-o", out, "--top", "3")
    assert code == 0, err
    data = json.loads(out.read_text())
    assert_typed(data, documented("`compare`"), "compare")
    assert_typed(data["baseline"], documented("`trace`"), "compare.baseline")
    for row in data["summary"]:
        assert_typed(row, documented("`compare.summary`"), "compare.summary")
    assert set(data["levels"]) == set(data["changes"]) == {"kernel", "cpu_op", "op_device"}
    for level, rows in data["levels"].items():
        assert len(rows) == 3
        for row in rows:
            assert_typed(row, documented("`compare.levels`"), f"compare.levels.{level}")
        assert_typed(data["changes"][level], documented("`compare.changes`"), f"compare.changes.{level}")


def test_compare_text_report_says_before_after_and_what_changed(capsys):
    code, out, _ = run(capsys, "compare", shared_path(*UNFUSED), shared_path(*FUSED), "--top", "5")
    assert code == 0
    assert "step time    21.62 ms → 12.28 ms (-9.34 ms, -43.2%)" in out
    assert "gone kernels" in out and "new kernels" in out and "aten::masked_fill_" in out


def test_compare_markdown(capsys):
    code, out, _ = run(capsys, "compare", SAMPLE, SAMPLE, "--format", "markdown")
    assert code == 0 and out.lstrip().startswith("# traceanalyzer compare")


@pytest.mark.parametrize("args", [("nope.json", SAMPLE), (SAMPLE, "nope.json"), (SAMPLE, SAMPLE, "--rank", "5")])
def test_compare_bad_input_is_exit_2_in_one_line(capsys, tmp_path, args):
    args = [tmp_path / a if a == "nope.json" else a for a in args]
    code, out, err = run(capsys, "compare", *args)
    assert (code, out) == (2, "")
    assert err.startswith("traceanalyze: error:") and len(err.splitlines()) == 1


def test_report_command_is_unchanged(capsys):
    code, out, _ = run(capsys, SAMPLE, "--top", "2")
    assert code == 0 and out.lstrip().startswith("traceanalyzer report")
