"""Plotly figures of analyzer data. Names from traces are escaped, so plotly shows them as text."""

from __future__ import annotations

import html

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from traceanalyzer import humanize
from traceanalyzer.humanize import NS_PER_MS
from traceanalyzer.renderers import palette
from traceanalyzer.renderers.timeline import CATEGORY

BAR_TOP = 20
LANE_PX = 26
LEGEND_PX = 40
"""Room (px) under the Gantt's x-axis title for its legend."""
LEGEND_BELOW = {"orientation": "h", "yref": "container", "y": 0, "yanchor": "bottom", "x": 0.5, "xanchor": "center"}
"""The Gantt's legend: under the plot (its rows wrap on a narrow window, the margin grows to fit), where the mode
bar (top right, on hover) does not cover it."""
LABEL_CHARS = 60
NAME_EM = {
    **dict.fromkeys(" ·.,:;|!'", 0.32),
    **dict.fromkeys("fijlrt()[]-", 0.42),
    **dict.fromkeys("cksvxyz", 0.6),
    **dict.fromkeys("abdeghnopqu0123456789#_", 0.64),
}
"""Widths (em) of a lane name's characters in DejaVu Sans, about the widest font plotly's default family falls back
to (rounded up within a group); any other character counts as wide as an 'M' (WIDE_EM)."""
WIDE_EM = 0.9
FONT_PX = 12
"""Plotly's default font size, the lane names' (px)."""
AXIS_PAD_PX = 12
"""Room plotly's y axis takes beside its tick labels, and the plot's own left margin (px)."""
GIB = 1 << 30
MEMORY_BUCKETS = 800
"""Memory lines keep each bucket's lowest and highest point: about one point per pixel of a wide chart."""


def text(name: object, limit: int | None = None) -> str:
    """A trace-supplied name made safe for plotly labels (which read a subset of HTML)."""
    s = str(name)
    if limit and len(s) > limit:
        s = s[: limit - 1] + "…"
    return html.escape(s)


