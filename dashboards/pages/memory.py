"""The Memory page: allocated and reserved memory over time with the peak marked, and the memory section's facts
and tables."""

from __future__ import annotations

import pandas as pd
from dash import dcc
from traceanalyzer.dashboards import charts, state
from traceanalyzer.dashboards.blocks import evidence_note, section_facts, section_tables, unavailable
from traceanalyzer.dashboards.views import View

from traceanalyzer.humanize import NS_PER_MS
from traceanalyzer.renderers import figures

TITLE = "Memory"


def layout(view: View, query: dict[str, str]) -> list:
    """Allocated/reserved over time with the peak marked, and the memory section's facts and tables."""
    found, section = view.optional("memory"), view.section("memory")
    if found.data is None or section is None:
        return [unavailable("Memory", found.reason or "no memory events")]
    result = found.data
    return [
        dcc.Graph(id="memory-graph", figure=_memory_chart(view, result.timeline, result.peaks)),
        section_facts(section, "memory-facts"),
        *evidence_note(state.evidence(query)),
        *section_tables(section, evidence=state.evidence(query)),
    ]


def _memory_chart(view: View, timeline: pd.DataFrame, peaks: pd.DataFrame):
    """The memory lines, one colour per rank and device, on the tables' clock: ms from the trace's start, as the
    section's at_ns columns count."""
    fig = charts.pools_coloured(figures.memory_lines(timeline, peaks))
    if not len(timeline):
        return fig
    shift = (int(timeline["ts"].min()) - view.trace.meta.start_ns) / NS_PER_MS
    for trace in fig.data:
        trace.x = [x + shift for x in trace.x]
    fig.update_layout(xaxis_title="ms from the trace's start (the tables' 'at' times count from there too)")
    return fig
