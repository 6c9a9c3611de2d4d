"""Matching and estimates: every occurrence of a library pattern, an unfused optimizer step or a discovered repeated
chain in the op stream (``opstream``), with its measured and estimated numbers.

Matching runs over the op stream (top-level ops per host thread, or device tasks per stream where no op is
linked), one regex per pattern over the joined canonical tokens, as msprof-analyze does; kernel-less ops (views,
no-op casts) may sit between the ops of a pattern. Autograd nodes of the same chain are matched in reverse order.

Saving model, per occurrence. Measured: the device time of every kernel in the chain (``current_ns``) and of its
GEMM/attention kernels (``kept_ns``: a fusion keeps that work). Estimated: the fused replacement of the memory-bound
rest. Folded into a GEMM (epilogue, flash attention) it costs nothing extra; a standalone fused kernel still reads
the chain's first input and writes its last output, at the device's peak memory bandwidth (``fused_ns``).
``saving_ns = current_ns - kept_ns - fused_ns``. Also estimated: ``intermediate_bytes`` (tensors written and read
back between the kernels, from recorded shapes and dtypes), ``traffic_ns`` (that traffic at peak bandwidth: the
roofline floor of the saving) and ``launch_ns`` (kernel launches removed × the measured median launch call, host
time).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from traceanalyzer import devices
from traceanalyzer.analyzers.fusion import opstream
from traceanalyzer.analyzers.fusion.opstream import COPY_PREFIX, FUSED_TOKEN
from traceanalyzer.analyzers.fusion.patterns import (
    BACKWARD_SUFFIX,
    FUSED_OPTIMIZER_OP,
    GEMM_TOKENS,
    KERNELLESS_SUFFIX,
    LABELS,
    OPTIMIZER_STEP,
    PATTERNS,
    Element,
    Pattern,
)
from traceanalyzer.analyzers.steps import step_table
from traceanalyzer.memo import per_trace
from traceanalyzer.schema import NO_ROW, Kind
from traceanalyzer.tracedata import TraceData

ANALYZER = "fusion"

GAP = r"(?:-[^-]*" + re.escape(KERNELLESS_SUFFIX) + r"-){0,8}"
"""Between two ops of a pattern: up to 8 ops that launched nothing (views, no-op casts)."""

CONSUMED = "#"
"""Token of an entry another pattern already claimed."""

MAX_CHAIN = 6
"""Longest chain of memory-bound kernels discovery considers."""

MAX_DISCOVERED = 8
"""How many distinct repeated chains discovery reports."""

OCCURRENCE_COLUMNS = [
    "pattern",
    "family",
    "variant",
    "phase",
    "rank",
    "step",
    "first_row",
    "kernels",
    "current_ns",
    "kept_ns",
    "fused_ns",
    "saving_ns",
    "intermediate_bytes",
    "traffic_ns",
    "launch_ns",
    "annotation",
    "stack",
    "module",
    "first_op",
    "entry_rows",
]


@dataclass
class _Context:
    """What every estimate needs: the entries, the bandwidth and the measured launch cost."""

    entries: pd.DataFrame
    bandwidth: float
    launch_ns: float
    cols: dict[str, np.ndarray] = field(default_factory=dict)
    gemm: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))

    def __post_init__(self) -> None:
        self.cols = {c: self.entries[c].to_numpy() for c in self.entries.columns}
        base = [_base(t) for t in self.cols["token"]]
        self.gemm = np.isin(base, list(GEMM_TOKENS)) | (self.cols["gemm_ns"] > 0)


@per_trace
def occurrences(trace: TraceData) -> pd.DataFrame:
    """Every occurrence found (library, optimizer, discovered), with its measured and estimated numbers."""
    entries = opstream.op_stream(trace)
    if not len(entries):
        return pd.DataFrame(columns=OCCURRENCE_COLUMNS)
    bw, _ = devices.bandwidth(trace.meta)
    ctx = _Context(entries, bw, _launch_ns(trace.events))
    tokens = entries["token"].to_numpy(dtype=object).copy()
    found = _library(ctx, tokens) + _optimizer(trace, ctx, tokens) + _discover(ctx, tokens)
    if not found:
        return pd.DataFrame(columns=OCCURRENCE_COLUMNS)
    table = pd.DataFrame(found)
    in_step = table["step"] != NO_ROW
    table = table[in_step] if in_step.any() and rank_steps(trace) else table
    where = opstream.locations(trace.events, table["first_row"].to_numpy())
    table = table.reset_index(drop=True)
    for col in ("annotation", "stack", "module"):
        table[col] = where[col].to_numpy()
    table["first_op"] = trace.events["name"].astype(str).to_numpy()[table["first_row"].to_numpy()]
    return _pair_backward(table)[OCCURRENCE_COLUMNS]


def _library(ctx: _Context, tokens: np.ndarray) -> list[dict]:
    """Match every library pattern in priority order; an entry belongs to the first match that claims it."""
    lanes = [(lo, hi, set(tokens[lo:hi].tolist())) for lo, hi in _lane_bounds(ctx.entries["lane"].to_numpy())]
    found = []
    for pattern in PATTERNS:
        for phase, alternatives in _phases(pattern):
            for elements in alternatives:
                found += _match(ctx, tokens, pattern, elements, phase, lanes)
    return found


def _phases(pattern: Pattern) -> list[tuple[str, tuple]]:
    phases = [("forward", pattern.alternatives)]
    if pattern.backward_alternatives:
        phases.append(("backward", pattern.backward_alternatives))
    elif pattern.backward:
        phases.append(("backward", tuple(tuple(reversed(a)) for a in pattern.alternatives)))
    return phases


def _regex(elements: tuple[Element, ...], backward: bool) -> re.Pattern:
    """The regex of one element sequence over the joined token text ``-a--b--c-``."""
    parts = []
    for el in elements:
        names = "|".join(re.escape(t + (BACKWARD_SUFFIX if backward else "")) for t in el.tokens)
        idle = f"(?:{re.escape(KERNELLESS_SUFFIX)})?" if (el.kernelless or backward) else ""
        parts.append(f"(?:{GAP}-(?:{names}){idle}-){{{el.least},{el.most}}}")
    return re.compile("".join(parts))


def _match(ctx: _Context, tokens: np.ndarray, pattern: Pattern, elements, phase: str, lanes: list) -> list[dict]:
    """Occurrences of one element sequence in each lane ``(lo, hi, tokens it held at first)``; claims their entries."""
    regex = _regex(elements, phase == "backward")
    need = min(2, sum(el.least for el in elements if not el.kernelless)) or 1
    found = []
    for lo, hi, present in lanes:
        if not _could_match(elements, phase == "backward", present):
            continue
        text, starts = _joined(tokens[lo:hi])
        for m in regex.finditer(text):
            first, last = _span(starts, m)
            work = [lo + i for i in range(first, last + 1) if not tokens[lo + i].endswith(KERNELLESS_SUFFIX)]
            if len(work) < need or any(tokens[w] == CONSUMED for w in work):
                continue
            variant = _variant(pattern, tokens, work)
            found.append(_occurrence(ctx, pattern.key, pattern.family, variant, phase, work, pattern.removable))
            tokens[work] = CONSUMED
    return found


def _lane_bounds(lanes: np.ndarray) -> list[tuple[int, int]]:
    """(start, stop) positions of each lane's entries (entries are sorted by lane)."""
    cuts = np.flatnonzero(np.diff(lanes)) + 1
    edges = np.concatenate(([0], cuts, [len(lanes)]))
    return list(zip(edges[:-1].tolist(), edges[1:].tolist(), strict=True))


