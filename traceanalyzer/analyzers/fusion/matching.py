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
from traceanalyzer.analyzers.fusion import discovery, opstream
from traceanalyzer.analyzers.fusion.discovery import Chain, Runs
from traceanalyzer.analyzers.fusion.opstream import COPY_PREFIX, FUSED_TOKEN, EntryWork, per_text, per_token
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
from traceanalyzer.analyzers.summary import compute_steps, step_table
from traceanalyzer.intervals import narrow
from traceanalyzer.memo import per_trace, remember
from traceanalyzer.schema import NO_ROW, PATH
from traceanalyzer.tracedata import TraceData

ANALYZER = "fusion"

MAX_GAP = 8
"""Between two ops of a pattern: up to this many ops that launched nothing (views, no-op casts)."""

CONSUMED = "#"
"""Token of an entry another pattern already claimed."""

FIRST_LETTER = 0x10000
"""Code point of the first token's letter (past the surrogates, so any number of tokens gets one)."""

DISCOVERED = "Repeated memory-bound chain"
"""The family of the chains discovery finds (``discovery``)."""

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
"""The columns of ``occurrences``."""

LOCATION_COLUMNS = ["annotation", "stack", "module", "first_op"]
"""Where an occurrence is: its first op's annotation path, user frame and nn.Module (``opstream.locations``), and
that op's name."""


@dataclass
class _Context:
    """What every estimate needs: the op stream's columns (``opstream.stream``), their regions (``regions``) and the
    bandwidth; ``gemm``: which entries are compute-bound."""

    cols: dict[str, np.ndarray]
    region: np.ndarray
    bandwidth: float
    gemm: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        self.gemm = per_token(self.cols["token"], lambda t: _base(t) in GEMM_TOKENS, bool) | (self.cols["gemm_ns"] > 0)


@dataclass
class Matched:
    """A trace's op stream matched: the library and optimizer occurrences (``found``), what discovery may chain
    among the entries they left (``runs``), and the removable device work of every entry (``work``)."""

    ctx: _Context
    found: list[Found]
    runs: Runs
    work: EntryWork


def matched(trace: TraceData) -> Matched | None:
    """The trace's op stream matched (once per trace); None without an op stream."""
    return remember(trace, f"{__name__}.matched", lambda: _matched(trace))


def _matched(trace: TraceData) -> Matched | None:
    entries = opstream.stream(trace)
    if not entries:
        return None
    bw, _ = devices.bandwidth(trace.meta)
    ctx = _Context(entries, regions(trace, entries), bw)
    tokens = entries["token"].copy()
    found = _library(ctx, tokens) + _optimizer(trace, ctx, tokens)
    work = opstream.entry_work(trace, ctx.cols["row"])
    return Matched(ctx, found, _runs(trace, ctx, tokens, work), work)


@per_trace
def occurrences(trace: TraceData) -> pd.DataFrame:
    """Every occurrence found (library, optimizer, discovered), with its measured and estimated numbers."""
    match = matched(trace)
    if match is None:
        return pd.DataFrame(columns=OCCURRENCE_COLUMNS)
    at = match.runs.cols["at"]
    found = match.found + [discovered(c, at[c.entries]) for c in discovery.discover(match.runs)]
    if not found:
        return pd.DataFrame(columns=OCCURRENCE_COLUMNS)
    table = located(trace, match.ctx, found)
    table["entry_rows"] = [match.ctx.cols["row"][e].tolist() for e in table["entries"]]
    table["launch_ns"] = whole(table["removed"].to_numpy() * launch_median(launch_counts(trace.events)))
    in_step = table["step"] != NO_ROW
    table = table[in_step] if in_step.any() and rank_steps(trace) else table
    return table.reset_index(drop=True)[OCCURRENCE_COLUMNS]


def discovered(chain: Chain, entries: np.ndarray) -> Found:
    """A discovered chain as an occurrence over some entries (its positions in the op stream or in ``Runs``)."""
    return Found("discovered", DISCOVERED, chain.variant, chain.phase, entries)


def located(trace: TraceData, ctx: _Context, found: list[Found]) -> pd.DataFrame:
    """The occurrences measured (``measured``; ``seq``: their order found), with their first row, entries
    (positions in the op stream) and location, backward ones paired with their forward ones, in (rank, start)
    order."""
    table = measured(ctx.cols, ctx.gemm, ctx.bandwidth, found)
    marker = np.array([f.marker for f in found], dtype=np.int64)
    first = ctx.cols["row"][np.array([f.work[0] for f in found], dtype=np.int64)]
    table["seq"] = np.arange(len(found))
    table["first_row"] = np.where(marker != NO_ROW, marker, first)
    table["entries"] = [f.work for f in found]
    where = locations(trace, table["first_row"].to_numpy())
    for col in LOCATION_COLUMNS:
        table[col] = where[col]
    return _pair_backward(table)


