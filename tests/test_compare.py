"""``ta.compare`` and ``traceanalyze compare`` on real pairs of runs, against what their recordings measured."""

from __future__ import annotations

import json
import statistics

import numpy as np
import orjson
import pandas as pd
import pytest
from scipy.stats import mannwhitneyu

import traceanalyzer as ta
from tests.conftest import REPO, load_shared, shared_path
from tests.test_cli import assert_typed, documented, run
from traceanalyzer import trace as trace_module
from traceanalyzer.comparison import Status, Threshold, platforms
from traceanalyzer.comparison.matching import Rule

UNFUSED = ("h200", "unfused_ops")
FUSED = ("h200", "fused_ops")
TRACE_DIFF = ("public", "torch", "hta", "trace_diff")
SAMPLE = REPO / "sample_traces" / "unfused_ops.json.gz"
FUSED_SAMPLE = SAMPLE.with_name("fused_ops.json.gz")
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
    assert fusion.metric("step_ns")["delta_ns"] == pytest.approx(measured, rel=0.05)  # ours -9.39 ms


def test_fused_ops_step_change_decomposed_by_kernel_adds_up(fusion):
    """-9.99 ms per step (means): the fused run loses masked_fill's kernel (2.86 ms) and the softmax kernels."""
    assert_adds_up(fusion)
    top = fusion.contributions.iloc[0]
    assert (top["what"], round(top["delta_ns"] / MS, 2)) == ("kernel", -2.86) and "masked_fill" in top["name"]


def test_fused_ops_kernel_time_per_step_matches_ground_truth(fusion):
    kernel = fusion.by_kind.set_index("kind").loc["kernel"]
    assert kernel["baseline_ns"] / MS == pytest.approx(15.54, abs=0.02)  # GROUND_TRUTH.md section 4
    assert kernel["candidate_ns"] / MS == pytest.approx(6.08, abs=0.02)
    assert (kernel["baseline_count"], kernel["candidate_count"]) == (229, 149)


def test_kernels_that_fusion_removes_are_gone_and_the_fused_ones_new(fusion):
    """Every kernel in either run's key_averages top list: our time per step is its self device time / 3 steps
    (an entry that matched several names holds at least the listed ones); one listed in only one run is new / gone,
    matched to a kernel of the other run, or fell below the other run's list."""
    kernels = fusion.levels["kernel"]
    lists = {
        side: {r["name"]: r["self_device_time_total_us"] * 1e3 / 3 for r in meta(*parts, f"{parts[1]}.meta.json")[key]}
        for side, parts, key in (
            ("baseline", UNFUSED, "key_averages_top_by_self_device_time"),
            ("candidate", FUSED, "key_averages_top_by_self_device_time"),
        )
    }
    checked = 0
    for side in ("baseline", "candidate"):
        for _, row in kernels.iterrows():
            listed = [lists[side][n] for n in row[f"{side}_names"] if n in lists[side]]
            if not listed:
                continue  # below the list, or an op or annotation, not a kernel
            if len(listed) == len(row[f"{side}_names"]):
                assert row[f"{side}_ns"] == pytest.approx(sum(listed), rel=0.01), row["name"]
            else:
                assert row[f"{side}_ns"] >= sum(listed) * 0.99, row["name"]
            checked += len(listed)
    assert checked >= 30
    by_name = kernels.set_index("name")
    assert statuses(by_name, "void (anonymous namespace)::softmax_warp_") == {Status.GONE}
    assert statuses(by_name, "cudnn_generated_fort_native_sdpa_sm90_flash_") == {Status.NEW}
    gemm = by_name.loc["GEMM"]  # nvjet: mm without bias (unfused) and addmm with its bias epilogue (fused)
    assert gemm["match"] == Rule.NORMALISED
    assert "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_TNT" in gemm["baseline_names"]
    assert "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_bias_TNT" in gemm["candidate_names"]
    op = fusion.levels["op_device"].set_index("name")["status"]
    assert (op["aten::masked_fill_"], op["aten::bmm"], op["aten::addmm"]) == ("gone", "gone", "new")


