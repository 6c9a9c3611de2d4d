"""Phase detection: every forward pass of a generation as one iteration, with its phase, shapes and device work.

The iterations come from the first rule the trace allows, per rank (``rule``): ``marker``, a serving engine's or the
user's annotation of each forward (vLLM's ``execute_..._context_..._generation_...``, SGLang's ``step[DECODE bs=32]``,
a ``record_function("prefill")``); ``shapes``, the model's token-embedding lookup that starts each eager forward,
whose token input ``[batch, tokens]`` says the phase (tokens > 1 at the start of a request, with an empty cache:
prefill; 1 token per sequence: decode; tokens > 1 later: mixed, a chunked prefill); ``structure``, a host event that
stands for one whole forward and repeats (a compiled graph's call, a graph launch) where the lookup is not recorded:
the attention's query ``[batch, heads, tokens, dim]`` says the phase as the lookup would, and without it the first
forward of a request is its prefill, the rest decode. A request is a profiler step (one ``generate()`` call), or the
whole trace without steps.

An iteration's window on the host runs from its forward's start to the next forward's (or its request's end), so it
holds the forward and the token's sampling; its device work is what was launched in that window.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd

from traceanalyzer import intervals
from traceanalyzer.analyzers.gemm import elem_bytes, geometry
from traceanalyzer.memo import remember
from traceanalyzer.schema import (
    BUSY,
    MARKERS,
    NO_ROW,
    OPS_AND_KERNELS,
    REQUEST_HOST,
    Kind,
    category_text,
    per_pair,
)
from traceanalyzer.tables import stack
from traceanalyzer.tracedata import TraceData
from traceanalyzer.vocabulary import (
    ATTENTION_OPS,
    BACKWARD_KERNEL,
    BATCHED_GEMM_OPS,
    DTOH_COPY,
    ENGINE_STEP,
    FORWARD_REPEAT,
    GEMM_KERNEL,
    GEMM_OPS,
    PHASE_MARKER,
    SOFTMAX_OPS,
    SYNC_CALLS,
    TOKEN_EMBEDDING,
    dtype_key,
    matches,
)

PREFILL, DECODE, MIXED = "prefill", "decode", "mixed"
"""The phases of an iteration (mixed: a batch with prefill and decode sequences, or a chunk of a longer prompt)."""
MARKER, SHAPES, STRUCTURE = "marker", "shapes", "structure"
"""The rules an iteration can be found by, in the order they are tried."""
UNKNOWN = -1
"""A count the trace does not show (batch, tokens, lengths)."""
FIRST_CALL_FACTOR = 2.0
"""An attention op's first call at its shapes stalls when its host time is more than this many times that of its
later calls at the same shapes (a plan built or a kernel compiled for a new KV length)."""

COLUMNS = [
    "rank", "request", "iteration", "phase", "rule", "marker", "batch", "tokens", "context_len", "kv_len",
    "request_start_ns", "start_ns", "end_ns", "device_start_ns", "device_end_ns", "token_end_ns", "device_busy_ns",
    "kernels",
    "syncs", "sync_idle_ns", "dtoh_copies", "unfused_attention_ns", "unfused_attention_flops",
    "first_call_stall_ns", "gemm_flops", "attention_flops",
    "weight_bytes", "kv_bytes", "kv_cache_bytes", "bytes_basis", "dtype",
]  # fmt: skip
"""One row per iteration: ``tokens`` the query tokens of the forward (all sequences), ``context_len`` the tokens per
sequence after it, ``kv_len`` the key length attention read (a static cache reads its whole buffer); times in ns on
the rank's time base; FLOPs and bytes from the recorded shapes (``bytes_basis`` says where an iteration whose ops
are not recorded got its bytes)."""


KERNEL_COLUMNS = ["rank", "phase", "name", "count", "total_ns"]
"""Device time per phase and kernel name (of the iterations of that phase)."""


def iterations(trace: TraceData) -> pd.DataFrame:
    """Every forward pass of the trace's ranks as one iteration row (``COLUMNS``), in rank and time order."""
    return _found(trace)[0].copy(deep=False)


def phase_kernels(trace: TraceData) -> pd.DataFrame:
    """Device time per rank, phase and kernel name (``KERNEL_COLUMNS``), the most time first."""
    return _found(trace)[1].copy(deep=False)