def locations(trace: TraceData, rows: np.ndarray) -> dict[str, np.ndarray]:
    """``LOCATION_COLUMNS`` of some rows (object arrays)."""
    return {**opstream.locations(trace, rows), "first_op": _names(trace.events, rows)}


def place_of(table: pd.DataFrame | dict[str, np.ndarray]) -> np.ndarray:
    """Per row of a table with ``LOCATION_COLUMNS``, its place: annotation | module | stack (those known), else its
    first op (made once per distinct location)."""
    cols = [np.asarray(table[c], dtype=object) for c in ("annotation", "module", "stack", "first_op")]
    codes, first = opstream.combinations(*cols)
    parts = zip(*(c[first].tolist() for c in cols[:3]), strict=True)
    place = np.array([" | ".join(x for x in p if x) for p in parts], dtype=object)
    return np.where(place != "", place, cols[3][first])[codes]


def regions(trace: TraceData, entries: opstream.Entries) -> np.ndarray:
    """Region number per op-stream entry (ascending): a new region starts with each lane, step and phase (forward,
    backward, after_backward, optimizer), and at an entry with device work that starts more than ``MAX_CHAIN_GAP_NS``
    after the end of its lane's previous entry with device work."""
    rows = entries["row"]
    lane, step = entries["lane"], entries["step"]
    phase = pd.factorize(phases(trace, pd.DataFrame({"launch": rows})))[0]
    new = np.ones(len(rows), dtype=bool)
    new[1:] = (lane[1:] != lane[:-1]) | (step[1:] != step[:-1]) | (phase[1:] != phase[:-1])
    work = np.flatnonzero(entries["kernels"] > 0)
    start = entries["ts"][work]
    end = start + trace.events["dur"].to_numpy()[rows[work]]
    late = (start[1:] - end[:-1] > MAX_CHAIN_GAP_NS) & (lane[work[1:]] == lane[work[:-1]])
    new[work[1:][late]] = True
    return np.cumsum(new) - 1


def _library(ctx: _Context, tokens: np.ndarray) -> list[Found]:
    """Match every library pattern in priority order, inside each region; an entry belongs to the first match that
    claims it."""
    lanes = _Regions(ctx.region, tokens)
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


def _match(letters: _Letters, pattern: Pattern, elements, phase: str, lanes: _Regions) -> list[Found]:
    """Occurrences of one element sequence in each region that may hold one; claims their entries. Matches of one
    regex never overlap, so all of them are measured and claimed at once."""
    regex = _regex(elements, phase == "backward", letters)
    text = letters.text(0, len(letters.points))
    spans = [
        (m.start(), m.end(), m.group())
        for lo, hi in lanes.could_match(elements, phase == "backward")
        for m in regex.finditer(text, lo, hi)  # as in text[lo:hi]: the regexes have no anchors nor lookbehinds
    ]
    if not spans:
        return []
    starts, ends, texts = zip(*spans, strict=True)
    lengths = np.subtract(ends, starts)
    entries = opstream.ranges(np.array(starts, dtype=np.int64), lengths)
    busy = ~letters.idle[entries]
    before = np.concatenate(([0], np.cumsum(busy)))
    edges = np.concatenate(([0], np.cumsum(lengths)))
    counts = before[edges[1:]] - before[edges[:-1]]
    claimed = np.concatenate(([0], np.cumsum(letters.points[entries] == letters.consumed)))
    need = min(2, sum(el.least for el in elements if not el.kernelless)) or 1
    ok = (counts >= need) & (claimed[edges[1:]] == claimed[edges[:-1]])
    works = opstream.pieces(entries[busy], counts)
    variants: dict[str, str] = {}
    found = []
    for i in np.flatnonzero(ok).tolist():
        if texts[i] not in variants:
            variants[texts[i]] = _variant(pattern, letters.tokens, works[i])
        found.append(Found(pattern.key, pattern.family, variants[texts[i]], phase, works[i], pattern.removable))
    if found:
        letters.claim(np.concatenate([f.work for f in found]))
    return found


