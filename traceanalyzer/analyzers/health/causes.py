"""Why the device is idle: every idle interval inside a step, read from the host thread that launches the work
ending it, split into causes (the rules and each cause's saving model: docs/diagnosis.md).

1. The threads: the host thread of the runtime call that launched the device work resuming after the gap, and the
   thread that runs the step (a background thread, a compile worker or the profiler's, never decides); where that
   call is not in the trace, the step's thread alone.
2. Queued: where that call had returned before the device went idle, the work waited on the device side (a stream
   dependency, scheduling latency): the host did not make the device wait (``queued``, no finding).
3. Painted: the parts of the gap the threads spend in calls of a cause, the first cause of ``PAINTED`` first.
4. The rest of a gap goes to one cause by the gap: a blocking call (a sync, ``cudaFree``, a pageable copy) ending
   in it drained the device queue (``host_sync``, ``allocator``, ``pageable_copy``); a host-to-device copy resumes
   it (``input_pipeline``); it is short (under ``LARGE_GAP_NS``: ``launch_bound``); host events of the threads cover
   most of it (``python_work``); else ``unexplained``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from traceanalyzer import calltree, intervals
from traceanalyzer.analyzers import callpath
from traceanalyzer.analyzers.attribution import is_one_of, kind_rows, linked, name_hits, place_text
from traceanalyzer.analyzers.health.gaps import LARGE_GAP_NS, idle_claims
from traceanalyzer.groups import Groups
from traceanalyzer.intervals import Intervals, Packed
from traceanalyzer.memo import remember
from traceanalyzer.schema import BUSY, HOST_WORK, NO_ROW, Kind, category_text, codes_at, positions
from traceanalyzer.tables import stack
from traceanalyzer.tracedata import TraceData
from traceanalyzer.vocabulary import (
    ALLOCATOR_CALLS,
    ALLOCATOR_FRAME,
    COMPILE_FRAME,
    DATA_LOADING,
    GC_FRAME,
    GRAD_SCALER,
    HTOD_COPY,
    LAUNCH_CALLS,
    OPTIMIZER_STEP,
    PAGEABLE_COPY,
    SYNC_CALLS,
    VECTORIZED_OPTIMIZER_OP,
)

PAINTED = (
    "compile",
    "host_sync",
    "allocator",
    "pageable_copy",
    "first_call",
    "python_gc",
    "input_pipeline",
    "optimizer_loop",
)
"""Causes read from the thread's own calls during a gap, in priority order (a call inside a higher one's is the
higher one's)."""

LAUNCH_BOUND, PYTHON_WORK, QUEUED, UNEXPLAINED = "launch_bound", "python_work", "queued", "unexplained"
CAUSES = (*PAINTED, LAUNCH_BOUND, PYTHON_WORK, QUEUED, UNEXPLAINED)
"""Every cause an idle interval can have, in the order a table lists them."""

CODE = {cause: code for code, cause in enumerate(CAUSES)}
"""A gap's rule as a small integer: its cause's position in ``CAUSES``."""

FIRST_CALL_FACTOR = 10
"""A call is a first-call stall when it lasts this many times the median of its name on the rank ..."""
FIRST_CALL_MIN_NS = 200_000
"""... and at least this long (200 µs), and it (or its op) meets an input shape for the first time."""

DRAINS = ("host_sync", "allocator", "pageable_copy")
"""Causes of blocking calls: the device queue runs dry while the host waits in them."""

LEAD_IN = 8
"""How many short host-made gaps right before a drained gap are the blocking call's: the last few kernels before a
sync compute the value it reads (``.isfinite().all().item()``: five elementwise and reduction kernels and a copy)."""

COLUMNS = ["rank", "cause", "idle_ns", "gaps", "where", "ops", "grad_scaler", "empty_cache", "optimizer", "recorded"]
"""``recorded``: the host events the profiler recorded on the rank's launching threads that start inside the cause's
idle (what its own overhead inflates: each costs the host a few µs under the profiler)."""


_Weights = dict[tuple[int, str], list[tuple[np.ndarray, np.ndarray]]]
"""Per rank and cause: the host rows explaining some of its idle, each with the idle it explains (ns), in the order
they were found."""