def statuses(kernels, prefix: str) -> set[str]:
    """The statuses of the kernels (a table indexed by name) whose names start with prefix."""
    return set(kernels.loc[kernels.index.str.startswith(prefix), "status"])


def test_hta_trace_diff_pair_a100_eager_vs_v100_compiled():
    """HTA's TraceDiff pair: control is rank 3 of an A100 job, test rank 1 of a V100 job that runs torch.compile'd
    (CompiledFunction). The GEMMs run other kernels on the other GPU (CUTLASS TF32 and ampere_sgemm vs volta_sgemm),
    and the embedding kernels differ in one template argument (2ul vs 5ul): matched by normalised name, so nearly
    all device time of both runs is matched exactly or by normalised name."""
    control, test = (shared_path(*TRACE_DIFF, n, f"{n}.json.gz") for n in ("control", "test"))
    diff = ta.compare(load_shared(*TRACE_DIFF, "control"), load_shared(*TRACE_DIFF, "test"))
    step = diff.metric("step_ns")
    # the step model's step time (device-experienced), not the ProfilerStep span
    for side, path in (("baseline_ns", control), ("candidate_ns", test)):
        assert step[side] == pytest.approx(ta.load(path).steps()["step_ns"].median(), rel=0.001)
    assert (diff.baseline.units, diff.candidate.units) == (6, 6)
    kernels = diff.levels["kernel"]
    for side in ("baseline", "candidate"):
        share = kernels.groupby("match")[f"{side}_ns"].sum() / kernels[f"{side}_ns"].sum()
        assert share[Rule.EXACT] + share[Rule.NORMALISED] > 0.99, share
        assert share[Rule.NORMALISED] > 0.25, share  # what exact names alone would call gone and new
    gemm = kernels.set_index("name").loc["GEMM (fp32)"]
    assert gemm["match"] == Rule.NORMALISED and gemm["status"] == Status.SLOWER
    for arch in ("ampere_sgemm_", "cutlass_80_tensorop_s1688gemm_"):  # A100 only
        assert any(arch in n for n in gemm["baseline_names"]) and not any(arch in n for n in gemm["candidate_names"])
    assert any(n.startswith("volta_sgemm_") for n in gemm["candidate_names"])
    forward = "void split_embedding_codegen_forward_unweighted_kernel<float, float, float, long, "
    embedding = kernels[kernels["baseline_names"].map(lambda names: any(n.startswith(forward) for n in names))]
    assert len(embedding) == 1 and embedding["match"].iloc[0] == Rule.NORMALISED
    assert [n[len(forward) : len(forward) + 3] for n in embedding["candidate_names"].iloc[0]] == ["5ul"]
    ops = diff.levels["cpu_op"].set_index("name")["status"]
    assert ops["CompiledFunction"] == ops["CompiledFunctionBackward"] == Status.NEW
    # like with like: busy measured inside the step windows never exceeds the step (it read 122.2 in 114.7 ms)
    for side in diff.samples:
        assert (side["device_busy_ns"] <= side["step_ns"]).all()
        parts = side[["compute_ns", "comm_exposed_ns", "memory_exposed_ns", "idle_ns"]].sum(axis=1)
        assert (parts == side["step_ns"]).all()
    data = diff.to_dict()
    assert [d["family"] for d in data["baseline"]["hardware"]] == ["A100"]
    assert [d["name"] for d in data["candidate"]["hardware"]] == ["Tesla V100-SXM2-16GB"]
    assert diff.warnings == [
        "the runs ran on different hardware: baseline on cuda (NVIDIA A100-PG509-200), candidate on cuda "
        "(Tesla V100-SXM2-16GB); times compare both"
    ]
    assert_adds_up(diff)


def assert_adds_up(diff: ta.Comparison) -> None:
    """The decomposition's rows add up to the change of the mean step time within 1 %, its residual under 1 %."""
    means = [side["step_ns"].mean() for side in diff.samples]
    delta = means[1] - means[0]
    rows = diff.contributions.set_index("what")["delta_ns"]
    assert rows.sum() == pytest.approx(delta, rel=0.01, abs=1e3)
    assert abs(rows.get("residual", 0.0)) <= 0.01 * max(abs(delta), max(means) * 0.01)
    order = diff.contributions["delta_ns"].abs().to_numpy()
    assert (order[:-1] >= order[1:]).all()  # biggest first


