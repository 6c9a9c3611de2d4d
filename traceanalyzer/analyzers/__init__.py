"""Analyzers: functions of a (scoped) ``TraceData`` that return data; none prints, none imports a presenter.

Each module in ``MODULES`` may define ``findings(trace) -> list[Finding]`` and
``section(trace, options) -> Section | None`` (``traceanalyzer.section``), and, where a missing section needs
saying why, ``absence(trace) -> str`` (and ``job_absence(job)``): the ledger names it with that reason.
``report`` collects them: every section, and every finding ranked once over all analyzers (``findings.rank``), so
savings add up.

A job analysed rank by rank (``traceanalyzer.jobdata``) goes through the same modules in two halves: each module's
``summarize(trace, options) -> part`` runs where a rank is loaded, on that rank alone, and its
``job_section(job, options)`` and ``job_findings(job)`` run on the ranks' parts; they give what ``section`` and
``findings`` give on the joined trace.
"""

from __future__ import annotations

import warnings

from traceanalyzer.analyzers import (
    ascend,
    counters,
    distributed,
    fusion,
    gemm,
    health,
    hotspots,
    inference,
    ledger,
    memory,
    steps,
)
from traceanalyzer.errors import AnalyzerFailed
from traceanalyzer.findings import Finding, rank
from traceanalyzer.jobdata import Failed, JobData
from traceanalyzer.options import Options
from traceanalyzer.section import Fact, Section
from traceanalyzer.tracedata import TraceData

MODULES = (steps, hotspots, gemm, counters, health, distributed, fusion, memory, ascend, inference)
"""Analyzer modules, in report order (the ledger comes first and always)."""
SUMMARIZED = (ledger, *MODULES)
"""Modules whose parts a rank's summary carries."""


def part_name(module) -> str:
    """The name a module's part goes by in a rank's summary: its last name (``"hotspots"``)."""
    return module.__name__.rsplit(".", 1)[-1]


def all_findings(trace: TraceData) -> list[Finding]:
    """Findings of every analyzer, ranked; an analyzer that fails is reported as a warning, not a crash."""
    found = [f for of_module in _each(_with("findings"), lambda m: m.findings(trace)) for f in of_module]
    return rank(found, _headroom(lambda: health.device_headroom(trace)))


def sections(trace: TraceData, options: Options) -> list[Section]:
    """The ledger, then the section of every analyzer that has something to say about this trace."""
    failed: list[str] = []
    found = [s for s in _each(MODULES, lambda m: m.section(trace, options), failed) if s is not None]
    absent = _absent(found, failed, "absence", lambda m: m.absence(trace))
    return [_marked(ledger.section(trace, options), failed, absent), *found]


def summarize(trace: TraceData, options: Options) -> dict[str, object]:
    """Every module's part of one rank (a trace of that rank alone, or a step of it), by part name, keeping what a
    report with these options shows; a module that fails leaves a ``Failed`` part, reported where the parts are
    read, as the joined trace's report would."""
    parts: dict[str, object] = {}
    for module in SUMMARIZED:
        try:
            parts[part_name(module)] = module.summarize(trace, options)
        except Exception as e:  # one analyzer's bug must not lose the rank
            parts[part_name(module)] = Failed(f"{type(e).__name__}: {e}")
    return parts


def all_job_findings(job: JobData) -> list[Finding]:
    """Findings of every analyzer from the ranks' parts, ranked as ``all_findings`` ranks them."""
    found = _each(_with("job_findings"), lambda m: _read(job, m, m.job_findings))
    return rank([f for of_module in found for f in of_module], _headroom(lambda: health.job_device_headroom(job)))


def job_sections(job: JobData, options: Options) -> list[Section]:
    """The ledger, then every analyzer's section, from the ranks' parts (as ``sections`` of the joined trace)."""
    failed: list[str] = []
    found = [s for s in _each(MODULES, lambda m: _read(job, m, lambda j: m.job_section(j, options)), failed) if s]
    absent = _absent(found, failed, "job_absence", lambda m: m.job_absence(job))
    return [_marked(ledger.job_section(job, options), failed, absent), *found]


def _absent(found: list[Section], failed: list[str], function: str, call) -> list[tuple[str, str]]:
    """(part name, why) of each module with ``function`` whose section is not shown, its analyzer not failed."""
    shown = {s.id for s in found} | set(failed)
    whys = [(part_name(m), _each([m], call)) for m in _with(function) if part_name(m) not in shown]
    return [(name, why[0]) for name, why in whys if why and why[0]]


def _marked(led: Section, failed: list[str], absent: list[tuple[str, str]]) -> Section:
    """The ledger with the sections whose analyzer failed named as missing, and why the absent ones are."""
    if failed:
        led.facts.append(Fact("missing_sections", "sections missing (their analyzer failed)", ", ".join(failed)))
    led.facts += [Fact(f"{name}_not_shown", f"{name} section not shown", why) for name, why in absent]
    return led


def _headroom(read) -> dict[int, int] | None:
    """The ranks' device headroom (``health.critical``), or None (device savings unbounded) with a warning when it
    cannot be read."""
    try:
        return read()
    except Exception as e:  # the health analyzer's failure is already reported; rank the findings anyway
        warnings.warn(f"device headroom not known ({type(e).__name__}: {e}): device savings not bounded", stacklevel=3)
        return None


class _PartFailed(Exception):
    """A module's part could not be made on some rank (its problem, as the rank's worker caught it)."""


def _read(job: JobData, module, read):
    """``read(job)``, unless a rank's part of the module failed (then that failure)."""
    failed = [p for p in job.parts(part_name(module)) if isinstance(p, Failed)]
    if failed:
        raise _PartFailed(failed[0].problem)
    return read(job)


def _with(function: str) -> list:
    """The modules that define ``function``."""
    return [m for m in MODULES if hasattr(m, function)]


def _each(modules, call, failed: list[str] | None = None) -> list:
    """``call(module)`` for every module; an analyzer that fails is an AnalyzerFailed warning (its part name added
    to ``failed``), so that one analyzer's bug does not hide the others' results."""
    out = []
    for module in modules:
        try:
            out.append(call(module))
        except Exception as e:
            problem = str(e) if isinstance(e, _PartFailed) else f"{type(e).__name__}: {e}"
            warnings.warn(f"analyzer {module.__name__} failed: {problem}", AnalyzerFailed, stacklevel=3)
            if failed is not None:
                failed.append(part_name(module))
    return out