def idle_causes(trace: TraceData) -> tuple[pd.DataFrame, dict[tuple[int, str], Packed]]:
    """Per rank and cause: the idle inside steps it explains (ns, total), how many gaps, where most of it is (place
    and ops), and its idle intervals packed (once per trace)."""
    return remember(trace, "health.idle_causes", lambda: _attribute(trace))


def merged_causes(tables: list[pd.DataFrame]) -> pd.DataFrame:
    """``idle_causes`` tables of several parts' ranks, by rank and the most idle first."""
    table = stack(tables) if tables else pd.DataFrame(columns=COLUMNS)
    return table.sort_values(["rank", "idle_ns"], ascending=[True, False], kind="stable").reset_index(drop=True)


class _Host:
    """The host rows of a trace with what the rules ask of them (arrays by host row)."""

    def __init__(self, trace: TraceData) -> None:
        events = trace.events
        self.rows = kind_rows(events, HOST_WORK)
        column = {c: events[c].to_numpy()[self.rows] for c in ("ts", "dur", "rank")}
        self.ts, self.end, self.rank = column["ts"], column["ts"] + column["dur"], column["rank"]
        self.thread = _threads(events, self.rows)
        kind = events["kind"]
        runtime = (kind == Kind.RUNTIME.value).to_numpy()
        python = (kind == Kind.PYTHON.value).to_numpy()
        names = events["name"]
        sync = runtime & is_one_of(names, SYNC_CALLS)
        allocator_call = runtime & is_one_of(names, ALLOCATOR_CALLS)
        empty_cache = python & name_hits(names, ALLOCATOR_FRAME)
        pageable = _pageable_copy_calls(events)
        masks = {
            "compile": name_hits(names, COMPILE_FRAME),
            "host_sync": sync,
            "allocator": allocator_call | empty_cache,
            "pageable_copy": pageable,
            "first_call": _first_calls(events),
            "python_gc": python & name_hits(names, GC_FRAME),
            "input_pipeline": name_hits(names, DATA_LOADING),
            "optimizer_loop": _per_parameter_optimizers(trace),
        }
        self.masks = {cause: mask[self.rows] for cause, mask in masks.items()}
        self.blocking = {
            "host_sync": sync[self.rows],
            "allocator": allocator_call[self.rows],
            "pageable_copy": pageable[self.rows],
        }
        self.empty_cache = empty_cache[self.rows]
        self.launch = (runtime & is_one_of(names, LAUNCH_CALLS))[self.rows]


def _threads(events: pd.DataFrame, rows: np.ndarray) -> np.ndarray:
    """Per event of ``rows`` (positions): one integer per (process, thread) lane (computed at those rows only: a
    lane per event of the whole table is three int64 columns, 8 MiB of transient on big)."""
    tid_codes = np.asarray(events["tid"].array.codes)
    pid = np.asarray(events["pid"].array.codes)[rows].astype(np.int64)
    tid = tid_codes[rows].astype(np.int64)
    return (pid + 1) * (int(tid_codes.max(initial=0)) + 2) + tid + 1


def _pageable_copy_calls(events: pd.DataFrame) -> np.ndarray:
    """Per event: a runtime call that launched a copy to or from pageable host memory (it blocks the host)."""
    copies = kind_rows(events, [Kind.MEMCPY.value])
    copies = copies[name_hits(events["name"], PAGEABLE_COPY)[copies]]
    calls = positions(events.index, events["launch"].to_numpy()[copies])
    out = np.zeros(len(events), dtype=bool)
    out[calls[calls >= 0]] = True
    return out