def _found(trace: TraceData) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The iterations and per-phase kernel time of every rank (once per trace)."""
    return remember(trace, "inference.phases", lambda: _of_ranks(trace.events))


def _of_ranks(ev: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The iterations and per-phase kernel time of each rank, stacked."""
    ranks = sorted(ev["rank"].unique()) if len(ev) else []
    found = [_of_rank(ev if len(ranks) == 1 else ev[ev["rank"] == r]) for r in ranks]  # one rank: no copy
    table = stack([*(f[0] for f in found), pd.DataFrame(columns=COLUMNS)]).reset_index(drop=True)[COLUMNS]
    kernels = stack([*(f[1] for f in found), pd.DataFrame(columns=KERNEL_COLUMNS)]).reset_index(drop=True)
    return table, kernels.sort_values("total_ns", ascending=False, kind="stable").reset_index(drop=True)


def _of_rank(ev: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The iterations and per-phase kernel time of one rank's events (none for a training step: its forwards are
    not generation)."""
    none = pd.DataFrame(columns=COLUMNS), pd.DataFrame(columns=KERNEL_COLUMNS)
    if is_training(ev):
        return none
    requests = _requests(ev)
    anchors = _anchors(ev)
    if not len(anchors) or not len(requests):
        return none
    table = _lone_structures_dropped(_windows(anchors, requests))
    if not len(table):
        return none
    blocks = _written_out_attention(ev)
    _add_ops(table, ev, blocks)
    at, device = _add_device(table, ev, blocks)
    _resolve(table)
    rank = int(ev["rank"].iloc[0])
    table.insert(0, "rank", rank)
    return table[COLUMNS], _kernels(table, at, device, rank)


def _kernels(table: pd.DataFrame, at: np.ndarray, device: pd.DataFrame, rank: int) -> pd.DataFrame:
    """Kernel time per phase of the iterations the kernels were launched in."""
    kernel = (device["kind"] == Kind.KERNEL.value).to_numpy() & (at >= 0)
    names = category_text(device["name"])[device["name"].array.codes][kernel]
    frame = pd.DataFrame(
        {"phase": table["phase"].to_numpy(object)[at[kernel]], "name": names, "dur": device["dur"].to_numpy()[kernel]}
    )
    sums = frame.groupby(["phase", "name"])["dur"].agg(["size", "sum"]).reset_index()
    sums.columns = ["phase", "name", "count", "total_ns"]
    sums.insert(0, "rank", rank)
    return sums[KERNEL_COLUMNS]


def is_training(ev: pd.DataFrame) -> bool:
    """Whether the events hold a backward pass (autograd ops or backward kernels)."""
    names = ev["name"].array
    codes = names.codes[ev["kind"].isin(OPS_AND_KERNELS).to_numpy()]
    used = np.unique(codes[codes >= 0])
    return bool(len(used)) and bool(matches(np.asarray(names.categories, dtype=object), BACKWARD_KERNEL)[used].any())


def _requests(ev: pd.DataFrame) -> pd.DataFrame:
    """The requests of a rank: its profiler steps (one ``generate()`` each), else its whole window as one."""
    steps = ev[ev["kind"] == Kind.STEP.value]
    if len(steps):
        start = steps["ts"].to_numpy(np.int64)
        end = start + steps["dur"].to_numpy(np.int64)
    else:  # one request: from the first host event on (device work can be recorded before it)
        host = ev[ev["kind"].isin(REQUEST_HOST)]
        start = np.array([(host if len(host) else ev)["ts"].min()], dtype=np.int64)
        end = np.array([(ev["ts"] + ev["dur"]).max()], dtype=np.int64)
    order = np.argsort(start, kind="stable")
    return pd.DataFrame({"start": start[order], "end": end[order]})


def _anchors(ev: pd.DataFrame) -> pd.DataFrame:
    """The start of each forward: engine or phase markers where there are any, else token embeddings and repeated
    whole-forward events, the outermost of nested ones."""
    notes = ev[ev["kind"] == Kind.ANNOTATION.value]
    names = category_text(notes["name"])[notes["name"].array.codes]
    marked = matches(names, ENGINE_STEP) | matches(names, PHASE_MARKER)
    if marked.any():
        found = _anchor_frame(notes[marked], names[marked], MARKER)
        found["phase"] = [_marker_phase(n) for n in found["marker"]]
        return _outermost(found)
    ops = ev[(ev["kind"] == Kind.CPU_OP.value) & ev["name"].isin(list(TOKEN_EMBEDDING))]
    tokens = _token_lookups(ops)
    host = ev[ev["kind"].isin(MARKERS)]
    host_names = category_text(host["name"])[host["name"].array.codes]
    repeat = matches(host_names, FORWARD_REPEAT)
    repeated = _repeated(host[repeat], host_names[repeat])
    both = stack(
        [
            _anchor_frame(tokens, category_text(tokens["name"])[tokens["name"].array.codes], SHAPES),
            _anchor_frame(repeated, category_text(repeated["name"])[repeated["name"].array.codes], STRUCTURE),
        ]
    )
    both["phase"] = ""
    return _outermost(both)


def _anchor_frame(rows: pd.DataFrame, names: np.ndarray, rule: str) -> pd.DataFrame:
    """Anchor rows: start, end, rule and the marker's name (the event's name for other rules)."""
    return pd.DataFrame(
        {
            "start": rows["ts"].to_numpy(np.int64),
            "end": (rows["ts"] + rows["dur"]).to_numpy(np.int64),
            "rule": rule,
            "marker": np.asarray(names, dtype=object),
        }
    )


def _outermost(anchors: pd.DataFrame) -> pd.DataFrame:
    """Anchors not inside another one (a graph launch inside a compiled region, an embedding inside a marker)."""
    anchors = anchors.sort_values(["start", "end"], ascending=[True, False], kind="stable").reset_index(drop=True)
    reach = np.maximum.accumulate(anchors["end"].to_numpy()) if len(anchors) else np.empty(0, np.int64)
    inside = np.zeros(len(anchors), dtype=bool)
    inside[1:] = anchors["end"].to_numpy()[1:] <= reach[:-1]
    return anchors[~inside].reset_index(drop=True)


def _token_lookups(ops: pd.DataFrame) -> pd.DataFrame:
    """Embedding lookups on the model's vocabulary: the table with the most rows (positions and token types are
    smaller tables), lookups nested in another lookup left out."""
    if not len(ops):
        return ops
    dims = _parsed(ops["input_dims"])
    rows = np.array([_shape(d, 0)[0] if len(_shape(d, 0)) == 2 else 0 for d in dims], dtype=np.int64)
    outer = ~ops["parent"].isin(ops.index).to_numpy()
    return ops[(rows == rows.max()) & (rows > 0) & outer]


def _repeated(rows: pd.DataFrame, names: np.ndarray) -> pd.DataFrame:
    """Whole-forward events of the name that repeats most (at least twice), at their outermost depth."""
    if not len(rows):
        return rows
    family = np.array([FORWARD_REPEAT.match(n)[0] for n in names], dtype=object)
    counts = pd.Series(family).value_counts()
    if counts.iloc[0] < 2:
        return rows.iloc[:0]
    chosen = rows[family == counts.index[0]]
    return chosen[chosen["depth"] == chosen["depth"].min()]


def _marker_phase(name: str) -> str:
    """The phase a marker's name states ('' when it states none)."""
    engine = ENGINE_STEP.match(name)
    if engine and engine["context"] is not None:
        context, generation = int(engine["context"]), int(engine["generation"])
        return MIXED if context and generation else PREFILL if context else DECODE if generation else ""
    if engine:
        return {"EXTEND": PREFILL, "PREFILL": PREFILL, "DECODE": DECODE, "MIXED": MIXED}.get(engine["mode"], "")
    phase = PHASE_MARKER.search(name)
    return PREFILL if phase and phase["prefill"] else DECODE if phase else ""


