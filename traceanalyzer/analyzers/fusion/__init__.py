"""Fusion opportunities: library patterns, unfused optimizer steps and discovered repeated chains of memory-bound
kernels, each with an estimated saving per step.

Modules: ``patterns`` (name → token normalisation for both platforms, and the pattern library), ``opstream`` (the
op stream the patterns match on: one entry per top-level op or unlinked device task), ``matching`` (occurrences
and their measured/estimated numbers), ``discovery`` (repeated chains over the memory-bound runs of all ranks),
``part`` (a rank's part: its occurrences summed per variant, its runs), ``section`` (the parts combined into
opportunities per variant, findings and the report section).
Contract: ``occurrences(trace)`` and ``opportunities(trace)`` are memoised DataFrames; ``rank_part(trace)`` is a
rank's part, ``merge`` combines a job's parts; ``job_findings``/``job_section`` read a job's
merged part (a joined trace is the job of its one part, ``analyzers.as_job``).
"""

from __future__ import annotations

from traceanalyzer.analyzers.fusion.matching import occurrences
from traceanalyzer.analyzers.fusion.opstream import op_stream
from traceanalyzer.analyzers.fusion.part import rank_part
from traceanalyzer.analyzers.fusion.section import (
    OPPORTUNITY_COLUMNS,
    SAVING_MODEL,
    job_findings,
    job_section,
    merge,
    opportunities,
)

__all__ = [
    "OPPORTUNITY_COLUMNS",
    "SAVING_MODEL",
    "job_findings",
    "job_section",
    "merge",
    "occurrences",
    "op_stream",
    "opportunities",
    "rank_part",
]
