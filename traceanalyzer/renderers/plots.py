"""Plotly figures of a trace's analyses, for notebooks: ``ta.plots.hotspots(t.hotspots())`` and friends.

Each function takes what the ``Trace`` facade computed (a table, an analysis, the event table) and draws it with
the same figure builders as the dashboard; none computes a finding, none takes a trace.
"""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from traceanalyzer.analyzers.memory import MemoryAnalysis
from traceanalyzer.records import records
from traceanalyzer.renderers import figures
from traceanalyzer.renderers import timeline as lanes


def hotspots(table: pd.DataFrame) -> go.Figure:
    """Bars of the top ``figures.BAR_TOP`` entries of a hotspot table (``t.hotspots(level, step=, rank=)``)."""
    return figures.hotspot_bars(table)


def steps(table: pd.DataFrame) -> go.Figure:
    """Step time (device-experienced) against device busy time, per rank and step of a step table (``t.steps()``)."""
    return figures.step_bars(records(table))


def timeline(events: pd.DataFrame, steps: pd.DataFrame, rank: int | None = None, step: int | None = None) -> go.Figure:
    """One step of one rank of the event table as Gantt lanes (device streams and host threads), coloured by kind
    of work; ``steps`` is the step table (``t.steps()``). Defaults: the first rank, and its median-length step."""
    if not len(steps):
        return figures.empty("the trace has no step markers")
    rank = int(steps["rank"].iloc[0]) if rank is None else rank
    mine = steps[steps["rank"] == rank].sort_values("step_ns")
    step = int(mine["step"].iloc[len(mine) // 2]) if step is None else step
    return figures.gantt(lanes.step_segments(events, rank, step))


def overlap(table: pd.DataFrame) -> go.Figure:
    """Exposed communication per rank and step of an overlap table (``t.overlap()``), as a heatmap."""
    return figures.heatmap(table, "comm_exposed_ns", "exposed communication (ms)")


def memory(analysis: MemoryAnalysis) -> go.Figure:
    """Allocated and reserved memory over time per device of a memory analysis (``t.memory()``), each peak marked."""
    return figures.memory_lines(analysis.timeline, analysis.peaks)