class _Regions:
    """The regions of the op stream (``regions``: numbered 0.. in entry order) and the tokens each held at first."""

    def __init__(self, region: np.ndarray, tokens: np.ndarray) -> None:
        edges = np.concatenate(([0], np.flatnonzero(np.diff(region)) + 1, [len(region)]))
        self.bounds = np.stack((edges[:-1], edges[1:]), axis=1)
        codes, distinct = pd.factorize(tokens)
        self.code = {str(t): i for i, t in enumerate(distinct)}
        held = np.unique(region.astype(np.int64) * len(distinct) + codes)  # one per (region, token) held
        self.region, self.token = np.divmod(held, max(len(distinct), 1))

    def could_match(self, elements: tuple[Element, ...], backward: bool) -> list[tuple[int, int]]:
        """(start, stop) positions of the regions where every required element has one of its tokens: in the
        others the regex cannot match."""
        suffix = BACKWARD_SUFFIX if backward else ""
        ok = np.ones(len(self.bounds), dtype=bool)
        for el in (el for el in elements if el.least > 0):
            names = [t + suffix + end for t in el.tokens for end in ("", KERNELLESS_SUFFIX)]
            has = np.zeros(len(self.bounds), dtype=bool)
            has[self.region[np.isin(self.token, [self.code[n] for n in names if n in self.code])]] = True
            ok &= has
        return [(lo, hi) for lo, hi in self.bounds[ok].tolist()]


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
class Found:
    """One occurrence as matched: what it is and its entries with device work (positions in the op stream, or in
    ``Runs``)."""

    pattern: str
    family: str
    variant: str
    phase: str
    work: np.ndarray
    removable: bool = False  # the fix removes the work, no fused kernel replaces it
    marker: int = NO_ROW  # an optimizer step: its marker's row, which locates it


def measured(c: dict[str, np.ndarray], gemm: np.ndarray, bandwidth: float, found: list[Found]) -> pd.DataFrame:
    """The occurrences with their measured and estimated numbers (the module's saving model), one row each, from
    the columns of the entries they are made of (``c``: the op stream's, or ``Runs``'), which of them are
    compute-bound (``gemm``) and the bandwidth; ``removed``: the kernel launches the fix removes."""
    lengths = np.array([len(f.work) for f in found], dtype=np.int64)
    flat = np.concatenate([f.work for f in found])
    starts = np.cumsum(lengths) - lengths
    first, last = flat[starts], flat[starts + lengths - 1]

    def total(values: np.ndarray) -> np.ndarray:
        return np.add.reduceat(values[flat], starts)

    current, kept = total(c["device_ns"]), total(np.where(gemm, c["device_ns"], 0))
    replaced = (total(gemm.astype(np.int64)) > 0) | np.array([f.removable for f in found], dtype=bool)
    fused = np.where(replaced, 0.0, (c["in_bytes"][first] + c["out_bytes"][last]) / bandwidth * 1e9)
    removed = total(np.where(gemm, 0, c["kernels"])) - np.where(replaced, 0, 1)
    intermediate = 2 * (total(c["out_bytes"]) - c["out_bytes"][last])
    saving = np.maximum(whole(current - kept - fused), 0)
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
            "ts": c["ts"][first].astype(np.int64),
            "kernels": total(c["kernels"]),
            "current_ns": current,
            "kept_ns": kept,
            "fused_ns": whole(fused),
            "saving_ns": np.where(optimizer, whole(current * (1 - 2 / lengths)), saving),
            "intermediate_bytes": intermediate,
            "traffic_ns": whole(intermediate / bandwidth * 1e9),
            "removed": np.maximum(removed, 0).astype(np.int64),
        }
    )


def whole(values: np.ndarray) -> np.ndarray:
    """Values truncated toward zero to integers (as ``int()`` does)."""
    return np.trunc(values).astype(np.int64)


def launch_counts(ev: pd.DataFrame) -> pd.DataFrame:
    """The durations of the runtime calls that launched device work, as (``dur``, ``count``) rows: additive over
    ranks, and their median is ``launch_median``'s."""
    launch = ev["launch"].to_numpy()
    launcher = np.zeros(len(ev), dtype=bool)
    launcher[launch[launch != NO_ROW]] = True
    rows = np.flatnonzero(launcher)
    dur, count = np.unique(ev["dur"].to_numpy()[rows].astype(np.int64), return_counts=True)
    return pd.DataFrame({"dur": narrow(dur), "count": narrow(count)})