@pytest.fixture(scope="module")
def ddp() -> tuple[ta.Trace, ta.Trace]:
    return load_shared("h200", "ddp_no_overlap"), load_shared("h200", "ddp_overlap")


def _cuda_event_median(scenario: str) -> float:
    """Median CUDA-event step time (ms) of the profiled steps of an h200 scenario's rank 0."""
    meta = json.loads(shared_path("h200", scenario, f"{scenario}_rank0.meta.json").read_text())
    steps = [int(s.split("#")[1]) for s in meta["trace_holds_profiler_steps"]]
    return float(np.median([meta["step_gpu_ms_cuda_events"][s] for s in steps]))


def test_ddp_overlap_hides_communication_that_was_exposed(ddp):
    """No overlap: all NCCL time exposed (rank 0 waits ~99 ms/step for the sleeping rank 1); DDP buckets: ~33 %
    hidden under backward on both ranks (GROUND_TRUTH.md sections 10 and 11)."""
    rank0 = ta.compare(*ddp, rank=0)
    assert rank0.metric("comm_exposed_ns")["baseline_ns"] / MS == pytest.approx(99.3, rel=0.03)
    # the device-experienced step against CUDA events around each step (steps 2-4 of the meta's list)
    assert rank0.metric("step_ns")["baseline_ns"] / MS == pytest.approx(_cuda_event_median("ddp_no_overlap"), rel=0.05)
    assert rank0.metric("step_ns")["candidate_ns"] / MS == pytest.approx(_cuda_event_median("ddp_overlap"), rel=0.05)
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


def test_a_trace_compared_with_itself_has_no_change_and_passes_the_gate():
    trace = ta.load(SAMPLE)
    diff = ta.compare(trace, trace)
    assert (diff.summary["delta_ns"] == 0).all()
    assert set(diff.summary["noise"]) == {"no change"}
    for table in (diff.by_kind, *diff.levels.values()):
        assert len(table) and (table["delta_ns"] == 0).all()
        assert set(table["status"]) == {Status.SAME.value}
        assert (table["baseline_count"] == table["candidate_count"]).all()
    assert set(diff.levels["kernel"]["match"]) == {Rule.EXACT.value}
    assert set(diff.findings["status"]) == {Status.SAME.value} and len(diff.findings)
    assert diff.memory["delta_bytes"] == 0 and diff.memory["moved"] is False
    verdict = diff.gate(Threshold(share=0.0, ns=0.0))
    assert verdict.outcome == "pass" and verdict.reason.startswith("step time unchanged")
    assert all(row["delta_ns"] == 0 for row in verdict.culprits)


def test_noise_verdicts_are_the_rank_test_of_the_per_step_values(fusion):
    """The step-time row's p-value is the one-sided Mann–Whitney U of the two runs' step times; with 3 steps a
    side, a complete separation gives p = 0.05 (beyond noise); memsets that barely change are within noise."""
    column = "step_ns"  # the step table's step time
    before, after = (load_shared(*parts).steps()[column] for parts in (UNFUSED, FUSED))
    expected = mannwhitneyu(after, before, alternative="less").pvalue
    step = fusion.metric("step_ns")
    assert (step["noise"], step["p_value"]) == ("beyond noise", pytest.approx(expected))
    kinds = fusion.by_kind.set_index("kind")
    assert kinds.loc["memset", "noise"] == "within noise" and kinds.loc["memset", "p_value"] > 0.05
    assert kinds.loc["kernel", "noise"] == "beyond noise"


def test_findings_and_peak_memory_compared(fusion):
    """Fusing attention removes the unfused-attention fusion finding; the peak falls from 2.628 GiB (inside
    SoftmaxBackward0) to 1.145 GiB (GROUND_TRUTH.md section 4) and is reached elsewhere."""
    gone = fusion.findings[fusion.findings["status"] == Status.GONE.value]
    assert gone["title"].str.startswith("Unfused attention: MatMul+Mul+MaskedFill+Softmax+MatMul").any()
    memory = fusion.memory
    assert (memory["baseline"]["peak_allocated_bytes"], memory["candidate"]["peak_allocated_bytes"]) == (
        2_822_239_232,
        1_229_566_976,
    )
    assert "SoftmaxBackward0" in memory["baseline"]["path"] and memory["moved"]


