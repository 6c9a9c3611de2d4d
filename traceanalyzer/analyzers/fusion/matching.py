"""Matching and estimates: every occurrence of a library pattern, an unfused optimizer step or a discovered repeated
chain in the op stream (``opstream``), with its measured and estimated numbers.

Matching runs over the op stream (top-level ops per host thread, or device tasks per stream where no op is
linked), one regex per pattern over the joined canonical tokens, as msprof-analyze does; kernel-less ops (views,
no-op casts) may sit between the ops of a pattern. Autograd nodes of the same chain are matched in reverse order.
Patterns and discovered chains match inside one region of a lane only (``regions``): a region ends at a step or
phase change and at a host gap over ``MAX_CHAIN_GAP_NS`` between ops with device work, since ops fuse only when they
run back to back in one region of the program.

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
from traceanalyzer.analyzers.collective_calls import phases
from traceanalyzer.analyzers.fusion import opstream
from traceanalyzer.analyzers.fusion.opstream import COPY_PREFIX, FUSED_TOKEN, per_text, per_token
from traceanalyzer.analyzers.fusion.patterns import (
    BACKWARD_SUFFIX,
    FUSED_OPTIMIZER_OP,
    GEMM_TOKENS,
    KERNELLESS_SUFFIX,
    LABELS,
    MAX_CHAIN_GAP_NS,
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

MAX_GAP = 8
"""Between two ops of a pattern: up to this many ops that launched nothing (views, no-op casts)."""

CONSUMED = "#"
"""Token of an entry another pattern already claimed."""

FIRST_LETTER = 0x10000
"""Code point of the first token's letter (past the surrogates, so any number of tokens gets one)."""

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
    """What every estimate needs: the entries, their regions (``regions``), the bandwidth and the measured launch
    cost."""

    entries: pd.DataFrame
    region: np.ndarray
    bandwidth: float
    launch_ns: float
    cols: dict[str, np.ndarray] = field(default_factory=dict)
    gemm: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))

    def __post_init__(self) -> None:
        self.cols = {c: self.entries[c].to_numpy() for c in self.entries.columns}
        self.gemm = per_token(self.cols["token"], lambda t: _base(t) in GEMM_TOKENS, bool) | (self.cols["gemm_ns"] > 0)


@per_trace
def occurrences(trace: TraceData) -> pd.DataFrame:
    """Every occurrence found (library, optimizer, discovered), with its measured and estimated numbers."""
    entries = opstream.op_stream(trace)
    if not len(entries):
        return pd.DataFrame(columns=OCCURRENCE_COLUMNS)
    bw, _ = devices.bandwidth(trace.meta)
    ctx = _Context(entries, regions(trace, entries), bw, _launch_ns(trace.events))
    tokens = entries["token"].to_numpy(dtype=object).copy()
    found = _library(ctx, tokens) + _optimizer(trace, ctx, tokens) + _discover(ctx, tokens)
    if not found:
        return pd.DataFrame(columns=OCCURRENCE_COLUMNS)
    table = _measured(ctx, found)
    in_step = table["step"] != NO_ROW
    table = table[in_step] if in_step.any() and rank_steps(trace) else table
    where = opstream.locations(trace.events, table["first_row"].to_numpy())
    table = table.reset_index(drop=True)
    for col in ("annotation", "stack", "module"):
        table[col] = where[col].to_numpy()
    table["first_op"] = _names(trace.events, table["first_row"].to_numpy())
    return _pair_backward(table)[OCCURRENCE_COLUMNS]


def regions(trace: TraceData, entries: pd.DataFrame) -> np.ndarray:
    """Region number per op-stream entry (ascending): a new region starts with each lane, step and phase (forward,
    backward, after_backward, optimizer), and at an entry with device work that starts more than ``MAX_CHAIN_GAP_NS``
    after the end of its lane's previous entry with device work."""
    rows = entries["row"].to_numpy()
    lane, step = entries["lane"].to_numpy(), entries["step"].to_numpy()
    phase = pd.factorize(phases(trace, pd.DataFrame({"launch": rows})))[0]
    new = np.ones(len(rows), dtype=bool)
    new[1:] = (lane[1:] != lane[:-1]) | (step[1:] != step[:-1]) | (phase[1:] != phase[:-1])
    work = np.flatnonzero(entries["kernels"].to_numpy() > 0)
    start = entries["ts"].to_numpy()[work]
    end = start + trace.events["dur"].to_numpy()[rows[work]]
    late = (start[1:] - end[:-1] > MAX_CHAIN_GAP_NS) & (lane[work[1:]] == lane[work[:-1]])
    new[work[1:][late]] = True
    return np.cumsum(new) - 1


