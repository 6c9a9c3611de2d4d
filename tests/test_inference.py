"""Inference views on real traces: phases found by the engines' markers, by the forward's shapes, or not at all
(training), with the numbers a user reads checked against the shapes and times the trace records."""

from __future__ import annotations

import json

import numpy as np
import pytest

import traceanalyzer as ta
from tests.conftest import (
    JOBS,
    REPO,
    job_pair,
    joined_findings,
    joined_section,
    load_shared,
    same_findings,
    same_section,
    shared_path,
)
from traceanalyzer import perrank
from traceanalyzer.analyzers import inference
from traceanalyzer.comparison import Threshold
from traceanalyzer.options import Options
from traceanalyzer.renderers import compare as compare_renderer
from traceanalyzer.renderers import html as html_renderer
from traceanalyzer.renderers import json as json_renderer
from traceanalyzer.renderers import text as text_renderer

ENGINES = ("public", "torch", "tracelens", "inference")
QWEN = ("public", "torch", "tracelens", "h100", "Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz")


def _engine(*parts: str) -> ta.Trace:
    return load_shared(*ENGINES, *parts)


def test_engine_markers_give_phase_batch_and_kv_length():
    decode = _engine("sglang_decode", "sglang_Qwen3-8B_decode.json.gz").inference()
    row = decode.timeline.iloc[0]
    assert len(decode.timeline) == 1 and (row["phase"], row["rule"], row["batch"], row["kv_len"]) == (
        "decode",
        "marker",
        32,
        32785,
    )  # step[DECODE bs=32] inside execute_32_context_0(...)_generation_32(sq32sk32785...)
    extend = _engine("sglang_prefilldecode", "sglang_Qwen3-8B_prefilldecode.json.gz").inference().timeline.iloc[0]
    assert (extend["phase"], extend["batch"], extend["tokens"]) == ("prefill", 15, 15360)  # step[EXTEND bs=15 ...]
    mixed = _engine("vllm_prefilldecode_piecewise", "graph_execution.json.gz").inference().timeline.iloc[0]
    assert (mixed["phase"], mixed["batch"], mixed["tokens"], mixed["kv_len"]) == ("mixed", 46, 8192, 34489)


def test_a_forward_of_a_batch_of_prompts_is_one_prefill_by_its_shapes():
    analysis = load_shared(*QWEN).inference()
    row = analysis.timeline.iloc[0]
    assert len(analysis.timeline) == 1
    assert (row["phase"], row["rule"], row["batch"], row["tokens"], row["context_len"]) == (
        "prefill",
        "shapes",
        16,
        16 * 559,
        559,
    )
    # K and V of 24 layers, 16 sequences x 16 heads x 559 positions x 64, bf16
    assert analysis.kv["kv_cache_bytes"] == 24 * 2 * 16 * 16 * 559 * 64 * 2
    assert analysis.kv["kv_bytes_per_token"] == 24 * 2 * 16 * 64 * 2
    assert analysis.phases.set_index("phase").loc["prefill", "judged_against"] == "compute"
    forward = inference.phases.iterations(load_shared(*QWEN)).iloc[0]
    span = forward["device_end_ns"] - forward["device_start_ns"]  # the prefill's device span, first to last kernel
    assert row["tflops"] == pytest.approx(row["flops"] / span / 1e3) and 0 < row["peak_share"] < 1
    assert row["peak_share"] == pytest.approx(row["tflops"] / 989.0)  # H100 SXM dense bf16


def test_the_report_has_an_inference_section_with_its_ledger():
    report = load_shared(*QWEN).report()
    facts = {f["id"]: f for f in report["sections"]["inference"]["facts"]}
    assert facts["rule"]["value"].startswith("shapes (the token-embedding input")
    assert facts["ttft_ns"]["unit"] == "ns" and facts["prefill_mfu"]["estimated"]
    tables = {t["id"] for t in report["sections"]["inference"]["tables"]}
    assert tables == {"phases", "requests", "iterations", "phase_hotspots"}


def test_a_training_trace_has_no_inference_section_and_says_why(gpt_train):
    assert "inference" not in gpt_train.report()["sections"]
    assert gpt_train.inference().reason.startswith("a training trace (it has a backward pass)")


