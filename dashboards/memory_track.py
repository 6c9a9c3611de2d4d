"""The Timeline's memory track: each device's allocated and reserved bytes over the drawn step(s), as the memory
analyzer replays the allocator's events, with the peak it reports marked where it falls, under the lanes on the
same time axis."""

from __future__ import annotations

import pandas as pd

from traceanalyzer import humanize
from traceanalyzer.humanize import NS_PER_MS
from traceanalyzer.renderers import figures, palette

TRACK_PX = 150
"""Height of the memory track under the lanes (px)."""
AXIS = "y2"
"""The memory track's y axis (GiB); the lanes keep the first."""


def series(timeline: pd.DataFrame, rank: int, lo: int, hi: int) -> pd.DataFrame:
    """One rank's device memory (allocated, reserved bytes; the host pool left out) from lo to hi (absolute ns):
    the points inside, and each device's last point before lo moved to lo (the level the window opens at)."""
    mine = timeline[(timeline["rank"] == rank) & (timeline["device"] >= 0)]
    before = mine[mine["ts"] < lo].groupby("device", sort=True).tail(1).assign(ts=lo)
    return pd.concat([before, mine[(mine["ts"] >= lo) & (mine["ts"] <= hi)]], ignore_index=True)


def peaks_in(peaks: pd.DataFrame, rank: int, lo: int, hi: int) -> pd.DataFrame:
    """One rank's device peaks (the memory analyzer's) that fall from lo to hi (absolute ns)."""
    mine = peaks[(peaks["rank"] == rank) & (peaks["device"] >= 0)]
    return mine[(mine["peak_ts"] >= lo) & (mine["peak_ts"] <= hi)]


def traces(points: pd.DataFrame, peaks: pd.DataFrame, origin: int, prefix: str = "") -> list[dict]:
    """The track's lines (allocated, reserved per device, ms from origin, GiB; at most 2 × MEMORY_BUCKETS points
    each, peaks kept) and a marker at each peak (customdata: its bytes)."""
    out = []
    for device, mine in points.groupby("device", sort=True):
        for col, colour in palette.MEMORY.items():
            kept = figures.envelope(mine[mine[col].notna()], col)
            if not len(kept):
                continue
            out.append(
                {
                    "type": "scatter",
                    "mode": "lines",
                    "x": ((kept["ts"] - origin) / NS_PER_MS).tolist(),
                    "y": (kept[col] / figures.GIB).tolist(),
                    "yaxis": AXIS,
                    "name": f"{prefix}device {device} {col}",
                    "line": {"color": colour, "shape": "hv", "width": 1.5},
                    "hovertemplate": f"{col} %{{y:.3f}} GiB at %{{x:.4f}} ms<extra>{prefix}device {device}</extra>",
                }
            )
    for peak in peaks.itertuples():
        said = f"memory peak {humanize.size(peak.peak_allocated_bytes)} allocated on {prefix}device {peak.device}"
        out.append(
            {
                "type": "scatter",
                "mode": "markers",
                "x": [(peak.peak_ts - origin) / NS_PER_MS],
                "y": [peak.peak_allocated_bytes / figures.GIB],
                "yaxis": AXIS,
                "name": f"{prefix}device {peak.device} peak",
                "marker": {"color": palette.MARK["memory peak"], "size": 11, "symbol": "x"},
                "customdata": [[int(peak.peak_allocated_bytes)]],
                "hovertext": [said],
                "hovertemplate": "%{hovertext}<extra></extra>",
            }
        )
    return out


def said(peaks: pd.DataFrame, shown: pd.DataFrame, rank: int | None) -> str:
    """What the track draws, and where the trace's peak is when it is not in view."""
    note = " Memory track (under the lanes): allocated and reserved bytes of each device (GiB, replayed from the "
    note += "allocator's events by the memory analyzer)"
    if len(shown):
        at = "; ".join(f"{humanize.size(p.peak_allocated_bytes)} on device {p.device}" for p in shown.itertuples())
        return note + f"; the peak marked ×: {at}."
    mine = peaks[(peaks["device"] >= 0) & ((peaks["rank"] == rank) | (rank is None))]
    where = ", ".join(f"in step {s}" if s >= 0 else "outside every step" for s in sorted(mine["peak_step"].unique()))
    return note + (f"; the peak is not in view (it is {where})." if len(mine) else ".")


def layout(height: int, bottom_px: int) -> dict:
    """The layout changes that put the track under the lanes (for update_layout): the lanes' axis above it, the
    track's GiB axis, the time axis at the bottom; height, the figure's without the track."""
    total = height + TRACK_PX
    cut = TRACK_PX / (total - bottom_px - 30)
    return {
        "height": total,
        "yaxis": {"domain": [cut, 1]},
        "yaxis2": {
            "domain": [0, cut * 0.8],
            "title": {"text": "GiB"},
            "rangemode": "tozero",
            "anchor": "x",
            "fixedrange": True,
        },
        "xaxis": {"anchor": AXIS},
    }
