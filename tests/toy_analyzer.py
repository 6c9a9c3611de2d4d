"""A toy analysis written as README's "To add an analysis" says: kernels per rank, a section and one finding.

Its functions live in a module (not a test's body) so that worker processes and Dask workers can import them."""

from __future__ import annotations

import pandas as pd

from traceanalyzer.analyzer import Analyzer
from traceanalyzer.analyzers.steps import job_step_time
from traceanalyzer.findings import Finding, make
from traceanalyzer.jobdata import JobData
from traceanalyzer.options import Options
from traceanalyzer.schema import Kind
from traceanalyzer.section import Fact, Per, Section, Table, Unit
from traceanalyzer.tables import stack
from traceanalyzer.tracedata import TraceData


def rank_part(view: TraceData, options: Options) -> pd.DataFrame:
    """Per rank of the view: its kernels and their device time."""
    kernels = view.events[view.events["kind"] == Kind.KERNEL.value]
    table = kernels.groupby("rank", sort=True)["dur"].agg(["size", "sum"]).reset_index()
    return table.set_axis(["rank", "kernels", "kernel_ns"], axis=1)


def _merged(job: JobData, name: str = "toy") -> pd.DataFrame:
    """The ranks' parts of analyzer ``name``, one after another (each rank is in one part)."""
    return stack(job.parts(name)).sort_values("rank", kind="stable").reset_index(drop=True)


def section(job: JobData, options: Options) -> Section:
    """Kernels per rank, and their sum."""
    table = _merged(job)
    facts = [Fact("kernels", "kernels", int(table["kernels"].sum()), Unit.COUNT, Per.TOTAL)]
    return Section("toy", "Toy: kernels per rank", facts, [Table("by_rank", "Kernels per rank", table, Per.TOTAL)])


def findings(job: JobData) -> list[Finding]:
    """One informational finding: the kernel time per step (what the toy is about)."""
    total = int(_merged(job)["kernel_ns"].sum())
    return [make("toy", "kernels", "Kernel time (toy)", "Nothing to do.", job_step_time(job), concerns_ns=total)]


TOY = Analyzer("toy", rank_part, section, findings, needs=("steps",))


def broken_part(view: TraceData, options: Options) -> pd.DataFrame:
    """A part that fails where rank 1 is in the view."""
    if 1 in view.meta.ranks:
        raise ValueError("a bug on rank 1")
    return rank_part(view, options)


def broken_section(job: JobData, options: Options) -> Section:
    """The section of the broken analyzer's parts."""
    return Section("broken", "Broken", tables=[Table("by_rank", "Kernels per rank", _merged(job, "broken"))])


def needs_broken_section(job: JobData, options: Options) -> Section:
    """A section that reads the broken analyzer's parts."""
    return Section("needs_broken", "Needs broken", tables=[Table("by_rank", "Kernels", _merged(job, "broken"))])


BROKEN = Analyzer("broken", broken_part, broken_section)
NEEDS_BROKEN = Analyzer("needs_broken", rank_part, needs_broken_section, needs=("broken",))


def failing_part(view: TraceData, options: Options) -> pd.DataFrame:
    """A part that fails everywhere."""
    raise ValueError("a bug")