def _marker_counts(name: str) -> tuple[int, int, int]:
    """(batch, tokens, kv length) an engine marker states (``UNKNOWN`` where it does not)."""
    engine = ENGINE_STEP.match(name)
    if not engine:
        return UNKNOWN, UNKNOWN, UNKNOWN
    if engine["context"] is not None:
        batch = int(engine["context"]) + int(engine["generation"])
        kv = max(int(engine["context_sk"]), int(engine["generation_sk"]))
        return batch, int(engine["tokens"]), kv
    tokens = int(engine["toks"]) if engine["toks"] else int(engine["bs"]) if engine["mode"] == "DECODE" else UNKNOWN
    return int(engine["bs"]), tokens, UNKNOWN


def _windows(anchors: pd.DataFrame, requests: pd.DataFrame) -> pd.DataFrame:
    """One row per anchor inside a request: its request, its place in it, its host window and what a marker says."""
    start = anchors["start"].to_numpy(np.int64)
    request = np.searchsorted(requests["start"].to_numpy(), start, side="right") - 1
    valid = request >= 0
    valid[valid] &= start[valid] < requests["end"].to_numpy()[request[valid]]
    anchors, request, start = anchors[valid].reset_index(drop=True), request[valid], start[valid]
    same = np.append(request[1:] == request[:-1], False)
    end = np.where(same, np.append(start[1:], 0), requests["end"].to_numpy()[request])
    marked = zip(anchors["marker"], anchors["rule"], strict=True)
    stated = [_marker_counts(m) if r == MARKER else (UNKNOWN,) * 3 for m, r in marked]
    batch, tokens, kv = np.array(stated, dtype=np.int64).reshape(-1, 3).T
    return pd.DataFrame(
        {
            "request": request,
            "iteration": pd.Series(request).groupby(request).cumcount().to_numpy(),
            "phase": anchors["phase"].to_numpy(object),
            "rule": anchors["rule"].to_numpy(object),
            "marker": anchors["marker"].to_numpy(object),
            "batch": batch,
            "tokens": tokens,
            "kv_len": kv,
            "request_start_ns": requests["start"].to_numpy()[request],
            "start_ns": start,
            "end_ns": end,
        }
    )