def _could_match(elements: tuple[Element, ...], backward: bool, present: set[str]) -> bool:
    """False when a required element's tokens are all absent from the lane (the regex cannot match: skip it)."""
    suffix = BACKWARD_SUFFIX if backward else ""
    return all(
        any(t + suffix in present or t + suffix + KERNELLESS_SUFFIX in present for t in el.tokens)
        for el in elements
        if el.least > 0
    )


def _joined(tokens: np.ndarray) -> tuple[str, np.ndarray]:
    """The text ``-a--b-`` of a lane's tokens and the offset where each token starts."""
    words = tokens.tolist()
    lengths = np.fromiter(map(len, words), dtype=np.int64, count=len(words)) + 2
    return "-" + "--".join(words) + "-", np.concatenate(([0], np.cumsum(lengths)[:-1]))


def _span(starts: np.ndarray, m: re.Match) -> tuple[int, int]:
    first = int(np.searchsorted(starts, m.start(), side="right")) - 1
    last = int(np.searchsorted(starts, m.end() - 1, side="right")) - 1
    return first, last


def _variant(pattern: Pattern, tokens: np.ndarray, work: list[int]) -> str:
    """The variant name: fixed, or the matched ops' labels in forward order (``MatMul+BiasAdd+ReLU``)."""
    if pattern.named:
        return pattern.named
    names = [_base(t) for t in tokens[work]]
    if any(t.endswith(BACKWARD_SUFFIX) for t in tokens[work]):
        names = names[::-1]
    labels = [LABELS.get(n, n) for n in names]
    return "+".join(label for i, label in enumerate(labels) if i == 0 or label != labels[i - 1])