def _first_calls(events: pd.DataFrame) -> np.ndarray:
    """Per event: a CPU op or runtime call that lasts ``FIRST_CALL_FACTOR`` × its name's median on the rank (and at
    least ``FIRST_CALL_MIN_NS``) where it, or the op it runs in, meets its input shape for the first time."""
    kind = events["kind"]
    is_op = (kind == Kind.CPU_OP.value).to_numpy()
    rows = np.flatnonzero(
        (is_op | (kind == Kind.RUNTIME.value).to_numpy()) & ~is_one_of(events["name"], SYNC_CALLS | ALLOCATOR_CALLS)
    )
    width = len(events["name"].array.categories) + 1
    by_name = events["rank"].to_numpy()[rows].astype(np.int64) * width + events["name"].array.codes[rows] + 1
    dur = events["dur"].to_numpy()[rows]
    long = np.flatnonzero(dur >= FIRST_CALL_MIN_NS)  # the calls that can be slow (positions in ``rows``)
    judged = np.where(is_op[rows[long]], rows[long], positions(events.index, events["op"].to_numpy()[rows[long]]))
    long = long[_first_shapes(events, rows[is_op[rows]], by_name[is_op[rows]], judged)]
    out = np.zeros(len(events), dtype=bool)
    out[rows[long[_slow(by_name, dur, long)]]] = True
    return out


def _first_shapes(events: pd.DataFrame, ops: np.ndarray, by_name: np.ndarray, judged: np.ndarray) -> np.ndarray:
    """Per judged row (a position, or NO_ROW): is it one of ``ops`` (their rank and name as one key ``by_name``), and
    the first of them in time to meet its input shape?"""
    shape = np.full(len(events) + 1, -1, dtype=np.int64)  # per op: its (rank, name, input shape); the last: NO_ROW's
    shape[ops] = by_name * (len(events["input_dims"].array.categories) + 1) + events["input_dims"].array.codes[ops] + 1
    among = ops[np.isin(shape[ops], shape[judged[judged >= 0]])]
    among = among[np.argsort(events["ts"].to_numpy()[among], kind="stable")]
    first = np.zeros(len(events) + 1, dtype=bool)
    first[among[np.unique(shape[among], return_index=True)[1]]] = True
    return first[judged]


def _slow(by_name: np.ndarray, dur: np.ndarray, calls: np.ndarray) -> np.ndarray:
    """Per call of ``calls`` (positions; rank and name as one key ``by_name``): does it last ``FIRST_CALL_FACTOR`` ×
    its key's median and at least ``FIRST_CALL_MIN_NS``? (Medians taken only of those calls' keys.)"""
    need = np.flatnonzero(np.isin(by_name, by_name[calls]))
    groups = Groups([by_name[need]])
    median = np.empty(len(dur), dtype=np.float64)
    median[need[groups.order]] = np.repeat(groups.median(dur[need]), groups.sizes)
    return dur[calls] >= np.maximum(FIRST_CALL_FACTOR * median[calls], FIRST_CALL_MIN_NS)


def _per_parameter_optimizers(trace: TraceData) -> np.ndarray:
    """Per event: an ``optimizer.step()`` range that runs no foreach/fused op (a loop over the parameters)."""
    events = trace.events
    names = events["name"]
    step = (events["kind"] == Kind.ANNOTATION.value).to_numpy() & name_hits(names, OPTIMIZER_STEP)
    if not step.any():
        return step
    vectorized = (events["kind"] == Kind.CPU_OP.value).to_numpy() & name_hits(names, VECTORIZED_OPTIMIZER_OP)
    inside = calltree.nearest(events["parent"].to_numpy(), np.flatnonzero(vectorized), step)
    step[inside[inside != NO_ROW]] = False
    return step


def _attribute(trace: TraceData) -> tuple[pd.DataFrame, dict[tuple[int, str], Packed]]:
    host = remember(trace, "health.idle_causes.host", lambda: _Host(trace))
    weights: _Weights = {}
    found: dict[tuple[int, str], list[Intervals]] = {}
    for rank, gaps in idle_claims(trace).items():
        if len(gaps[0]):
            _rank_causes(trace, host, rank, gaps, found, weights)
    idle = {key: intervals.union(np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]))
            for key, parts in found.items()}  # fmt: skip
    idle = {key: ivs for key, ivs in idle.items() if len(ivs[0])}
    table = _table(trace, host, idle, weights)
    return table, {key: intervals.pack(*ivs) for key, ivs in idle.items()}