def _library(ctx: _Context, tokens: np.ndarray) -> list[_Found]:
    """Match every library pattern in priority order, inside each region; an entry belongs to the first match that
    claims it."""
    lanes = [(lo, hi, set(tokens[lo:hi].tolist())) for lo, hi in _lane_bounds(ctx.region)]
    letters = _Letters(tokens)
    found = []
    for pattern in PATTERNS:
        for phase, alternatives in _phases(pattern):
            for elements in alternatives:
                found += _match(letters, pattern, elements, phase, lanes)
    return found


class _Letters:
    """The op stream as text of one letter per entry (one per distinct token), for the patterns' regexes; claimed
    entries read ``CONSUMED``, in the text and in ``tokens``."""

    def __init__(self, tokens: np.ndarray) -> None:
        codes, distinct = pd.factorize(np.append(tokens, CONSUMED))
        self.tokens = tokens
        self.points = (codes[:-1] + FIRST_LETTER).astype("<u4")
        self.consumed = int(codes[-1]) + FIRST_LETTER
        self.of = {str(t): chr(c + FIRST_LETTER) for c, t in enumerate(distinct)}
        self.idle = per_token(tokens, lambda t: t.endswith(KERNELLESS_SUFFIX), bool)

    def text(self, lo: int, hi: int) -> str:
        """The letters of entries lo..hi-1."""
        return self.points[lo:hi].tobytes().decode("utf-32-le")

    def any_of(self, tokens: set[str]) -> str:
        """A regex matching the letter of any of the tokens (matching nothing when none occurs)."""
        present = "".join(self.of[t] for t in sorted(tokens) if t in self.of)
        return f"[{present}]" if present else "(?!)"

    def claim(self, work: np.ndarray) -> None:
        self.points[work] = self.consumed
        self.tokens[work] = CONSUMED


def _phases(pattern: Pattern) -> list[tuple[str, tuple]]:
    phases = [("forward", pattern.alternatives)]
    if pattern.backward_alternatives:
        phases.append(("backward", pattern.backward_alternatives))
    elif pattern.backward:
        phases.append(("backward", tuple(tuple(reversed(a)) for a in pattern.alternatives)))
    return phases


def _regex(elements: tuple[Element, ...], backward: bool, letters: _Letters) -> re.Pattern:
    """The regex of one element sequence over the letters of a lane: each element is up to ``MAX_GAP`` kernel-less
    entries, then one entry with one of its tokens (kernel-less too where the element allows it)."""
    gap = letters.any_of({t for t in letters.of if t.endswith(KERNELLESS_SUFFIX)})
    parts = []
    for el in elements:
        names = {t + (BACKWARD_SUFFIX if backward else "") for t in el.tokens}
        if el.kernelless or backward:
            names |= {n + KERNELLESS_SUFFIX for n in names}
        parts.append(f"(?:{gap}{{0,{MAX_GAP}}}{letters.any_of(names)}){{{el.least},{el.most}}}")
    return re.compile("".join(parts))


def _match(letters: _Letters, pattern: Pattern, elements, phase: str, lanes: list) -> list[_Found]:
    """Occurrences of one element sequence in each lane or region ``(lo, hi, tokens it held at first)``; claims their
    entries."""
    regex = _regex(elements, phase == "backward", letters)
    need = min(2, sum(el.least for el in elements if not el.kernelless)) or 1
    found = []
    for lo, hi, present in lanes:
        if not _could_match(elements, phase == "backward", present):
            continue
        for m in regex.finditer(letters.text(lo, hi)):
            span = np.arange(lo + m.start(), lo + m.end())
            work = span[~letters.idle[span]]
            if len(work) < need or (letters.points[work] == letters.consumed).any():
                continue
            variant = _variant(pattern, letters.tokens, work)
            found.append(_Found(pattern.key, pattern.family, variant, phase, work, pattern.removable))
            letters.claim(work)
    return found


def _lane_bounds(lanes: np.ndarray) -> list[tuple[int, int]]:
    """(start, stop) positions of each lane's (or region's) entries (entries are sorted by it)."""
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


def _variant(pattern: Pattern, tokens: np.ndarray, work: np.ndarray) -> str:
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