def _lone_structures_dropped(table: pd.DataFrame) -> pd.DataFrame:
    """The windows without requests found only by structure that hold a single forward: a generation repeats its
    forward (prefill, then decode), a lone compiled region or graph launch is no evidence of one."""
    structural = table["rule"].eq(STRUCTURE).groupby(table["request"]).transform("all")
    lone = table.groupby("request")["request"].transform("size") < 2
    return table[~(structural & lone)].reset_index(drop=True)


def _window_of(table: pd.DataFrame, ts: np.ndarray) -> np.ndarray:
    """The iteration whose host window holds each time (-1 outside every window)."""
    at = np.searchsorted(table["start_ns"].to_numpy(), ts, side="right") - 1
    inside = at >= 0
    inside[inside] &= ts[inside] < table["end_ns"].to_numpy()[at[inside]]
    return np.where(inside, at, -1)


def _add_ops(table: pd.DataFrame, ev: pd.DataFrame, blocks: pd.DataFrame) -> None:
    """Shapes of each iteration's ops: token lookups (batch, tokens), attention (KV length, KV bytes, FLOPs),
    GEMMs (FLOPs, weight bytes, dtype), and the host syncs in its window."""
    n = len(table)
    ops = ev[ev["kind"] == Kind.CPU_OP.value]
    lookups = _token_lookups(ops[ops["name"].isin(list(TOKEN_EMBEDDING))])
    at = _window_of(table, lookups["ts"].to_numpy(np.int64))
    for i, dims in zip(at, _parsed(lookups["input_dims"]), strict=True):
        ids = _shape(dims, 1)
        if i < 0 or not ids or table.at[i, "tokens"] != UNKNOWN:
            continue
        table.at[i, "tokens"] = int(np.prod(ids))
        table.at[i, "batch"] = ids[0] if len(ids) == 2 else UNKNOWN
    stored = _stored_kv_heads(table, ops)
    _add_attention(table, ops[ops["name"].isin(list(ATTENTION_OPS))], stored)
    _add_written_out(table, blocks, stored)
    _add_gemms(table, ops[ops["name"].isin(list(GEMM_OPS))])
    runtime = ev[(ev["kind"] == Kind.RUNTIME.value) & ev["name"].isin(list(SYNC_CALLS))]
    table["syncs"] = np.bincount(_valid(_window_of(table, runtime["ts"].to_numpy(np.int64))), minlength=n)[:n]


def _stored_kv_heads(table: pd.DataFrame, ops: pd.DataFrame) -> list[dict]:
    """Per iteration, the head counts its ops' tensors show per (batch, length, dim): where attention is given more
    heads at the same batch, length and dim, the fewest of these that divides them is the cache's own (HF's
    ``repeat_kv`` expands ``[batch, kv_heads, 1, length, dim]``; a compiled graph's kernel reads the cache
    ``[batch, kv_heads, length, dim]`` and writes the repeated heads). A 4-D tensor of a single head is left out:
    it is a broadcast rotary table as often as a one-head cache, which shows only by its expand."""
    dims = ops["input_dims"]
    found = [_cache_shapes(_loads(t)) for t in category_text(dims)]
    codes = np.asarray(dims.array.codes, dtype=np.int64)
    has = np.array([bool(f) for f in found], dtype=bool)[codes]
    at = _window_of(table, ops["ts"].to_numpy(np.int64)[has])
    out: list[dict] = [{} for _ in range(len(table))]
    for i, code in np.unique(np.stack([at, codes[has]], axis=1), axis=0) if has.any() else ():
        for batch, heads, length, dim in found[code] if i >= 0 else ():
            out[i].setdefault((batch, length, dim), set()).add(heads)
    return out


def _cache_shapes(dims) -> list[tuple[int, ...]]:
    """The (batch, heads, length, dim) of the inputs (and of tensor lists' items) that may be a KV cache's."""
    if not isinstance(dims, list):
        return []
    shapes = [d for d in dims if isinstance(d, list)]
    shapes += [s for d in shapes for s in d if isinstance(s, list)]
    shapes = [s for s in shapes if all(isinstance(v, int) for v in s)]
    out = [(s[0], s[1], s[3], s[4]) for s in shapes if len(s) == 5 and s[2] == 1]
    return out + [tuple(s) for s in shapes if len(s) == 4 and s[1] > 1]