def _rank_causes(trace, host, rank, gaps, found, weights) -> None:
    """Split one rank's idle intervals into causes (into ``found``), with the rows that explain them (``weights``)."""
    events = trace.events
    a, b = gaps
    work = kind_rows(events, BUSY)
    work = work[events["rank"].to_numpy()[work] == rank]
    if not len(work):  # no device work: nothing launched, nothing to explain (the rank is not judged idle)
        return
    ts = events["ts"].to_numpy()[work]
    order = np.argsort(ts, kind="stable")
    work, ts = work[order], ts[order]
    at = np.minimum(np.searchsorted(ts, b), len(ts) - 1)
    resumes = np.where(ts[at] == b, work[at], NO_ROW)
    launch = np.where(
        resumes != NO_ROW, positions(events.index, events["launch"].to_numpy()[np.maximum(resumes, 0)]), -1
    )
    mine = host.rank == rank
    main = _main_thread(host, events, rank, mine)
    launcher = np.maximum(launch, 0)
    thread = np.where(launch >= 0, _threads(events, launcher), main)
    launch_end = np.where(
        launch >= 0,
        events["ts"].to_numpy()[launcher] + events["dur"].to_numpy()[launcher],
        np.iinfo(np.int64).max,
    )
    queued = launch_end <= a
    _add(found, rank, QUEUED, (a[queued], b[queued]))
    htod = np.zeros(len(a), dtype=bool)
    copies = resumes != NO_ROW
    htod[copies] = (events["kind"].to_numpy()[resumes[copies]] == Kind.MEMCPY.value) & name_hits(
        events["name"], HTOD_COPY
    )[resumes[copies]]
    rule = np.full(len(a), CODE[QUEUED], dtype=np.int8)
    culprit = np.full(len(a), NO_ROW, dtype=np.int64)
    rests = []
    for th in np.unique(thread[~queued]).tolist():
        gi = np.flatnonzero((thread == th) & ~queued)
        on = np.flatnonzero(mine & ((host.thread == th) | (host.thread == main)))
        mine_gaps = (a[gi], b[gi])
        rest = _painted(host, on, mine_gaps, rank, found, weights)
        rule[gi], culprit[gi] = _rules(host, on, mine_gaps, htod[gi], np.where(launch[gi] >= 0, launch[gi], NO_ROW))
        rests.append(rest)
    rule = _lead_ins(rule)
    if rests:
        _rest_causes(rank, gaps, rule, culprit, rests, found, weights)


def _lead_ins(rule: np.ndarray) -> np.ndarray:
    """Gaps in time order (their ``CODE``): the short host-made gaps (up to ``LEAD_IN``) right before a gap a
    blocking call drained are that call's cause (the kernels computing the value it waits for, launched one at a
    time after the device ran dry)."""
    short = rule == CODE[LAUNCH_BOUND]
    at = np.arange(len(rule))
    after = np.minimum.accumulate(np.where(short, len(rule), at)[::-1])[::-1]  # the first other gap from here on
    ends = np.r_[rule, CODE[QUEUED]][after]  # the rule of the gap that ends each run of short ones
    drained = np.isin(ends, [CODE[c] for c in DRAINS])
    return np.where(short & drained & (after - at <= LEAD_IN), ends, rule).astype(rule.dtype)


def _rest_causes(rank, gaps, rule, culprit, rests, found, weights) -> None:
    """Each gap's rest (the part no painted call explains) under its gap's cause."""
    a, _ = gaps
    starts = np.concatenate([r[0] for r in rests])
    ends = np.concatenate([r[1] for r in rests])
    gap = np.searchsorted(a, starts, side="right") - 1
    left = np.bincount(gap, weights=ends - starts, minlength=len(a)).astype(np.int64)
    for code in sorted(np.unique(rule[gap]).tolist(), key=CAUSES.__getitem__):  # in name order, as ``found`` keeps them
        pieces = rule[gap] == code
        _add(found, rank, CAUSES[code], intervals.union(starts[pieces], ends[pieces]))
        hit = (rule == code) & (culprit != NO_ROW) & (left > 0)
        _weigh(weights, rank, CAUSES[code], culprit[hit], left[hit])


def _main_thread(host: _Host, events: pd.DataFrame, rank: int, mine: np.ndarray) -> int:
    """The thread that runs a rank's steps (its step markers'), else the one with the most kernel launches."""
    steps = kind_rows(events, [Kind.STEP.value])
    steps = steps[events["rank"].to_numpy()[steps] == rank]
    if len(steps):
        return int(_threads(events, steps[:1])[0])
    launches = host.thread[mine & host.launch]
    values, counts = np.unique(launches if len(launches) else host.thread[mine], return_counts=True)
    return int(values[np.argmax(counts)]) if len(values) else -1


