"""Analyzers: functions of a (scoped) ``TraceData`` that return data; none prints, none imports a presenter.

Each module in ``MODULES`` may define ``findings(trace) -> list[Finding]`` and
``section(trace, options) -> Section | None`` (``traceanalyzer.section``). ``report`` collects them: every
section, and every finding ranked once over all analyzers (``findings.rank``), so savings add up.

A job analysed rank by rank (``traceanalyzer.jobdata``) goes through the same modules in two halves: each module's
``summarize(trace, options) -> part`` runs where a rank is loaded, on that rank alone, and its
``job_section(job, options)`` and ``job_findings(job)`` run on the ranks' parts; they give what ``section`` and
``findings`` give on the joined trace.
"""

from __future__ import annotations

import warnings

from traceanalyzer.analyzers import ascend, distributed, fusion, gemm, health, hotspots, ledger, memory, steps
from traceanalyzer.findings import Finding, rank
from traceanalyzer.jobdata import JobData
from traceanalyzer.options import Options
from traceanalyzer.section import Section
from traceanalyzer.tracedata import TraceData

MODULES = (steps, hotspots, gemm, health, distributed, fusion, memory, ascend)
"""Analyzer modules, in report order (the ledger comes first and always)."""
SUMMARIZED = (ledger, *MODULES)
"""Modules whose parts a rank's summary carries."""


def part_name(module) -> str:
    """The name a module's part goes by in a rank's summary: its last name (``"hotspots"``)."""
    return module.__name__.rsplit(".", 1)[-1]


def all_findings(trace: TraceData) -> list[Finding]:
    """Findings of every analyzer, ranked; an analyzer that fails is reported as a warning, not a crash."""
    found: list[Finding] = []
    for module in MODULES:
        finder = getattr(module, "findings", None)
        if finder is None:
            continue
        try:
            found.extend(finder(trace))
        except Exception as e:  # one analyzer's bug must not hide the others' findings
            warnings.warn(f"analyzer {module.__name__} failed: {type(e).__name__}: {e}", stacklevel=2)
    return rank(found)


def sections(trace: TraceData, options: Options) -> list[Section]:
    """The ledger, then the section of every analyzer that has something to say about this trace."""
    out = [ledger.section(trace, options)]
    for module in MODULES:
        try:
            section = module.section(trace, options)
        except Exception as e:  # keep the rest of the report
            warnings.warn(f"analyzer {module.__name__} failed: {type(e).__name__}: {e}", stacklevel=2)
            continue
        if section is not None:
            out.append(section)
    return out


def summarize(trace: TraceData, options: Options) -> dict[str, object]:
    """Every module's part of one rank (a trace of that rank alone, or a step of it), by part name, keeping what a
    report with these options shows."""
    return {part_name(module): module.summarize(trace, options) for module in SUMMARIZED}


def all_job_findings(job: JobData) -> list[Finding]:
    """Findings of every analyzer from the ranks' parts, ranked as ``all_findings`` ranks them."""
    found: list[Finding] = []
    for module in MODULES:
        finder = getattr(module, "job_findings", None)
        if finder is None:
            continue
        try:
            found.extend(finder(job))
        except Exception as e:  # one analyzer's bug must not hide the others' findings
            warnings.warn(f"analyzer {module.__name__} failed: {type(e).__name__}: {e}", stacklevel=2)
    return rank(found)


def job_sections(job: JobData, options: Options) -> list[Section]:
    """The ledger, then every analyzer's section, from the ranks' parts (as ``sections`` of the joined trace)."""
    out = [ledger.job_section(job, options)]
    for module in MODULES:
        try:
            section = module.job_section(job, options)
        except Exception as e:  # keep the rest of the report
            warnings.warn(f"analyzer {module.__name__} failed: {type(e).__name__}: {e}", stacklevel=2)
            continue
        if section is not None:
            out.append(section)
    return out