@dataclass
class _Found:
    """One occurrence as matched: what it is and its entries with device work (positions in the op stream)."""

    pattern: str
    family: str
    variant: str
    phase: str
    work: np.ndarray
    removable: bool = False  # the fix removes the work, no fused kernel replaces it
    marker: int = NO_ROW  # an optimizer step: its marker's row, which locates it


def _measured(ctx: _Context, found: list[_Found]) -> pd.DataFrame:
    """The occurrences with their measured and estimated numbers (the module's saving model), one row each."""
    c = ctx.cols
    lengths = np.array([len(f.work) for f in found], dtype=np.int64)
    flat = np.concatenate([f.work for f in found])
    starts = np.cumsum(lengths) - lengths
    first, last = flat[starts], flat[starts + lengths - 1]

    def total(values: np.ndarray) -> np.ndarray:
        return np.add.reduceat(values[flat], starts)

    current, kept = total(c["device_ns"]), total(np.where(ctx.gemm, c["device_ns"], 0))
    replaced = (total(ctx.gemm.astype(np.int64)) > 0) | np.array([f.removable for f in found], dtype=bool)
    fused = np.where(replaced, 0.0, (c["in_bytes"][first] + c["out_bytes"][last]) / ctx.bandwidth * 1e9)
    removed = total(np.where(ctx.gemm, 0, c["kernels"])) - np.where(replaced, 0, 1)
    intermediate = 2 * (total(c["out_bytes"]) - c["out_bytes"][last])
    saving = np.maximum(_whole(current - kept - fused), 0)
    marker = np.array([f.marker for f in found], dtype=np.int64)
    optimizer = marker != NO_ROW
    return pd.DataFrame(
        {
            "pattern": [f.pattern for f in found],
            "family": [f.family for f in found],
            "variant": [f.variant for f in found],
            "phase": [f.phase for f in found],
            "rank": c["rank"][first].astype(np.int64),
            "step": c["step"][first].astype(np.int64),
            "first_row": np.where(optimizer, marker, c["row"][first]),
            "entry_rows": _pieces(c["row"][flat].tolist(), starts, lengths),
            "ts": c["ts"][first],
            "kernels": total(c["kernels"]),
            "current_ns": current,
            "kept_ns": kept,
            "fused_ns": _whole(fused),
            "saving_ns": np.where(optimizer, _whole(current * (1 - 2 / lengths)), saving),
            "intermediate_bytes": intermediate,
            "traffic_ns": _whole(intermediate / ctx.bandwidth * 1e9),
            "launch_ns": _whole(np.maximum(removed, 0) * ctx.launch_ns),
        }
    )


def _pieces(values: list, starts: np.ndarray, lengths: np.ndarray) -> list[list]:
    """The list cut into consecutive pieces of the given starts and lengths."""
    return [values[a : a + n] for a, n in zip(starts.tolist(), lengths.tolist(), strict=True)]


def _whole(values: np.ndarray) -> np.ndarray:
    """Values truncated toward zero to integers (as ``int()`` does)."""
    return np.trunc(values).astype(np.int64)


def _launch_ns(ev: pd.DataFrame) -> float:
    """Measured median duration of the runtime calls that launched device work (0 when none is linked)."""
    launch = ev["launch"].to_numpy()
    rows = np.unique(launch[launch != NO_ROW])
    return float(np.median(ev["dur"].to_numpy()[rows])) if len(rows) else 0.0


def _optimizer(trace, ctx: _Context, tokens: np.ndarray) -> list[_Found]:
    """Optimizer steps that run as many elementwise passes (foreach or per-parameter) instead of one fused one."""
    ev = trace.events
    c = ctx.cols
    fused = per_text(ev["name"], c["row"], lambda n: bool(FUSED_OPTIMIZER_OP.search(n)), bool)
    starts = _Starts(c["rank"], c["ts"])
    found = []
    for row in _optimizer_steps(ev).tolist():
        inside = starts.inside(int(ev["rank"].iat[row]), int(ev["ts"].iat[row]), int(ev["dur"].iat[row]))
        work = inside[(c["kernels"][inside] > 0) & (tokens[inside] != CONSUMED)]
        if len(work) <= 2 or fused[work].any():
            continue
        name = OPTIMIZER_STEP.match(str(ev["name"].iat[row])).group(1)
        style = "foreach" if any(tokens[w] == "foreach" for w in work) else "per-parameter loop"
        variant = f"{name} ({style}, {len(work)} ops)"
        found.append(_Found("optimizer", "Optimizer step", variant, "optimizer", work, marker=row))
        tokens[work] = CONSUMED
    return found


