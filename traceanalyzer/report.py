"""The report: what was loaded, the ledger and every analyzer's section, and the findings ranked once."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from traceanalyzer import analyzers
from traceanalyzer.analyzer import Analyzer
from traceanalyzer.findings import Finding
from traceanalyzer.jobdata import JobData
from traceanalyzer.options import Options
from traceanalyzer.schema import TraceMeta
from traceanalyzer.section import Section
from traceanalyzer.tracedata import Scope, TraceData

SCHEMA_VERSION = 3
"""The JSON report's schema version (docs/report-schema.md); a major change bumps it."""


@dataclass
class Report:
    """A report of one scope of a trace, as typed data; the renderers turn it into text, JSON, HTML."""

    trace: dict
    scope: Scope
    sections: list[Section]
    findings: list[Finding]

    def section(self, section_id: str) -> Section:
        """The section with this id (KeyError if the report has none)."""
        for section in self.sections:
            if section.id == section_id:
                return section
        raise KeyError(section_id)


def build(trace: TraceData, options: Options) -> Report:
    """The report of a (scoped) trace: the report of the job of its one part."""
    return _of_job(analyzers.as_job(trace, options), options, trace_facts(trace), None)


def build_job(job: JobData, options: Options, registry: Sequence[Analyzer] | None = None) -> Report:
    """The report of a job analysed rank by rank (its parts made by ``registry``'s analyzers, default all): the one
    its joined trace has."""
    return _of_job(job, options, _loaded_facts(job.meta, job.events, job.memory_events), registry)


def _of_job(job: JobData, options: Options, facts: dict, registry: Sequence[Analyzer] | None) -> Report:
    """The report of a job's parts, with the facts of what was loaded."""
    sections = analyzers.job_sections(job, options, registry)
    return Report(facts, job.scope, sections, analyzers.job_findings(job, registry))


def trace_facts(trace: TraceData) -> dict:
    """What was loaded: files, platform, format, ranks, devices and the time window."""
    return _loaded_facts(trace.meta, len(trace.events), len(trace.memory_events))


def _loaded_facts(m: TraceMeta, events: int, memory_events: int) -> dict:
    """What was loaded, from the meta and the table sizes."""
    return {
        "paths": m.paths,
        "platform": m.platform.value,
        "source_format": m.source_format,
        "format_version": m.format_version,
        "ranks": m.ranks,
        "world_size": m.world_size,
        "rank_known": m.rank_known,
        "devices": [{"index": d.index, "name": d.name, "memory_bytes": d.memory_bytes} for d in m.devices],
        "start_ns": m.start_ns,
        "end_ns": m.end_ns,
        "span_ns": m.span_ns,
        "events": events,
        "memory_events": memory_events,
        "warnings": m.warnings,
        "adjustments": m.adjustments,
    }
