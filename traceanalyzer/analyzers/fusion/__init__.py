"""Fusion opportunities: library patterns, unfused optimizer steps and discovered repeated chains of memory-bound
kernels, each with an estimated saving per step.

Modules: ``patterns`` (name → token normalisation for both platforms, and the pattern library), ``opstream`` (the
op stream the patterns match on: one entry per top-level op or unlinked device task), ``matching`` (occurrences
and their measured/estimated numbers), ``section`` (opportunities per variant, findings and the report section).
Contract: ``opportunities(trace)`` and ``occurrences(trace)`` are memoised DataFrames; ``findings`` and ``section``
read only them.
"""

from __future__ import annotations

from traceanalyzer.analyzers.fusion.matching import occurrences
from traceanalyzer.analyzers.fusion.opstream import op_stream
from traceanalyzer.analyzers.fusion.section import OPPORTUNITY_COLUMNS, SAVING_MODEL, findings, opportunities, section

__all__ = ["OPPORTUNITY_COLUMNS", "SAVING_MODEL", "findings", "occurrences", "op_stream", "opportunities", "section"]