def test_a_run_without_steps_is_compared_over_whole_windows_and_says_so():
    stepless = load_shared("public", "torch", "tracelens", "b200", "eager_trace.json.gz")
    diff = ta.compare(ta.load(SAMPLE), stepless)
    assert not diff.per_step and diff.notes == [
        "no ProfilerStep markers in the candidate: whole windows compared (per rank)"
    ]
    assert (diff.baseline.steps, diff.baseline.units) == (None, 1)
    assert diff.metric("step_ns")["candidate_ns"] == stepless.meta.span_ns
    assert diff.by_kind.set_index("kind").loc["kernel", "baseline_count"] == 3 * 229  # all 3 steps, not per step
    assert set(diff.summary["noise"]) <= {"too few steps", "no change"}
    assert set(diff.levels["kernel"]["noise"]) == {"too few steps"}
    verdict = diff.gate(Threshold(share=0.10))
    assert verdict.outcome == "inconclusive" and verdict.reason.startswith(
        "with 1 vs 1 steps changes of any size cannot be told from noise at 99% confidence"
    )


CNN_H200 = REPO / "sample_traces" / "cnn_h200" / "alexnet_ddp.json.gz"
ASCEND_CNN = ("public", "ascend", "msinsight", "pytorch_text", "level2", "rank0_ascend_pt")


@pytest.fixture(scope="module")
def gpu_npu() -> ta.Comparison:
    """AlexNet under DDP on one H200 (sample_traces/cnn_h200, recorded to match the Ascend sample) against the
    msinsight level-2 AlexNet run on an Ascend NPU (rank 0 of 8)."""
    if not CNN_H200.exists():
        pytest.skip(f"{CNN_H200} is not in this checkout")
    return ta.compare(ta.load(CNN_H200), load_shared(*ASCEND_CNN))


def test_gpu_npu_compares_by_category_and_fills_every_shared_category(gpu_npu):
    view = gpu_npu.platforms
    assert view is not None and ta.compare(ta.load(SAMPLE), ta.load(SAMPLE)).platforms is None
    table = view.categories.set_index("name")
    assert list(table.index) == [c for c in platforms.CATEGORIES if c in table.index]  # in taxonomy order
    both = table[(table["baseline_ns"] > 0) & (table["candidate_ns"] > 0)]
    assert set(both.index) == set(platforms.CATEGORIES) - {"attention fwd", "attention bwd", "communication exposed"}
    # one GPU, world size 1: its all-reduces move nothing; rank 0 of 8 NPUs waits on HCCL
    assert table.loc["communication exposed", "baseline_ns"] == 0
    assert table.loc["communication exposed", "more"] == "candidate (ascend)"
    meta = json.loads(CNN_H200.with_name("alexnet_ddp.meta.json").read_text())["key_averages_top_self_device_ns"]
    gemm = (meta["aten::mm"] + meta["aten::addmm"]) / 4  # 4 profiled steps
    assert table.loc["gemm", "baseline_ns"] == pytest.approx(gemm, rel=0.05)
    assert set(table["noise"]) <= {"too few steps"}  # the Ascend run profiled one step
    data = orjson.loads(orjson.dumps(gpu_npu.to_dict(top=5)))
    for key in ("categories", "ops", "modules"):
        for row in data["platforms"][key]:
            assert_typed(row, documented("`compare.platforms`"), f"compare.platforms.{key}")


def test_gpu_npu_names_the_framework_ops_and_modules_that_differ_most(gpu_npu):
    ops = gpu_npu.platforms.ops
    assert ops["name"].iloc[0] == "c10d::allreduce_" and ops["status"].iloc[0] == Status.NEW
    compute = ops[ops["kind"] != "communication"].head(10)
    assert set(compute["match"]) == {Rule.EXACT.value} and compute["name"].str.startswith("aten::").all()
    assert compute["name"].iloc[0] == "aten::convolution_backward"
    dropout = ops.set_index("name").loc["aten::native_dropout_backward"]  # npu::npu_dropout_backward on the NPU
    assert dropout["match"] == Rule.EXACT and dropout["baseline_ns"] > 0 and dropout["candidate_ns"] > 0
    assert gpu_npu.platforms.mapped["npu::npu_dropout_backward"] == "aten::native_dropout_backward"
    modules = gpu_npu.platforms.modules
    layers = modules[modules["match"] == Rule.EXACT.value]["name"]
    assert len(layers) >= 20 and layers.str.startswith("DistributedDataParallel_0 › AlexNet_0").sum() >= 20