def _cache_heads(stored: dict, key: list[int]) -> int:
    """The heads a cache stores for an attention key ``[batch, heads, length, dim]`` (its own heads when the trace
    shows no fewer)."""
    batch, heads, length, dim = key
    fewer = [h for h in stored.get((batch, length, dim), ()) if 0 < h < heads and heads % h == 0]
    return min(fewer, default=heads)


def _add_attention(table: pd.DataFrame, ops: pd.DataFrame, stored: list[dict]) -> None:
    """KV length read, KV bytes read and held (the cache's own heads, where they were repeated for attention) and
    attention FLOPs per iteration from its outermost attention ops."""
    n = len(table)
    ops = ops[~ops["parent"].isin(ops.index).to_numpy()]
    at = _window_of(table, ops["ts"].to_numpy(np.int64))
    kv_len = np.full(n, UNKNOWN, dtype=np.int64)
    kv_bytes, cache_bytes, flops = np.zeros(n), np.zeros(n), np.zeros(n)
    queries = np.zeros((n, 2), dtype=np.int64)  # batch and query length of the first attention
    for i, dims, types in zip(at, _parsed(ops["input_dims"]), ops["input_types"].astype(str), strict=True):
        q, k, v = _shape(dims, 0), _shape(dims, 1), _shape(dims, 2)
        if i < 0 or len(q) != 4 or len(k) != 4:
            continue
        batch, heads, sq, head_dim = q
        skv = k[2]
        kv_len[i] = max(kv_len[i], skv)
        if not queries[i, 1]:
            queries[i] = batch, sq
        read = (np.prod(k) + np.prod(v or k)) * elem_bytes(types)
        kv_bytes[i] += read
        cache_bytes[i] += read * _cache_heads(stored[i], k) / k[1]
        causal = 0.5 if sq == skv and sq > 1 else 1.0  # a prompt attends to the tokens before it
        flops[i] += 4.0 * batch * heads * sq * skv * head_dim * causal
    table["kv_len"] = np.where(table["kv_len"] == UNKNOWN, kv_len, table["kv_len"])
    unknown = (table["tokens"] == UNKNOWN).to_numpy() & (queries[:, 1] > 0)  # no token lookup recorded (compiled)
    table.loc[unknown, "batch"] = queries[unknown, 0]
    table.loc[unknown, "tokens"] = queries[unknown, 0] * queries[unknown, 1]
    table["kv_bytes"], table["kv_cache_bytes"], table["attention_flops"] = kv_bytes, cache_bytes, flops
    table["first_call_stall_ns"] = _first_call_stalls(table, ops, at)


def _first_call_stalls(table: pd.DataFrame, ops: pd.DataFrame, at: np.ndarray) -> np.ndarray:
    """Per iteration, the host time its attention ops' first calls at new shapes took beyond their later calls at
    the same shapes (median), where more than ``FIRST_CALL_FACTOR`` times; shapes never called again count 0."""
    key = pd.Series(ops["name"].array.codes.astype(np.int64) * (len(ops["input_dims"].array.categories) + 1))
    key += ops["input_dims"].array.codes.astype(np.int64) + 1
    dur = ops["dur"].to_numpy(np.int64)
    first = ~key.duplicated().to_numpy()
    later = pd.Series(dur[~first]).groupby(key.to_numpy()[~first]).median()
    usual = key.map(later).to_numpy(float)
    stalled = first & (dur > FIRST_CALL_FACTOR * usual) & (at >= 0)
    out = np.zeros(len(table), dtype=np.int64)
    np.add.at(out, at[stalled], (dur[stalled] - usual[stalled]).astype(np.int64))
    return out