def _optimizer_steps(ev: pd.DataFrame) -> np.ndarray:
    """Rows of the optimizer-step markers (an annotation; torch_npu: a CPU op), in row order."""
    marker_kind = ev["kind"].isin([Kind.ANNOTATION.value, Kind.CPU_OP.value]).to_numpy()
    step_names = np.asarray(ev["name"].cat.categories.astype(str).str.match(OPTIMIZER_STEP.pattern), dtype=bool)
    codes = ev["name"].cat.codes.to_numpy()
    return np.flatnonzero(marker_kind & np.append(step_names, False)[codes])


class _Starts:
    """The entries sorted by rank then start, to find those of a rank that start in a window."""

    def __init__(self, rank: np.ndarray, ts: np.ndarray) -> None:
        self.order = np.lexsort((ts, rank))
        self.rank, self.ts = rank[self.order], ts[self.order]

    def inside(self, rank: int, start: int, dur: int) -> np.ndarray:
        """Positions (ascending) of the entries of ``rank`` that start in [start, start + dur)."""
        lo, hi = np.searchsorted(self.rank, [rank, rank + 1])
        first, last = lo + np.searchsorted(self.ts[lo:hi], [start, start + dur])
        return np.sort(self.order[first:last])


def _names(ev: pd.DataFrame, rows: np.ndarray) -> np.ndarray:
    """The event names of some rows (object array)."""
    codes = ev["name"].cat.codes.to_numpy()[rows]
    return np.asarray(ev["name"].cat.categories.take(codes).astype(str), dtype=object)


def _discover(ctx: _Context, tokens: np.ndarray) -> list[_Found]:
    """Repeated chains of consecutive memory-bound kernels of one region that no library pattern claimed."""
    work = np.flatnonzero(~per_token(tokens, lambda t: t.endswith(KERNELLESS_SUFFIX), bool))
    entries = ctx.entries
    memory_bound = (tokens[work] != CONSUMED) & (entries["gemm_ns"].to_numpy()[work] == 0)
    memory_bound &= ~per_token(tokens[work], lambda t: _unfusable(_base(t)), bool)
    run = _runs(ctx.region[work], memory_bound)
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
            chain = work[start : start + length]
            found.append(_Found("discovered", "Repeated memory-bound chain", variant, phase, chain))
            run[start : start + length] = -1
            tokens[chain] = CONSUMED
    return found


def _unfusable(token: str) -> bool:
    """Compute-bound work, host↔device copies and already-fused kernels: no chain of them can be fused."""
    return token in GEMM_TOKENS or token == FUSED_TOKEN or token.startswith(COPY_PREFIX)


def _runs(lanes: np.ndarray, ok: np.ndarray) -> np.ndarray:
    """Run id of each work entry: consecutive memory-bound entries of one lane (or region) share one; -1 elsewhere."""
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


PAIRED = ["variant", "annotation", "stack", "module"]
"""What a backward occurrence takes from the forward one it belongs to."""


def _pair_backward(table: pd.DataFrame) -> pd.DataFrame:
    """Give each backward occurrence the variant and location of the forward one it belongs to.

    Autograd runs a step's nodes in reverse, so in each (rank, step, pattern) the i-th backward occurrence
    belongs to the i-th forward one from the end; unpaired ones keep their own variant.
    """
    table = table.sort_values("ts", kind="stable").reset_index(drop=True)
    fwd, bwd = _backward_pairs(table)
    for col in PAIRED:
        values = table[col].to_numpy(dtype=object).copy()
        values[bwd] = values[fwd]
        table[col] = values
    return table.sort_values(["rank", "ts"], kind="stable").reset_index(drop=True)


def _backward_pairs(table: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Positions of the (forward, backward) library occurrences that belong together (see ``_pair_backward``)."""
    keys = ["rank", "step", "pattern"]
    library = table[table["pattern"] != "discovered"]
    fwd = library[library["phase"] == "forward"]
    bwd = library[library["phase"] == "backward"]
    fwd = fwd[keys].assign(nth=fwd.groupby(keys, sort=False).cumcount(ascending=False), at=fwd.index)
    bwd = bwd[keys].assign(nth=bwd.groupby(keys, sort=False).cumcount(), at=bwd.index)
    pairs = fwd.merge(bwd, on=[*keys, "nth"], suffixes=("_fwd", "_bwd"))
    return pairs["at_fwd"].to_numpy(), pairs["at_bwd"].to_numpy()


def rank_steps(trace: TraceData) -> int:
    """Number of (rank, step) pairs with a step marker."""
    return len(step_table(trace))
