"""The analyzer contract: one ``Analyzer`` per analysis, run the same way on a joined trace and on a job analysed
rank by rank (here or on Dask workers).

``rank_part(view, options)`` runs where a rank is loaded, on that rank's (scoped) view, and returns its part: small,
picklable data (never the event table). The job's parts, one per rank, are then read by ``section(job, options)``
and ``findings(job)`` through ``job.parts(name)``, which merge them by the analyzer's rule (stacked in rank order,
summed per key, unions of intervals: each analyzer states its own); ``needs`` names the analyzers whose parts they
read as well; ``absence(job)``, where an analyzer has one, says why its section is missing (the ledger names it).
A joined trace is the job of one part (``rank_part`` of the whole scope), so an analyzer that
follows this contract shows the same in the joined, the ``--per-rank`` and the Dask report.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from traceanalyzer.findings import Finding
from traceanalyzer.jobdata import JobData
from traceanalyzer.options import Options
from traceanalyzer.section import Section
from traceanalyzer.tracedata import TraceData


def no_section(job: JobData, options: Options) -> Section | None:
    """The section of an analyzer that has none."""
    return None


def no_findings(job: JobData) -> list[Finding]:
    """The findings of an analyzer that makes none."""
    return []


@dataclass(frozen=True)
class Analyzer:
    """One analysis: its name (the key of its part and its section's id), its part of a rank, its section and
    findings of the job's parts, and the analyzers whose parts those read too."""

    name: str
    rank_part: Callable[[TraceData, Options], object]
    section: Callable[[JobData, Options], Section | None] = no_section
    findings: Callable[[JobData], list[Finding]] = no_findings
    needs: tuple[str, ...] = ()
    absence: Callable[[JobData], str] | None = None  # why the job has no section ('' when it has one), if it says
