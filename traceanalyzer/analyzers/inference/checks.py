"""Findings that fit inference, each with its saving per token or per request: decode waiting on kernel launches,
host syncs in every token, stalls at new KV lengths, prefill attention without a fused kernel, and how many more
tokens the KV cache can hold.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from traceanalyzer import humanize, intervals
from traceanalyzer.analyzers.inference.metrics import LAUNCH_BOUND_BUSY
from traceanalyzer.analyzers.inference.phases import DECODE, PREFILL
from traceanalyzer.findings import Basis, Claims, Finding, StepTime, make

STALL_FACTOR = 2.0
"""A decode iteration whose time per token is more than this many times the median stalls."""
STALL_SHARE = 0.05
"""Stalls at new KV lengths are a finding when they take at least this share of the decode time."""
SYNCED_SHARE = 0.5
"""Host syncs are per token when at least this share of decode iterations has one."""

ANALYZER = "inference"


def findings(line: pd.DataFrame, phases: pd.DataFrame, kv: dict, step: StepTime) -> list[Finding]:
    """Every inference check's finding on a timeline (``metrics.timeline``), its phase table and KV facts."""
    decode = line[(line["phase"] == DECODE) & line["token_ns"].notna()]
    stalls = _stalls(decode)
    found = [
        _launch_bound(decode, stalls, step),
        _per_token_syncs(decode, step),
        _new_length_stalls(decode, stalls, step),
        _unfused_prefill_attention(line, step),
        _kv_headroom(kv, step),
    ]
    return [f for f in found if f is not None]


def _launch_bound(decode: pd.DataFrame, stalls: np.ndarray, step: StepTime) -> Finding | None:
    """Decode whose device idles most of each token: the host's launches set the pace (the stalls at new KV
    lengths are their own finding's saving, not this one's)."""
    token, busy = decode["token_ns"].sum(), decode["device_busy_ns"].sum()
    if not len(decode) or token <= 0 or busy / token >= LAUNCH_BOUND_BUSY:
        return None
    saving = max(token - busy - stalls.sum(), 0)
    per_token = saving / len(decode)
    return make(
        ANALYZER,
        "decode_launch_bound",
        f"Decode is launch-bound: the device is busy {humanize.share(busy / token, 0)} of each token "
        f"({humanize.duration(np.median(decode['device_busy_ns']))} of "
        f"{humanize.duration(np.median(decode['token_ns']))} TPOT, median)",
        "Each decode step launches every kernel of the model from Python; at batch 1 the kernels are shorter than "
        "their launches. Capture the decode step in a CUDA graph: torch.compile(model, mode='reduce-overhead') "
        "with a static KV cache (HF: cache_implementation='static'), or an engine that replays graphs (vLLM, "
        f"SGLang). Saving up to {humanize.duration(per_token)} per token (TPOT down to the device time).",
        step,
        concerns_ns=int(token),
        saving_ns=int(saving),
        basis=Basis.MODELLED,
        model="decode at its device busy time per token (graph replay removes the launch gaps), less the stalls at "
        "new KV lengths",
        claims=_spans(decode),
        where={"phase": DECODE},
        evidence={
            "decode_iterations": len(decode),
            "busy_share": float(busy / token),
            "saving_ns_per_token": float(per_token),
        },
    )


def _spans(rows: pd.DataFrame) -> Claims:
    """The device-time spans of some iterations' tokens (from the previous token to theirs), per rank."""
    out: Claims = {}
    for rank, of_rank in rows.groupby("rank"):
        end = of_rank["token_end_ns"].to_numpy(np.int64)
        out[int(rank)] = intervals.union(end - of_rank["token_ns"].to_numpy(np.int64), end)
    return out


def _per_token_syncs(decode: pd.DataFrame, step: StepTime) -> Finding | None:
    """Host syncs in most decode iterations (stopping criteria, ``.item()`` in sampling)."""
    synced = decode[decode["syncs"] > 0]
    if not len(decode) or len(synced) < SYNCED_SHARE * len(decode):
        return None
    idle = synced["sync_idle_ns"].sum()
    per_token = idle / len(decode)
    return make(
        ANALYZER,
        "per_token_syncs",
        f"{np.median(synced['syncs']):.0f} host sync(s) in every decode token ({len(synced)} of {len(decode)} "
        f"tokens), the device idle {humanize.duration(per_token)} per token after them",
        "The host waits for the device every token (a stopping criterion or `.item()` / `.cpu()` in sampling), so "
        "the next token's kernels cannot be queued ahead. Keep the check on the device (e.g. HF's stopping criteria "
        "on tensors, `torch.where` instead of `if tensor:`), or check every N tokens. Saving "
        f"{humanize.duration(per_token)} per token (the idle after the syncs).",
        step,
        concerns_ns=int(idle),
        saving_ns=int(idle),
        basis=Basis.MEASURED,
        model="the device idle from each sync's return to the next device work",
        where={"phase": DECODE},
        evidence={"synced_tokens": len(synced), "saving_ns_per_token": float(per_token)},
    )