def _painted(host, on, gaps, rank, found, weights) -> Intervals:
    """The painted causes of the gaps one thread resumes (into ``found``); the rest of the gaps."""
    taken = intervals.EMPTY
    for cause in PAINTED:
        rows = on[host.masks[cause][on]]
        if not len(rows):
            continue
        painted = intervals.union(host.ts[rows], host.end[rows])
        piece = intervals.intersect(gaps, intervals.subtract(painted, taken))
        if len(piece[0]):
            _add(found, rank, cause, piece)
            share = intervals.covered_within(piece, host.ts[rows], host.end[rows])
            _weigh(weights, rank, cause, host.rows[rows], share)
        taken = intervals.union(np.r_[taken[0], painted[0]], np.r_[taken[1], painted[1]])
    return intervals.subtract(gaps, taken)


def _rules(host, on, gaps, htod, launch) -> tuple[np.ndarray, np.ndarray]:
    """Per gap: the cause its rest goes to (rule 4, its ``CODE``) and the row that explains it (NO_ROW if none)."""
    a, b = gaps
    rule = np.full(len(a), CODE[UNEXPLAINED], dtype=np.int8)
    culprit = np.full(len(a), NO_ROW, dtype=np.int64)
    covered = intervals.covered_within(intervals.union(host.ts[on], host.end[on]), a, b)
    decided = np.zeros(len(a), dtype=bool)
    for cause, hit, row in (
        *((c, *_drained(host, on[host.blocking[c][on]], a, b)) for c in DRAINS),
        ("input_pipeline", htod, launch),
        (LAUNCH_BOUND, b - a < LARGE_GAP_NS, launch),
        (PYTHON_WORK, covered * 2 >= b - a, launch),
    ):
        take = hit & ~decided
        rule[take], culprit[take] = CODE[cause], row[take]
        decided |= take
    return rule, culprit


def _drained(host, rows, a, b) -> tuple[np.ndarray, np.ndarray]:
    """Per gap: does a blocking call end in it (the device queue drained while the host waited), and which."""
    if not len(rows):
        return np.zeros(len(a), dtype=bool), np.full(len(a), NO_ROW, dtype=np.int64)
    ends = host.end[rows]
    order = np.argsort(ends, kind="stable")
    rows, ends = rows[order], ends[order]
    first = np.searchsorted(ends, a, side="left")
    hit = first < np.searchsorted(ends, b, side="right")
    return hit, np.where(hit, host.rows[rows[np.minimum(first, len(rows) - 1)]], NO_ROW)


def _add(found: dict, rank: int, cause: str, piece: Intervals) -> None:
    if len(piece[0]):
        found.setdefault((int(rank), cause), []).append(piece)


def _weigh(weights: _Weights, rank: int, cause: str, rows: np.ndarray, idle: np.ndarray) -> None:
    """Record the host rows explaining some idle of a rank's cause, with the idle each explains (ns)."""
    weights.setdefault((int(rank), cause), []).append((np.asarray(rows, dtype=np.int64), np.asarray(idle)))


def _table(trace, host, idle, weights: _Weights) -> pd.DataFrame:
    """One row per rank and cause: idle, gaps, and the place and ops of the rows explaining most of it."""
    rows = []
    places = _Places(trace)
    flags = _Flags(trace, host)
    launching: dict[int, np.ndarray] = {}
    for (rank, cause), ivs in sorted(idle.items()):
        pieces = weights.get((rank, cause), [])
        at = np.concatenate([p[0] for p in pieces]) if pieces else np.empty(0, dtype=np.int64)
        weight = np.concatenate([p[1] for p in pieces]) if pieces else np.empty(0, dtype=np.int64)
        at, weight = at[weight > 0], weight[weight > 0]
        if rank not in launching:
            launching[rank] = _launching_ts(trace, host, rank)
        rows.append(
            {
                "rank": rank,
                "cause": cause,
                "idle_ns": intervals.length(ivs),
                "gaps": len(ivs[0]),
                "where": places.most(at, weight),
                "ops": ", ".join(places.ops(at, weight)),
                "grad_scaler": flags.under(at, "grad_scaler"),
                "empty_cache": flags.under(at, "empty_cache"),
                "optimizer": _optimizer(trace, at) if cause == "optimizer_loop" else "",
                "recorded": _recorded(launching[rank], ivs),
            }
        )
    return merged_causes([pd.DataFrame(rows, columns=COLUMNS)])


