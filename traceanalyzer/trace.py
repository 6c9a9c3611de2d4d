"""The ``Trace`` facade: a loaded trace's data (``TraceData``) with every analysis as a method.

The analyses themselves are functions of the data in ``traceanalyzer.analyzers``; this class only names them for
notebooks, the CLI and the dashboard, so no presenter needs to know which module holds which analysis.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from traceanalyzer import lazy, loading, notebook
from traceanalyzer.analyzers import (
    as_job,
    fusion,
    gemm,
    health,
    hotspots,
    inference,
    job_findings,
    ledger,
    memory,
    summary,
)
from traceanalyzer.classify import Rule
from traceanalyzer.findings import Finding
from traceanalyzer.options import DEFAULT, Options
from traceanalyzer.progress import Progress
from traceanalyzer.report import Report, build
from traceanalyzer.section import Section
from traceanalyzer.tokens import DIGEST_BUDGET
from traceanalyzer.tracedata import Scope, TraceData

if TYPE_CHECKING:
    import plotly.graph_objects as go

    from traceanalyzer.renderers.perfetto import Annotated

distributed = lazy.Module("traceanalyzer.analyzers.distributed")
"""The distributed analyses, imported when one is first asked for: a report imports them where there is
communication (``analyzers.APPLIES``)."""
plots = lazy.Module("traceanalyzer.renderers.plots")
"""The figure builders (Plotly), imported when a figure is first drawn: a text report never loads Plotly."""
digest_renderer = lazy.Module("traceanalyzer.renderers.digest")
export_renderer = lazy.Module("traceanalyzer.renderers.export")
json_renderer = lazy.Module("traceanalyzer.renderers.json")
perfetto = lazy.Module("traceanalyzer.renderers.perfetto")
"""The renderers the methods below write with, imported on first use: the command line's report needs none of them."""


