"""The Inference page: the iterations of a generation on the device's time line coloured by phase, the time per
output token over the sequence, the bandwidth of each iteration against the device's peak, and the inference
section's facts and tables. It draws ``analyzers.inference``'s data; nothing here computes a finding."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
from dash import dcc
from traceanalyzer.dashboards import state
from traceanalyzer.dashboards.blocks import evidence_note, section_facts, section_tables, unavailable
from traceanalyzer.dashboards.views import View

from traceanalyzer import devices
from traceanalyzer.humanize import NS_PER_MS

TITLE = "Inference"
PHASE_COLOURS = {"prefill": "#d62728", "mixed": "#ff7f0e", "decode": "#1f77b4"}
"""One colour per phase, in every chart of the page."""


def layout(view: View, query: dict[str, str]) -> list:
    """The three charts of the iterations, then the section's facts and tables."""
    analysis, section = view.trace.inference(), view.section("inference")
    if section is None or not len(analysis.timeline):
        return [unavailable("Inference", analysis.reason)]
    line = analysis.timeline
    start = view.trace.meta.start_ns
    return [
        dcc.Graph(id="inference-timeline", figure=_iterations(line, start)),
        dcc.Graph(id="inference-tpot", figure=_tpot(line)),
        dcc.Graph(id="inference-bandwidth", figure=_bandwidth(line, devices.bandwidth(view.trace.meta))),
        section_facts(section, "inference-facts"),
        *evidence_note(state.evidence(query)),
        *section_tables(section, evidence=state.evidence(query)),
    ]


def _iterations(line: pd.DataFrame, start_ns: int) -> go.Figure:
    """Each iteration as a bar from the previous token to its own, on ms from the trace's start, per rank."""
    fig = go.Figure()
    for phase, rows in line.groupby("phase", sort=False):
        begin = (rows["token_end_ns"] - rows["token_ns"] - start_ns) / NS_PER_MS
        fig.add_trace(
            go.Bar(
                x=rows["token_ns"] / NS_PER_MS,
                base=begin,
                y=[f"rank {r}" for r in rows["rank"]],
                orientation="h",
                name=phase,
                marker_color=PHASE_COLOURS.get(phase),
                customdata=rows[["iteration", "context_len"]].to_numpy(),
                hovertemplate="iteration %{customdata[0]}, context %{customdata[1]}: %{x:.2f} ms<extra>%{fullData.name}"
                "</extra>",
            )
        )
    fig.update_layout(
        title="Iterations on the device's time line (each from the previous token to its own)",
        xaxis_title="ms from the trace's start",
        barmode="overlay",
        height=260,
    )
    return fig


def _tpot(line: pd.DataFrame) -> go.Figure:
    """Time per token of every iteration against its place in the request (decode: TPOT)."""
    fig = go.Figure()
    for (rank, request), rows in line.groupby(["rank", "request"]):
        fig.add_trace(
            go.Scatter(
                x=rows["iteration"],
                y=rows["token_ns"] / NS_PER_MS,
                mode="lines+markers",
                name=f"rank {rank}, request {request}",
                marker_color=[PHASE_COLOURS.get(p) for p in rows["phase"]],
            )
        )
    fig.update_layout(
        title="Time per token over the sequence (iteration 0: time to first token)",
        xaxis_title="iteration of the request",
        yaxis_title="ms per token",
    )
    return fig


def _bandwidth(line: pd.DataFrame, peak: tuple[float, str]) -> go.Figure:
    """Achieved GB/s of each iteration (bytes from the shapes over its time per token) and the HBM peak line."""
    bandwidth, source = peak
    fig = go.Figure()
    for phase, rows in line.groupby("phase", sort=False):
        fig.add_trace(
            go.Scatter(
                x=rows["iteration"], y=rows["gbps"], mode="markers", name=phase, marker_color=PHASE_COLOURS.get(phase)
            )
        )
    fig.add_hline(y=bandwidth / 1e9, line_dash="dash", annotation_text=f"peak: {source}")
    fig.update_layout(
        title="Bandwidth per iteration (estimated from shapes) against the device's peak",
        xaxis_title="iteration of the request",
        yaxis_title="GB/s",
        yaxis_type="log",
    )
    return fig