def test_a_torch_npu_fused_op_is_compared_with_the_aten_chain_it_replaces(gpt_train):
    """Eager Llama's RMSNorm (pow → mean → add → rsqrt → mul): 17 per step (2 per layer and the final norm) over
    3 steps, and RoPE's rotate_half (slice → neg → cat, then mul → add) for q and k in 8 layers."""
    labels = platforms.chain_labels(gpt_train, {"npu::npu_rms_norm", "npu::npu_rotary_mul"})
    names = gpt_train.events["name"].astype(str)
    per_op = pd.Series({row: (label, names[row]) for row, label in labels.items()}).value_counts()
    rms = "npu_rms_norm ≈ pow → mean → add → rsqrt → mul"
    assert {op: per_op[(rms, op)] for op in ("aten::pow", "aten::mean", "aten::rsqrt")} == dict.fromkeys(
        ("aten::pow", "aten::mean", "aten::rsqrt"), 51
    )
    assert per_op[("npu_rotary_mul ≈ chunk → neg → cat → mul → add", "aten::neg")] == 48


def flat(text: str) -> str:
    """The text with its line wrapping and column padding folded to single spaces."""
    return " ".join(text.split())


_GATED: dict = {}
"""The gate tests' traces by (side, path), loaded once per session."""


def gate(capsys, baseline, candidate, *options: str) -> tuple[int, str, str]:
    """``traceanalyze compare`` with the gate's options, its baseline and candidate each loaded once per session (the
    gate tests compare the same few traces again and again; the CLI's loading is checked in tests/test_cli.py)."""
    sides, load = iter(("baseline", "candidate")), trace_module.load  # a trace compared with itself: two loads

    def load_once(path, **given):
        key = (next(sides), str(path))
        if key not in _GATED:
            _GATED[key] = load(path, **given)
        return _GATED[key]

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(trace_module, "load", load_once)
        return run(capsys, "compare", baseline, candidate, *options)


def test_gate_with_3_steps_a_run_is_inconclusive_at_99_percent(capsys):
    """fused → unfused: +9.3 ms per step (+76 %), every unfused step slower than every fused one; but with 3 steps a
    run no 99 % interval exists (a complete separation has p = 1/20): exit 4, the reason and the fix, or 0 under
    --inconclusive pass."""
    code, out, _ = gate(capsys, FUSED_SAMPLE, SAMPLE, "--fail-on-regression", "10")
    assert code == 4
    assert (
        "gate inconclusive: with 3 vs 3 steps changes of any size cannot be told from noise at 99% "
        "confidence (it takes 5 steps a run); profile more steps"
    ) in flat(out)
    assert gate(capsys, FUSED_SAMPLE, SAMPLE, "--fail-on-regression", "10", "--inconclusive", "pass")[0] == 0
    assert gate(capsys, FUSED_SAMPLE, SAMPLE, "--fail-on-regression", "10", "--inconclusive", "fail")[0] == 3


def test_gate_fails_on_the_work_a_host_bound_step_added_and_names_it_first(capsys):
    """At 90 % (3 steps a run suffice) the host-bound unfused steps fail on their device work (+171 %) and CPU ops
    (+40 %); what changed the step (+9.99 ms per step, means) opens with masked_fill's kernel (new, 2.86 ms per
    step)."""
    code, out, _ = gate(capsys, FUSED_SAMPLE, SAMPLE, "--fail-on-regression", "10", "--confidence", "90")
    assert code == 3
    head = flat(out.split("Device time by kind")[0])
    assert "gate FAIL: host-bound steps, their work grew: device work +170.8% (90% interval" in head
    assert "device work 6.13 ms → 16.60 ms per step (+170.8%, 90% interval" in head
    changed = head.split("What changed the step (per step, means; adds up to +")[1]
    assert changed.index("masked_fill") < changed.index("2.86 ms") < changed.index("GEMM")


