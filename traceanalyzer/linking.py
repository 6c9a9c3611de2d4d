"""Fill the link columns of one rank's event table: host call tree, launches, causing ops, steps.

Parsers fill the raw columns; this module derives, the same way for every platform:
``parent``/``depth`` (nesting on each host thread), ``launch`` (device work → runtime call, by
correlation id), ``op``/``top_op`` (innermost and top-level CPU op), and ``step``.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from traceanalyzer.parsers import columns
from traceanalyzer.schema import HOST, LINKABLE_DEVICE, NO_ROW, Kind

_STEP_NUMBER = re.compile(r"(\d+)\s*$")


def link(events: pd.DataFrame, memory: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Fill the link columns of one rank's events, and ``op``/``step`` of its memory events."""
    events = events.reset_index(drop=True)
    tree = HostTree(events)
    if "caller" in events:
        tree.hand_over(events["caller"].to_numpy())
    launch, before_window = _launches(events)
    has_launch = launch != NO_ROW
    op = tree.op.copy()
    top = tree.top_op.copy()
    op[has_launch] = tree.op[launch[has_launch]]
    top[has_launch] = tree.top_op[launch[has_launch]]
    steps = step_markers(events)
    step = _steps(events, launch, before_window, steps)
    linked = {"parent": tree.parent, "depth": tree.depth, "launch": launch, "op": op, "top_op": top, "step": step}
    return _with_columns(events, linked), _link_memory(memory, events, tree, steps)


def _with_columns(frame: pd.DataFrame, columns: dict[str, np.ndarray]) -> pd.DataFrame:
    """``frame`` with ``columns`` set (replaced in place, or added after the others), the arrays taken without a copy
    (``frame[name] = array`` copies each: big, 0.02 s and 30 MB of pages faulted in)."""
    kept = {name: frame[name] for name in frame.columns}
    return pd.DataFrame(kept | columns, index=frame.index, copy=False)


def _link_memory(memory: pd.DataFrame, events: pd.DataFrame, tree: HostTree, steps: pd.DataFrame) -> pd.DataFrame:
    memory = memory.reset_index(drop=True)
    if not len(memory):
        return _with_columns(memory, {"op": np.empty(0, dtype=np.int64), "step": np.empty(0, dtype=np.int32)})
    ts = memory["ts"].to_numpy()
    host = tree.enclosing(lane_code_of(events, memory["pid"], memory["tid"]), ts)
    op = np.full(len(memory), NO_ROW, dtype=np.int64)
    ok = host != NO_ROW
    op[ok] = tree.op[host[ok]]
    given = memory["op"].to_numpy() if "op" in memory else op  # a parser that names the op (Ascend operator_memory)
    return _with_columns(memory, {"op": np.where(given != NO_ROW, given, op), "step": assign_steps(ts, steps)})


