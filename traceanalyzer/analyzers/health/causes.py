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

from traceanalyzer import intervals
from traceanalyzer.analyzers import callpath
from traceanalyzer.analyzers.attribution import is_one_of, kind_rows, linked, locate, name_hits, place_text
from traceanalyzer.analyzers.health.gaps import LARGE_GAP_NS, idle_claims
from traceanalyzer.intervals import Intervals, Packed
from traceanalyzer.memo import remember
from traceanalyzer.schema import BUSY, HOST_WORK, NO_ROW, Kind, positions
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
    op_or_call = ((kind == Kind.CPU_OP.value) | (kind == Kind.RUNTIME.value)).to_numpy()
    rows = np.flatnonzero(op_or_call & ~is_one_of(events["name"], SYNC_CALLS | ALLOCATOR_CALLS))
    out = np.zeros(len(events), dtype=bool)
    if not len(rows):
        return out
    frame = pd.DataFrame(
        {
            "rank": events["rank"].to_numpy()[rows],
            "name": np.asarray(events["name"].array.codes)[rows],
            "dims": np.asarray(events["input_dims"].array.codes)[rows],
            "ts": events["ts"].to_numpy()[rows],
            "dur": events["dur"].to_numpy()[rows],
        }
    )
    median = frame.groupby(["rank", "name"])["dur"].transform("median").to_numpy()
    slow = frame["dur"].to_numpy() >= np.maximum(FIRST_CALL_FACTOR * median, FIRST_CALL_MIN_NS)
    is_op = (kind == Kind.CPU_OP.value).to_numpy()
    new_shape = np.zeros(len(events), dtype=bool)
    ops = frame[is_op[rows]].sort_values("ts", kind="stable")
    new_shape[rows[ops.index[~ops.duplicated(["rank", "name", "dims"])]]] = True
    op_at = positions(events.index, events["op"].to_numpy()[rows])
    new = np.where(is_op[rows], new_shape[rows], np.where(op_at >= 0, new_shape[np.maximum(op_at, 0)], False))
    out[rows[slow & new]] = True
    return out


def _per_parameter_optimizers(trace: TraceData) -> np.ndarray:
    """Per event: an ``optimizer.step()`` range that runs no foreach/fused op (a loop over the parameters)."""
    events = trace.events
    names = events["name"]
    step = (events["kind"] == Kind.ANNOTATION.value).to_numpy() & name_hits(names, OPTIMIZER_STEP)
    if not step.any():
        return step
    vectorized = (events["kind"] == Kind.CPU_OP.value).to_numpy() & name_hits(names, VECTORIZED_OPTIMIZER_OP)
    inside = callpath.walk(trace).innermost(step)[:-1][vectorized]
    step[inside[inside != NO_ROW]] = False
    return step


def _attribute(trace: TraceData) -> tuple[pd.DataFrame, dict[tuple[int, str], Packed]]:
    host = remember(trace, "health.idle_causes.host", lambda: _Host(trace))
    weights: list[pd.DataFrame] = []
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
    rule = np.full(len(a), QUEUED, dtype=object)
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
    """Gaps in time order: the short host-made gaps (up to ``LEAD_IN``) right before a gap a blocking call drained
    are that call's cause (the kernels computing the value it waits for, launched one at a time after the device
    ran dry)."""
    out = rule.copy()
    run: list[int] = []
    for i, cause in enumerate(rule.tolist()):
        if cause == LAUNCH_BOUND:
            run.append(i)
            continue
        if cause in DRAINS:
            out[run[-LEAD_IN:]] = cause
        run = []
    return out


def _rest_causes(rank, gaps, rule, culprit, rests, found, weights) -> None:
    """Each gap's rest (the part no painted call explains) under its gap's cause."""
    a, _ = gaps
    starts = np.concatenate([r[0] for r in rests])
    ends = np.concatenate([r[1] for r in rests])
    gap = np.searchsorted(a, starts, side="right") - 1
    left = np.bincount(gap, weights=ends - starts, minlength=len(a)).astype(np.int64)
    for cause in np.unique(rule[gap]).tolist():
        pieces = rule[gap] == cause
        _add(found, rank, cause, intervals.union(starts[pieces], ends[pieces]))
        hit = (rule == cause) & (culprit != NO_ROW) & (left > 0)
        weights.append(_weights(rank, cause, culprit[hit], left[hit]))


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
            weights.append(_weights(rank, cause, host.rows[rows], share))
        taken = intervals.union(np.r_[taken[0], painted[0]], np.r_[taken[1], painted[1]])
    return intervals.subtract(gaps, taken)


