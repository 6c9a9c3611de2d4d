"""The dashboard's own charts: hotspot bars coloured by kind, with names cut in the middle (full name on hover)."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
from traceanalyzer.dashboards.names import shortened

from traceanalyzer import humanize
from traceanalyzer.renderers import figures
from traceanalyzer.renderers.timeline import CATEGORY

BAR_TOP = 20
BAR_PX = 22


def hotspot_bars(table: pd.DataFrame, per: str = "total over the selection") -> go.Figure:
    """The top rows of a hotspot table as horizontal bars of total time (ms), one colour per kind of device work."""
    if not len(table):
        return figures.empty("no events match the filter")
    top = table.head(BAR_TOP).iloc[::-1]
    names = [str(n) for n in top["name"]]
    kinds = [str(k) for k in top["kind"]] if "kind" in top else ["" for _ in names]
    labels = [f"{i}. {figures.text(s)}" for i, s in zip(range(len(top), 0, -1), shortened(names), strict=True)]
    fig = go.Figure()
    for kind in dict.fromkeys(kinds):
        rows = [i for i, k in enumerate(kinds) if k == kind]
        fig.add_trace(_bars(top.iloc[rows], [labels[i] for i in rows], kind))
    fig.update_layout(
        height=150 + BAR_PX * len(top),
        margin={"l": 10, "r": 10, "t": 30, "b": 40},
        xaxis_title=f"time (ms, {per})",
        barmode="stack",
        showlegend=len(set(kinds)) > 1,
        legend={"orientation": "h", "y": 1.02, "yanchor": "bottom", "x": 0},
    )
    fig.update_yaxes(automargin=True, categoryorder="array", categoryarray=labels)
    return fig


def _bars(rows: pd.DataFrame, labels: list[str], kind: str) -> go.Bar:
    hover = [
        f"{figures.text(n)}<br>{humanize.duration(t)} · {humanize.share(s)} of the total"
        for n, t, s in zip(rows["name"], rows["total_ns"], rows["share"], strict=True)
    ]
    colour = figures.COLOURS.get(CATEGORY.get(kind, ""), figures.COLOURS["compute"])
    return go.Bar(
        x=rows["total_ns"] / 1e6,
        y=labels,
        orientation="h",
        name=kind or "time",
        customdata=[str(n) for n in rows["name"]],
        hovertext=hover,
        hoverinfo="text",
        marker_color=colour,
    )


BREAKDOWN = (
    ("compute_only_ns", "compute", "compute"),
    ("comm_exposed_ns", "exposed communication", "communication"),
    ("memory_exposed_ns", "exposed copies", "memory copy/set"),
    ("idle_ns", "device idle", "annotation/step"),
)
"""Overlap columns stacked per step: (column, legend, colour category). They add up to the step's span."""


def step_breakdown(overlap: pd.DataFrame) -> go.Figure:
    """Per (rank, step) stacked bars of where the step's device time went (ms per step): compute (with the
    communication it hides), exposed communication, exposed copies and idle, as the overlap analysis splits them."""
    labels = [f"rank {r} · step {s}" for r, s in zip(overlap["rank"], overlap["step"], strict=True)]
    fig = go.Figure(
        [
            go.Bar(
                name=legend,
                x=labels,
                y=overlap[column] / 1e6,
                marker_color=figures.COLOURS[colour],
                hovertemplate=f"{legend}: %{{y:.2f}} ms<extra>%{{x}}</extra>",
            )
            for column, legend, colour in BREAKDOWN
            if column in overlap
        ]
    )
    fig.update_layout(
        barmode="stack",
        height=300,
        yaxis_title="ms per step",
        margin={"t": 30, "b": 40},
        legend={"orientation": "h", "y": 1.02, "yanchor": "bottom", "x": 0},
    )
    return fig