class Trace(TraceData):
    """A loaded trace (one rank or a whole job): ``events`` is the common event table; ``scoped(step=, rank=)``
    restricts every analysis below to one step and/or rank."""

    def __repr__(self) -> str:
        return notebook.trace_repr(self.meta, len(self.events), self.scope)

    def _repr_html_(self) -> str:
        counts = len(self.events), len(self.memory_events)
        return notebook.trace_html(self.meta, *counts, self.ledger(), self.steps(), self.findings())

    def select(
        self,
        step: int | Iterable[int] | None = None,
        rank: int | Iterable[int] | None = None,
        kind: str | Iterable[str] | None = None,
    ) -> pd.DataFrame:
        """The event rows of the given step(s), rank(s) and kind(s); None keeps all."""
        ev = self.events
        mask = pd.Series(True, index=ev.index)
        for col, value in (("step", step), ("rank", rank), ("kind", kind)):
            if value is not None:
                values = [value] if isinstance(value, int | str) else list(value)
                mask &= ev[col].isin([getattr(v, "value", v) for v in values])
        return ev[mask]

    def hotspots(
        self,
        level: str = "kernel",
        step: int | Iterable[int] | None = None,
        rank: int | Iterable[int] | None = None,
        kind: str | Iterable[str] | None = None,
        top: int | None = None,
    ) -> pd.DataFrame:
        """Ranked by total time; level: 'kernel', 'cpu_op', 'op_device' (device time per launching op) or 'category'.
        One step or rank is a scoped view (an unknown one is a TraceError); several select their rows."""
        if all(v is None or isinstance(v, int) for v in (step, rank)):
            view = self.scoped(step=step, rank=rank)
            return hotspots.hotspots(view.select(kind=kind), level, top, table=view.events)
        return hotspots.hotspots(self.select(step, rank, kind), level, top, table=self.events)

    def steps(self) -> pd.DataFrame:
        """Per (rank, step): step time as the device experiences it, host and device spans, bound, busy (ns)."""
        return summary.step_table(self)

    def findings(self) -> list[Finding]:
        """Every analyzer's findings, ranked by saving (pushed ones first)."""
        return job_findings(as_job(self, DEFAULT))

    def ledger(self) -> Section:
        """What was analysed: window, steps, ranks vs world size, device time outside steps, dropped values."""
        return ledger.section(self, Options())

    def overlap(self) -> pd.DataFrame:
        """Per rank and step: compute, hidden and exposed communication, exposed copies, idle (ns)."""
        return distributed.overlap(self)

    def collectives(self) -> pd.DataFrame:
        """Every collective call, with exposed time, phase, and (across ranks) wait vs transfer."""
        return distributed.collectives(self)

    def clock_offsets(self) -> pd.DataFrame:
        """Per rank: the clock offset against the lowest rank (ns) estimated from matched collectives."""
        return distributed.clock_offsets(self)

    def late_arrivals(self) -> pd.DataFrame:
        """Collective calls that peers waited for: the late rank, the wait it caused, what it was doing."""
        return distributed.late_arrivals(self)

    def pipeline_bubble(self) -> pd.DataFrame:
        """Per rank and step of a pipeline-parallel job: send/recv time, cross-stage waits, the bubble and its share."""
        return distributed.pipeline_bubble(self)

    def fusion(self) -> pd.DataFrame:
        """Fusion opportunities ranked by estimated saving per step."""
        return fusion.opportunities(self)

    def memory(self) -> memory.MemoryAnalysis:
        """Memory analysis: timeline, peak, live blocks at the peak, per-op, leak trend."""
        return memory.analyze(self)

    def gemm(self) -> pd.DataFrame:
        """Achieved throughput per GEMM op and dtype against the device's dense peak."""
        return gemm.gemm_throughput(self)

    def inference(self) -> inference.InferenceAnalysis:
        """Inference views: per iteration (phase, shapes, time per token, GB/s and TFLOP/s against the device), per
        phase (TTFT, TPOT p50/p90/max, tokens/s, MBU, MFU), per request, kernel time per phase; ``reason`` when the
        trace holds no generation."""
        return inference.analyze(self)

    def device_busy(self) -> pd.DataFrame:
        """Per rank and device: busy share, gaps, large gaps (> 100 µs), largest gap."""
        return health.device_busy(self)

    def idle_gaps(self, top: int = health.LARGEST_GAPS) -> pd.DataFrame:
        """The largest device idle gaps, with what the host was doing."""
        return health.idle_gaps(self, top)

    def sync_places(self) -> pd.DataFrame:
        """In-step host syncs per annotation / frame, and the device idle after them."""
        return health.sync_places(self)

    def launch_bound(self) -> pd.DataFrame:
        """Places where tiny kernels wait for their launches."""
        return health.launch_bound(self)

    def fp32_gemms(self) -> pd.DataFrame:
        """fp32 GEMM kernels that run without tensor cores."""
        return health.fp32_gemms(self)

    def dynamic_shapes(self) -> pd.DataFrame:
        """Ops whose input shapes change between steps."""
        return health.dynamic_shapes(self)

    def figures(self, scope: Scope = Scope()) -> list[tuple[str, go.Figure]]:  # noqa: B008 - frozen
        """The ``ta.plots`` figures that apply to the trace, titled, in ``scope`` where a figure can be scoped
        (hotspots, timeline); steps, overlap (multi-rank jobs) and memory (when recorded) are of the whole trace."""
        where = f" ({scope})" if scope.step is not None or scope.rank is not None else ""
        scoped = {k: v for k, v in (("step", scope.step), ("rank", scope.rank)) if v is not None}
        steps = self.steps()
        out = [(f"Top kernels (total){where}", plots.hotspots(self.hotspots(**scoped)))]
        out.append(("Steps, every rank", plots.steps(steps)))
        timeline = "Timeline of the median step" if scope.step is None else f"Timeline of step {scope.step}"
        out.append((timeline, plots.timeline(self.events, steps, rank=scope.rank, step=scope.step)))
        if len(self.meta.ranks) > 1:
            out.append(("Exposed communication per rank and step", plots.overlap(self.overlap())))
        if len(self.memory_events):
            out.append(("Memory over time", plots.memory(self.memory())))
        return out

    def annotated(self) -> Annotated:
        """What the annotated (Perfetto) trace is written from: the events, the meta, the steps, the findings."""
        return perfetto.Annotated(self.events, self.meta, self.steps(), self.findings())

    def export(self, target: str, out: Path, top: int = 15) -> str:
        """Write the export ``target`` (one of ``export.TARGETS``) to ``out``: the annotated trace, or the loaded
        tables and the report's (``top`` rows) as files; returns what was written, for the user."""
        if target == "perfetto":
            return perfetto.write(self.annotated(), out)
        loaded = {"events": self.events, "memory_events": self.memory_events}
        return export_renderer.write(self.build_report(top=top), loaded, target, out)

    def build_report(
        self, top: int = 15, step: int | None = None, rank: int | None = None, kind: str | None = None
    ) -> Report:
        """The report of a scope as typed data (sections and ranked findings)."""
        return build(self.scoped(step=step, rank=rank), Options(top=top, kind=kind))

    def report(self, top: int = 15, step: int | None = None, rank: int | None = None, kind: str | None = None) -> dict:
        """The whole report as plain data (the JSON the CLI writes); ``kind`` filters the kernel hotspot table."""
        return json_renderer.data(self.build_report(top, step, rank, kind))

    def digest(self, budget_tokens: int = DIGEST_BUDGET, step: int | None = None, rank: int | None = None) -> str:
        """The report as a digest for a coding agent in ``budget_tokens`` tokens (counted as
        ``traceanalyzer.renderers.digest.tokens``): trace, ledger, step, pushed findings, hotspots, sections by id."""
        return digest_renderer.render(self.build_report(step=step, rank=rank), budget_tokens)


def load(
    path: str | os.PathLike | Sequence[str | os.PathLike],
    rules: Sequence[Rule] = (),
    progress: Callable[[str], None] | Progress | None = None,
    cache: bool | None = None,
    scheduler: object = None,
) -> Trace:
    """Load a trace file, a run folder, or several of them, into one Trace (ranks side by side). ``cache``: keep
    and reuse the parsed tables in the user's cache folder (None: unless ``TRACEANALYZER_CACHE=0``); ``progress``:
    a callback for messages, or a ``traceanalyzer.progress.Progress``; ``scheduler``: a Dask scheduler address
    (tcp://HOST:PORT) or ``distributed.Client`` to parse the ranks on (None: ``TRACEANALYZER_SCHEDULER``, else here)."""
    data = loading.load(path, rules=rules, progress=progress, cache=cache, scheduler=scheduler)
    return Trace(data.events, data.memory_events, data.meta)
