"""The Trace: one job's event table, memory table and metadata, with the analyses as methods."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable

import pandas as pd

from traceanalyzer.findings import Finding
from traceanalyzer.schema import TraceMeta


class Trace:
    """A loaded trace (one rank or a whole job). ``events`` is the common event table."""

    def __init__(self, events: pd.DataFrame, memory_events: pd.DataFrame, meta: TraceMeta) -> None:
        self.events = events
        self.memory_events = memory_events
        self.meta = meta
        self._cache: dict = {}

    def __repr__(self) -> str:
        return (
            f"<Trace {self.meta.platform.value} {self.meta.source_format}: {len(self.events):,} events, "
            f"ranks {self.meta.ranks}, {self.meta.span_ns / 1e6:.1f} ms>"
        )

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
        """Ranked by total time; level: 'kernel', 'cpu_op', 'op_device' (device time per launching op) or 'category'."""
        from traceanalyzer.analyzers import hotspots

        return hotspots.hotspots(self.select(step, rank, kind), level, top, table=self.events)

    def steps(self) -> pd.DataFrame:
        """Per (rank, step): wall time, device busy time and device time by kind, in ns."""
        from traceanalyzer.analyzers import steps

        return self._cached("steps", lambda: steps.step_table(self.events))

    def findings(self) -> list[Finding]:
        """Every analyzer's findings, ranked by what they are worth."""
        from traceanalyzer.analyzers import all_findings

        return self._cached("findings", lambda: all_findings(self))

    def findings_frame(self) -> pd.DataFrame:
        """The findings as a DataFrame."""
        from traceanalyzer.findings import to_frame

        return to_frame(self.findings())

    def overlap(self) -> pd.DataFrame:
        """Per rank and step: compute, hidden and exposed communication, exposed copies, idle (ns)."""
        from traceanalyzer.analyzers import distributed

        return self._cached("overlap", lambda: distributed.overlap(self))

    def collectives(self) -> pd.DataFrame:
        """Every collective call, with exposed time, phase, and (across ranks) wait vs transfer."""
        from traceanalyzer.analyzers import distributed

        return self._cached("collectives", lambda: distributed.collectives(self))

    def fusion(self) -> pd.DataFrame:
        """Fusion opportunities ranked by estimated saving."""
        from traceanalyzer.analyzers import fusion

        return self._cached("fusion", lambda: fusion.opportunities(self))

    def memory(self):
        """Memory analysis: timeline, peak, live blocks at the peak, per-op, leak trend."""
        from traceanalyzer.analyzers import memory

        return self._cached("memory", lambda: memory.analyze(self))

    def report(self, top: int = 15, step: int | None = None, rank: int | None = None, kind: str | None = None) -> dict:
        """The whole report as plain data (the JSON the CLI writes); ``kind`` filters the kernel hotspot table."""
        from traceanalyzer.report import Options, build

        return build(self, Options(top=top, step=step, rank=rank, kind=kind))

    def _cached(self, key: str, compute):
        if key not in self._cache:
            self._cache[key] = compute()
        return self._cache[key]


def per_trace(table: Callable[[Trace], pd.DataFrame]) -> Callable[[Trace], pd.DataFrame]:
    """Decorator for an analyzer table of the trace alone: computed once per trace (a report asks for some tables
    from both its findings and its section); each call gets its own copy-on-write copy to change."""
    key = f"{table.__module__}.{table.__qualname__}"

    @functools.wraps(table)
    def once(trace: Trace) -> pd.DataFrame:
        return trace._cached(key, lambda: table(trace)).copy(deep=False)

    return once
