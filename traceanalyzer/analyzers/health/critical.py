"""The critical path of a step: how far its device work can shrink before the step turns host-bound.

A rank's **headroom** is, per step, the step time less the host's own time in it (its step marker's span less the
time it waits for the device: blocking syncs, and kernel launches held up by a full launch queue). A faster kernel
saves step time only down to that floor; ``findings.rank`` bounds the device-time savings it pushes by it.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from traceanalyzer.analyzers.attribution import is_one_of
from traceanalyzer.groups import Groups
from traceanalyzer.schema import NO_ROW, Kind
from traceanalyzer.tables import stack
from traceanalyzer.tracedata import TraceData
from traceanalyzer.vocabulary import LAUNCH_CALLS, SYNC_CALLS

LAUNCH_WAIT_NS = 50_000
"""A kernel launch longer than this (50 µs) waited for room in the device's launch queue (the device was busy)."""

COLUMNS = ["rank", "step", "blocked_ns"]


def blocked(trace: TraceData) -> pd.DataFrame:
    """Per rank and step: the host's time waiting for the device (blocking syncs, launches held by a full queue)."""
    events = trace.events
    runtime = (events["kind"] == Kind.RUNTIME.value).to_numpy() & (events["step"] != NO_ROW).to_numpy()
    dur = events["dur"].to_numpy()
    held = is_one_of(events["name"], LAUNCH_CALLS) & (dur > LAUNCH_WAIT_NS)
    waits = runtime & (is_one_of(events["name"], SYNC_CALLS) | held)
    rank, step = events["rank"].to_numpy()[waits], events["step"].to_numpy()[waits]
    order = np.lexsort((step, rank))
    g = Groups([rank[order], step[order]])  # in (rank, step) order
    frame = {"rank": rank[order][g.first], "step": step[order][g.first], "blocked_ns": g.sum(dur[waits][order])}
    return merged_blocked([pd.DataFrame(frame)])


def merged_blocked(tables: list[pd.DataFrame]) -> pd.DataFrame:
    """``blocked`` tables of several parts' ranks, by rank and step."""
    table = stack(tables) if tables else pd.DataFrame(columns=COLUMNS)
    return table.sort_values(["rank", "step"], kind="stable").reset_index(drop=True)


def headroom(steps: pd.DataFrame, waits: pd.DataFrame) -> dict[int, int]:
    """Per rank: the median over its steps of step time less the host's own time (ns per step; never below 0); a
    rank whose host span is not known (no host events) has none."""
    if not len(steps):
        return {}
    table = steps[["rank", "step", "step_ns", "host_ns"]].merge(waits, on=["rank", "step"], how="left")
    own = np.maximum(table["host_ns"].to_numpy() - table["blocked_ns"].fillna(0).to_numpy(), 0)
    table["room"] = np.maximum(table["step_ns"].to_numpy() - own, 0)
    return {int(rank): int(room) for rank, room in table.groupby("rank")["room"].median().dropna().items()}