def _stalls(decode: pd.DataFrame) -> np.ndarray:
    """Per decode token, its stall at a new KV length: the host time its attention's first calls at the new shapes
    took beyond their later calls; else, for a token more than ``STALL_FACTOR`` times the median at a KV length
    first seen, its time beyond the median (a recompile outside attention). At most its device idle."""
    token = decode["token_ns"].to_numpy(float)
    first_seen = (~decode.duplicated(["rank", "kv_len"]) & (decode["kv_len"] > 0)).to_numpy()
    median = np.median(token) if len(token) else 0.0
    slow = np.where(first_seen & (token > STALL_FACTOR * median) & (len(token) >= 4), token - median, 0.0)
    measured = decode["first_call_stall_ns"].to_numpy(float)
    idle = np.clip(token - decode["device_busy_ns"].to_numpy(float), 0, None)
    return np.minimum(np.where(measured > 0, measured, slow), idle)


def _new_length_stalls(decode: pd.DataFrame, stalls: np.ndarray, step: StepTime) -> Finding | None:
    """Decode tokens that stall at a KV length not seen before (a new plan or compile), when the stalls take
    ``STALL_SHARE`` of the decode time or more."""
    total = float(stalls.sum())
    if not len(decode) or total < STALL_SHARE * decode["token_ns"].sum():
        return None
    stalled = decode[stalls > 0]
    per_token = total / len(decode)
    return make(
        ANALYZER,
        "new_kv_length_stalls",
        f"{len(stalled)} of {len(decode)} decode tokens stall at a KV length seen for the first time: "
        f"{humanize.duration(np.median(stalls[stalls > 0]))} each (median) of a "
        f"{humanize.duration(decode['token_ns'].median())} TPOT",
        "Attention meets a new key length every token (a dynamic cache), and its first call at each shape builds a "
        "new plan or recompiles (cuDNN SDPA plans a graph per shape; torch.compile without dynamic shapes "
        "recompiles). Use an SDPA backend that does not plan per shape (torch.nn.attention.sdpa_kernel with "
        "FLASH_ATTENTION / EFFICIENT_ATTENTION), a static cache (cache_implementation='static'), KV lengths padded "
        f"to buckets, or compile with dynamic=True. Saving {humanize.duration(per_token)} per token.",
        step,
        concerns_ns=int(stalled["token_ns"].sum()),
        saving_ns=int(total),
        basis=Basis.MEASURED,
        model="the host time attention's first calls at new shapes took beyond its later calls at the same shapes, "
        "at most each token's device idle",
        where={"phase": DECODE},
        evidence={
            "stalled_tokens": len(stalled),
            "kv_lens": [int(v) for v in stalled["kv_len"].dropna().head(10)],
            "saving_ns_per_token": float(per_token),
        },
    )


def _unfused_prefill_attention(line: pd.DataFrame, step: StepTime) -> Finding | None:
    """Prefill whose attention runs written out as separate kernels (no fused attention kernel): the saving is
    their device time less a fused kernel's at the dtype's dense peak."""
    prefill = line[line["phase"] == PREFILL]
    unfused = float(prefill["unfused_attention_ns"].sum())
    if not unfused:
        return None
    requests = max(len(prefill), 1)
    saving = max(unfused - float(prefill["fused_attention_ns"].sum()), 0.0)
    return make(
        ANALYZER,
        "prefill_attention_unfused",
        f"Prefill attention runs unfused: {humanize.duration(unfused / requests)} of device time per request in "
        "separate kernels (score GEMM, scaling, mask, softmax, casts, product with V)",
        "Use scaled_dot_product_attention (HF: attn_implementation='sdpa' or 'flash_attention_2'): a fused kernel "
        "never writes the scores to memory. Saving about "
        f"{humanize.duration(saving / requests)} per request.",
        step,
        concerns_ns=int(unfused),
        saving_ns=int(saving),
        basis=Basis.MODELLED,
        model="the written-out attention's device time less a fused kernel doing its (causal) FLOPs at the dense peak",
        where={"phase": PREFILL},
        evidence={"unfused_ns": int(unfused), "saving_ns_per_request": saving / requests},
    )


def _kv_headroom(kv: dict, step: StepTime) -> Finding | None:
    """How many more tokens the KV cache can grow before the device's memory is full (no saving: a fact)."""
    headroom = kv.get("headroom_tokens")
    if headroom is None or kv.get("kv_bytes_per_token", 0) <= 0:
        return None
    return make(
        ANALYZER,
        "kv_headroom",
        f"KV cache: {humanize.size(kv['kv_bytes_per_token'], 0)} per token; {headroom:,.0f} more tokens fit before "
        f"the device's memory is full (peak allocated {humanize.size(kv['peak_allocated_bytes'], 1)} of "
        f"{humanize.size(kv['device_memory_bytes'], 0)})",
        "The headroom is how long the contexts of this batch can grow, or how many more sequences of this length "
        "fit, before the allocator runs out; a larger batch is the cheapest way to more tokens/s in "
        "bandwidth-bound decode.",
        step,
        concerns_ns=0,
        where={"phase": DECODE},
        evidence=dict(kv),
    )
