"""Shared helpers for findings: device busy intervals, steps, linked columns, and where host events came from."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from traceanalyzer import intervals
from traceanalyzer.analyzers import callpath
from traceanalyzer.analyzers.summary import step_table
from traceanalyzer.memo import remember
from traceanalyzer.schema import BUSY, HOST_WORK, NO_ROW, Kind, Platform, category_text, codes_at
from traceanalyzer.tracedata import TraceData

"""Host event kinds that describe what the host was doing at a moment."""


def steps_in(table: pd.DataFrame) -> int:
    """Number of distinct steps of a step table (1 when it has none)."""
    return max(int(table["step"].nunique()), 1) if len(table) else 1


def computing_ranks(trace: TraceData) -> set[int]:
    """The ranks of a trace whose compute (kernels) is recorded (a rank loaded from its communication alone has
    none)."""
    events = trace.events
    return {int(r) for r in events.loc[events["kind"] == Kind.KERNEL.value, "rank"].unique()}


def in_steps(trace: TraceData, rows: pd.DataFrame) -> pd.DataFrame:
    """The rows that belong to a step; all rows when the trace has no steps."""
    return rows[rows["step"] != NO_ROW] if len(step_table(trace)) else rows


def in_step_rows(trace: TraceData, rows: np.ndarray) -> np.ndarray:
    """``in_steps`` of some positions of the trace's events: those of a step; all when the trace has no steps."""
    return rows[trace.events["step"].to_numpy()[rows] != NO_ROW] if len(step_table(trace)) else rows


def is_one_of(column: pd.Series, values) -> np.ndarray:
    """Per row of a category column: is its text one of the values? (Compared once per category.)"""
    return np.isin(category_text(column), list(values))[column.array.codes]


def kind_rows(events: pd.DataFrame, kinds) -> np.ndarray:
    """The positions of the events of some kinds (their values)."""
    return np.flatnonzero(is_one_of(events["kind"], kinds))


def rank_spans(events: pd.DataFrame, rows: np.ndarray) -> dict[int, intervals.Intervals]:
    """Per rank (in rank order): the union of the [ts, ts + dur) spans of some positions of the events."""
    rank, ts = events["rank"].to_numpy()[rows], events["ts"].to_numpy()[rows]
    end = ts + events["dur"].to_numpy()[rows]
    return {int(r): intervals.union(ts[rank == r], end[rank == r]) for r in np.unique(rank).tolist()}


def rank_busy(trace: TraceData) -> dict[int, intervals.Intervals]:
    """Per rank: the union of its busy device work on all its devices (once per trace)."""
    return remember(trace, "attribution.rank_busy", lambda: _rank_busy(trace.events))


def _rank_busy(events: pd.DataFrame) -> dict[int, intervals.Intervals]:
    return rank_spans(events, kind_rows(events, BUSY))


def linked(events: pd.DataFrame, rows: np.ndarray, column: str) -> pd.api.extensions.ExtensionArray:
    """A text (category) column of linked rows, as a string array ('' where the link is NO_ROW)."""
    return pd.array(category_text(events[column]), dtype="str").take(codes_at(events[column], rows))


def name_hits(column: pd.Series, pattern: re.Pattern) -> np.ndarray:
    """Per row of a category column: does the pattern occur in its text? Searched once per category present."""
    text = category_text(column)
    codes = column.array.codes  # code -1 (missing) indexes the last text: ''
    present = np.zeros(len(text), dtype=bool)
    present[codes] = True
    hit = np.zeros(len(text), dtype=bool)
    for code in np.flatnonzero(present).tolist():
        hit[code] = bool(pattern.search(text[code]))
    return hit[codes]


def locate(trace: TraceData, rows: np.ndarray) -> pd.DataFrame:
    """For host rows of the trace's events (labels = positions): innermost enclosing annotation and user Python
    frame ('' for NO_ROW), indexed by row."""
    return callpath.walk(trace).innermost_names(rows)


def describe(trace: TraceData, rows: np.ndarray) -> list[str]:
    """'annotation › op › call' for host rows (labels = positions); '' for NO_ROW."""
    rows = np.asarray(rows, dtype=np.int64)
    ok = rows != NO_ROW
    place = locate(trace, rows[ok])
    ops = linked(trace.events, trace.events["op"].to_numpy()[rows[ok]], "name")
    calls = linked(trace.events, rows[ok], "name")
    out = [""] * len(rows)
    for i, parts in zip(np.flatnonzero(ok), zip(place["annotation"], ops, calls, strict=True), strict=True):
        out[i] = callpath.SEPARATOR.join(dict.fromkeys(p for p in parts if p))
    return out


def place_text(annotation: str, frame: str) -> str:
    """A place in words: annotation › frame."""
    return " › ".join(p for p in (annotation, frame) if p) or "(no annotation or Python frame)"


def host_activity(trace: TraceData, rank: int, starts: np.ndarray, ends: np.ndarray) -> pd.DataFrame:
    """For windows on ``rank``: the deepest host event at the start, and the deepest covering most of the window."""
    labels, ts, end, depth = _host_rows(trace).get(rank, _NO_HOST_ROWS)
    at_start, during = [], []
    for lo, hi in zip(starts.tolist(), ends.tolist(), strict=True):
        near = np.flatnonzero((ts <= hi) & (end >= lo))  # all either test can pick, in order
        t, e = ts[near], end[near]
        at_start.append(_deepest(labels[near], depth[near], (t <= lo) & (e > lo)))
        during.append(_deepest(labels[near], depth[near], (np.minimum(e, hi) - np.maximum(t, lo)) * 2 >= hi - lo))
    return pd.DataFrame({"host_at_start": describe(trace, at_start), "host_during": describe(trace, during)})


_NO_HOST_ROWS = tuple(np.empty(0, dtype=np.int64) for _ in range(4))


def _host_rows(trace: TraceData) -> dict[int, tuple[np.ndarray, ...]]:
    """Per rank: label, start, end and depth of its host events that describe host activity."""
    return remember(trace, "attribution.host_rows", lambda: _host_rows_of(trace.events))


def _host_rows_of(events: pd.DataFrame) -> dict[int, tuple[np.ndarray, ...]]:
    rows = kind_rows(events, HOST_WORK)
    rank = events["rank"].to_numpy()[rows]
    ts = events["ts"].to_numpy()[rows]
    columns = (events.index.to_numpy()[rows], ts, ts + events["dur"].to_numpy()[rows], events["depth"].to_numpy()[rows])
    ranks = np.unique(rank).tolist()
    mine = {r: slice(None) if len(ranks) == 1 else rank == r for r in ranks}
    return {int(r): tuple(np.asarray(c[at], dtype=np.int64) for c in columns) for r, at in mine.items()}


def _deepest(labels: np.ndarray, depth: np.ndarray, mask: np.ndarray) -> int:
    """Label of the deepest event among mask (NO_ROW if none)."""
    hit = np.flatnonzero(mask)
    return int(labels[hit[np.argmax(depth[hit])]]) if len(hit) else NO_ROW


def accelerator(trace: TraceData) -> str:
    """What to call the trace's devices in a sentence: NPU on Ascend, GPU elsewhere."""
    return "NPU" if trace.meta.platform == Platform.ASCEND else "GPU"
