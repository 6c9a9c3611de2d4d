"""Inference views: prefill and decode iterations, time to first token, time per output token, and how close each
phase runs to the device's limits (decode to HBM bandwidth, prefill to the tensor peak).

``phases`` finds the iterations (each forward pass, with the rule that found it), ``metrics`` times them and rates
them against the device, ``checks`` turns them into findings. A rank's part is its iterations, its kernel time per
phase and its peak allocated memory, so a job analysed rank by rank gets the section the joined trace gets. A
training trace (one with a backward pass) or one without any recognisable forward has no section; ``analyze``
says why.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from traceanalyzer import devices
from traceanalyzer.analyzers import summary
from traceanalyzer.analyzers.inference import checks, metrics, phases
from traceanalyzer.findings import Finding
from traceanalyzer.jobdata import JobData
from traceanalyzer.memo import remember
from traceanalyzer.options import DEFAULT, Options
from traceanalyzer.schema import NO_ROW, TraceMeta
from traceanalyzer.section import Fact, Per, Section, Table, Unit
from traceanalyzer.tables import stack
from traceanalyzer.tracedata import TraceData

HOTSPOTS_PER_PHASE = 5
"""Kernels listed per phase in the section's hotspot table."""

RULES = {
    phases.MARKER: "markers (engine or record_function annotations of each forward)",
    phases.SHAPES: "shapes (the token-embedding input [batch, tokens] of each eager forward)",
    phases.STRUCTURE: "structure (a repeated compiled graph call or graph launch per forward; phase from its "
    "attention's query length, else the first of a request is its prefill)",
}
"""What each phase-detection rule means, as the ledger of the section states it."""


@dataclass
class InferenceAnalysis:
    """The inference views of a trace: every iteration with its time per token and rates (``timeline``), one row
    per phase and per request, kernel time per phase, KV-cache facts, and why there is nothing when there is not."""

    timeline: pd.DataFrame
    phases: pd.DataFrame
    requests: pd.DataFrame
    kernels: pd.DataFrame
    kv: dict
    reason: str = ""


def analyze(trace: TraceData) -> InferenceAnalysis:
    """The inference views of a trace (empty tables and a ``reason`` when it holds no generation)."""
    return remember(trace, "inference.analysis", lambda: _analysis(rank_part(trace), trace.meta))


def merge(parts: list[InferencePart], job: JobData) -> InferenceAnalysis:
    """The analyzer's merge rule: ``analyze`` of a job, from its ranks' parts joined."""
    return _analysis(_joined(parts), job.meta)


@dataclass(frozen=True)
class InferencePart:
    """A rank's part (or a joined trace's): its iterations (``phases.iterations``), kernel time per phase, peak
    allocated memory per rank (bytes), and why it has no iterations ('' when it has)."""

    iterations: pd.DataFrame
    kernels: pd.DataFrame
    peak_allocated: dict[int, int]
    reason: str


def rank_part(trace: TraceData, options: Options = DEFAULT) -> InferencePart:
    """A rank's part (or a joined trace's)."""
    found = phases.iterations(trace)
    memory = trace.memory_events
    known = memory[memory["total_allocated"] != NO_ROW]
    peaks = known.groupby("rank")["total_allocated"].max().to_dict() if len(known) else {}
    return InferencePart(
        iterations=found,
        kernels=phases.phase_kernels(trace),
        peak_allocated={int(r): int(v) for r, v in peaks.items()},
        reason="" if len(found) else _reason(trace),
    )


def _joined(parts: list[InferencePart]) -> InferencePart:
    """The parts of several ranks as one."""
    reasons = [p.reason for p in parts if p.reason]
    found = stack([p.iterations for p in parts])
    return InferencePart(
        iterations=found,
        kernels=stack([p.kernels for p in parts]),
        peak_allocated={r: v for p in parts for r, v in p.peak_allocated.items()},
        reason="" if len(found) else (reasons[0] if reasons else "no ranks"),
    )


def _reason(trace: TraceData) -> str:
    """Why a trace has no inference iterations."""
    if phases.is_training(trace.events):
        return "a training trace (it has a backward pass): its forwards are not generation steps"
    return (
        "no forward pass found: no engine or prefill/decode markers, no token-embedding op with recorded shapes "
        "(record_shapes=True), no repeated compiled region or graph launch"
    )