@pytest.mark.parametrize(
    "options, code",
    [
        (("--fail-on-regression", "100"), 3),  # device work +171 %
        (("--fail-on-regression", "200"), 0),  # device work and CPU ops within; step +76 % (90 %: +45 … +101 %)
        (("--fail-on-regression-ms", "30"), 0),
        (("--fail-on-regression-ms", "3"), 3),
        (("--fail-on-regression", "200", "--fail-on-regression-ms", "3"), 0),  # both must be exceeded
    ],
    ids=["pct100", "pct200", "ms30", "ms3", "both"],
)
def test_gate_thresholds(capsys, options, code):
    assert gate(capsys, FUSED_SAMPLE, SAMPLE, "--confidence", "90", *options)[0] == code


def test_gate_passes_a_trace_against_itself_and_a_speedup(capsys):
    assert gate(capsys, SAMPLE, SAMPLE, "--fail-on-regression", "0")[0] == 0
    code, out, _ = gate(capsys, SAMPLE, FUSED_SAMPLE, "--fail-on-regression", "0", "--confidence", "90")
    assert code == 0 and "gate pass: step time -43.3% (90% interval" in flat(out)
    assert "all of it within +0.0% per step" in flat(out)


def test_gate_never_fails_two_profiles_of_the_same_unchanged_program(capsys):
    """The two ranks of one job run one program: the bundled FSDP run (rank 1 waits in its all-gathers; step time
    -4 %; the collectives differ a lot, and say so) and the DDP-overlap run (step time equal within 0.01 %, rank
    1's kernels 13.5 % longer). With 3 steps a run the gate cannot tell at 99 % and says so; at 90 % the DDP ranks
    pass at 20 %."""
    fsdp = REPO / "sample_traces" / "fsdp"
    code, out, _ = gate(capsys, fsdp / "fsdp_rank0.json.gz", fsdp / "fsdp_rank1.json.gz", "--fail-on-regression", "5")
    assert code == 4, out
    assert "exposed communication" in out and "beyond noise" in out
    ranks = [shared_path("h200", "ddp_overlap", f"ddp_overlap_rank{r}.json.gz") for r in (0, 1)]
    code, out, _ = gate(capsys, *ranks, "--fail-on-regression", "20", "--confidence", "90")
    assert code == 0 and "gate pass: step time +0.0% (90% interval" in flat(out)


def test_gate_calls_a_host_bound_slowdown_with_the_same_device_work_inconclusive(capsys):
    """gpt_train and big run the same code (GROUND_TRUTH.md section 3), recorded apart with 3 and 24 profiled steps;
    big's steps ran slower (CUDA events: median 75.9 -> 91.4 ms) with the same device work, its GPU idling longer:
    host-bound steps whose time changed with the same work, so inconclusive (exit 4), not a regression; what changed
    the step is device idle."""
    events = {
        name: statistics.median(meta("h200", name, f"{name}.meta.json")["step_gpu_ms_cuda_events"][2:]) * MS
        for name in ("gpt_train", "big")
    }
    code, out, _ = gate(
        capsys, shared_path("h200", "gpt_train"), shared_path("h200", "big"), "--fail-on-regression", "10"
    )
    assert code == 4 and "3 vs 24 steps" in out
    assert "inconclusive: host-bound, device work unchanged (device work " in flat(out)
    changed = out.split("What changed the step (per step, means;")[1].split("\n\n")[0].splitlines()
    assert changed[4].split()[0] == "idle", changed
    diff = ta.compare(load_shared("h200", "gpt_train"), load_shared("h200", "big"))
    step, busy = diff.metric("step_ns"), diff.metric("device_busy_ns")
    assert step["baseline_ns"] == pytest.approx(events["gpt_train"], rel=0.05)
    assert step["candidate_ns"] == pytest.approx(events["big"], rel=0.05)
    assert busy["candidate_ns"] == pytest.approx(busy["baseline_ns"], rel=0.01)
    assert diff.metric("idle_ns")["noise"] == "beyond noise"
    assert diff.metric("comm_exposed_ns")["noise"] == "no change"  # no communication in either


