"""Metrics of the iterations: time per token, TTFT and TPOT per request, and each phase against its device limit.

Times are measured on the device's time line: a token is out when the host reads it, the end of the first
device-to-host copy after the iteration's last GEMM (the logits' projection), else when its device work ends; so
the time per output token of decode iteration i is its token's time minus iteration i-1's, and the time to first
token is the prefill's token time minus the request's start (its profiler step's, the ``generate()`` call).
Decode is judged against HBM bandwidth: its bytes (every weight read once, plus the KV cache
attention read, from the recorded shapes and dtypes) over its time per token, against the device's peak (MBU).
Prefill is judged against the tensor peak: its FLOPs (GEMMs and attention) over its device span (MFU).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from traceanalyzer.analyzers import roofline
from traceanalyzer.analyzers.inference.phases import DECODE, MIXED, PREFILL, UNKNOWN
from traceanalyzer.schema import TraceMeta

COUNTS = ("batch", "tokens", "context_len", "kv_len")
"""Per-iteration counts, missing (NaN) where the trace does not show them."""

LAUNCH_BOUND_BUSY = 0.5
"""A phase whose device is busy less than this share of its time per token waits on the host: launch-bound."""

TIMELINE_COLUMNS = [
    "rank", "request", "iteration", "phase", "rule", "batch", "tokens", "context_len", "kv_len", "token_end_ns",
    "token_ns", "host_ns", "device_busy_ns", "busy_share", "syncs", "sync_idle_ns", "unfused_attention_ns",
    "fused_attention_ns", "first_call_stall_ns", "bytes", "gbps", "bandwidth_share", "flops", "tflops",
    "peak_share", "rates_dropped",
]  # fmt: skip
"""Per iteration: ``token_ns`` the time from the previous token (from the request's start for its first), the host
window ``host_ns``, the device's busy time and its share of ``token_ns``, the device time of attention written out
as separate kernels and that of a fused kernel doing its FLOPs at the dtype's dense peak (``unfused_attention_ns``,
``fused_attention_ns``, estimated), the host time attention's first calls
at new shapes stalled (``first_call_stall_ns``), bytes moved and the achieved GB/s and
share of HBM peak (decode), FLOPs and achieved TFLOP/s over the device span and share of the dtype's peak
(prefill and mixed). ``rates_dropped``: the rates would exceed the device's peak, so the iteration's device work is
not all in the trace (a graph replayed out of sight, say); its rates are left out rather than shown impossible."""

PHASE_COLUMNS = [
    "phase", "iterations", "tokens", "token_ns_p50", "token_ns_p90", "token_ns_max", "tokens_per_s", "host_ns_p50",
    "device_busy_ns_p50", "busy_share", "launch_bound", "bytes_p50", "gbps_p50", "bandwidth_share_p50", "tflops_p50",
    "peak_share_p50", "judged_against",
]  # fmt: skip
"""Per phase: iterations, output tokens, time per token (p50/p90/max: TPOT for decode), tokens/s, host and device
time per token, launch-bound verdict, and the phase against its limit (decode: bandwidth, prefill: compute)."""

REQUEST_COLUMNS = [
    "rank", "request", "batch", "prompt_len", "ttft_ns", "decode_tokens", "tpot_ns_p50", "tpot_ns_max", "total_ns",
    "tokens_per_s",
]  # fmt: skip
"""Per request (a ``generate()`` call): time to first token, decode tokens (all sequences), TPOT, the whole time
from its start to its last token, and output tokens per second."""


def timeline(iterations: pd.DataFrame, meta: TraceMeta) -> pd.DataFrame:
    """The iterations with their time per token and each against its limit (``TIMELINE_COLUMNS``)."""
    it = iterations
    if not len(it):
        return pd.DataFrame(columns=TIMELINE_COLUMNS)
    end = it["token_end_ns"].astype(float).where(it["token_end_ns"] > 0)
    previous = end.groupby([it["rank"], it["request"]]).shift(1)
    first = it["iteration"].to_numpy() == 0
    since = np.where(first, it["request_start_ns"].astype(float), previous)
    token_ns = end - since
    out = it[["rank", "request", "iteration", "phase", "rule"]].copy()
    for count in COUNTS:  # a count the trace does not show is missing, not -1
        out[count] = it[count].where(it[count] != UNKNOWN).astype(float)
    out["token_end_ns"], out["token_ns"] = end, token_ns
    out["host_ns"] = it["end_ns"] - it["start_ns"]
    out["device_busy_ns"] = it["device_busy_ns"]
    out["busy_share"] = (it["device_busy_ns"] / token_ns).clip(upper=1.0)
    out["syncs"], out["sync_idle_ns"] = it["syncs"], it["sync_idle_ns"]
    out["unfused_attention_ns"], out["first_call_stall_ns"] = it["unfused_attention_ns"], it["first_call_stall_ns"]
    out["bytes"] = it["weight_bytes"] + it["kv_bytes"]
    out["gbps"] = out["bytes"].where(out["bytes"] > 0) / token_ns
    bandwidth = roofline.roof(meta, "bf16").bandwidth
    out["bandwidth_share"] = out["gbps"] * 1e9 / bandwidth
    out["flops"] = it["gemm_flops"] + it["attention_flops"]
    span = (it["device_end_ns"] - it["device_start_ns"]).where(it["device_start_ns"] > 0)
    out["tflops"] = out["flops"].where(out["flops"] > 0) / span / 1e3
    peaks = np.array([roofline.roof(meta, d).peak_tflops if d else np.nan for d in it["dtype"]], dtype=float)
    out["peak_share"] = out["tflops"] / peaks
    out["fused_attention_ns"] = (it["unfused_attention_flops"] / peaks / 1e3).fillna(0.0)
    out["rates_dropped"] = (out["bandwidth_share"] > 1) | (out["peak_share"] > 1)
    rates = ["gbps", "bandwidth_share", "tflops", "peak_share"]
    out[rates] = out[rates].where(~out["rates_dropped"], axis=0)
    return out[TIMELINE_COLUMNS].reset_index(drop=True)


def phases(line: pd.DataFrame) -> pd.DataFrame:
    """One row per phase found (``PHASE_COLUMNS``), prefill first."""
    rows = [_phase_row(phase, line[line["phase"] == phase]) for phase in (PREFILL, MIXED, DECODE)]
    return pd.DataFrame([r for r in rows if r], columns=PHASE_COLUMNS)


def _phase_row(phase: str, rows: pd.DataFrame) -> dict | None:
    """The summary of one phase's iterations (None without any)."""
    if not len(rows):
        return None
    token = rows["token_ns"].dropna()
    outputs = rows["batch"].where(rows["batch"] > 0, 1).sum()
    busy = rows["device_busy_ns"].sum() / token.sum() if token.sum() > 0 else np.nan
    return {
        "phase": phase,
        "iterations": len(rows),
        "tokens": int(outputs),
        "token_ns_p50": _quantile(token, 0.5),
        "token_ns_p90": _quantile(token, 0.9),
        "token_ns_max": float(token.max()) if len(token) else np.nan,
        "tokens_per_s": outputs / token.sum() * 1e9 if token.sum() > 0 else np.nan,
        "host_ns_p50": _quantile(rows["host_ns"], 0.5),
        "device_busy_ns_p50": _quantile(rows["device_busy_ns"], 0.5),
        "busy_share": busy,
        "launch_bound": bool(busy < LAUNCH_BOUND_BUSY) if busy == busy else False,
        "bytes_p50": _quantile(rows["bytes"], 0.5),
        "gbps_p50": _quantile(rows["gbps"], 0.5),
        "bandwidth_share_p50": _quantile(rows["bandwidth_share"], 0.5),
        "tflops_p50": _quantile(rows["tflops"], 0.5),
        "peak_share_p50": _quantile(rows["peak_share"], 0.5),
        "judged_against": roofline.MEMORY if phase == DECODE else roofline.COMPUTE,
    }