class HostTree:
    """Nesting of host events per thread lane, and each event's innermost/top-level CPU op."""

    def __init__(self, events: pd.DataFrame) -> None:
        n = len(events)
        self.parent = np.full(n, NO_ROW, dtype=np.int64)
        self.depth = np.zeros(n, dtype=np.int32)
        self.op = np.full(n, NO_ROW, dtype=np.int64)
        self.top_op = np.full(n, NO_ROW, dtype=np.int64)
        host = events["kind"].isin(HOST).to_numpy()
        self.rows = np.flatnonzero(host)
        ts = events["ts"].to_numpy()[self.rows]
        end = ts + events["dur"].to_numpy()[self.rows]
        lane = _lane_codes(events, self.rows)
        order = _by_lane_and_start(lane, ts, end)
        self.rows, self.ts, self.end, self.lane = self.rows[order], ts[order], end[order], lane[order]
        is_op = (events["kind"] == Kind.CPU_OP.value).to_numpy()[self.rows]
        self.position = np.full(n, NO_ROW, dtype=np.int64)
        self.position[self.rows] = np.arange(len(self.rows))
        depth, up, op, top, self.stop = _walk(self.ts, self.end, self.lane, is_op)
        self.depth[self.rows] = depth
        row_of = np.append(self.rows, NO_ROW)  # position -1 (none) takes the last entry
        for into, position in ((self.parent, up), (self.op, op), (self.top_op, top)):
            into[self.rows] = row_of[position]

    def hand_over(self, caller: np.ndarray) -> None:
        """Events inside a called event (one with a ``caller`` row) take the caller's op and top_op, unless their own
        thread has an op inside the called event (a torch_npu task-queue thread runs what the op's Enqueue queued)."""
        called = self.innermost(np.flatnonzero(caller != NO_ROW))
        rows = np.flatnonzero(called != NO_ROW)
        src = caller[called[rows]]
        own = self.op[rows]
        inside = (own != NO_ROW) & (self.depth[np.maximum(own, 0)] >= self.depth[called[rows]])
        self.op[rows] = np.where(inside, own, self.op[src])
        self.top_op[rows] = np.where(self.top_op[src] != NO_ROW, self.top_op[src], self.top_op[rows])

    def innermost(self, heads: np.ndarray) -> np.ndarray:
        """Per event, the innermost of the ``heads`` rows that it is, or is nested in (NO_ROW if none)."""
        out = np.full(len(self.parent), NO_ROW, dtype=np.int64)
        heads = heads[self.position[heads] != NO_ROW]
        start = self.position[heads]
        length = self.stop[start] - start
        for level in np.unique(self.depth[heads]):  # outer levels first; subtrees of one level are disjoint
            mine = self.depth[heads] == level
            n = length[mine]
            offset = np.repeat(start[mine] - (np.cumsum(n) - n), n)
            out[self.rows[offset + np.arange(n.sum())]] = np.repeat(heads[mine], n)
        return out

    def enclosing(self, lane: np.ndarray, ts: np.ndarray) -> np.ndarray:
        """Row of the deepest host event on ``lane`` that contains each ``ts`` (NO_ROW if none)."""
        last = np.full(len(ts), NO_ROW, dtype=np.int64)
        for code in np.unique(lane):
            mine = np.flatnonzero(lane == code)
            a, b = np.searchsorted(self.lane, [code, code + 1], side="left")
            j = np.searchsorted(self.ts[a:b], ts[mine], side="right") - 1
            ok = j >= 0
            last[mine[ok]] = self.rows[a + j[ok]]
        end_of = np.zeros(len(self.parent), dtype=np.int64)
        end_of[self.rows] = self.end
        climbing = np.flatnonzero(last != NO_ROW)
        while len(climbing):
            climbing = climbing[end_of[last[climbing]] <= ts[climbing]]
            last[climbing] = self.parent[last[climbing]]
            climbing = climbing[last[climbing] != NO_ROW]
        return last


def _by_lane_and_start(lane: np.ndarray, ts: np.ndarray, end: np.ndarray) -> np.ndarray:
    """The stable order by (lane, start, -end): one sort of a key of lane and start where it fits in int64 and no two
    events of a lane start together (big: 12 -> 1 ms), else a sort by the three."""
    if len(ts):
        low = int(ts.min())
        span = int(ts.max()) - low + 1
        if max(-int(lane.min()), int(lane.max()) + 1) * span < 2**62:
            key = ts - low
            key += lane * span
            order = np.argsort(key, kind="stable")
            ordered = key[order]
            if (ordered[1:] != ordered[:-1]).all():
                return order
    return np.lexsort((-end, ts, lane))


def _walk(ts: np.ndarray, end: np.ndarray, lane: np.ndarray, is_op: np.ndarray) -> tuple[np.ndarray, ...]:
    """The stack walk over host events sorted by (lane, start, -end): per position its depth, parent, innermost and
    top-level CPU op (positions, -1 if none) and the position that pops it. Native in one pass (parsers/_scan.c,
    0.1 s -> 0.01 s on big's 320k host events), else vectorised: the same positions."""
    native = columns.native()
    if native is None:
        stop = _pop_positions(ts, end, lane)
        depth, up, by_depth = _depth_and_parent(stop)
        op, top = _propagate_ops(depth, up, by_depth, is_op)
        return depth, up, op, top, stop
    n = len(ts)
    depth = np.empty(n, dtype=np.int32)
    up, op, top, stop = (np.empty(n, dtype=np.int64) for _ in range(4))
    as_c = [np.ascontiguousarray(a, dtype=np.int64) for a in (ts, end, lane)]
    native.walk(*as_c, np.ascontiguousarray(is_op, dtype=np.uint8), depth, up, op, top, stop)
    return depth, up, op, top, stop