@pytest.mark.parametrize("option", ["--fail-on-regression", "--fail-on-regression-ms"])
def test_gate_refuses_a_negative_threshold(capsys, option):
    code, out, err = gate(capsys, SAMPLE, SAMPLE, option, "-5")
    assert (code, out) == (2, "")
    assert err.startswith(f"traceanalyze: error: {option}: ") and len(err.splitlines()) == 1


def test_gate_markdown_is_a_compact_pull_request_comment(capsys):
    code, out, _ = gate(
        capsys,
        FUSED_SAMPLE,
        SAMPLE,
        *("--fail-on-regression", "10", "--confidence", "90", "--format", "markdown"),
        *("--report-link", "https://ci.example/compare.txt"),
    )
    assert code == 3 and out.splitlines()[0].startswith("- **FAIL: host-bound steps, their work grew: device work")
    assert "# traceanalyzer compare" in out and "**What changed the step (per step, means; adds up to" in out
    assert "CPU ops (self host time)" not in out and "Device time by kind" not in out
    assert out.rstrip().endswith("[Full comparison report](https://ci.example/compare.txt)")
    assert len(out.splitlines()) < 80


def test_compare_json_has_every_documented_key(capsys, tmp_path):
    out = tmp_path / "compare.json"
    code, _, err = run(
        capsys, "compare", SAMPLE, SAMPLE, "--format", "json", "-o", out, "--top", "3", "--fail-on-regression", "5"
    )
    assert code == 0, err
    data = json.loads(out.read_text())
    assert_typed(data, documented("`compare`"), "compare")
    assert_typed(data["baseline"], documented("`trace`"), "compare.baseline")
    assert_typed(data["gate"], documented("`compare.gate`"), "compare.gate")
    for row in data["summary"]:
        assert_typed(row, documented("`compare.summary`"), "compare.summary")
    assert set(data["levels"]) == set(data["changes"]) == {"kernel", "cpu_op", "op_device"}
    for level, rows in data["levels"].items():
        assert len(rows) == 3
        for row in rows:
            assert_typed(row, documented("`compare.levels`"), f"compare.levels.{level}")
        assert_typed(data["changes"][level], documented("`compare.changes`"), f"compare.changes.{level}")
    for row in data["findings"]:
        assert_typed(row, documented("`compare.findings`"), "compare.findings")
    for row in data["contributions"]:
        assert_typed(row, documented("`compare.contributions`"), "compare.contributions")
    assert_typed(data["gate"]["step"], documented("`compare.gate` change"), "compare.gate.step")


def test_compare_text_report_says_before_after_and_what_changed(capsys):
    code, out, _ = run(capsys, "compare", shared_path(*UNFUSED), shared_path(*FUSED), "--top", "5")
    assert code == 0
    assert "step time    21.67 ms → 12.28 ms (-9.39 ms, -43.3%; beyond noise, p = 0.05, 3 vs 3 steps)" in out
    assert "gone kernels" in out and "new kernels" in out and "aten::masked_fill_" in out
    assert "matched by              23 exact, 1 normalised, 1 op" in out


@pytest.mark.parametrize("args", [("nope.json", SAMPLE), (SAMPLE, "nope.json"), (SAMPLE, SAMPLE, "--rank", "5")])
def test_compare_bad_input_is_exit_2_in_one_line(capsys, tmp_path, args):
    args = [tmp_path / a if a == "nope.json" else a for a in args]
    code, out, err = run(capsys, "compare", *args)
    assert (code, out) == (2, "")
    lines = [line for line in err.splitlines() if not line.startswith(PROGRESS)]  # a load over 1 s says so first
    assert len(lines) == 1 and lines[0].startswith("traceanalyze: error:"), err


PROGRESS = ("traceanalyze: loading ", "traceanalyze: done in ")
"""The progress lines a load that takes over a second writes to stderr before any error."""


def test_report_command_is_unchanged(capsys):
    code, out, _ = run(capsys, SAMPLE, "--top", "2")
    assert code == 0 and out.lstrip().startswith("traceanalyzer report")
