"""The analyzer contract: one ``Analyzer`` per analysis, run the same way on a joined trace and on a job analysed
rank by rank (here or on Dask workers).

- ``rank_part(view, options) -> Part`` runs where a rank is loaded, on that rank's (scoped) view, and returns its
  part: small, picklable, typed data (a named dataclass, never the event table).
- ``merge(parts, job) -> JobPart`` is the analyzer's merge rule: the ranks' parts (in rank order) made into the
  job's part (stacked, summed per key, unions of intervals: each analyzer states its own). ``JobData.merged(name)``
  runs it once per job.
- ``section(job_part, job, options)`` and ``findings(job_part, job)`` read the merged part; the merged parts of the
  analyzers named in ``needs`` they read as ``job.merged(name)`` (through those analyzers' accessors, such as
  ``summary.job_step_table``), and ``job.meta``/``job.scope`` for the job's facts.
- ``absence(job_part, job)``, where an analyzer has one, says why its section is missing (the ledger names it).

A part that failed on a rank is named there ("broken failed on rank 1: ..."), and an analyzer that needs it says
"needs broken, which failed on rank 1" instead of failing on it. A joined trace is the job of one part
(``rank_part`` of the whole scope), so an analyzer that follows this contract shows the same in the joined, the
``--per-rank`` and the Dask report.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from traceanalyzer.findings import Finding
from traceanalyzer.jobdata import JobData
from traceanalyzer.options import Options
from traceanalyzer.section import Section
from traceanalyzer.tracedata import TraceData

P = TypeVar("P")
"""An analyzer's part of one rank."""
J = TypeVar("J")
"""An analyzer's part of the job (its ranks' parts merged)."""


def stacked(parts: list[P], job: JobData) -> list[P]:
    """The merge rule of an analyzer whose section reads every rank's part: the parts as they are, in rank order."""
    return parts


def no_section(job_part: Any, job: JobData, options: Options) -> Section | None:
    """The section of an analyzer that has none."""
    return None


def no_findings(job_part: Any, job: JobData) -> list[Finding]:
    """The findings of an analyzer that makes none."""
    return []


@dataclass(frozen=True)
class Analyzer(Generic[P, J]):
    """One analysis: its name (the key of its part and its section's id), its part of a rank, its merge rule, its
    section and findings of the merged part, and the analyzers whose merged parts those read too."""

    name: str
    rank_part: Callable[[TraceData, Options], P]
    merge: Callable[[list[P], JobData], J]
    section: Callable[[J, JobData, Options], Section | None] = no_section
    findings: Callable[[J, JobData], list[Finding]] = no_findings
    needs: tuple[str, ...] = ()
    absence: Callable[[J, JobData], str] | None = None  # why the job has no section ('' when it has one), if it says
