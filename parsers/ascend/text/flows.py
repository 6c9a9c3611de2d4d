"""The trace's flow events → links between rows: HostToDevice flows → ``correlation``, task-queue flows → ``caller``."""

from __future__ import annotations

import numpy as np
import pandas as pd
from traceanalyzer.parsers.ascend import common as c
from traceanalyzer.parsers.ascend.text.trace_json import FLOW_CAT, FLOW_PHASES, FLOW_START, QUEUE_FLOW_CAT, Events
from traceanalyzer.parsers.columns import ABSENT

from traceanalyzer.schema import NO_ROW


def bind_flows(frame: pd.DataFrame, src: np.ndarray, ev: Events) -> None:
    """Rows a HostToDevice flow starts or ends on (or inside) take its id; older traces' connection ids don't pair."""
    flows = np.flatnonzero(ev.among("ph", FLOW_PHASES) & ev.among("cat", {FLOW_CAT}))
    ids = np.array([_flow_id(v) for v in ev.values["id"]], dtype=np.int64)[ev.codes["id"][flows]]
    found = slices_at(frame, ev.lane_keys(src), ev.lane_keys(flows), _times(ev, flows))
    ok = (found != NO_ROW) & (ids != NO_ROW)
    corr = frame["correlation"].to_numpy().copy()
    assign_last(corr, found[ok], ids[ok])
    frame["correlation"] = corr


def _flow_id(text: str) -> int:
    value = c.int_or_none(text)
    return value if 0 <= value < 2**63 else NO_ROW


def _times(ev: Events, at: np.ndarray) -> np.ndarray:
    ts = ev.numbers["ts"][at]
    return np.where(ts == ABSENT, NO_ROW, ts)


def assign_last(target: np.ndarray, at: np.ndarray, values: np.ndarray) -> None:
    """``target[at] = values`` where, of repeated positions, the last value counts."""
    last = len(at) - 1 - np.unique(at[::-1], return_index=True)[1]
    target[at[last]] = values[last]


def callers(frame: pd.DataFrame, ev: Events) -> np.ndarray:
    """Per row, the row a task-queue flow starts on when the flow ends on it (``Dequeue@op`` ← its ``Enqueue``)."""
    out = np.full(len(frame), NO_ROW, dtype=np.int64)
    pairs = _flow_pairs(ev, np.flatnonzero(ev.among("ph", FLOW_PHASES) & ev.among("cat", {QUEUE_FLOW_CAT})))
    if not len(pairs):
        return out
    rows = row_lanes(frame)
    src, dst = (slices_at(frame, rows, _point_lanes(frame, ev, at), _times(ev, at)) for at in pairs.T)
    ok = (src != NO_ROW) & (dst != NO_ROW)
    assign_last(out, dst[ok], src[ok])
    return out


def _flow_pairs(ev: Events, flows: np.ndarray) -> np.ndarray:
    """(start, finish) events of each flow id that has both (the last of each), in order of the id's first event."""
    if not len(flows):
        return np.empty((0, 2), dtype=np.int64)
    ids = ev.codes["id"][flows]
    found = pd.DataFrame({"id": ids, "start": ev.among("ph", {FLOW_START})[flows], "at": flows})
    last = found.groupby(["id", "start"])["at"].last().unstack()
    return last.reindex(index=pd.unique(ids), columns=[True, False]).dropna().to_numpy(np.int64)


def row_lanes(frame: pd.DataFrame) -> np.ndarray:
    """One int per (pid, tid) of each row."""
    tids = len(frame["tid"].cat.categories)
    return frame["pid"].cat.codes.to_numpy(np.int64) * tids + frame["tid"].cat.codes.to_numpy(np.int64)


def _point_lanes(frame: pd.DataFrame, ev: Events, at: np.ndarray) -> np.ndarray:
    """The row_lanes key of each event's (pid, tid); -1 where no row has it."""
    pids, tids = frame["pid"].cat.categories, frame["tid"].cat.categories
    pid, tid = pids.get_indexer(ev.text("pid", at)), tids.get_indexer(ev.text("tid", at))
    return np.where((pid >= 0) & (tid >= 0), pid.astype(np.int64) * len(tids) + tid, -1)


def slices_at(frame: pd.DataFrame, row_lanes: np.ndarray, lanes: np.ndarray, times: np.ndarray) -> np.ndarray:
    """Row of the slice on each point's lane that starts last at or before its time and still contains it."""
    starts = frame["ts"].to_numpy()
    ends = starts + frame["dur"].to_numpy()
    rows_of = pd.Series(np.arange(len(row_lanes))).groupby(row_lanes).indices
    out = np.full(len(times), NO_ROW, dtype=np.int64)
    for lane, mine in pd.Series(np.arange(len(lanes))).groupby(lanes).indices.items():
        rows = rows_of.get(lane)
        if rows is None:
            continue
        rows = rows[np.argsort(starts[rows], kind="stable")]
        found = rows[np.maximum(np.searchsorted(starts[rows], times[mine], side="right") - 1, 0)]
        ok = (starts[found] <= times[mine]) & (ends[found] >= times[mine])
        out[mine[ok]] = found[ok]
    return out
