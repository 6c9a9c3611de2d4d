"""The Ascend page: core types, overlap per step, AI_CPU ops and dynamic shapes of an Ascend (CANN) trace: the
ascend analyzer's own tables, each under what its numbers are. Nothing here computes a finding."""

from __future__ import annotations

from dash import dcc, html
from traceanalyzer.dashboards import state
from traceanalyzer.dashboards.blocks import Block, block_section, evidence_note, unavailable
from traceanalyzer.dashboards.views import View

from traceanalyzer.analyzers import ascend as ascend_analyzer

TITLE = "Ascend"

ASCEND = (
    Block(
        "ascend",
        "core_breakdown",
        "core-types",
        "Total over the whole window (ms) and share of device time, per core group (cube, vector, AI_CPU, "
        "communication).",
        "no device work recorded",
    ),
    Block(
        "ascend",
        "overlap",
        "overlap",
        "Per rank and step (ms), as msprof's overlap analysis: computing, communication, communication not "
        "overlapped, free; the lane_ columns are the profiler's own overlap lanes where it wrote them.",
        "no steps to break down",
    ),
    Block(
        "ascend",
        "ai_cpu_ops",
        "ai-cpu",
        "Total over the whole window, per op (ms); slow ones are worth moving to AI Core.",
        "no op ran on the AI_CPU",
    ),
    Block(
        "ascend",
        "dynamic_shape_ops",
        "ascend-dynamic-shapes",
        "Total over the whole window, per op: calls, distinct shapes, device time (ms).",
        "no op ran with changing shapes",
    ),
)
"""The Ascend page, in reading order."""

FORMAT_CONVERSIONS = "Format conversions (TransData) are ranked with the other fusion opportunities: "


def layout(view: View, query: dict[str, str]) -> list:
    """Core types, overlap per step, AI_CPU ops and dynamic shapes of an Ascend trace."""
    if not ascend_analyzer.is_ascend(view.trace):
        return [unavailable("Ascend", "this is not an Ascend (CANN) trace")]
    conversions = html.P(
        [FORMAT_CONVERSIONS, dcc.Link("Fusion →", href=f"/fusion{state.encode(query)}")], className="note"
    )
    key = state.evidence(query)
    return [*evidence_note(key), *(block_section(view, block, evidence=key) for block in ASCEND), conversions]
