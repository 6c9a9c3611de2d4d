"""A toy analysis written as README's "To add an analysis" says: kernels per rank, a section and one finding.

Its functions live in a module (not a test's body) so that worker processes and Dask workers can import them."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from traceanalyzer.analyzer import Analyzer
from traceanalyzer.analyzers.summary import job_step_time
from traceanalyzer.findings import Finding, make
from traceanalyzer.jobdata import JobData
from traceanalyzer.options import Options
from traceanalyzer.schema import Kind
from traceanalyzer.section import Fact, Per, Section, Table, Unit
from traceanalyzer.tables import stack
from traceanalyzer.tracedata import TraceData


@dataclass(frozen=True)
class ToyPart:
    """Kernels per rank: one row per rank (``rank``, ``kernels``, ``kernel_ns``), of one rank or of a job."""

    by_rank: pd.DataFrame


def rank_part(view: TraceData, options: Options) -> ToyPart:
    """Per rank of the view: its kernels and their device time."""
    kernels = view.events[view.events["kind"] == Kind.KERNEL.value]
    table = kernels.groupby("rank", sort=True)["dur"].agg(["size", "sum"]).reset_index()
    return ToyPart(table.set_axis(["rank", "kernels", "kernel_ns"], axis=1))


def merge(parts: list[ToyPart], job: JobData) -> ToyPart:
    """The ranks' rows one after another, in rank order (each rank is in one part)."""
    table = stack([p.by_rank for p in parts]).sort_values("rank", kind="stable").reset_index(drop=True)
    return ToyPart(table)


def section(part: ToyPart, job: JobData, options: Options) -> Section:
    """Kernels per rank, and their sum."""
    facts = [Fact("kernels", "kernels", int(part.by_rank["kernels"].sum()), Unit.COUNT, Per.TOTAL)]
    return Section(
        "toy", "Toy: kernels per rank", facts, [Table("by_rank", "Kernels per rank", part.by_rank, Per.TOTAL)]
    )


def findings(part: ToyPart, job: JobData) -> list[Finding]:
    """One informational finding: the kernel time per step (what the toy is about)."""
    total = int(part.by_rank["kernel_ns"].sum())
    return [make("toy", "kernels", "Kernel time (toy)", "Nothing to do.", job_step_time(job), concerns_ns=total)]


TOY = Analyzer("toy", rank_part, merge, section, findings, needs=("summary",))


def broken_part(view: TraceData, options: Options) -> ToyPart:
    """A part that fails where rank 1 is in the view."""
    if 1 in view.meta.ranks:
        raise ValueError("a bug on rank 1")
    return rank_part(view, options)


def broken_section(part: ToyPart, job: JobData, options: Options) -> Section:
    """The section of the broken analyzer's part."""
    return Section("broken", "Broken", tables=[Table("by_rank", "Kernels per rank", part.by_rank)])


def needs_broken_section(part: ToyPart, job: JobData, options: Options) -> Section:
    """A section that reads the broken analyzer's merged part."""
    broken: ToyPart = job.merged("broken")
    return Section("needs_broken", "Needs broken", tables=[Table("by_rank", "Kernels", broken.by_rank)])


BROKEN = Analyzer("broken", broken_part, merge, broken_section)
NEEDS_BROKEN = Analyzer("needs_broken", rank_part, merge, needs_broken_section, needs=("broken",))


def undeclared_section(part: ToyPart, job: JobData, options: Options) -> Section:
    """A section that reads the broken analyzer's merged part without declaring it in ``needs``."""
    return needs_broken_section(part, job, options)


READS_BROKEN = Analyzer("reads_broken", rank_part, merge, undeclared_section)


def failing_part(view: TraceData, options: Options) -> ToyPart:
    """A part that fails everywhere."""
    raise ValueError("a bug")