def _analysis(part: InferencePart, meta: TraceMeta) -> InferenceAnalysis:
    """The inference views from a (joined) part."""
    line = metrics.timeline(part.iterations, meta)
    return InferenceAnalysis(
        line,
        metrics.phases(line),
        metrics.requests(line),
        part.kernels,
        _kv(part.iterations, part.peak_allocated, meta),
        part.reason,
    )


def _kv(iterations: pd.DataFrame, peaks: dict[int, int], meta: TraceMeta) -> dict:
    """KV-cache facts: bytes per token (all layers, K and V, at the heads the cache stores where the trace shows
    them repeated for attention, else as attention reads them) from the last forward with attention shapes, and
    the tokens that still fit in the device's memory above the peak allocated."""
    shaped = iterations[(iterations["kv_cache_bytes"] > 0) & (iterations["bytes_basis"] == "shapes")]
    shaped = shaped[(shaped["kv_len"] > 0) & (shaped["batch"] > 0)]
    if not len(shaped):
        return {}
    last = shaped.iloc[-1]
    per_token = float(last["kv_cache_bytes"] / (last["kv_len"] * last["batch"]))
    facts = {"kv_bytes_per_token": per_token, "kv_cache_bytes": float(last["kv_cache_bytes"])}
    memory = next((d.memory_bytes for d in meta.devices if d.memory_bytes), None)
    peak = peaks.get(int(last["rank"]))
    if memory and peak:
        facts |= {
            "device_memory_bytes": int(memory),
            "peak_allocated_bytes": int(peak),
            "headroom_tokens": int(max(memory - peak, 0) / per_token),
        }
    return facts


def job_findings(analysis: InferenceAnalysis, job: JobData) -> list[Finding]:
    """Inference findings of a job's merged part (decode launch-bound, per-token syncs, stalls at new KV lengths,
    unfused prefill attention, KV headroom), each with its saving per token or per request."""
    return _findings(analysis, summary.job_step_time(job))


def job_absence(analysis: InferenceAnalysis, job: JobData) -> str:
    """Why the job has no Inference section ('' when it has one)."""
    return analysis.reason


def _findings(analysis: InferenceAnalysis, step) -> list[Finding]:
    """The checks' findings of an analysis (none without iterations)."""
    if not len(analysis.timeline):
        return []
    return checks.findings(analysis.timeline, analysis.phases, analysis.kv, step)


def job_section(analysis: InferenceAnalysis, job: JobData, options: Options) -> Section | None:
    """The Inference section of a job's merged part: phases, TTFT and TPOT, tokens/s, decode against bandwidth and
    prefill against compute; None for a job without generation."""
    return _section(analysis, job.meta, options)


TIMELINE_UNITS = {
    "batch": Unit.COUNT,
    "tokens": Unit.COUNT,
    "context_len": Unit.COUNT,
    "kv_len": Unit.COUNT,
    "syncs": Unit.COUNT,
    "bytes": Unit.BYTES,
    "rates_dropped": Unit.TEXT,
}
PHASE_UNITS = {
    "iterations": Unit.COUNT,
    "tokens": Unit.COUNT,
    "tokens_per_s": Unit.NUMBER,
    "bytes_p50": Unit.BYTES,
    "gbps_p50": Unit.GBPS,
    "tflops_p50": Unit.TFLOPS,
    "bandwidth_share_p50": Unit.SHARE,
    "peak_share_p50": Unit.SHARE,
    "launch_bound": Unit.TEXT,
}
TIMELINE_NOTE = (
    "token_ns: device end of the iteration minus the previous one's (the first: minus the request's start); bytes: "
    "every GEMM weight once plus the K and V attention read, from recorded shapes and dtypes (estimated); "
    "bandwidth_share: achieved bytes/s over the device's HBM peak (MBU, decode); tflops over the iteration's device "
    "span, peak_share against the dtype's dense peak (MFU, prefill)"
)