def test_a_lone_graph_replay_is_not_taken_for_a_generation():
    trace = ta.load(REPO / "sample_traces" / "cuda_graph" / "cuda_graph.json.gz")
    assert trace.inference().timeline.empty and trace.inference().reason.startswith("no forward pass found")


RECORDED = REPO / "sample_traces" / "inference"
SCENARIOS = (
    "eager_dynamic", "static_compiled", "batched", "long_prefill", "eager_attention", "cudnn_kv", "flash_kv", "marked",
)  # fmt: skip
HEADS_READ = {"batched": 16, "static_compiled": 16, "eager_attention": 16}
"""KV heads attention reads per scenario, 4 (the cache's own) unless named: HF runs GQA natively in SDPA only
without a padding mask (batch 1, dynamic cache); with one (left padding, a static cache) it repeats the 4 KV heads
to the 16 query heads first, as attention written out (attn_implementation="eager") always does."""
_TRACES: dict[str, ta.Trace] = {}


def _recorded(name: str) -> tuple[ta.Trace, dict, dict]:
    """A recorded generate() trace (or marked loop), its meta and the CUDA-event truth of the one profiled call it
    holds."""
    meta = json.loads((RECORDED / f"{name}.meta.json").read_text())
    if name not in _TRACES:
        _TRACES[name] = ta.load(RECORDED / f"{name}.json.gz")
    return _TRACES[name], meta, meta["profiled_traced"][0]


@pytest.mark.parametrize("name", SCENARIOS)
def test_recorded_generate_phases_are_counted_exactly(name):
    trace, meta, truth = _recorded(name)
    line = trace.inference().timeline
    assert line["phase"].value_counts().to_dict() == {"prefill": 1, "decode": truth["new_tokens"] - 1}
    assert (line["batch"] == meta["batch"]).all()
    assert set(line["rule"]) == {
        "marker" if name == "marked" else "structure" if name == "static_compiled" else "shapes"
    }
    prefill, prompt = line.iloc[0], _prompt(meta, truth)
    assert prefill["phase"] == "prefill" and prefill["context_len"] == prompt  # left-padded
    assert line["context_len"].iloc[-1] == prompt + truth["new_tokens"] - 1


def _prompt(meta: dict, truth: dict) -> int:
    """The (padded) prompt length of the traced call (cudnn_kv and flash_kv lengthen it at every call)."""
    return max(truth.get("prompt_lens", meta["prompt_lens"]))


@pytest.mark.parametrize("name", SCENARIOS)
def test_recorded_ttft_and_every_tpot_are_within_5_percent_of_cuda_events(name):
    trace, _, truth = _recorded(name)
    analysis = trace.inference()
    ttft_ms = analysis.requests["ttft_ns"].iloc[0] / 1e6
    assert ttft_ms == pytest.approx(truth["ttft_ms_cuda_events"], rel=0.05)
    tpot_ms = analysis.timeline.loc[analysis.timeline["phase"] == "decode", "token_ns"].to_numpy() / 1e6
    assert tpot_ms == pytest.approx(truth["tpot_ms_cuda_events"], rel=0.05)  # token by token, in order
    decode = analysis.phases.set_index("phase").loc["decode"]
    assert decode["token_ns_p50"] / 1e6 == pytest.approx(np.median(truth["tpot_ms_cuda_events"]), rel=0.05)


