"""Analyzers: functions of a (scoped) ``TraceData`` that return data; none prints, none imports a presenter.

``ANALYZERS`` registers each analysis as an ``Analyzer`` (``traceanalyzer.analyzer``: its part of a rank, its
section and findings of the job's parts, the analyzers it needs), in report order; the ledger comes first and
always. One path makes every report: each rank's view is turned into every analyzer's part (``rank_parts``: where
the rank is loaded, a worker process or a Dask worker), and the job's sections and findings are read from the
parts (``job_sections``, ``job_findings``: every finding ranked once over all analyzers, ``findings.rank``, so
savings add up). A joined trace is the job of one part: ``as_job``, made by the analyzers that apply to it
(``APPLIES``: the Ascend analyzer on an Ascend trace, the distributed one where there is communication); those two
are imported on their first call (``lazy.Function``), so that the report of a one-rank Kineto trace imports neither.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence

from traceanalyzer import lazy
from traceanalyzer.analyzer import Analyzer, stacked
from traceanalyzer.analyzers import (
    counters,
    fusion,
    gemm,
    health,
    hotspots,
    inference,
    ledger,
    memory,
    summary,
)
from traceanalyzer.errors import AnalyzerFailed
from traceanalyzer.findings import Finding, rank
from traceanalyzer.jobdata import Failed, JobData, PartFailed, RankParts
from traceanalyzer.memo import remember
from traceanalyzer.options import Options
from traceanalyzer.schema import Kind, Platform
from traceanalyzer.section import Fact, Section
from traceanalyzer.tracedata import TraceData


def _imported_on_use(module: str) -> Analyzer:
    """The analyzer of ``traceanalyzer.analyzers.<module>`` (its ``rank_part``, ``merge``, ``job_section`` and
    ``job_findings``, reading the summary too), the module imported on the first call of one of them."""
    rank_part, merge, section, findings = (
        lazy.Function(f"{__name__}.{module}.{name}") for name in ("rank_part", "merge", "job_section", "job_findings")
    )
    return Analyzer(module, rank_part, merge, section, findings, ("summary",))


LEDGER: Analyzer = Analyzer("ledger", ledger.rank_part, ledger.merge, ledger.job_section, needs=("summary",))
"""What was analysed: the first section of every report, which also names the sections whose analyzer failed."""

ANALYZERS: tuple[Analyzer, ...] = (
    LEDGER,
    Analyzer("summary", summary.rank_part, summary.merge, summary.job_section),
    Analyzer(
        "hotspots",
        hotspots.rank_part,
        stacked,
        hotspots.job_section,
        hotspots.job_findings,
        ("summary", "gemm", "counters"),
    ),
    Analyzer("gemm", gemm.rank_part, gemm.merge, gemm.job_section, needs=("counters",)),
    Analyzer("counters", counters.rank_part, stacked, counters.job_section),
    Analyzer("health", health.rank_part, health.merge, health.job_section, health.job_findings, ("summary",)),
    _imported_on_use("distributed"),
    Analyzer("fusion", fusion.rank_part, fusion.merge, fusion.job_section, fusion.job_findings, ("summary",)),
    Analyzer("memory", memory.rank_part, memory.merge, memory.job_section, memory.job_findings, ("summary",)),
    _imported_on_use("ascend"),
    Analyzer(
        "inference",
        inference.rank_part,
        inference.merge,
        inference.job_section,
        inference.job_findings,
        ("summary",),
        inference.job_absence,
    ),
)
"""Every analyzer, in report order (the ledger first); a new analysis is one more entry (README: "To add an
analysis")."""


def _on_ascend(trace: TraceData) -> bool:
    """Was the trace recorded on Ascend (the Ascend analyzer's part is None off Ascend)?"""
    return trace.meta.platform == Platform.ASCEND


def _communicates(trace: TraceData) -> bool:
    """Does the trace hold communication (without it the distributed analyzer has no section and no findings)?"""
    return bool((trace.events["kind"] == Kind.COMMUNICATION.value).any())


APPLIES: dict[str, Callable[[TraceData], bool]] = {"ascend": _on_ascend, "distributed": _communicates}
"""For the analyzers that say something of some traces only: whether they can of a (whole) trace. A joined trace's
report leaves out those that cannot (``as_job`` without a registry); the others apply to every trace."""


def rank_parts(view: TraceData, options: Options, registry: Sequence[Analyzer] | None = None) -> dict[str, object]:
    """Every analyzer's part of one rank's view (or a joined trace's), by analyzer name, keeping what a report with
    these options shows; an analyzer that fails leaves a ``Failed`` part naming where, reported where the parts are
    read, so that one analyzer's bug does not lose the rank."""
    parts: dict[str, object] = {}
    for analyzer in registered(registry):
        try:
            parts[analyzer.name] = analyzer.rank_part(view, options)
        except Exception as e:  # one analyzer's bug must not lose the rank
            parts[analyzer.name] = Failed(f"{type(e).__name__}: {e}", _where(view.meta.ranks))
    return parts


def as_job(view: TraceData, options: Options, registry: Sequence[Analyzer] | None = None) -> JobData:
    """A (scoped) joined trace as the job of one part (every analyzer's part of the whole scope: those of
    ``registry``, default those of ``ANALYZERS`` that apply to the trace), once per view, ``options.top`` and
    registry: the joined report is the job path of one part."""
    key = f"analyzers.job.{options.top}.{_names(registry)}.{'given' if registry is not None else 'applying'}"
    return remember(view, key, lambda: _one_part_job(view, Options(top=options.top), _applicable(view, registry)))


def _applicable(view: TraceData, registry: Sequence[Analyzer] | None) -> Sequence[Analyzer]:
    """``registry`` when given, else the analyzers that can say something of the view's whole trace (``APPLIES``),
    in report order."""
    if registry is not None:
        return registry
    return [a for a in ANALYZERS if a.name not in APPLIES or APPLIES[a.name](view.base)]


def _one_part_job(view: TraceData, options: Options, registry: Sequence[Analyzer]) -> JobData:
    rank = view.meta.ranks[0] if view.meta.ranks else 0
    parts = rank_parts(view, options, registry)
    one = RankParts(rank, view.meta, view.base.steps_recorded(), len(view.events), len(view.memory_events), parts)
    return JobData(view.meta, [one], view.scope, options, registry)


def job_findings(job: JobData, registry: Sequence[Analyzer] | None = None) -> list[Finding]:
    """Findings of every analyzer from the job's parts, ranked once (device savings bounded by the ranks'
    headroom), once per job."""
    return remember(job, f"analyzers.findings.{_names(registry)}", lambda: _ranked(job, _reading(job, registry)))


def _ranked(job: JobData, registry: Sequence[Analyzer]) -> list[Finding]:
    names = {a.name for a in registry}
    found = _each(job, registry, lambda a: a.findings(job.merged(a.name), job))
    return rank([f for of_one in found for f in of_one], _headroom(job) if "health" in names else None)


def job_sections(job: JobData, options: Options, registry: Sequence[Analyzer] | None = None) -> list[Section]:
    """The ledger, then every analyzer's section that has something to say, from the job's parts."""
    first, *rest = _reading(job, registry)
    failed: list[str] = []
    found = [
        s for s in _each(job, rest, lambda a: a.section(job.merged(a.name), job, options), failed) if s is not None
    ]
    led = first.section(job.merged(first.name), job, options)
    assert led is not None, "the ledger always has a section"
    return [_marked(led, failed, _absent(job, rest, found, failed)), *found]


def registered(registry: Sequence[Analyzer] | None = None) -> Sequence[Analyzer]:
    """The analyzers a report runs: ``registry`` when given, else ``ANALYZERS`` as it is now."""
    return ANALYZERS if registry is None else registry


def _reading(job: JobData, registry: Sequence[Analyzer] | None) -> Sequence[Analyzer]:
    """The analyzers whose sections and findings a job's report reads: ``registry`` when given, else those that made
    the job's parts."""
    return registry if registry is not None else [a for a in job.registry if isinstance(a, Analyzer)]


def _names(registry: Sequence[Analyzer] | None) -> str:
    """The analyzers' names, as a memo key."""
    return ",".join(a.name for a in registered(registry))


def _absent(
    job: JobData, registry: Sequence[Analyzer], found: list[Section], failed: list[str]
) -> list[tuple[str, str]]:
    """(name, why) of each analyzer that says why it has no section, whose section is not shown, its analyzer not
    failed."""
    shown = {s.id for s in found} | set(failed)
    saying = [a for a in registry if a.absence is not None and a.name not in shown]
    whys = [(a.name, _each(job, [a], lambda a: a.absence(job.merged(a.name), job))) for a in saying]
    return [(name, why[0]) for name, why in whys if why and why[0]]


def _marked(led: Section, failed: list[str], absent: list[tuple[str, str]]) -> Section:
    """The ledger with the sections whose analyzer failed named as missing, and why the absent ones are."""
    if failed:
        led.facts.append(Fact("missing_sections", "sections missing (their analyzer failed)", ", ".join(failed)))
    led.facts += [Fact(f"{name}_not_shown", f"{name} section not shown", why) for name, why in absent]
    return led


def _headroom(job: JobData) -> dict[int, int] | None:
    """The ranks' device headroom (``health.critical``), or None (device savings unbounded) with a warning when it
    cannot be read."""
    try:
        return health.job_device_headroom(job)
    except Exception as e:  # the health analyzer's failure is already reported; rank the findings anyway
        warnings.warn(f"device headroom not known ({_problem(e, 'health')}): device savings not bounded", stacklevel=4)
        return None


def _each(job: JobData, registry: Sequence[Analyzer], call: Callable, failed: list[str] | None = None) -> list:
    """``call(analyzer)`` for every analyzer whose merged parts (those it needs, then its own) were made; one that
    fails is an AnalyzerFailed warning naming where (its name added to ``failed``), so that one analyzer's bug does
    not hide the others' results."""
    out = []
    for analyzer in registry:
        try:
            for of in (*analyzer.needs, analyzer.name):
                job.merged(of)
            out.append(call(analyzer))
        except Exception as e:
            warnings.warn(f"analyzer {analyzer.name} {_problem(e, analyzer.name)}", AnalyzerFailed, stacklevel=4)
            if failed is not None:
                failed.append(analyzer.name)
    return out


def _problem(e: Exception, analyzer: str) -> str:
    """What went wrong with ``analyzer``, as the warning says it: its own part failed (where), a part it reads
    failed (which, where), or it failed itself."""
    if not isinstance(e, PartFailed):
        return f"failed: {type(e).__name__}: {e}"
    if e.analyzer == analyzer:
        return f"failed on {e.where}: {e.problem}"
    return f"needs {e.analyzer}, which failed on {e.where} ({e.problem})"


def _where(ranks: Sequence[int]) -> str:
    """Where a part was made: ``"rank 1"``, ``"ranks 0, 1"``."""
    return f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {', '.join(map(str, ranks))}" if ranks else "no rank"