def _section(analysis: InferenceAnalysis, meta: TraceMeta, options: Options) -> Section | None:
    """The section of an analysis (None without iterations)."""
    line = analysis.timeline
    if not len(line):
        return None
    return Section(
        "inference",
        "Inference: prefill and decode",
        facts=_facts(analysis, meta),
        tables=[
            Table("phases", "Per phase: time per token, tokens/s, device against its limit", analysis.phases),
            Table("requests", "Per request (generate call): TTFT, TPOT, tokens/s", analysis.requests.head(options.top)),
            Table(
                "iterations",
                "Per iteration: phase, shapes, time per token, bandwidth and FLOP rates",
                line.head(options.top),
                Per.NONE,
                TIMELINE_UNITS,
                TIMELINE_NOTE,
            ),
            Table(
                "phase_hotspots", "Top kernels per phase (total device time)", _hotspots(analysis.kernels), Per.TOTAL
            ),
        ],
    )


def _facts(analysis: InferenceAnalysis, meta: TraceMeta) -> list[Fact]:
    """The headline numbers: rules used, TTFT, TPOT spread, decode MBU, prefill MFU, KV cache."""
    line, by_phase, requests = analysis.timeline, analysis.phases.set_index("phase"), analysis.requests
    rules = line.groupby("rule").size()
    facts = [
        Fact("rule", "phase detection", "; ".join(f"{RULES[r]}: {n} iterations" for r, n in rules.items())),
        Fact("requests", "requests", len(requests), Unit.COUNT),
        Fact("iterations", "iterations", len(line), Unit.COUNT),
    ]
    ttft = requests["ttft_ns"].dropna()
    if len(ttft):
        facts.append(Fact("ttft_ns", "time to first token (median over requests)", float(ttft.median()), Unit.NS))
    if phases.DECODE in by_phase.index:
        decode = by_phase.loc[phases.DECODE]
        facts += [
            Fact("tpot_p50_ns", "time per output token, p50", decode["token_ns_p50"], Unit.NS),
            Fact("tpot_p90_ns", "time per output token, p90", decode["token_ns_p90"], Unit.NS),
            Fact("tpot_max_ns", "time per output token, max", decode["token_ns_max"], Unit.NS),
            Fact("decode_tokens_per_s", "decode tokens/s (all sequences)", decode["tokens_per_s"], Unit.NUMBER),
            Fact("decode_busy_share", "decode: device busy share of each token", decode["busy_share"], Unit.SHARE),
            Fact("decode_gbps", "decode: achieved bandwidth (p50)", decode["gbps_p50"], Unit.GBPS, estimated=True),
            Fact("decode_mbu", "decode: MBU, share of HBM peak (p50)", decode["bandwidth_share_p50"], Unit.SHARE,
                 estimated=True),
        ]  # fmt: skip
    if phases.PREFILL in by_phase.index:
        prefill = by_phase.loc[phases.PREFILL]
        facts += [
            Fact("prefill_tflops", "prefill: TFLOP/s (p50)", prefill["tflops_p50"], Unit.TFLOPS, estimated=True),
            Fact("prefill_mfu", "prefill: MFU, share of the dense peak (p50)", prefill["peak_share_p50"], Unit.SHARE,
                 estimated=True),
        ]  # fmt: skip
    dropped = int(line["rates_dropped"].sum())
    if dropped:
        facts.append(
            Fact(
                "rates_dropped",
                "iterations whose rates would exceed the device's peak (their device work is not all in the trace): "
                "rates left out",
                dropped,
                Unit.COUNT,
            )
        )
    facts.append(Fact("bandwidth_source", "bandwidth source", devices.bandwidth(meta)[1]))
    for key, title, unit in (
        ("kv_bytes_per_token", "KV cache bytes per token (all layers)", Unit.BYTES),
        ("kv_cache_bytes", "KV cache held at the last forward", Unit.BYTES),
        ("headroom_tokens", "tokens that still fit above the peak allocated", Unit.COUNT),
    ):
        if key in analysis.kv:
            facts.append(Fact(key, title, analysis.kv[key], unit, estimated=True))
    return facts


def _hotspots(kernels: pd.DataFrame) -> pd.DataFrame:
    """The top kernels of each phase over all ranks."""
    if not len(kernels):
        return pd.DataFrame(columns=["phase", "name", "count", "total_ns", "share"])
    totals = kernels.groupby(["phase", "name"])[["count", "total_ns"]].sum().reset_index()
    totals["share"] = totals["total_ns"] / totals.groupby("phase")["total_ns"].transform("sum")
    totals = totals.sort_values(["phase", "total_ns"], ascending=[True, False], kind="stable")
    return totals.groupby("phase").head(HOTSPOTS_PER_PHASE).reset_index(drop=True)
