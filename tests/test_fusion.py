"""Fusion opportunities on real H200 traces: planted patterns found with counts, locations and savings."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from conftest import REPO, joined_findings, joined_section, load_shared

import traceanalyzer as ta
from traceanalyzer import intervals
from traceanalyzer.analyzers import fusion
from traceanalyzer.analyzers.collective_calls import phases
from traceanalyzer.analyzers.fusion.matching import rank_steps
from traceanalyzer.analyzers.fusion.patterns import MAX_CHAIN_GAP_NS, WRAPPER_OP
from traceanalyzer.report import Options

MEASURED_DIFFERENCE_NS = (15.54 - 6.08) * 1e6
"""GROUND_TRUTH §4: GPU kernel time per step, unfused_ops minus fused_ops."""

FUSED_IN_FUSED_OPS = ("Unfused attention", "GEMM epilogue", "Layout copy")
"""The pattern families fused_ops replaces (SDPA, nn.Linear bias, no .contiguous())."""


@pytest.fixture(scope="module")
def unfused():
    return load_shared("h200", "unfused_ops", "unfused_ops.json.gz")


@pytest.fixture(scope="module")
def fused():
    return load_shared("h200", "fused_ops", "fused_ops.json.gz")


def _row(table, pattern, variant):
    rows = table[(table["pattern"] == pattern) & (table["variant"] == variant)]
    assert len(rows) == 1, f"{pattern} / {variant} not found once in:\n{table[['pattern', 'variant']]}"
    return rows.iloc[0]


@pytest.mark.parametrize(
    ("pattern", "variant", "per_step", "annotation"),
    [
        ("GEMM epilogue", "MatMul+BiasAdd+ReLU", 4, "mlp_matmul_add_relu"),
        ("GEMM epilogue", "MatMul+BiasAdd", 12, "(?:attention|mlp_matmul_add_relu)"),
        ("Unfused attention", "MatMul+Mul+MaskedFill+Softmax+MatMul", 4, "attention"),
        ("Layout copy", "Transpose/permute → contiguous copy", 16, "attention"),
        ("Residual add + norm", "Add+LayerNorm", 4, "residual_add_layernorm"),
        ("Residual add + norm", "Add+LayerNorm+GELU", 4, "residual_add_layernorm_gelu"),
    ],
)
def test_unfused_ops_planted_patterns(unfused, pattern, variant, per_step, annotation):
    row = _row(unfused.fusion(), pattern, variant)
    assert row["per_step"] == per_step
    assert row["saving_ns_per_step"] > 0
    occ = fusion.occurrences(unfused)
    mine = occ[(occ["family"] == pattern) & (occ["variant"] == variant) & (occ["phase"] == "forward")]
    assert mine["annotation"].str.contains(rf"layer\d\.{annotation}$").all()
    assert mine.groupby("step").size().eq(per_step).all()
    assert set(mine["annotation"].str.extract(r"(layer\d)")[0]) == {"layer0", "layer1", "layer2", "layer3"}


def test_attention_has_python_stack_and_backward(unfused):
    row = _row(unfused.fusion(), "Unfused attention", "MatMul+Mul+MaskedFill+Softmax+MatMul")
    assert row["backward_per_step"] == 4
    assert "attn_unfused" in row["where"]
    assert "scaled_dot_product_attention" in row["replacement"]


def test_estimated_saving_matches_measured_difference(unfused):
    table = unfused.fusion()
    saving = table[table["pattern"].isin(FUSED_IN_FUSED_OPS)]["saving_ns_per_step"].sum()
    assert abs(saving - MEASURED_DIFFERENCE_NS) / MEASURED_DIFFERENCE_NS < 0.30


def test_fused_ops_reports_only_what_is_still_unfused(fused):
    table = fused.fusion()
    assert not table["pattern"].isin(["Unfused attention", "Layout copy"]).any()
    epilogue = table[table["pattern"] == "GEMM epilogue"]
    assert list(epilogue["variant"]) == ["MatMul+ReLU"]
    assert _row(table, "Residual add + norm", "Add+LayerNorm")["per_step"] == 4


def test_gpt_train_llama_chains_named(gpt_train):
    table = gpt_train.fusion()
    assert _row(table, "RMSNorm", "Add+Pow+Mean+Add+Rsqrt+Mul")["per_step"] == 16
    assert _row(table, "Rotary embedding", "RoPE (slice/neg/cat/mul/add)")["per_step"] == 16
    assert _row(table, "Gated MLP", "SiLU+MatMul+Mul")["per_step"] == 8
    where = _row(table, "RMSNorm", "Add+Pow+Mean+Add+Rsqrt+Mul")["where"]
    assert "LlamaDecoderLayer_0 | gen.py(250): step" in where  # the module, then the user's line (not transformers')
    assert "modeling_llama.py" not in where
    assert table["saving_ns_per_step"].is_monotonic_decreasing


def test_findings_and_section(unfused):
    found = joined_findings(fusion, unfused)
    assert found and found[0].basis.value == "modelled" and found[0].saving_ns > 0
    assert "Unfused attention" in found[0].title
    section = joined_section(fusion, unfused, Options(top=5))
    assert section.fact("memory_bandwidth").value.startswith("NVIDIA H200: 4.80 TB/s")
    assert len(section.table("opportunities").frame) == 5


ASCEND_CNN = ("ascend", "msinsight", "pytorch_text", "level1", "rank0_ascend_pt")
"""torch_npu Level1 text export of an AlexNet DDP step (with_stack): kernels link to the op the user called."""


@pytest.fixture(scope="module")
def ascend_cnn():
    return load_shared("public", *ASCEND_CNN)


def test_ascend_cnn_conv_relu_and_transdata(ascend_cnn):
    table = ascend_cnn.fusion()
    conv = _row(table, "Conv + BN + activation", "Conv+ReLU")
    assert conv["per_step"] == 5
    assert "ConvBatchnormFusionPass" in conv["replacement"]
    occ = fusion.occurrences(ascend_cnn)
    assert set(occ[occ["family"] == "Conv + BN + activation"]["first_op"]) == {"aten::conv2d"}
    fmt = _row(table, "NPU format conversion", "TransData (layout conversion around the op)")
    assert fmt["per_step"] >= 5 and fmt["saving_ns_per_step"] == fmt["current_ns_per_step"] > 0
    assert "torch_npu.npu_format_cast" in fmt["replacement"]
    assert "ConvolutionBackward0" in fmt["where"]


def test_ascend_chains_name_ops_not_record_function_ranges(ascend_cnn):
    table = ascend_cnn.fusion()
    discovered = table[table["pattern"] == "Repeated memory-bound chain"]["variant"]
    assert len(discovered) and not discovered.str.contains(r"ddp|DistributedDataParallel|\.forward").any()
    assert discovered.str.contains("ReluBackward0").any()
    sgd = _row(table, "Optimizer step", "SGD (foreach, 4 ops)")
    assert sgd["replacement"] == "torch_npu.optim.NpuFusedSGD"


def test_op_stream_entries_are_top_level_ops_or_the_ops_inside_npu_record_function_ranges(unfused, ascend_cnn):
    """Kineto: every host entry is its own top-level op (linking's top_op). torch_npu writes record_function ranges
    (DistributedDataParallel.forward) as CPU ops: the ops inside them are the entries, the ranges never are."""
    for trace in (unfused, ascend_cnn):
        ev = trace.events
        rows = fusion.op_stream(trace)["row"].to_numpy()
        host = rows[(ev["kind"].to_numpy()[rows] == "cpu_op")]
        names = ev["name"].astype(str).to_numpy()
        top = ev["top_op"].to_numpy()[host]
        below = host[top != host]
        assert not any(WRAPPER_OP.match(n) for n in names[host])
        assert all(WRAPPER_OP.match(n) for n in names[top[top != host]])
        assert ("aten::conv2d" in set(names[below])) == (trace is ascend_cnn)  # the model's ops inside DDP.forward


@pytest.mark.parametrize("level", ["level0", "level2"])
def test_ascend_other_levels_find_transdata(level):
    trace = load_shared("public", "ascend", "msinsight", "pytorch_text", level, "rank0_ascend_pt")
    table = trace.fusion()
    assert _row(table, "NPU format conversion", "TransData (layout conversion around the op)")["per_step"] > 0
    assert (table["replacement"].str.contains("torch_npu")).any()


def test_ascend_db_export_matches_text_export(ascend_cnn):
    db = load_shared("public", "ascend", "msinsight", "pytorch_db", "level1", "rank0_ascend_pt").fusion()
    text = ascend_cnn.fusion()
    for family in ("Conv + BN + activation", "NPU format conversion", "Optimizer step"):
        assert db[db["pattern"] == family]["per_step"].tolist() == text[text["pattern"] == family]["per_step"].tolist()


def test_ascend_qwen3_already_uses_fused_npu_ops():
    table = load_shared("public", "ascend", "msinsight", "st_level2_qwen3_4rank", "rank_0_ascend_pt").fusion()
    assert not table["pattern"].isin(["RMSNorm", "Rotary embedding", "Gated MLP", "Unfused attention"]).any()
    discovered = " ".join(table[table["pattern"] == "Repeated memory-bound chain"]["variant"])
    assert discovered  # the unfused rest is still found
    for fused in ("RmsNorm", "RotaryPosition", "FlashAttentionScore", "ApplyAdamW", "SwiGlu"):
        assert fused not in discovered  # an NPU fused op is never told to fuse


def test_host_to_device_copies_are_named_by_their_kind_not_taken_for_a_cast_chain():
    trace = ta.load(REPO / "sample_traces" / "cnn_h200" / "alexnet_ddp.json.gz")
    ev = trace.events
    copies = ev[(ev["kind"] == "memcpy") & ev["name"].astype(str).str.contains("HtoD")]
    assert len(copies) and (ev["name"].astype(str).reindex(copies["top_op"]) == "aten::to").all()
    stream = fusion.op_stream(trace)
    tokens = stream.set_index("row").loc[copies["top_op"].unique(), "token"]
    assert (tokens == "memcpy_htod").all()  # the batch moving to the device, by its copy kind
    occ = fusion.occurrences(trace)
    assert not (occ["pattern"] == "cast").any()
    claimed = {row for rows in occ["entry_rows"] for row in rows}
    assert not claimed & set(copies["top_op"])  # nor part of a discovered chain (it was "to → to")


def test_a_fusion_finding_claims_the_work_it_removes_and_covers_those_hotspots(unfused):
    """The unfused attention finding claims its chain's elementwise kernels (not the GEMMs a fusion keeps, as its
    saving model says), so the hotspot findings of masked_fill and mul point to it instead of being pushed again,
    while the aten::bmm hotspot keeps its own modelled GEMM saving."""
    found = unfused.findings()
    attention = next(f for f in found if f.title.startswith("Unfused attention"))
    claimed = {r: ivs for r, ivs in attention.claims.items() if len(ivs[0])}
    assert claimed, "the fusion finding claims device work"
    by_name = {f.where.get("name"): f for f in found if f.analyzer == "hotspots"}
    assert by_name["aten::masked_fill_"].covered_by == attention.title
    assert not by_name["aten::bmm"].covered_by and by_name["aten::bmm"].saving_ns > 0
    kernels = unfused.events[unfused.events["kind"] == ta.Kind.KERNEL.value]
    gemm = kernels[kernels["name"].astype(str).str.contains("nvjet|gemm", case=False)]
    gemm_time = intervals.union(gemm["ts"].to_numpy(), (gemm["ts"] + gemm["dur"]).to_numpy())
    assert len(gemm) and sum(intervals.overlap_length(ivs, gemm_time) for ivs in claimed.values()) == 0


def test_ddp_occurrences_stay_inside_one_phase_step_and_stretch_of_back_to_back_ops():
    """ddp_no_overlap (2 ranks; the main thread waits ~60-100 ms for backward, then all-reduces and divides the
    gradients): each occurrence's consecutive ops share their step and phase and follow each other within the gap
    bound, so no chain runs from the loss to the gradient division (it did: to → … → ones_like → _foreach_div_, its
    band ~100 ms of the step); the loss chain ending at ones_like is still found once per rank and step."""
    trace = load_shared("h200", "ddp_no_overlap")
    ev = trace.events
    names, step = ev["name"].astype(str).to_numpy(), ev["step"].to_numpy()
    occ = fusion.occurrences(trace)
    assert set(occ["rank"]) == {0, 1} and len(occ) > 100
    entries = list(occ["entry_rows"])
    every = phases(trace, pd.DataFrame({"launch": np.concatenate(entries)}))  # one call: a row's phase is its own
    for rows, phase in zip(entries, np.split(every, np.cumsum([len(r) for r in entries])[:-1]), strict=True):
        start = ev["ts"].to_numpy()[rows]
        gaps = start[1:] - (start + ev["dur"].to_numpy()[rows])[:-1]
        assert len(set(phase)) == 1, names[rows]
        assert len(set(step[rows])) == 1 and (gaps <= MAX_CHAIN_GAP_NS).all(), names[rows]
        assert not {"aten::ones_like", "aten::_foreach_div_"} <= set(names[rows])
    loss = occ[occ["variant"] == "to → pad → contiguous → cross_entropy_loss → ones_like"]
    assert len(loss) == rank_steps(trace)