def empty(message: str) -> go.Figure:
    """A figure that only says why it is empty."""
    fig = go.Figure()
    fig.add_annotation(text=text(message), showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper")
    fig.update_layout(xaxis_visible=False, yaxis_visible=False, height=200)
    return fig


def hotspot_bars(table: pd.DataFrame) -> go.Figure:
    """Top entries of a hotspot table as horizontal bars of total time (ms)."""
    if not len(table):
        return empty("no events match the filter")
    top = table.head(BAR_TOP).iloc[::-1]
    fig = go.Figure(
        go.Bar(
            x=top["total_ns"] / NS_PER_MS,
            y=[f"{i}. {text(n, LABEL_CHARS)}" for i, n in zip(range(len(top), 0, -1), top["name"], strict=True)],
            orientation="h",
            customdata=top["name"],
            hovertext=[
                f"{text(n)}<br>{humanize.duration(t)} · {humanize.share(s)}" for n, t, s in _cols(top, "total_ns")
            ],
            hoverinfo="text",
            marker_color=palette.CATEGORY["compute"],
        )
    )
    fig.update_layout(height=140 + 22 * len(top), margin={"l": 10, "r": 10, "t": 30, "b": 40}, xaxis_title="total (ms)")
    fig.update_yaxes(automargin=True)
    return fig


def _cols(table: pd.DataFrame, value: str):
    return zip(table["name"], table[value], table["share"], strict=True)


def step_bars(steps: list[dict]) -> go.Figure:
    """Per (rank, step): step time next to device busy time."""
    if not steps:
        return empty("the trace has no step markers")
    frame = pd.DataFrame(steps)
    labels = [f"rank {r} · step {s}" for r, s in zip(frame["rank"], frame["step"], strict=True)]
    fig = go.Figure(
        [
            go.Bar(
                name="step time",
                x=labels,
                y=frame["step_ns"] / NS_PER_MS,
                marker_color=palette.CATEGORY["annotation/step"],
            ),
            go.Bar(
                name="device busy",
                x=labels,
                y=frame["device_busy_ns"] / NS_PER_MS,
                marker_color=palette.CATEGORY["compute"],
            ),
        ]
    )
    fig.update_layout(barmode="group", height=260, yaxis_title="ms", margin={"t": 30, "b": 40})
    return fig


FINDINGS_LANE = "findings"
"""The lane on top of a timeline where the findings' marks are drawn (one bar each); on top of each rank's lanes
(``rank R · findings``) when ranks are stacked."""


def findings_lane(rank: int | None = None) -> str:
    """The findings lane of a timeline, or of one rank's lanes when ranks are stacked."""
    return FINDINGS_LANE if rank is None else f"rank {rank} · {FINDINGS_LANE}"


def is_findings(lane: object) -> bool:
    """Whether a lane is a findings lane (a timeline's or a stacked rank's)."""
    return isinstance(lane, str) and _rank_of(lane)[1] == FINDINGS_LANE


BAR_WIDTH = 0.7
"""Height of a timeline bar, in lanes."""
GANTT_HOVER = "%{hovertext}<br>%{x:.4f} ms · %{customdata[0]} event(s) in this bar<extra>%{fullData.name}</extra>"


def gantt(
    segments: pd.DataFrame,
    revision: object = None,
    labels: list[str] | None = None,
    lanes=None,
    extra: list[dict] = (),
    shapes: list[dict] = (),
) -> go.Figure:
    """Timeline segments as one horizontal bar trace per colour category (bars from start to end, ms; hover shows
    the name, duration and events merged; customdata is [events merged, first event row]); labels, when given,
    are written inside the bars that fit them; lanes (default: the segments') are the rows drawn top to bottom
    after sorting (findings, devices, host threads), so a zoom that empties some keeps the others in place; extra
    traces (dicts) are drawn after the segments, shapes on the layout (with lanes given, a window with no segments
    still draws its axes); lanes named ``rank R · …`` are grouped by rank, every other group shaded. Built
    unvalidated: every attribute here is a known one, and validating a few thousand bars costs more than drawing
    them."""
    if not len(segments) and lanes is None:
        return empty("no events in this step")
    segments = segments.assign(label=labels) if labels is not None else segments
    lanes = lane_order(segments["lane"].unique() if lanes is None else lanes)
    traces = [
        _gantt_trace(category, mine)
        for category in dict.fromkeys([*CATEGORY.values(), "other"])
        if len(mine := segments[segments["category"] == category])
    ]
    layout = {
        "height": 120 + LEGEND_PX + LANE_PX * len(lanes),
        "hovermode": "closest",
        "barmode": "overlay",
        "xaxis": {"title": {"text": "ms from step start"}},
        "yaxis": {"type": "category", "categoryorder": "array", "categoryarray": lanes[::-1], "automargin": True},
        "margin": {"l": names_px(lanes) + AXIS_PAD_PX, "r": 10, "t": 30, "b": 40 + LEGEND_PX},
        "legend": LEGEND_BELOW,
        "uirevision": str(revision),
        "showlegend": True,
        "uniformtext": {"minsize": 9, "mode": "hide"},  # a label that does not fit its bar is left out
        "shapes": [*rank_bands(lanes), *shapes],
    }
    return go.Figure(data=[*traces, *extra], layout=layout, _validate=False)


def names_px(names: list[str]) -> int:
    """The width (px, at FONT_PX) of the widest of some names, about the most a browser draws it: the Gantt's left
    margin starts that wide, so that plotly's automargin, still on where a font draws wider, need not draw it
    twice."""
    return max((round(sum(NAME_EM.get(c, WIDE_EM) for c in " ".join(n.split())) * FONT_PX) for n in names), default=0)


def _lane_order(lane: str) -> tuple:
    """Findings first, then by rank (lanes named ``rank R · …``, in rank order: its findings, devices, host)."""
    rank, rest = _rank_of(lane)
    return (lane != FINDINGS_LANE, rank, rest != FINDINGS_LANE, not rest.startswith("device"), rest)


def _rank_of(lane: str) -> tuple[int, str]:
    """A lane's rank (-1 when its name has none) and the rest of its name."""
    head, _, rest = lane.partition(" · ")
    if head.startswith("rank ") and head[5:].isdigit():
        return int(head[5:]), rest
    return -1, lane


def lane_order(lanes) -> list[str]:
    """Lanes top to bottom as the Gantt draws them."""
    return sorted(lanes, key=_lane_order)


def rank_spans(lanes: list[str]) -> dict[int, tuple[float, float]]:
    """Per rank, the bottom and top edge of its lanes on the y axis (category positions; lanes as drawn top to
    bottom, a rank's lanes together)."""
    top, spans = len(lanes) - 1, {}  # the category axis puts the first lane at the top
    for i, lane in enumerate(lanes):
        rank = _rank_of(lane)[0]
        if rank >= 0:
            low, high = spans.get(rank, (top - i - 0.5, top - i + 0.5))
            spans[rank] = (min(low, top - i - 0.5), max(high, top - i + 0.5))
    return spans


def rank_bands(lanes: list[str]) -> list[dict]:
    """A shaded band behind every other rank's lanes (lanes as drawn top to bottom), so each rank's group stands
    apart; none when the lanes carry no rank."""
    return [
        {
            "type": "rect",
            "xref": "paper",
            "yref": "y",
            "x0": 0,
            "x1": 1,
            "y0": low,
            "y1": high,
            "fillcolor": "#000",
            "opacity": 0.05,
            "line": {"width": 0},
            "layer": "below",
            "name": f"rank {rank}",
        }
        for n, (rank, (low, high)) in enumerate(rank_spans(lanes).items())
        if n % 2
    ]


def _gantt_trace(category: str, seg: pd.DataFrame) -> dict:
    start = seg["start_ns"].to_numpy()
    labelled = "label" in seg
    return {
        "type": "bar",
        "base": start / NS_PER_MS,
        "x": (seg["end_ns"].to_numpy() - start) / NS_PER_MS,
        "y": seg["lane"].to_numpy(),
        "orientation": "h",
        "width": BAR_WIDTH,
        "name": category,
        "marker": {"color": palette.CATEGORY.get(category, palette.CATEGORY["other"]), "line": {"width": 0}},
        # lists: Dash passes a clicked point's customdata only from plain lists
        "customdata": np.c_[seg["count"].to_numpy(np.int64), seg["row"].to_numpy(np.int64)].tolist(),
        "hovertext": [text(name, 120) for name in seg["name"]],
        "hovertemplate": GANTT_HOVER,
        "text": [text(label) for label in seg["label"]] if labelled else None,
        "textposition": "inside" if labelled else "none",
        "insidetextanchor": "start",
        "textfont": {"color": "white", "size": 10},
        "cliponaxis": True,
    }


def heatmap(frame: pd.DataFrame, value: str, title: str) -> go.Figure:
    """A rank × step heatmap of one column (ms)."""
    grid = frame.pivot_table(index="rank", columns="step", values=value, aggfunc="sum")
    fig = go.Figure(
        go.Heatmap(
            z=grid.to_numpy() / NS_PER_MS,
            x=[f"step {s}" for s in grid.columns],
            y=[f"rank {r}" for r in grid.index],
            colorscale="Reds",
            colorbar={"title": "ms"},
            texttemplate="%{z:.1f}",
        )
    )
    fig.update_layout(title=text(title), height=160 + 40 * len(grid), margin={"t": 50, "b": 40})
    return fig


def envelope(frame: pd.DataFrame, col: str, buckets: int = MEMORY_BUCKETS) -> pd.DataFrame:
    """At most 2 × buckets rows of a time series: each bucket's lowest and highest point, so peaks stay visible."""
    if len(frame) <= 2 * buckets:
        return frame
    bucket = np.arange(len(frame)) * buckets // len(frame)
    values = frame[col].to_numpy()
    keep = np.zeros(len(frame), dtype=bool)
    for pick in (np.argmin, np.argmax):
        first = np.flatnonzero(np.r_[True, bucket[1:] != bucket[:-1]])
        keep[[f + pick(v) for f, v in zip(first, np.split(values, first[1:]), strict=True)]] = True
    return frame[keep]


def memory_lines(timeline: pd.DataFrame, peaks: pd.DataFrame) -> go.Figure:
    """Allocated and reserved memory per device over time (GiB), each device's peak marked (SVG lines: at most
    2 × MEMORY_BUCKETS points each draw faster than a WebGL context starts)."""
    pools = peaks[peaks["device"] >= 0] if (peaks["device"] >= 0).any() else peaks
    t0 = timeline["ts"].min()
    fig = go.Figure()
    for _, peak in pools.iterrows():
        mine = timeline[(timeline["rank"] == peak["rank"]) & (timeline["device"] == peak["device"])]
        pool = f"rank {peak['rank']} device {peak['device']}"
        for col, colour in (
            ("allocated", palette.CATEGORY["compute"]),
            ("reserved", palette.CATEGORY["annotation/step"]),
        ):
            ok = envelope(mine[mine[col].notna()], col)
            if len(ok):
                x, y = (ok["ts"] - t0) / NS_PER_MS, ok[col] / GIB
                fig.add_trace(go.Scatter(x=x, y=y, name=f"{pool} {col}", line={"color": colour, "shape": "hv"}))
        fig.add_trace(
            go.Scatter(
                x=[(peak["peak_ts"] - t0) / NS_PER_MS],
                y=[peak["peak_allocated_bytes"] / GIB],
                mode="markers+text",
                marker={"size": 12, "color": palette.CATEGORY["communication"], "symbol": "x"},
                text=[f"peak {humanize.size(peak['peak_allocated_bytes'])}"],
                textposition="top center",
                name=f"{pool} peak",
            )
        )
    fig.update_layout(height=380, xaxis_title="ms from first memory event", yaxis_title="GiB", margin={"t": 30})
    return fig
