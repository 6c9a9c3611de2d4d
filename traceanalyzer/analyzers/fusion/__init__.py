"""Fusion opportunities: library patterns, unfused optimizer steps and discovered repeated chains of memory-bound
kernels, each with an estimated saving per step.

Modules: ``patterns`` (name → token normalisation for both platforms, and the pattern library), ``opstream`` (the
op stream the patterns match on: one entry per top-level op or unlinked device task), ``matching`` (occurrences
and their measured/estimated numbers), ``discovery`` (repeated chains over the memory-bound runs of all ranks),
``part`` (a rank's part: its occurrences summed per variant, its runs), ``section`` (the parts combined into
opportunities per variant, findings and the report section).
Contract: ``occurrences(trace)`` and ``opportunities(trace)`` are memoised DataFrames; ``rank_part(trace)`` is a
rank's part, ``merge`` combines a job's parts; ``findings``/``section`` (a trace) and ``job_findings``/``job_section``
(a job's merged part) combine parts the same way and give the same result for the same ranks.
"""

from __future__ import annotations

from traceanalyzer.analyzers.fusion.matching import occurrences
from traceanalyzer.analyzers.fusion.opstream import op_stream
from traceanalyzer.analyzers.fusion.part import rank_part
from traceanalyzer.analyzers.fusion.section import (
    OPPORTUNITY_COLUMNS,
    SAVING_MODEL,
    findings,
    job_findings,
    job_section,
    merge,
    opportunities,
    section,
)

__all__ = [
    "OPPORTUNITY_COLUMNS",
    "SAVING_MODEL",
    "findings",
    "job_findings",
    "job_section",
    "merge",
    "occurrences",
    "op_stream",
    "opportunities",
    "section",
    "rank_part",
]