@pytest.mark.parametrize("name", SCENARIOS)
def test_recorded_decode_mbu_matches_the_bytes_of_the_model_over_the_measured_tpot(name):
    """By hand: every weight but the input embedding table (decode looks up one row of it) once per token, plus K and
    V of every position attention reads (heads as attention is given them: HF repeats the KV heads for SDPA unless
    it runs GQA natively), over the CUDA-event TPOT, against the H200's 4.8 TB/s."""
    trace, meta, truth = _recorded(name)
    cfg = meta["config"]
    weights = meta["param_bytes"] - cfg["vocab_size"] * cfg["hidden_size"] * 2
    analysis = trace.inference()
    decode = analysis.timeline[analysis.timeline["phase"] == "decode"]
    prompt, new = _prompt(meta, truth), truth["new_tokens"]
    positions = np.full(new - 1, prompt + new - 1) if meta["cache"] == "static" else prompt + np.arange(1, new)
    head_dim = cfg["hidden_size"] // cfg["num_attention_heads"]
    kv_read = 2 * cfg["num_hidden_layers"] * HEADS_READ.get(name, 4) * head_dim * 2 * meta["batch"] * positions
    by_hand = (weights + kv_read) / (np.array(truth["tpot_ms_cuda_events"]) / 1e3) / 4.8e12
    assert decode["bandwidth_share"].to_numpy() == pytest.approx(by_hand, rel=0.10)
    assert analysis.phases.set_index("phase").loc["decode", "judged_against"] == "memory"
    assert analysis.phases.set_index("phase").loc["prefill", "judged_against"] == "compute"


@pytest.mark.parametrize("name", SCENARIOS)
def test_recorded_kv_cache_per_token_and_headroom(name):
    """By hand from the model's config: layers x K and V x the cache's 4 KV heads x head dim x bf16, also where
    attention is given them repeated to 16 heads (batched: HF's expand; static_compiled: inductor's kernel reading
    the preallocated [1, 4, 543, 128] cache and writing 16 heads)."""
    trace, meta, _ = _recorded(name)
    cfg = meta["config"]
    by_hand = (
        cfg["num_hidden_layers"] * 2 * cfg["num_key_value_heads"] * cfg["hidden_size"] // cfg["num_attention_heads"] * 2
    )
    kv = trace.inference().kv
    assert kv["kv_bytes_per_token"] == by_hand == meta["kv_bytes_per_token"]
    free = trace.meta.devices[0].memory_bytes - kv["peak_allocated_bytes"]
    assert kv["headroom_tokens"] == free // by_hand
    assert kv["peak_allocated_bytes"] <= meta["max_memory_allocated_B"]


@pytest.mark.parametrize("name", [n for n in SCENARIOS if n != "cudnn_kv"])
def test_recorded_batch_1_decode_is_found_launch_bound_with_a_saving_per_token(name):
    trace, _, truth = _recorded(name)
    found = next(f for f in trace.findings() if f.id == "inference.decode_launch_bound")
    per_token = found.evidence["saving_ns_per_token"]
    assert 0 < per_token < np.median(truth["tpot_ms_cuda_events"]) * 1e6  # a part of each token's time
    assert found.claims  # the decode spans it claims: the generic launch-bound finding of the same gaps defers to it
    assert found.severity.value == "high" or found.covered_by.startswith("Launch-bound loop")


def _finding(name: str, finding: str):
    """A recording's inference finding by its id (None without one)."""
    return next((f for f in _recorded(name)[0].findings() if f.id == f"inference.{finding}"), None)


def test_first_call_stalls_at_new_kv_lengths_save_what_the_fixed_backend_measures():
    """cudnn_kv plans a cuDNN graph at every new KV length (its first attention call of each token takes tens of ms,
    the other layers' calls at that length 0.2 ms); flash_kv, the same decode on the flash backend, has none. The
    saving per token is the traced call's measured TPOT difference (CUDA events), within 10 %; the launch-bound
    finding keeps only the rest of the host time: about flash_kv's."""
    tpot = {n: np.mean(_recorded(n)[2]["tpot_ms_cuda_events"]) * 1e6 for n in ("cudnn_kv", "flash_kv")}
    stalls = _finding("cudnn_kv", "new_kv_length_stalls")
    assert stalls.evidence["stalled_tokens"] == 31 and stalls.evidence["kv_lens"][:2] == [793, 794]
    assert stalls.evidence["saving_ns_per_token"] == pytest.approx(tpot["cudnn_kv"] - tpot["flash_kv"], rel=0.10)
    assert "sdpa_kernel" in stalls.advice and stalls.basis.value == "measured"
    assert (
        _finding("flash_kv", "new_kv_length_stalls") is None
        and _finding("eager_dynamic", "new_kv_length_stalls") is None
    )
    rest = _finding("cudnn_kv", "decode_launch_bound").evidence["saving_ns_per_token"]
    assert rest == pytest.approx(_finding("flash_kv", "decode_launch_bound").evidence["saving_ns_per_token"], rel=0.25)


