"""One step of one rank as Gantt lanes: each device stream, and each host thread at its own call depths.

Host depth is counted per thread. On ``with_stack`` traces the main thread's ops sit under dozens of Python frames;
by default those frames are collapsed (a level counts only ancestors that are not Python frames), so the
annotations, ops and runtime calls of every thread show in the first few levels; both can be expanded. Step
markers have a lane of their own per thread (however the profiler nested them).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from traceanalyzer.renderers.timeline import laid_out, lane_rows
from traceanalyzer.schema import DEVICE_KINDS, HOST_KINDS, NO_ROW, Kind

LEVEL_CHOICES = (4, 8, 16, 64)
"""Host levels per thread the page offers; the first is the default."""

_DEVICE = [k.value for k in DEVICE_KINDS | {Kind.COMM_TASK}]
_HOST = [k.value for k in HOST_KINDS]


def host_levels(events: pd.DataFrame) -> np.ndarray:
    """Per event row: how many of its host ancestors are neither Python frames nor step markers (its level with
    Python frames collapsed; a step marker is a level of its own, however the steps nest)."""
    parent = events["parent"].to_numpy()
    depth = events["depth"].to_numpy()
    host = events["kind"].isin(_HOST).to_numpy()
    counts = np.zeros(len(events), dtype=np.int32)
    counting = host & ~events["kind"].isin([Kind.PYTHON.value, Kind.STEP.value]).to_numpy()
    for level in np.unique(depth[host & (parent != NO_ROW)]):
        rows = np.flatnonzero(host & (depth == level) & (parent != NO_ROW))
        up = parent[rows]
        counts[rows] = counts[up] + counting[up]
    return counts


def step_segments(
    events: pd.DataFrame,
    levels: np.ndarray,
    rank: int,
    step: int,
    max_level: int = LEVEL_CHOICES[0],
    python: bool = False,
    window: tuple[int, int] | None = None,
) -> pd.DataFrame:
    """Segments of one (rank, step): device streams, and host threads to max_level levels (Python frames shown and
    counted when python, else collapsed); start/end in ns from the step's first event, only those in window."""
    rows = np.flatnonzero((events["rank"] == rank).to_numpy() & (events["step"] == step).to_numpy())
    mine = events.iloc[rows]
    kinds = mine["kind"]
    device = mine[kinds.isin(_DEVICE).to_numpy()]
    level = mine["depth"].to_numpy() if python else levels[rows]
    host_mask = kinds.isin(_HOST).to_numpy() & (python | (kinds != Kind.PYTHON.value).to_numpy())
    is_step = (kinds == Kind.STEP.value).to_numpy()
    steps = mine[host_mask & is_step]
    host_mask &= ~is_step & (level < max_level)
    host = mine[host_mask]
    lanes = pd.concat(
        [
            lane_rows(device, "device " + device["device"].astype(str) + " · stream " + device["stream"].astype(str)),
            lane_rows(steps, "thread " + steps["tid"].astype(str) + " · Step"),
            lane_rows(host, "thread " + host["tid"].astype(str) + " · level " + _padded(level[host_mask], host.index)),
        ]
    )
    return laid_out(lanes, window)


MARK_COLUMNS = ["what", "start_ns", "end_ns", "label"]
MAX_MARKS = 60
"""The most finding marks drawn on one step (the longest first)."""


def marks(gaps: pd.DataFrame, stalls: pd.DataFrame, first_work: pd.Series, rank: int, origin: int, span: int):
    """The health findings' evidence inside one step of one rank, in ns from origin: the largest idle gaps (from
    health.idle_gaps; offsets count from each device's first work, first_work by (rank, device)) and blocking host
    syncs (health.sync_stalls)."""
    rows = []
    for gap in gaps[gaps["rank"] == rank].itertuples():
        start = int(gap.offset_ns) + int(first_work.get((rank, gap.device), 0)) - origin
        rows.append(("idle gap", start, start + int(gap.dur_ns), f"device {gap.device} idle {gap.dur_ns / 1e6:.2f} ms"))
    for sync in stalls[
        (stalls["rank"] == rank) & (stalls["ts"] < origin + span) & (stalls["ts"] >= origin)
    ].itertuples():
        start = int(sync.ts) - origin
        rows.append(("host sync", start, start + int(sync.sync_ns), f"{sync.name} ({sync.annotation or sync.op})"))
    frame = pd.DataFrame(rows, columns=MARK_COLUMNS)
    inside = frame[(frame["end_ns"] > 0) & (frame["start_ns"] < span)]
    longest = (inside["end_ns"] - inside["start_ns"]).sort_values(ascending=False).index[:MAX_MARKS]
    return inside.loc[longest].assign(  # drawn within the step (a gap may begin before it)
        start_ns=lambda f: f["start_ns"].clip(lower=0), end_ns=lambda f: f["end_ns"].clip(upper=span)
    )


def _padded(levels: np.ndarray, index: pd.Index) -> pd.Series:
    """Levels as text that sorts as numbers (lanes are ordered by name)."""
    return pd.Series(levels, index=index, dtype="int64").astype(str).str.rjust(2)
