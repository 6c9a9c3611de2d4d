"""One step of one rank as Gantt lanes (device streams, host threads), decimated to a browser-sized set of segments."""

from __future__ import annotations

import numpy as np
import pandas as pd

from traceanalyzer.schema import HOST, TIMELINE_DEVICE, Kind

MAX_SEGMENTS = 40_000
"""The most segments one timeline sends to the browser."""

RESOLUTION = 4_000
"""Intervals closer than span / RESOLUTION on one lane (and of one colour) are drawn as one."""

MAX_HOST_DEPTH = 3
"""Host call-tree levels shown per thread (0 = top level)."""

CATEGORY = {
    Kind.KERNEL.value: "compute",
    Kind.COMMUNICATION.value: "communication",
    Kind.COMM_TASK.value: "communication",
    Kind.MEMCPY.value: "memory copy/set",
    Kind.MEMSET.value: "memory copy/set",
    Kind.SYNC.value: "sync/wait",
    Kind.CPU_OP.value: "cpu op",
    Kind.PYTHON.value: "python",
    Kind.ANNOTATION.value: "annotation/step",
    Kind.STEP.value: "annotation/step",
    Kind.RUNTIME.value: "runtime call",
}
"""Colour group of each event kind on the timeline."""

SEGMENT_COLUMNS = ["lane", "category", "start_ns", "end_ns", "count", "name", "row"]


def step_segments(events: pd.DataFrame, rank: int, step: int, window: tuple[int, int] | None = None) -> pd.DataFrame:
    """Segments of one (rank, step), optionally only those in window (ns from step start): lane, colour, start/end
    (ns from the step's first event), events merged, name; finer when the window is narrower."""
    mine = events[(events["rank"] == rank) & (events["step"] == step)]
    device = mine[mine["kind"].isin(TIMELINE_DEVICE)]
    host = mine[mine["kind"].isin(HOST) & (mine["depth"] <= MAX_HOST_DEPTH)]
    return laid_out(pd.concat([_device_lanes(device), _host_lanes(host)]), window)


def laid_out(lanes: pd.DataFrame, window: tuple[int, int] | None = None, resolution: int = RESOLUTION) -> pd.DataFrame:
    """Lane rows as drawn segments: times from the first one's start (kept in ``attrs["origin_ns"]``), only those
    in window (ns from that start) when given, decimated to what the window's width can show (gaps narrower than
    window / resolution closed). lanes is left as it was."""
    if not len(lanes):
        return pd.DataFrame(columns=SEGMENT_COLUMNS)
    origin = int(lanes["start_ns"].min())
    lanes = lanes.assign(start_ns=lanes["start_ns"] - origin, end_ns=lanes["end_ns"] - origin)
    if window:
        lanes = lanes[(lanes["end_ns"] > window[0]) & (lanes["start_ns"] < window[1])]
        if not len(lanes):
            return pd.DataFrame(columns=SEGMENT_COLUMNS)
    out = decimate(lanes, span=window[1] - window[0] if window else None, resolution=resolution)
    out.attrs["origin_ns"] = origin
    return out


def lane_rows(rows: pd.DataFrame, lane: pd.Series) -> pd.DataFrame:
    """Event rows as lane rows: lane, colour category, start and end (ns), name, and the event's row."""
    return pd.DataFrame(
        {
            "lane": lane.to_numpy(),
            "category": rows["kind"].astype(str).map(CATEGORY).fillna("other").to_numpy(),
            "start_ns": rows["ts"].to_numpy(),
            "end_ns": (rows["ts"] + rows["dur"]).to_numpy(),
            "name": rows["name"].astype(str).to_numpy(),
            "row": rows.index.to_numpy(),
        }
    )


def _device_lanes(device: pd.DataFrame) -> pd.DataFrame:
    return lane_rows(device, device_lanes(device))


def device_lanes(device: pd.DataFrame) -> pd.Series:
    """Each device event's lane: "device D · stream S"; where the trace names no stream or device (the -1 of the
    event table, e.g. Ascend's HCCL and overlap rows) its kind takes the stream's place and the device is left out."""
    known = device["device"] >= 0
    where = ("device " + device["device"].astype(str)).where(known, "device")
    stream = ("stream " + device["stream"].astype(str)).where(device["stream"] >= 0, device["kind"].astype(str))
    return where + " · " + stream


def _host_lanes(host: pd.DataFrame) -> pd.DataFrame:
    lane = "thread " + host["tid"].astype(str) + " · depth " + host["depth"].astype(str)
    return lane_rows(host, lane)


def decimate(
    segments: pd.DataFrame, span: int | None = None, max_segments: int = MAX_SEGMENTS, resolution: int = RESOLUTION
) -> pd.DataFrame:
    """Merge near-adjacent segments of one lane and colour (closer than span / resolution) to at most max_segments;
    a merged segment keeps its first event's name and row."""
    span = span or int(segments["end_ns"].max() - segments["start_ns"].min())
    gap = max(span, 1) / resolution
    seg = segments.sort_values(["lane", "category", "start_ns"], kind="stable").reset_index(drop=True)
    while True:
        merged = _merge(seg, gap)
        if len(merged) <= max_segments:
            return merged
        gap *= 2


def _merge(seg: pd.DataFrame, gap: float) -> pd.DataFrame:
    lane = seg["lane"].to_numpy()
    cat = seg["category"].to_numpy()
    start = seg["start_ns"].to_numpy()
    end = seg["end_ns"].to_numpy()
    new = np.ones(len(seg), dtype=bool)
    new[1:] = (lane[1:] != lane[:-1]) | (cat[1:] != cat[:-1]) | (start[1:] - end[:-1] > gap)
    group = np.cumsum(new) - 1
    g = seg.groupby(group, sort=False)
    out = pd.DataFrame(
        {
            "lane": g["lane"].first(),
            "category": g["category"].first(),
            "start_ns": g["start_ns"].min(),
            "end_ns": g["end_ns"].max(),
            "count": g.size(),
            "name": g["name"].first(),
            "row": g["row"].first(),
        }
    )
    return out.reset_index(drop=True)[SEGMENT_COLUMNS]