def test_prefill_attention_written_out_saves_what_sdpa_measures():
    """eager_attention's prefill (prompt 4096, attn_implementation="eager") runs the scores, scaling, mask, softmax in
    fp32, casts and the product with V as separate kernels: 13.6 ms of device time, where long_prefill's fused SDPA
    kernel takes 0.6 ms. The saving per request is the TTFT difference of the pair's unprofiled calls (CUDA events,
    medians), within 10 %: the profiled long_prefill prefill is host-bound under the profiler (its host window 9.7 ms
    against 4.7 ms of device work), so the profiled calls differ by less."""
    ttft = {
        n: np.median([c["ttft_ms_cuda_events"] for c in _recorded(n)[1]["unprofiled"]]) * 1e6
        for n in ("eager_attention", "long_prefill")
    }
    found = _finding("eager_attention", "prefill_attention_unfused")
    assert found.evidence["saving_ns_per_request"] == pytest.approx(
        ttft["eager_attention"] - ttft["long_prefill"], rel=0.10
    )
    assert "attn_implementation='sdpa'" in found.advice
    assert _finding("long_prefill", "prefill_attention_unfused") is None


def test_user_markers_give_the_phases_of_a_hand_written_loop():
    """marked: record_function("prefill") around the prompt's forward, ("decode") around each token's: each range is
    an iteration, found by the marker rule, with its shapes from the ops inside."""
    analysis = _recorded("marked")[0].inference()
    line = analysis.timeline
    assert list(line["phase"]) == ["prefill"] + ["decode"] * 31 and set(line["rule"]) == {"marker"}
    facts = {f.id: f.value for f in joined_section(inference, _recorded("marked")[0], Options()).facts}
    assert facts["rule"] == "markers (engine or record_function annotations of each forward): 32 iterations"


_COMPARED: dict[tuple[str, str], ta.Comparison] = {}


def _compared(baseline: str, candidate: str) -> ta.Comparison:
    """Two recordings compared, once per module."""
    if (baseline, candidate) not in _COMPARED:
        _COMPARED[baseline, candidate] = ta.compare(_recorded(baseline)[0], _recorded(candidate)[0])
    return _COMPARED[baseline, candidate]


def test_compare_states_ttft_and_tpot_per_phase():
    """The static cache with torch.compile against eager decode: TPOT more than halves, beyond token-to-token noise."""
    eager, compiled = _recorded("eager_dynamic")[0], _recorded("static_compiled")[0]
    rows = {r["metric"]: r for r in _compared("eager_dynamic", "static_compiled").to_dict()["inference"]}
    assert set(rows) == {"ttft_ns", "tpot_p50_ns", "tpot_p90_ns"}
    tpot = rows["tpot_p50_ns"]
    decode = [
        a.phases.set_index("phase").loc["decode", "token_ns_p50"] for a in (eager.inference(), compiled.inference())
    ]
    assert (tpot["baseline_ns"], tpot["candidate_ns"]) == pytest.approx(decode)
    assert tpot["delta_share"] < -0.5 and tpot["noise"] == "beyond noise" and tpot["baseline_samples"] == 31
    assert rows["ttft_ns"]["baseline_ns"] == eager.inference().requests["ttft_ns"].iloc[0]
    assert ta.compare(eager, eager).to_dict()["inference"][1]["noise"] == "no change"