def _add_gemms(table: pd.DataFrame, ops: pd.DataFrame) -> None:
    """GEMM FLOPs, weight bytes (the second operand of mm/addmm, read once per forward) and the dtype per iteration
    (that of its largest GEMM); shapes and types parsed once per distinct text."""
    n = len(table)
    at = _window_of(table, ops["ts"].to_numpy(np.int64))
    names, dims, types = ops["name"], ops["input_dims"], ops["input_types"]
    rules = np.array([GEMM_OPS.get(t, "") for t in category_text(names)], dtype=object)[names.array.codes]
    shape = per_pair(
        names.array.codes, category_text(names), dims.array.codes, category_text(dims),
        lambda name, text: geometry(GEMM_OPS.get(name, ""), text),
    )  # fmt: skip
    batch, m, nn, k, _ = np.array(list(shape), dtype=float).reshape(-1, 5).T
    typed = per_pair(types.array.codes, category_text(types), types.array.codes, category_text(types),
                     lambda text, _: (elem_bytes(text), _first_dtype(text)))  # fmt: skip
    elem = np.array([t[0] for t in typed], dtype=float)
    work = 2.0 * batch * m * nn * k
    weight = np.where(np.isin(rules, ["mm", "addmm"]), k * nn * elem, 0.0)
    inside = at >= 0
    flops, weights = np.zeros(n), np.zeros(n)
    np.add.at(flops, at[inside], work[inside])
    np.add.at(weights, at[inside], weight[inside])
    dtype = np.full(n, "", dtype=object)
    if inside.any():
        frame = pd.DataFrame({"at": at[inside], "work": work[inside], "dtype": [t[1] for t in typed[inside]]})
        largest = frame.loc[frame.groupby("at")["work"].idxmax()]
        dtype[largest["at"].to_numpy()] = largest["dtype"].to_numpy()
    table["gemm_flops"], table["weight_bytes"], table["dtype"] = flops, weights, dtype


def _add_device(table: pd.DataFrame, ev: pd.DataFrame, blocks: pd.DataFrame) -> tuple[np.ndarray, pd.DataFrame]:
    """Each iteration's device work (launched in its window): first start, last end, busy time, kernels, the
    device-to-host copies that make the host wait, and the device idle after its host syncs; the iteration of each
    device row, and those rows."""
    n = len(table)
    device = ev[ev["kind"].isin(BUSY)]
    launch = device["launch"].to_numpy(np.int64)
    launched = ev["ts"].reindex(launch[launch != NO_ROW]).to_numpy()
    when = device["ts"].to_numpy(np.int64).copy()
    known = launch != NO_ROW
    when[known] = np.where(np.isnan(launched), when[known], launched).astype(np.int64)
    at = _window_of(table, when)
    start, end = device["ts"].to_numpy(np.int64), (device["ts"] + device["dur"]).to_numpy(np.int64)
    table["device_start_ns"], table["device_end_ns"] = (
        _reduce(np.minimum, at, start, n),
        _reduce(np.maximum, at, end, n),
    )
    busy = np.zeros(n, dtype=np.int64)
    for i in np.unique(at[at >= 0]):
        mine = at == i
        busy[i] = intervals.length(intervals.union(start[mine], end[mine]))
    table["device_busy_ns"] = busy
    is_kernel = (device["kind"] == Kind.KERNEL.value).to_numpy()
    table["kernels"] = np.bincount(_valid(at[is_kernel]), minlength=n)[:n]
    names = category_text(device["name"])[device["name"].array.codes]
    dtoh = (device["kind"] == Kind.MEMCPY.value).to_numpy() & matches(names, DTOH_COPY)
    table["dtoh_copies"] = np.bincount(_valid(at[dtoh]), minlength=n)[:n]
    gemm = (device["kind"] == Kind.KERNEL.value).to_numpy() & matches(names, GEMM_KERNEL)
    table["token_end_ns"] = _token_ends(table, at, start, end, gemm, dtoh)
    table["sync_idle_ns"] = _idle_after_syncs(table, ev, np.sort(start))
    table["unfused_attention_ns"] = _unfused_attention(table, blocks, device, when, at)
    return at, device


BLOCK_COLUMNS = ["start", "end", "flops", "kv_len", "kv_bytes", "key"]
"""An attention block written out: its host span, the FLOPs a fused kernel would do (causal where the scores are
square), the key length, the K and V bytes its GEMMs read and K's shape ``[..., heads, length, dim]``."""


def _written_out_attention(ev: pd.DataFrame) -> pd.DataFrame:
    """Each attention block written out (``BLOCK_COLUMNS``), in time order: a batched GEMM ``[..., q, d] x
    [..., d, k]`` (the scores), a softmax, then a batched GEMM ``[..., q, k] x [..., k, d]`` (their product with V)."""
    ops = ev[(ev["kind"] == Kind.CPU_OP.value) & ev["name"].isin([*BATCHED_GEMM_OPS, *SOFTMAX_OPS])]
    ops = ops[~ops["parent"].isin(ops.index).to_numpy()].sort_values("ts", kind="stable")
    blocks, scores, softmaxed = [], None, False
    rows = zip(
        ops["name"].astype(str),
        ops["ts"],
        ops["dur"],
        _parsed(ops["input_dims"]),
        ops["input_types"].astype(str),
        strict=True,
    )
    for name, ts, dur, dims, types in rows:
        if name in SOFTMAX_OPS:
            softmaxed = scores is not None
            continue
        a, b = _shape(dims, 0), _shape(dims, 1)
        if len(a) < 3 or len(b) < 3:
            continue
        if scores is not None and softmaxed and a[-2:] == scores[1][-2:] and b[-2] == scores[1][-1]:
            q, k, d = a[-2], a[-1], b[-1]
            causal = 0.5 if q == k and q > 1 else 1.0
            read = (np.prod(scores[2]) + np.prod(b)) * elem_bytes(types)
            key = [*scores[2][:-2], scores[2][-1], scores[2][-2]]  # Kᵀ [..., dim, length] as K
            blocks.append((scores[0], int(ts + dur), 4.0 * float(np.prod(a[:-2])) * q * k * d * causal, k, read, key))
            scores, softmaxed = None, False
        else:
            scores, softmaxed = (int(ts), [*a[:-1], b[-1]], b), False
    return pd.DataFrame(blocks, columns=BLOCK_COLUMNS)


