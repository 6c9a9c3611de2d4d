"""One step of one rank as Gantt lanes: each device stream, and each host thread at its own call depths.

Host depth is counted per thread. On ``with_stack`` traces the main thread's ops sit under dozens of Python frames;
by default those frames are collapsed (a level counts only ancestors that are not Python frames), so the
annotations, ops and runtime calls of every thread show in the first few levels; both can be expanded. Step
markers have a lane of their own per thread (however the profiler nested them).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from traceanalyzer.renderers.timeline import CATEGORY, SEGMENT_COLUMNS, decimate
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
    mine = (events["rank"] == rank).to_numpy() & (events["step"] == step).to_numpy()
    kinds = events["kind"]
    device = events[mine & kinds.isin(_DEVICE).to_numpy()]
    host_mask = mine & kinds.isin(_HOST).to_numpy() & (python | (kinds != Kind.PYTHON.value).to_numpy())
    level = events["depth"].to_numpy() if python else levels
    is_step = (kinds == Kind.STEP.value).to_numpy()
    steps = events[host_mask & is_step]
    host_mask &= ~is_step & (level < max_level)
    host = events[host_mask]
    lanes = pd.concat(
        [
            _frame(device, "device " + device["device"].astype(str) + " · stream " + device["stream"].astype(str)),
            _frame(steps, "thread " + steps["tid"].astype(str) + " · Step"),
            _frame(host, "thread " + host["tid"].astype(str) + " · level " + _padded(level[host_mask], host.index)),
        ]
    )
    if not len(lanes):
        return pd.DataFrame(columns=SEGMENT_COLUMNS)
    origin = int(lanes["start_ns"].min())
    lanes["start_ns"] -= origin
    lanes["end_ns"] -= origin
    if window:
        lanes = lanes[(lanes["end_ns"] > window[0]) & (lanes["start_ns"] < window[1])]
        if not len(lanes):
            return pd.DataFrame(columns=SEGMENT_COLUMNS)
    return decimate(lanes, span=window[1] - window[0] if window else None)


def _padded(levels: np.ndarray, index: pd.Index) -> pd.Series:
    """Levels as text that sorts as numbers (lanes are ordered by name)."""
    return pd.Series(levels, index=index, dtype="int64").astype(str).str.rjust(2)


def _frame(rows: pd.DataFrame, lane: pd.Series) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "lane": lane.to_numpy(),
            "category": rows["kind"].astype(str).map(CATEGORY).fillna("other").to_numpy(),
            "start_ns": rows["ts"].to_numpy(),
            "end_ns": (rows["ts"] + rows["dur"]).to_numpy(),
            "name": rows["name"].astype(str).to_numpy(),
        }
    )