def requests(line: pd.DataFrame) -> pd.DataFrame:
    """One row per request (``REQUEST_COLUMNS``): TTFT, TPOT and output rate."""
    rows = []
    for (rank, request), rows_of in line.groupby(["rank", "request"], sort=True):
        prefill = rows_of[rows_of["phase"] != DECODE]
        leading = prefill[prefill["iteration"] == np.arange(len(prefill))]  # the prompt's forwards, before decode
        decode = rows_of[rows_of["phase"] == DECODE]
        batch = int(rows_of["batch"].max()) if rows_of["batch"].notna().any() else UNKNOWN
        tpot = decode["token_ns"].dropna()
        total = rows_of["token_ns"].sum()
        outputs = (batch if batch > 0 else 1) * len(rows_of)
        context = leading["context_len"]
        rows.append(
            {
                "rank": rank,
                "request": request,
                "batch": batch if batch > 0 else np.nan,
                "prompt_len": float(context.iloc[-1]) if len(context) else np.nan,
                "ttft_ns": float(leading["token_ns"].sum()) if len(leading) else np.nan,
                "decode_tokens": int(len(decode) * (batch if batch > 0 else 1)),
                "tpot_ns_p50": _quantile(tpot, 0.5),
                "tpot_ns_max": float(tpot.max()) if len(tpot) else np.nan,
                "total_ns": float(total),
                "tokens_per_s": outputs / total * 1e9 if total > 0 else np.nan,
            }
        )
    return pd.DataFrame(rows, columns=REQUEST_COLUMNS)


def _quantile(values: pd.Series, q: float) -> float:
    """A quantile of the known values (NaN without any)."""
    known = pd.to_numeric(values, errors="coerce").dropna()
    return float(known.quantile(q)) if len(known) else np.nan
