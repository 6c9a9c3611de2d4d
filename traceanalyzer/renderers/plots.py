"""Plotly figures of a trace's analyses, for notebooks: ``ta.plots.hotspots(t)`` and friends.

Each function takes a loaded Trace, asks the analyzers for their data, and draws it with the same figure builders
as the dashboard; none computes a finding.
"""

from __future__ import annotations

import plotly.graph_objects as go

from traceanalyzer.records import records
from traceanalyzer.renderers import figures
from traceanalyzer.renderers import timeline as lanes


def hotspots(trace, level: str = "kernel", top: int = figures.BAR_TOP, **filters) -> go.Figure:
    """Bars of the top entries of ``trace.hotspots(level, **filters)`` (filters: step, rank, kind)."""
    return figures.hotspot_bars(trace.hotspots(level, top=top, **filters))


def steps(trace) -> go.Figure:
    """Step time (device-experienced) against device busy time, per rank and step."""
    return figures.step_bars(records(trace.steps()))


def timeline(trace, rank: int | None = None, step: int | None = None) -> go.Figure:
    """One step of one rank as Gantt lanes (device streams and host threads), coloured by kind of work.

    Defaults: the first rank, and its median-length step."""
    table = trace.steps()
    if not len(table):
        return figures.empty("the trace has no step markers")
    rank = int(table["rank"].iloc[0]) if rank is None else rank
    mine = table[table["rank"] == rank].sort_values("step_ns")
    step = int(mine["step"].iloc[len(mine) // 2]) if step is None else step
    return figures.gantt(lanes.step_segments(trace.events, rank, step))


def overlap(trace) -> go.Figure:
    """Exposed communication per rank and step, as a heatmap."""
    return figures.heatmap(trace.overlap(), "comm_exposed_ns", "exposed communication (ms)")


def memory(trace) -> go.Figure:
    """Allocated and reserved memory over time per device, with each peak marked."""
    analysis = trace.memory()
    return figures.memory_lines(analysis.timeline, analysis.peaks)