def _depth_and_parent(stop: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Depth, parent position and the order by (depth, position) of events sorted by (lane, start, -end), exactly
    as a stack walk gives them.

    The walk (pop the innermost open event while this start is at or after its end, then push) pops each event at
    a known position ``stop`` (``_pop_positions``); depth = earlier events not yet popped, parent = the last earlier
    event one level up.
    """
    n = len(stop)
    pos = np.arange(n, dtype=np.int64)
    popped = np.cumsum(np.bincount(stop, minlength=n + 1))[:n]
    depth = pos - popped
    key = depth * n + pos
    order = np.argsort(key, kind="stable")
    j = np.searchsorted(key[order], key - n, side="left") - 1
    up = np.where(depth > 0, order[np.maximum(j, 0)], -1)
    return depth.astype(np.int32), up, order


def _pop_positions(ts: np.ndarray, end: np.ndarray, lane: np.ndarray) -> np.ndarray:
    """Per event, the position whose start pops it: the first later start at or after the largest end of the event
    and those pushed above it (a child that outlives its parent keeps the parent open); the lane's end if none.

    Found as a fixed point (reach = the largest reach within its range), re-examining only events whose reach grew."""
    bounds = np.flatnonzero(np.r_[True, lane[1:] != lane[:-1], True])
    reach = np.r_[end, np.iinfo(np.int64).min]  # a sentinel, so a range may stop at the last lane's end
    stop = np.empty(len(ts), dtype=np.int64)
    todo = np.arange(len(ts), dtype=np.int64)
    while len(todo):
        cuts = np.searchsorted(todo, bounds)
        spans = zip(bounds[:-1].tolist(), bounds[1:].tolist(), cuts[:-1].tolist(), cuts[1:].tolist(), strict=True)
        for a, b, lo, hi in spans:
            stop[todo[lo:hi]] = a + np.searchsorted(ts[a:b], reach[todo[lo:hi]], side="left")
        stop[todo] = np.maximum(stop[todo], todo + 1)
        pairs = np.empty(2 * len(todo), dtype=np.int64)
        pairs[0::2] = todo
        pairs[1::2] = stop[todo]
        further = np.maximum.reduceat(reach, pairs)[0::2]
        grew = further > reach[todo]
        reach[todo] = further
        todo = todo[grew]
    return stop


def _propagate_ops(depth: np.ndarray, up: np.ndarray, by_depth: np.ndarray, is_op: np.ndarray) -> tuple:
    """Innermost and top-level CPU op positions of each sorted event (-1 if none), one depth level at a time."""
    own = np.where(is_op, np.arange(len(is_op)), -1)
    op = own.copy()
    top = own.copy()
    cuts = np.searchsorted(depth[by_depth], np.arange(1, int(depth.max(initial=0)) + 1), side="left")
    for level in np.split(by_depth, cuts)[1:]:
        parent = up[level]
        op[level] = np.where(is_op[level], own[level], op[parent])
        top[level] = np.where(top[parent] >= 0, top[parent], own[level])
    return op, top


def _lane_codes(events: pd.DataFrame, rows: np.ndarray) -> np.ndarray:
    """One integer per (pid, tid) host lane, for the given rows."""
    tid_codes = events["tid"].cat.codes.to_numpy()
    pid = events["pid"].cat.codes.to_numpy()[rows].astype(np.int64)
    tid = tid_codes[rows].astype(np.int64)
    return pid * (int(tid_codes.max()) + 1 if len(tid_codes) else 1) + tid


def lane_code_of(events: pd.DataFrame, pid: pd.Series, tid: pd.Series) -> np.ndarray:
    """Lane codes (as in the event table) of other rows' pid/tid strings; -1 where unknown."""
    p = _codes_in(events["pid"].cat.categories, pd.Series(pid))
    t = _codes_in(events["tid"].cat.categories, pd.Series(tid))
    return np.where((p < 0) | (t < 0), -1, p * len(events["tid"].cat.categories) + t)


def _codes_in(categories: pd.Index, values: pd.Series) -> np.ndarray:
    """Positions in ``categories`` of the values as text, -1 where absent; a Categorical's looked up once per
    category (big's 64k memory rows: 17 -> 2 ms)."""
    if not isinstance(values.dtype, pd.CategoricalDtype):
        return pd.Index(categories).get_indexer(values.astype(str)).astype(np.int64)
    texts = [*values.cat.categories.astype(str), "nan"]  # a missing value's text, as astype(str) writes it
    return pd.Index(categories).get_indexer(texts).astype(np.int64)[values.cat.codes.to_numpy()]


def _launches(events: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """For device rows, the row of the runtime call with the same correlation id; and the device rows launched
    before the recorded window (no recorded launch, and a correlation id older than every recorded runtime call's)."""
    out = np.full(len(events), NO_ROW, dtype=np.int64)
    before = np.zeros(len(events), dtype=bool)
    corr = events["correlation"].to_numpy()
    kind = events["kind"]
    has_id = corr != NO_ROW
    runtime = np.flatnonzero((kind == Kind.RUNTIME.value).to_numpy() & has_id)
    device = np.flatnonzero(kind.isin(LINKABLE_DEVICE).to_numpy() & has_id)
    if not len(runtime) or not len(device):
        return out, before
    order = np.argsort(corr[runtime], kind="stable")  # equal ids: the first runtime call comes first
    ids = corr[runtime][order]
    j = np.minimum(np.searchsorted(ids, corr[device], side="left"), len(ids) - 1)
    ok = ids[j] == corr[device]
    out[device[ok]] = runtime[order[j[ok]]]
    before[device[~ok]] = corr[device[~ok]] < ids[0]
    return out, before


def step_markers(events: pd.DataFrame) -> pd.DataFrame:
    """Step markers of one rank: step number, start and end (ns), sorted by start."""
    steps = events.loc[events["kind"] == Kind.STEP.value, ["name", "ts", "dur"]]
    number = steps["name"].astype(str).str.extract(_STEP_NUMBER)[0]
    table = pd.DataFrame(
        {
            "step": pd.to_numeric(number, errors="coerce").fillna(-1).astype(np.int32).to_numpy(),
            "start": steps["ts"].to_numpy(),
            "end": (steps["ts"] + steps["dur"]).to_numpy(),
        }
    )
    return table.sort_values("start", kind="stable").reset_index(drop=True)


def assign_steps(ts: np.ndarray, steps: pd.DataFrame) -> np.ndarray:
    """Step number of each timestamp, NO_ROW outside every step."""
    if not len(steps):
        return np.full(len(ts), NO_ROW, dtype=np.int32)
    starts = steps["start"].to_numpy()
    i = np.searchsorted(starts, ts, side="right") - 1
    inside = (i >= 0) & (ts < steps["end"].to_numpy()[np.clip(i, 0, None)])
    return np.where(inside, steps["step"].to_numpy()[np.clip(i, 0, None)], NO_ROW).astype(np.int32)


def _steps(events: pd.DataFrame, launch: np.ndarray, before: np.ndarray, steps: pd.DataFrame) -> np.ndarray:
    """Host events by their own start; device work by the start of the call that launched it, and none for device
    work launched before the recorded window (``before``: it belongs to a step the profiler did not record)."""
    ts = events["ts"].to_numpy().copy()
    has = launch != NO_ROW
    ts[has] = ts[launch[has]]
    step = assign_steps(ts, steps)
    step[before] = NO_ROW
    return step