def _add_written_out(table: pd.DataFrame, blocks: pd.DataFrame, stored: list[dict]) -> None:
    """For iterations without a fused attention op, KV length, bytes read and held, and the FLOPs a fused kernel
    would do, from their attention written out."""
    n = len(table)
    flops, kv_len = np.zeros(n), table["kv_len"].to_numpy().copy()
    unfused = table["attention_flops"].to_numpy() == 0
    at = _window_of(table, blocks["start"].to_numpy(np.int64))
    for i, block in zip(at, blocks.itertuples(index=False), strict=True):
        if i < 0 or not unfused[i] or len(block.key) != 4:
            continue
        flops[i] += block.flops
        kv_len[i] = max(kv_len[i], block.kv_len)
        table.at[i, "kv_bytes"] += block.kv_bytes
        table.at[i, "kv_cache_bytes"] += block.kv_bytes * _cache_heads(stored[i], block.key) / block.key[1]
    table["unfused_attention_flops"], table["kv_len"] = flops, kv_len


def _unfused_attention(
    table: pd.DataFrame, blocks: pd.DataFrame, device: pd.DataFrame, when: np.ndarray, at: np.ndarray
) -> np.ndarray:
    """Per iteration without a fused attention op, the device time of its attention written out: all the work
    launched in its blocks (scores, scaling, mask, softmax, casts, the product with V)."""
    block = np.searchsorted(blocks["start"].to_numpy(np.int64), when, side="right") - 1
    inside = (block >= 0) & (at >= 0)
    inside[inside] &= when[inside] < blocks["end"].to_numpy(np.int64)[block[inside]]
    out = np.zeros(len(table), dtype=np.int64)
    np.add.at(out, at[inside], device["dur"].to_numpy(np.int64)[inside])
    return np.where(table["attention_flops"].to_numpy() > 0, 0, out)


def _token_ends(
    table: pd.DataFrame, at: np.ndarray, start: np.ndarray, end: np.ndarray, gemm: np.ndarray, dtoh: np.ndarray
) -> np.ndarray:
    """When each iteration's token is out: the end of its first device-to-host copy after its last GEMM (the
    logits' projection, then the sampled ids read by the host: a streamer, ``.item()``, ``.tolist()``); without
    one, the end of its device work."""
    last_gemm = _reduce(np.maximum, np.where(gemm, at, -1), start, len(table))
    copies = dtoh & (at >= 0)
    after = copies & (start >= last_gemm[np.where(at >= 0, at, 0)]) & (last_gemm[np.where(at >= 0, at, 0)] != NO_ROW)
    first_copy = _reduce(np.minimum, np.where(after, at, -1), end, len(table))
    return np.where(first_copy != NO_ROW, first_copy, table["device_end_ns"].to_numpy())


def _idle_after_syncs(table: pd.DataFrame, ev: pd.DataFrame, starts: np.ndarray) -> np.ndarray:
    """Per iteration, the device idle after each host sync in its window: from the sync's return to the next device
    work's start (the host waited for the device to drain, then had to launch again)."""
    n = len(table)
    syncs = ev[(ev["kind"] == Kind.RUNTIME.value) & ev["name"].isin(list(SYNC_CALLS))]
    end = (syncs["ts"] + syncs["dur"]).to_numpy(np.int64)
    at = _window_of(table, syncs["ts"].to_numpy(np.int64))
    following = np.searchsorted(starts, end)
    has_next = following < len(starts)
    idle = np.where(has_next, starts[np.minimum(following, len(starts) - 1)] - end, 0) if len(starts) else end * 0
    out = np.zeros(n, dtype=np.int64)
    np.add.at(out, at[(at >= 0) & has_next], idle[(at >= 0) & has_next])
    return out