def _base(token: str) -> str:
    return token.removesuffix(KERNELLESS_SUFFIX).removesuffix(BACKWARD_SUFFIX)


def _occurrence(
    ctx: _Context, key: str, family: str, variant: str, phase: str, work: list[int], removable: bool = False
) -> dict:
    """Measured and estimated numbers of one occurrence (``work``: its entry positions with device work;
    ``removable``: the fix removes the work, no fused kernel replaces it)."""
    c, idx = ctx.cols, np.asarray(work)
    gemm = ctx.gemm[idx]
    dur = c["device_ns"][idx]
    current, kept = int(dur.sum()), int(dur[gemm].sum())
    out_bytes = c["out_bytes"][idx]
    replaced = gemm.any() or removable
    fused = 0.0 if replaced else (int(c["in_bytes"][idx[0]]) + int(out_bytes[-1])) / ctx.bandwidth * 1e9
    kernels = c["kernels"][idx]
    removed = int(kernels[~gemm].sum()) - (0 if replaced else 1)
    intermediate = int(2 * out_bytes[:-1].sum())
    return {
        "pattern": key,
        "family": family,
        "variant": variant,
        "phase": phase,
        "rank": int(c["rank"][idx[0]]),
        "step": int(c["step"][idx[0]]),
        "first_row": int(c["row"][idx[0]]),
        "entry_rows": c["row"][idx].tolist(),
        "ts": int(c["ts"][idx[0]]),
        "kernels": int(kernels.sum()),
        "current_ns": current,
        "kept_ns": kept,
        "fused_ns": int(fused),
        "saving_ns": max(int(current - kept - fused), 0),
        "intermediate_bytes": intermediate,
        "traffic_ns": int(intermediate / ctx.bandwidth * 1e9),
        "launch_ns": int(max(removed, 0) * ctx.launch_ns),
    }


def _launch_ns(ev: pd.DataFrame) -> float:
    """Measured median duration of the runtime calls that launched device work (0 when none is linked)."""
    launch = ev["launch"].to_numpy()
    rows = np.unique(launch[launch != NO_ROW])
    return float(np.median(ev["dur"].to_numpy()[rows])) if len(rows) else 0.0


def _optimizer(trace, ctx: _Context, tokens: np.ndarray) -> list[dict]:
    """Optimizer steps that run as many elementwise passes (foreach or per-parameter) instead of one fused one."""
    ev = trace.events
    marker_kind = ev["kind"].isin([Kind.ANNOTATION.value, Kind.CPU_OP.value])  # torch_npu: a CPU op
    categories = ev["name"].cat.categories.astype(str)
    step_names = np.asarray(categories.str.match(OPTIMIZER_STEP.pattern), dtype=bool)
    codes = ev["name"].cat.codes.to_numpy()
    steps = ev[marker_kind.to_numpy() & step_names[codes] & (codes >= 0)]
    entries = ctx.entries
    entry_names = np.asarray(categories, dtype=object)[codes[entries["row"].to_numpy()]]
    found = []
    for row, marker in steps.iterrows():
        inside = (entries["ts"] >= marker["ts"]) & (entries["ts"] < marker["ts"] + marker["dur"])
        inside &= (entries["rank"] == marker["rank"]) & (entries["kernels"] > 0)
        work = np.flatnonzero(inside.to_numpy() & (tokens != CONSUMED))
        names = entry_names[work]
        if len(work) <= 2 or any(FUSED_OPTIMIZER_OP.search(n) for n in names):
            continue
        name = OPTIMIZER_STEP.match(str(marker["name"])).group(1)
        style = "foreach" if any(tokens[w] == "foreach" for w in work) else "per-parameter loop"
        occ = _occurrence(ctx, "optimizer", "Optimizer step", f"{name} ({style}, {len(work)} ops)", "optimizer", work)
        occ["saving_ns"] = int(occ["current_ns"] * (1 - 2 / len(work)))
        occ["first_row"] = int(row)
        found.append(occ)
        tokens[work] = CONSUMED
    return found