def launch_median(counts: pd.DataFrame) -> float:
    """Measured median duration (ns) of the launch calls counted (``launch_counts``, of one or more ranks; 0 when
    none is linked)."""
    counts = counts.astype(np.int64).groupby("dur", sort=True)["count"].sum()
    total = int(counts.sum())
    if not total:
        return 0.0
    at = np.searchsorted(np.cumsum(counts.to_numpy()), [(total - 1) // 2, total // 2], side="right")
    return float(np.median(counts.index.to_numpy()[at]))


def _optimizer(trace, ctx: _Context, tokens: np.ndarray) -> list[Found]:
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
        found.append(Found("optimizer", "Optimizer step", variant, "optimizer", work, marker=row))
        tokens[work] = CONSUMED
    return found


def _optimizer_steps(ev: pd.DataFrame) -> np.ndarray:
    """Rows of the optimizer-step markers (an annotation; torch_npu: a CPU op), in row order."""
    marker_kind = ev["kind"].isin(PATH).to_numpy()
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


def _runs(trace: TraceData, ctx: _Context, tokens: np.ndarray, work: EntryWork) -> Runs:
    """What discovery may chain (``discovery.Runs``): runs of consecutive memory-bound work entries of one region
    that no library pattern or optimizer step claimed (``tokens``), with their numbers, places and device work;
    rank by rank (in op-stream order within a rank), as the ranks' parts are merged."""
    c = ctx.cols
    entries = np.flatnonzero(~per_token(tokens, lambda t: t.endswith(KERNELLESS_SUFFIX), bool))
    entries = entries[np.argsort(c["rank"][entries], kind="stable")]
    memory_bound = (tokens[entries] != CONSUMED) & (c["gemm_ns"][entries] == 0)
    memory_bound &= ~per_token(tokens[entries], lambda t: _unfusable(_base(t)), bool)
    run = discovery.run_ids(ctx.region[entries], memory_bound)
    token, vocab = discovery.coded(tokens[entries])
    keep = discovery.in_runs(run)
    at = entries[keep]
    label, labels = discovery.coded(c["label"][at])
    place, places = discovery.coded(place_of(locations(trace, c["row"][at])))
    cols = {
        "token": token[keep],
        "label": label,
        "place": place,
        "run": discovery.coded(run[keep])[0],
        "rank": c["rank"][at].astype(np.int32),
        "step": c["step"][at].astype(np.int32),
        "ts": c["ts"][at].astype(np.int64),
        **{k: c[k][at].astype(np.int64) for k in discovery.MEASURED},
        "at": at.astype(np.int32),
    }
    stepped = c["step"] != NO_ROW
    steps = len(opstream.combinations(c["rank"][stepped], c["step"][stepped])[1])
    return Runs(cols, {"token": vocab, "label": labels, "place": places}, work.take(at), steps)


def _unfusable(token: str) -> bool:
    """Compute-bound work, host↔device copies and already-fused kernels: no chain of them can be fused."""
    return token in GEMM_TOKENS or token == FUSED_TOKEN or token.startswith(COPY_PREFIX)


PAIRED = ["variant", "annotation", "stack", "module"]
"""What a backward occurrence takes from the forward one it belongs to."""


def _pair_backward(table: pd.DataFrame) -> pd.DataFrame:
    """Give each backward occurrence the variant and location of the forward one it belongs to, in (rank, start)
    order.

    Autograd runs a step's nodes in reverse, so in each (rank, step, pattern) the i-th backward occurrence (by
    start) belongs to the i-th forward one from the end; unpaired ones keep their own variant.
    """
    fwd, bwd = _backward_pairs(table)
    for col in PAIRED:
        values = table[col].to_numpy(dtype=object).copy()
        values[bwd] = values[fwd]
        table[col] = values
    order = np.lexsort((table["ts"].to_numpy(), table["rank"].to_numpy()))
    return table.take(order).reset_index(drop=True)


def _backward_pairs(table: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Positions of the (forward, backward) library occurrences that belong together (see ``_pair_backward``)."""
    by_start = np.argsort(table["ts"].to_numpy(), kind="stable")
    key, _ = opstream.combinations(*(table[c].to_numpy()[by_start] for c in ("rank", "step", "pattern")))
    phase = table["phase"].to_numpy()[by_start]
    library = table["pattern"].to_numpy()[by_start] != "discovered"
    fwd, bwd = by_start[library & (phase == "forward")], by_start[library & (phase == "backward")]
    fwd_key, bwd_key = key[library & (phase == "forward")], key[library & (phase == "backward")]
    fwd_nth, bwd_nth = _nth(fwd_key[::-1])[::-1], _nth(bwd_key)
    width = max(len(fwd), len(bwd)) + 1
    want, have = fwd_key * width + fwd_nth, bwd_key * width + bwd_nth
    order = np.argsort(want, kind="stable")
    at = np.minimum(np.searchsorted(want[order], have), max(len(want) - 1, 0))
    hit = want[order][at] == have if len(want) else np.zeros(len(have), dtype=bool)
    return fwd[order[at[hit]]], bwd[hit]


def _nth(group: np.ndarray) -> np.ndarray:
    """Per position, how many positions before it hold the same group."""
    order = np.argsort(group, kind="stable")
    ordered = group[order]
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]]) if len(group) else np.empty(0, dtype=np.int64)
    nth = np.empty(len(group), dtype=np.int64)
    nth[order] = np.arange(len(group)) - np.repeat(starts, np.diff(np.r_[starts, len(group)]))
    return nth


def rank_steps(trace: TraceData) -> int:
    """Number of (rank, step) pairs with a step marker whose kernels were recorded (``summary.compute_steps``)."""
    return compute_steps(step_table(trace))
