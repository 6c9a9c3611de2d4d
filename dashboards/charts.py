"""The dashboard's own charts: hotspot bars coloured by kind, with names cut in the middle (full name on hover)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.colors import qualitative
from traceanalyzer.dashboards.names import shortened

from traceanalyzer import humanize
from traceanalyzer.humanize import NS_PER_MS
from traceanalyzer.renderers import figures, palette
from traceanalyzer.renderers.timeline import CATEGORY

BAR_TOP = 20
BAR_PX = 22
BAR_LABEL_CHARS = 36
"""Bar labels are names cut to about this (the chart shares its row with the selection's details), kept distinct."""
LEGEND_ABOVE = {"orientation": "h", "y": 1.02, "yanchor": "bottom", "x": 0}
LEGEND_BELOW = {"orientation": "h", "y": -0.1, "yanchor": "top", "x": 0}
"""Legends of a full-width chart (above: the tool bar sits at its right) and of a narrow one (below its axis)."""


def hotspot_bars(table: pd.DataFrame, per: str = "total over the selection") -> go.Figure:
    """The top rows of a hotspot table as horizontal bars of total time (ms), one colour per kind of device work."""
    if not len(table):
        return figures.empty("no events match the filter")
    top = table.head(BAR_TOP).iloc[::-1]
    names = [str(n) for n in top["name"]]
    kinds = [str(k) for k in top["kind"]] if "kind" in top else ["" for _ in names]
    short = shortened(names, BAR_LABEL_CHARS)
    labels = [f"{i}. {figures.text(s)}" for i, s in zip(range(len(top), 0, -1), short, strict=True)]
    fig = go.Figure()
    for kind in dict.fromkeys(kinds):
        rows = [i for i, k in enumerate(kinds) if k == kind]
        fig.add_trace(_bars(top.iloc[rows], [labels[i] for i in rows], kind))
    fig.update_layout(
        height=150 + BAR_PX * len(top),
        margin={"l": 10, "r": 10, "t": 30, "b": 80},
        xaxis_title=f"time (ms, {per})",
        barmode="stack",
        showlegend=len(set(kinds)) > 1,
        legend=LEGEND_BELOW,
    )
    fig.update_yaxes(automargin=True, categoryorder="array", categoryarray=labels)
    return fig


def _bars(rows: pd.DataFrame, labels: list[str], kind: str) -> go.Bar:
    hover = [
        f"{figures.text(n)}<br>{humanize.duration(t)} · {humanize.share(s)} of the total"
        for n, t, s in zip(rows["name"], rows["total_ns"], rows["share"], strict=True)
    ]
    colour = palette.KIND.get(kind) or palette.CATEGORY.get(CATEGORY.get(kind, ""), palette.CATEGORY["compute"])
    return go.Bar(
        x=rows["total_ns"] / NS_PER_MS,
        y=labels,
        orientation="h",
        name=kind or "time",
        customdata=[str(n) for n in rows["name"]],
        hovertext=hover,
        hoverinfo="text",
        marker_color=colour,
    )


STEP_PARTS = (("device_busy_ns", "device busy", "compute"), ("device_idle_ns", "device idle", "annotation/step"))
"""Columns of the summary's step table stacked per step: together they are the step's device span."""


def step_breakdown(steps: pd.DataFrame | None) -> go.Figure:
    """Per (rank, step) of the report's step table: device busy and idle stacked (ms per step), each step's axis
    label saying whether it is host- or device-bound (axis labels turn when many, so they never overlap), kernel
    and communication time on hover."""
    if steps is None or not len(steps):
        return figures.empty("the trace has no step markers")
    labels = [
        f"rank {r} · step {s}" + (f" · {b}-bound" if b else "")
        for r, s, b in zip(steps["rank"], steps["step"], steps["bound"], strict=True)
    ]
    hover = [
        f"kernels {humanize.duration(k)} · communication {humanize.duration(c)} · step {humanize.duration(t)}"
        for k, c, t in zip(
            steps["kernel_ns"], steps.get("communication_ns", 0 * steps["kernel_ns"]), steps["step_ns"], strict=True
        )
    ]
    fig = go.Figure(
        [
            go.Bar(
                name=legend,
                x=labels,
                y=steps[column] / NS_PER_MS,
                marker_color=palette.CATEGORY[colour],
                customdata=hover,
                hovertemplate=f"{legend}: %{{y:.2f}} ms<br>%{{customdata}}<extra>%{{x}}</extra>",
            )
            for column, legend, colour in STEP_PARTS
        ]
    )
    top = (steps["device_busy_ns"] + steps["device_idle_ns"]) / NS_PER_MS
    fig.update_layout(
        barmode="stack",
        height=380,
        yaxis_title="ms per step",
        xaxis_automargin=True,
        yaxis_range=[0, float(top.max()) * 1.15],
        margin={"t": 30, "b": 40},
        legend=LEGEND_ABOVE,
    )
    return fig


def outline(segments: pd.DataFrame, name: str) -> go.Scattergl:
    """Timeline segments drawn wider in yellow: put under the Gantt's own lines, they outline them."""
    n = len(segments)
    x = np.full(3 * n, np.nan)
    x[0::3] = segments["start_ns"].to_numpy() / NS_PER_MS
    x[1::3] = segments["end_ns"].to_numpy() / NS_PER_MS
    y = np.repeat(segments["lane"].to_numpy().astype(object), 3)
    y[2::3] = None
    return go.Scattergl(
        x=x,
        y=y,
        mode="lines",
        name=name,
        line={"width": figures.LANE_PX * 0.95, "color": palette.SELECTED},
        hoverinfo="skip",
        connectgaps=False,
    )


POOL_COLOURS = qualitative.D3
LINE_DASH = {"allocated": "solid", "reserved": "dot"}


def pools_coloured(fig: go.Figure) -> go.Figure:
    """The memory chart with one colour per pool (rank and device: allocated solid, reserved dotted, its peak
    marked in the same colour, its size in the legend) and the legend below the plot."""
    pools: dict[str, str] = {}
    for trace in fig.data:
        pool, _, what = trace.name.rpartition(" ")
        colour = pools.setdefault(pool, POOL_COLOURS[len(pools) % len(POOL_COLOURS)])
        if what == "peak":  # its size in the legend: labels of peaks at the same height would overlap
            trace.marker.color, trace.mode = colour, "markers"
            trace.name = f"{trace.name} ({str(trace.text[0]).removeprefix('peak ')})" if trace.text else trace.name
        else:
            trace.line.color, trace.line.dash = colour, LINE_DASH.get(what, "solid")
    below = {**LEGEND_BELOW, "y": -0.2}  # above, it would run under the tool bar
    fig.update_layout(legend=below, showlegend=True, margin={"t": 30, "b": 40})
    return fig


def warm_up() -> None:
    """Draw a throwaway step chart and hotspot bar chart: Plotly builds its validators for a process's first figure
    (≈ 0.2 s CPU), paid here, while the trace loads, and not by the first page's callback."""
    one = {"rank": [0], "step": [0], "bound": ["device"], "kernel_ns": [1], "step_ns": [2]}
    step_breakdown(pd.DataFrame({**one, "device_busy_ns": [1], "device_idle_ns": [1]})).to_plotly_json()
    hotspot_bars(pd.DataFrame({"name": ["warm-up"], "kind": ["kernel"], "total_ns": [1], "share": [1.0]}))