def _reduce(op: np.ufunc, at: np.ndarray, values: np.ndarray, n: int) -> np.ndarray:
    """``op`` of the values of each iteration (NO_ROW where it has none)."""
    out = np.full(n, np.iinfo(np.int64).max if op is np.minimum else np.iinfo(np.int64).min, dtype=np.int64)
    op.at(out, at[at >= 0], values[at >= 0])
    return np.where(np.abs(out) == np.iinfo(np.int64).max, NO_ROW, out) if n else out


def _valid(at: np.ndarray) -> np.ndarray:
    """The iteration numbers of rows inside a window."""
    return at[at >= 0]


def _resolve(table: pd.DataFrame) -> None:
    """Phases the markers left open from the shapes (or the position in the request), batch carried through a
    request, the context per sequence (not for an engine's steps: they batch many requests), and bytes for
    iterations whose ops are not recorded."""
    first = table["iteration"].to_numpy() == 0
    batch = table["batch"].replace(UNKNOWN, np.nan).groupby(table["request"]).transform(lambda b: b.ffill().bfill())
    table["batch"] = batch.fillna(UNKNOWN).astype(np.int64)
    per_seq = np.where(table["batch"] > 0, table["tokens"] / table["batch"].clip(lower=1), np.nan)
    per_seq = np.where(table["tokens"] == UNKNOWN, np.nan, per_seq)
    by_shape = np.where(per_seq > 1, np.where(first, PREFILL, MIXED), DECODE)
    by_place = np.where(first, PREFILL, DECODE)
    open_phase = table["phase"].to_numpy(object) == ""
    no_shape = np.isnan(per_seq)
    table["phase"] = np.where(open_phase, np.where(no_shape, by_place, by_shape), table["phase"])
    table["rule"] = np.where(open_phase & no_shape & (table["rule"] == SHAPES), STRUCTURE, table["rule"])
    step = np.where(no_shape, np.where(table["phase"] == DECODE, 1.0, np.nan), per_seq)
    context = pd.Series(step).groupby(table["request"].to_numpy()).cumsum(skipna=False)
    engine = [r == MARKER and bool(ENGINE_STEP.match(m)) for r, m in zip(table["rule"], table["marker"], strict=True)]
    table["context_len"] = np.where(np.array(engine, bool) | context.isna(), UNKNOWN, context.fillna(0)).astype(
        np.int64
    )
    _fill_bytes(table)


def _fill_bytes(table: pd.DataFrame) -> None:
    """Bytes of iterations without recorded GEMMs or attention: the model's weights as its fullest forward read
    them, and the KV read of the request's last forward with shapes, grown with the context unless that forward
    read a fixed buffer (a static cache, longer than its context)."""
    has_shapes = table["weight_bytes"] > 0
    table["bytes_basis"] = np.where(has_shapes, "shapes", "")
    if not has_shapes.any():
        return
    missing = ~has_shapes.to_numpy()
    table.loc[missing, "weight_bytes"] = table["weight_bytes"].max()
    known = table["kv_bytes"].where(table["kv_bytes"] > 0)
    ref_bytes = known.groupby(table["request"]).ffill()
    ref_context = table["context_len"].where(known.notna()).groupby(table["request"]).ffill()
    ref_kv = table["kv_len"].where(known.notna()).groupby(table["request"]).ffill()
    static = ref_kv > ref_context
    growth = np.where(static, 1.0, table["context_len"] / ref_context)
    filled = (ref_bytes * growth).where(ref_context > 0)
    table.loc[missing, "kv_bytes"] = filled[missing].fillna(0.0)
    table.loc[missing & static.to_numpy(), "kv_len"] = ref_kv[missing & static.to_numpy()]
    table.loc[missing, "bytes_basis"] = "from the shapes of the request's other forwards"


def _parsed(column: pd.Series) -> list:
    """Each row's JSON text parsed (once per distinct text); None where it is missing or not JSON."""
    texts = category_text(column)
    parsed = [_loads(t) for t in texts]
    return [parsed[c] for c in column.array.codes]


def _loads(text: str):
    try:
        return json.loads(text) if text else None
    except ValueError:
        return None


def _shape(dims, i: int) -> list[int]:
    """The ``i``th recorded input shape ([] when absent)."""
    if not isinstance(dims, list) or len(dims) <= i or not isinstance(dims[i], list):
        return []
    return [d for d in dims[i] if isinstance(d, int)]


def _first_dtype(types_text: str) -> str:
    """The dtype key of the first recorded input type."""
    first = re.search(r'"([^"]+)"', types_text or "")
    return dtype_key(first[1]) if first else ""
