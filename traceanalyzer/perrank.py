"""A job analysed rank by rank: each rank is loaded and analysed where it is parsed (a worker process here, or a
Dask worker), and only its parts come back, so the parent's memory grows with the parts, not with the sum
of the traces. ``Job`` is the facade: the same report and findings as the joined trace's."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import pandas as pd

from traceanalyzer import analyzers, loading, notebook
from traceanalyzer.analyzer import Analyzer
from traceanalyzer.analyzers.memory import compact_module_memory
from traceanalyzer.classify import Rule
from traceanalyzer.findings import Finding
from traceanalyzer.jobdata import JobData, RankParts
from traceanalyzer.options import DEFAULT, Options
from traceanalyzer.progress import Progress
from traceanalyzer.renderers import json as json_renderer
from traceanalyzer.report import Report, build_job
from traceanalyzer.schema import TraceMeta
from traceanalyzer.tracedata import Scope, TraceData, check_step


@dataclass
class Job(JobData):
    """A job of ranks analysed one by one (every rank's part made by ``registry``'s analyzers): ``report()`` and
    ``findings()`` as a joined ``Trace`` gives them."""

    registry: Sequence[Analyzer] = analyzers.ANALYZERS

    def __repr__(self) -> str:
        return notebook.job_repr(self)

    def findings(self) -> list[Finding]:
        """Every analyzer's findings, ranked by saving (pushed ones first)."""
        return analyzers.job_findings(self, self.registry)

    def build_report(self, top: int = 15, kind: str | None = None) -> Report:
        """The report of the job's scope as typed data (sections and ranked findings); a ``top`` beyond the one the
        ranks were analysed with says where a table is cut."""
        return build_job(self, Options(top=top, kind=kind), self.registry)

    def report(self, top: int = 15, kind: str | None = None) -> dict:
        """The whole report as plain data (the JSON the CLI writes)."""
        return json_renderer.data(self.build_report(top, kind))


def load_job(
    path: str | os.PathLike | Sequence[str | os.PathLike],
    rules: Sequence[Rule] = (),
    progress: Callable[[str], None] | Progress | None = None,
    cache: bool | None = None,
    scheduler: Any = None,
    step: int | None = None,
    top: int = DEFAULT.top,
) -> Job:
    """Load a job rank by rank (arguments as ``traceanalyzer.load``; ``step``: analyse that step of each rank;
    ``top``: the rows per table its reports will show) into a Job of the ranks' parts."""
    options = Options(top=top)
    registry = tuple(analyzers.registered())
    analyse = functools.partial(analyse_rank, step=step, options=options, registry=registry)
    loaded, meta = loading.load_per_rank(path, analyse, rules, progress, cache, scheduler)
    ranks = [replace(parts, meta=rank_meta) for rank_meta, parts in loaded]  # named as the user gave them
    if step is not None:
        check_step("; ".join(meta.paths), {s for parts in ranks for s in parts.steps}, step)
    return Job(meta, ranks, Scope(step=step), options, registry=registry)


def analyse_rank(
    events: pd.DataFrame,
    memory: pd.DataFrame,
    meta: TraceMeta,
    step: int | None,
    options: Options = DEFAULT,
    registry: Sequence[Analyzer] | None = None,
) -> RankParts:
    """One rank's parts (of one step of it, when given; empty for a rank without that step): every analyzer's part
    (``registry``'s, default all), the steps it recorded, the table sizes and its meta."""
    trace = TraceData(events, memory, meta)
    view = trace.scoped(step=step, check=False)
    parts = analyzers.rank_parts(view, options, registry)
    compact_module_memory(meta)  # the meta goes back too: its side tables reduced to what is read
    return RankParts(meta.ranks[0], meta, trace.steps_recorded(), len(view.events), len(view.memory_events), parts)