def _discover(ctx: _Context, tokens: np.ndarray) -> list[dict]:
    """Repeated chains of consecutive memory-bound kernels that no library pattern claimed."""
    work = np.flatnonzero(~pd.Series(tokens).str.endswith(KERNELLESS_SUFFIX).to_numpy())
    entries = ctx.entries
    memory_bound = (tokens[work] != CONSUMED) & (entries["gemm_ns"].to_numpy()[work] == 0)
    memory_bound &= ~np.array([_unfusable(_base(t)) for t in tokens[work]], dtype=bool)
    run = _runs(entries["lane"].to_numpy()[work], memory_bound)
    codes = pd.factorize(tokens[work])[0]
    min_count = max(2, entries.loc[entries["step"] != NO_ROW, ["rank", "step"]].drop_duplicates().shape[0])
    found = []
    for _ in range(MAX_DISCOVERED):
        best = _best_chain(codes, run, entries["device_ns"].to_numpy()[work], min_count)
        if best is None:
            break
        length, picks = best
        first = work[picks[0] : picks[0] + length]
        backward = all(t.endswith(BACKWARD_SUFFIX) for t in tokens[first])
        variant = ("backward: " if backward else "") + " → ".join(ctx.cols["label"][first])
        phase = "backward" if backward else "forward"
        for start in picks:
            chain = work[start : start + length].tolist()
            found.append(_occurrence(ctx, "discovered", "Repeated memory-bound chain", variant, phase, chain))
            run[start : start + length] = -1
            tokens[chain] = CONSUMED
    return found


def _unfusable(token: str) -> bool:
    """Compute-bound work, host↔device copies and already-fused kernels: no chain of them can be fused."""
    return token in GEMM_TOKENS or token == FUSED_TOKEN or token.startswith(COPY_PREFIX)


def _runs(lanes: np.ndarray, ok: np.ndarray) -> np.ndarray:
    """Run id of each work entry: consecutive memory-bound entries of one lane share one; -1 elsewhere."""
    new = np.ones(len(ok), dtype=bool)
    new[1:] = (lanes[1:] != lanes[:-1]) | ~ok[:-1]
    ids = np.cumsum(new)
    return np.where(ok, ids, -1)


def _best_chain(codes: np.ndarray, run: np.ndarray, dur: np.ndarray, min_count: int):
    """The chain (length, non-overlapping starts) worth most: summed time × (1 - 1/length) over its repeats."""
    best, best_score = None, 0.0
    for length in range(2, MAX_CHAIN + 1):
        if len(codes) < length:
            break
        windows = np.lib.stride_tricks.sliding_window_view(codes, length)
        runs = np.lib.stride_tricks.sliding_window_view(run, length)
        valid = np.flatnonzero((runs[:, 0] >= 0) & (runs == runs[:, :1]).all(axis=1))
        if len(valid) < min_count:
            continue
        keys, inverse = np.unique(windows[valid], axis=0, return_inverse=True)
        times = np.convolve(dur, np.ones(length, dtype=np.int64), mode="valid")[valid]
        score = np.bincount(inverse.ravel(), weights=times) * (1 - 1 / length)
        score[np.bincount(inverse.ravel()) < min_count] = 0
        top = int(np.argmax(score))
        if score[top] > best_score:
            picks = _non_overlapping(valid[inverse.ravel() == top], length)
            if len(picks) >= min_count:
                best, best_score = (length, picks), float(score[top])
    return best


def _non_overlapping(starts: np.ndarray, length: int) -> list[int]:
    picks, edge = [], -1
    for s in starts.tolist():
        if s > edge:
            picks.append(s)
            edge = s + length - 1
    return picks


def _pair_backward(table: pd.DataFrame) -> pd.DataFrame:
    """Give each backward occurrence the variant and location of the forward one it belongs to.

    Autograd runs a step's nodes in reverse, so in each (rank, step, pattern) the i-th backward occurrence
    belongs to the i-th forward one from the end; unpaired ones keep their own variant.
    """
    table = table.sort_values("ts", kind="stable")
    library = table[table["pattern"] != "discovered"]
    for _, group in library.groupby(["rank", "step", "pattern"], sort=False):
        fwd = group.index[group["phase"] == "forward"][::-1]
        bwd = group.index[group["phase"] == "backward"]
        n = min(len(fwd), len(bwd))
        cols = ["variant", "annotation", "stack", "module"]
        table.loc[bwd[:n], cols] = table.loc[fwd[:n], cols].to_numpy()
    return table.sort_values(["rank", "ts"], kind="stable").reset_index(drop=True)


def rank_steps(trace: TraceData) -> int:
    """Number of (rank, step) pairs with a step marker."""
    return len(step_table(trace))