def _rules(host, on, gaps, htod, launch) -> tuple[np.ndarray, np.ndarray]:
    """Per gap: the cause its rest goes to (rule 4) and the row that explains it (NO_ROW if none)."""
    a, b = gaps
    rule = np.full(len(a), UNEXPLAINED, dtype=object)
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
        rule[take], culprit[take] = cause, row[take]
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


def _weights(rank: int, cause: str, rows: np.ndarray, idle: np.ndarray) -> pd.DataFrame:
    return pd.DataFrame({"rank": int(rank), "cause": cause, "row": rows, "idle": idle})


def _table(trace, host, idle, weights) -> pd.DataFrame:
    """One row per rank and cause: idle, gaps, and the place and ops of the rows explaining most of it."""
    rows = []
    explained = stack(weights) if weights else pd.DataFrame(columns=["rank", "cause", "row", "idle"])
    explained = explained[explained["idle"] > 0]
    at = explained["row"].to_numpy(dtype=np.int64)
    places = locate(trace, at)
    explained = explained.assign(
        where=[place_text(*pair) for pair in zip(places["annotation"], places["frame"], strict=True)],
        op=_op_names(trace, at),
    )
    flags = _flags(trace, host)
    for (rank, cause), ivs in sorted(idle.items()):
        mine = explained[(explained["rank"] == rank) & (explained["cause"] == cause)]
        where = mine.groupby("where", sort=False)["idle"].sum().sort_values(ascending=False, kind="stable")
        ops = mine[mine["op"] != ""].groupby("op", sort=False)["idle"].sum().sort_values(ascending=False, kind="stable")
        rows_of = set(mine["row"].tolist())
        rows.append(
            {
                "rank": rank,
                "cause": cause,
                "idle_ns": intervals.length(ivs),
                "gaps": len(ivs[0]),
                "where": str(where.index[0]) if len(where) else "",
                "ops": ", ".join(ops.index[:3]),
                "grad_scaler": bool(rows_of & flags["grad_scaler"]),
                "empty_cache": bool(rows_of & flags["empty_cache"]),
                "optimizer": _optimizer(trace, mine["row"]) if cause == "optimizer_loop" else "",
                "recorded": _recorded(trace, host, rank, ivs),
            }
        )
    return merged_causes([pd.DataFrame(rows, columns=COLUMNS)])


def _recorded(trace: TraceData, host: _Host, rank: int, ivs: Intervals) -> int:
    """How many host events of the rank's launching threads (its step thread and those that launch device work)
    start inside some intervals."""
    mine = host.rank == rank
    launching = np.r_[np.unique(host.thread[mine & host.launch]), _main_thread(host, trace.events, rank, mine)]
    ts = host.ts[mine & np.isin(host.thread, launching)]
    at = np.searchsorted(ivs[0], ts, side="right") - 1
    return int(((at >= 0) & (ts < ivs[1][np.maximum(at, 0)])).sum())


def _op_names(trace: TraceData, rows: np.ndarray) -> np.ndarray:
    """The op a row runs in (its own name for an op, '' for a frame or range)."""
    events = trace.events
    own = events["kind"].to_numpy()[rows] == Kind.CPU_OP.value
    op = np.asarray(linked(events, events["op"].to_numpy()[rows], "name"), dtype=object)
    name = np.asarray(linked(events, rows, "name"), dtype=object)
    return np.where(own, name, op)


def _flags(trace: TraceData, host: _Host) -> dict[str, set[int]]:
    """Rows called from GradScaler, and allocator calls made under ``empty_cache``."""
    events = trace.events
    walk = callpath.walk(trace)
    scaler = walk.innermost(name_hits(events["name"], GRAD_SCALER))[:-1]
    cache_mask = np.zeros(len(events), dtype=bool)
    cache_mask[host.rows[host.empty_cache]] = True
    cache = walk.innermost(cache_mask)[:-1]
    return {
        "grad_scaler": set(np.flatnonzero(scaler != NO_ROW).tolist()),
        "empty_cache": set(np.flatnonzero(cache != NO_ROW).tolist()),
    }


def _optimizer(trace: TraceData, rows: pd.Series) -> str:
    """The optimizer class of ``Optimizer.step#AdamW.step`` ranges ('AdamW')."""
    names = linked(trace.events, rows.to_numpy(dtype=np.int64), "name")
    return next((n.split("#", 1)[1].split(".", 1)[0] for n in names if "#" in n), "")