class _Places:
    """Where host rows are (``place_text`` of their innermost annotation and user frame) and the op they run in,
    ranked by the idle they explain."""

    def __init__(self, trace: TraceData) -> None:
        events = trace.events
        self.walk = callpath.walk(trace)
        self.width = len(self.walk.names) + 1
        self.events = events
        self.op_text = category_text(events["name"])
        self.is_op = (events["kind"] == Kind.CPU_OP.value).to_numpy()

    def most(self, rows: np.ndarray, idle: np.ndarray) -> str:
        """The place of the rows explaining the most idle (the first seen of a tie; '' without rows)."""
        if not len(rows):
            return ""
        names, width = self.walk.names, self.width
        pairs = (self.walk.annotations.innermost(rows) + 1) * width + self.walk.user.innermost(rows) + 1
        distinct, at = np.unique(pairs, return_inverse=True)
        texts = [place_text(names[p // width - 1], names[p % width - 1]) for p in distinct.tolist()]
        codes, uniques = pd.factorize(np.array(texts, dtype=object))
        place = codes[at.reshape(-1)]  # per row: the code of its place's text
        groups = Groups([place])
        return str(uniques[place[groups.first[int(np.argmax(groups.sum(idle)))]]])

    def ops(self, rows: np.ndarray, idle: np.ndarray) -> list[str]:
        """The (at most 3) ops the rows run in that explain the most idle, the most first (a row's own name for an
        op, none for a frame or range)."""
        events = self.events
        code = np.where(
            self.is_op[rows], codes_at(events["name"], rows), codes_at(events["name"], events["op"].to_numpy()[rows])
        )
        text = self.op_text[code]
        keep = text != ""
        if not keep.any():
            return []
        groups = Groups([code[keep]])
        order = np.argsort(-groups.sum(idle[keep]), kind="stable")[:3]
        return text[keep][groups.first[order]].tolist()


def _launching_ts(trace: TraceData, host: _Host, rank: int) -> np.ndarray:
    """The start of each host event of a rank's launching threads (its step thread and those that launch device
    work)."""
    mine = host.rank == rank
    launching = np.r_[np.unique(host.thread[mine & host.launch]), _main_thread(host, trace.events, rank, mine)]
    return host.ts[mine & np.isin(host.thread, launching)]


def _recorded(ts: np.ndarray, ivs: Intervals) -> int:
    """How many of some host events' starts lie inside some intervals."""
    at = np.searchsorted(ivs[0], ts, side="right") - 1
    return int(((at >= 0) & (ts < ivs[1][np.maximum(at, 0)])).sum())


class _Flags:
    """Two marks a cause's rows can carry, each held by a row when it or one of its ancestors is marked:
    ``grad_scaler`` (GradScaler's calls) and ``empty_cache`` (the allocator calls under ``empty_cache``)."""

    def __init__(self, trace: TraceData, host: _Host) -> None:
        events = trace.events
        self.parent = events["parent"].to_numpy()
        cache = np.zeros(len(events), dtype=bool)
        cache[host.rows[host.empty_cache]] = True
        self.masks = {"grad_scaler": name_hits(events["name"], GRAD_SCALER), "empty_cache": cache}

    def under(self, rows: np.ndarray, flag: str) -> bool:
        """Is one of the rows, or one of their ancestors, a row of the flag?"""
        mask = self.masks[flag]
        return bool(mask.any() and (calltree.nearest(self.parent, rows, mask) != NO_ROW).any())


def _optimizer(trace: TraceData, rows: np.ndarray) -> str:
    """The optimizer class of ``Optimizer.step#AdamW.step`` ranges ('AdamW')."""
    names = linked(trace.events, rows, "name")
    return next((n.split("#", 1)[1].split(".", 1)[0] for n in names if "#" in n), "")