def test_the_gate_judges_tpot_over_the_tokens_and_ttft_over_the_requests():
    """One generate() a profiler step is too few steps to judge the step time; the gate judges the phases. Eager decode
    against the compiled static cache is slower per token by what the CUDA events say, beyond a 5 % threshold: FAIL
    (exit 3); the other way round TPOT passes, but one request a run cannot tell TTFT from noise: inconclusive."""
    truth = {
        name: np.median(_recorded(name)[2]["tpot_ms_cuda_events"]) for name in ("eager_dynamic", "static_compiled")
    }
    slower = _compared("static_compiled", "eager_dynamic").to_dict(threshold=Threshold(share=0.05))
    gate = slower["gate"]
    phases = {g["quantity"]: g for g in gate["generation"]}
    tpot, ttft = phases["time per output token"], phases["time to first token"]
    assert gate["outcome"] == "fail" and gate["reason"].startswith("generation slower: time per output token +1")
    assert (tpot["outcome"], tpot["steps"], tpot["samples"]) == ("fail", [31, 31], "decode tokens")
    assert tpot["estimate_share"] == pytest.approx(truth["eager_dynamic"] / truth["static_compiled"] - 1, rel=0.1)
    assert (ttft["outcome"], ttft["steps"], ttft["samples"]) == ("inconclusive", [1, 1], "requests")
    text = " ".join(compare_renderer.render(slower, "text").split())
    assert "gate: time per output token 4.34 ms → 10.84 ms (+149.8%" in text and "(31 vs 31 decode tokens)" in text
    faster = _compared("eager_dynamic", "static_compiled").gate(Threshold(share=0.05))
    assert faster.outcome == "inconclusive" and [g.outcome.value for g in faster.generation] == ["inconclusive", "pass"]
    assert "time to first token cannot be told from noise with 1 vs 1 requests" in faster.reason


@pytest.mark.parametrize("job", ["ascend_pp2_4rank", "ascend_level1_2rank"])
def test_ascend_training_samples_have_no_generation(job):
    """The Ascend samples are training steps (MindSpeed Qwen3, MindStudio Insight test data): no generation."""
    trace = load_shared(*JOBS[job])
    assert trace.meta.platform.value == "ascend" and trace.inference().reason.startswith(TRAINING)


TRAINING = "a training trace (it has a backward pass)"


def test_the_ledger_says_why_an_ascend_sample_has_no_inference_section_in_every_presenter():
    """Joined and rank by rank, in JSON, text and HTML."""
    ranks, trace = job_pair("ascend_level1_2rank")
    report = trace.build_report()
    assert "inference" not in {s.id for s in report.sections}
    ledger = {f["id"]: f["value"] for f in json_renderer.data(report)["sections"]["ledger"]["facts"]}
    assert ledger["inference_not_shown"].startswith(TRAINING)
    assert f"inference section not shown {TRAINING}" in " ".join(text_renderer.render(report).split())
    html = html_renderer.render(report)
    assert "inference section not shown" in html and TRAINING in html
    rank_by_rank = {f.id: f.value for f in ranks.build_report().section("ledger").facts}
    assert rank_by_rank["inference_not_shown"] == ledger["inference_not_shown"]


def test_the_html_report_shows_the_inference_section():
    html = html_renderer.render(_recorded("batched")[0].build_report())
    assert "Inference: prefill and decode" in html and "time per output token, p50" in html


@pytest.mark.parametrize("name", ["qwen_h100", "batched", "static_compiled"])
def test_rank_by_rank_equals_joined(name):
    if name == "qwen_h100":
        path, joined = shared_path(*QWEN), load_shared(*QWEN)
    else:
        path, joined = RECORDED / f"{name}.json.gz", _recorded(name)[0]
    job = perrank.load_job(path)
    same_section(inference, job, joined, Options())
    same_findings(inference.job_findings(job.merged("inference"), job), joined_findings(inference, joined))


def test_the_dashboard_page_draws_the_iterations_tpot_and_bandwidth_against_the_peak():
    from traceanalyzer.dashboards import routing
    from traceanalyzer.dashboards.views import View

    trace = _recorded("batched")[0]
    out = routing.render("/inference", {"k": View(trace, "batched")}, "k", {})
    graphs = {c.id: c.figure for c in out if hasattr(c, "figure")}
    assert list(graphs) == ["inference-timeline", "inference-tpot", "inference-bandwidth"]
    bars = {bar.name: len(bar.x) for bar in graphs["inference-timeline"].data}
    assert bars == {"prefill": 1, "decode": 31}
    peak = graphs["inference-bandwidth"].layout.shapes[0]
    assert peak.y0 == peak.y1 == 4800.0  # the H200's HBM peak, GB/s
    training = routing.render(
        "/inference", {"k": View(ta.load(REPO / "sample_traces" / "unfused_ops.json.gz"), "t")}, "k", {}
    )
    assert "a training trace" in str(training[-1])
