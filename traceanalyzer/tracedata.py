"""The data of a loaded trace: the event table, the memory table and the facts, and scoped views of them.

A ``TraceData`` is what every analyzer reads. ``scoped(step=, rank=)`` gives the same kind of object restricted
to one step and/or rank, so one scope reaches every analysis: its rows are the events of the scope, renumbered so
that row labels are positions again, with links to rows outside the scope cut (``NO_ROW``). The unscoped trace
stays reachable as ``base``, for what needs the whole run (the period of a step ends where the next step begins).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from traceanalyzer.errors import TraceError
from traceanalyzer.memo import remember
from traceanalyzer.schema import NO_ROW, Kind, TraceMeta

LINK_COLUMNS = ("parent", "launch", "op", "top_op", "caller")
"""Event-table columns that hold row labels of the same table."""


@dataclass(frozen=True)
class Scope:
    """The step and rank a view is restricted to (None: all)."""

    step: int | None = None
    rank: int | None = None

    def __str__(self) -> str:
        parts = [
            f"rank {self.rank}" if self.rank is not None else "",
            f"step {self.step}" if self.step is not None else "",
        ]
        return ", ".join(p for p in parts if p) or "whole trace"


class TraceData:
    """One job's tables and facts (one rank or several), the scope they cover, and a memo of derived tables."""

    def __init__(
        self,
        events: pd.DataFrame,
        memory_events: pd.DataFrame,
        meta: TraceMeta,
        scope: Scope = Scope(),
        base: TraceData | None = None,
    ) -> None:
        self.events = events
        self.memory_events = memory_events
        self.meta = meta
        self.scope = scope
        self.base = base if base is not None else self
        self.memo: dict[str, object] = {}

    def steps_recorded(self) -> list[int]:
        """Step numbers with a step marker, in order (of the scope's ranks)."""
        markers = self.events.loc[self.events["kind"] == Kind.STEP.value, "step"]
        return sorted({int(s) for s in markers if s != NO_ROW})

    def scoped(self, step: int | None = None, rank: int | None = None, check: bool = True) -> TraceData:
        """The view of one step and/or rank, made once per scope of the trace (so its memo, every analysis of the
        scope, is kept too); a step or rank the trace lacks is a TraceError naming the valid ones (unless ``check``
        is False: then the view is empty, as a rank of a job that lacks the step)."""
        if step is None and rank is None:
            return self
        base = self.base
        scope = Scope(step if step is not None else self.scope.step, rank if rank is not None else self.scope.rank)
        if check:
            _check_scope(base, scope)
        return remember(base, f"tracedata.scoped.{scope.step}.{scope.rank}", lambda: self._view(scope))

    def _view(self, scope: Scope) -> TraceData:
        """A new view of ``scope`` of the trace (``scoped`` keeps it)."""
        base = self.base
        events, memory = _restrict(base.events, base.memory_events, scope)
        ranks = [scope.rank] if scope.rank is not None else list(base.meta.ranks)
        meta = replace(base.meta, ranks=ranks, side_tables=_side_tables_of(base.meta, scope.rank))
        return type(self)(events, memory, meta, scope, base)


def _side_tables_of(meta: TraceMeta, rank: int | None) -> dict[str, pd.DataFrame]:
    """The trace's side tables, only the rows of ``rank`` where it is given."""
    if rank is None:
        return meta.side_tables
    return {name: table[table["rank"] == rank] for name, table in meta.side_tables.items()}


def _check_scope(trace: TraceData, scope: Scope) -> None:
    path = "; ".join(trace.meta.paths) or "trace"
    if scope.rank is not None and scope.rank not in trace.meta.ranks:
        raise TraceError(path, f"has no rank {scope.rank}; its ranks are {_listing(trace.meta.ranks)}")
    if scope.step is None:
        return
    events = trace.events if scope.rank is None else trace.events[trace.events["rank"] == scope.rank]
    markers = events.loc[events["kind"] == Kind.STEP.value, "step"]
    check_step(path, {int(s) for s in markers if s != NO_ROW}, scope.step)


def check_step(path: str, steps: set[int], step: int) -> None:
    """A TraceError naming the valid steps when ``step`` is not among a trace's ``steps``."""
    if step not in steps:
        valid = _listing(sorted(steps)) if steps else "none (the trace has no step markers)"
        raise TraceError(path, f"has no step {step}; its steps are {valid}")


def _listing(values: list[int]) -> str:
    """Integers as a short list: consecutive runs as ranges."""
    runs: list[list[int]] = []
    for v in sorted(values):
        if runs and v == runs[-1][-1] + 1:
            runs[-1].append(v)
        else:
            runs.append([v])
    return ", ".join(f"{r[0]}–{r[-1]}" if len(r) > 2 else ", ".join(map(str, r)) for r in runs)


def _restrict(events: pd.DataFrame, memory: pd.DataFrame, scope: Scope) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The rows of the scope, labels renumbered to positions, links out of the scope cut."""
    keep = np.ones(len(events), dtype=bool)
    mem_keep = np.ones(len(memory), dtype=bool)
    if scope.rank is not None:
        keep &= (events["rank"] == scope.rank).to_numpy()
        mem_keep &= (memory["rank"] == scope.rank).to_numpy()
    if scope.step is not None:
        keep &= (events["step"] == scope.step).to_numpy()
        mem_keep &= (memory["step"] == scope.step).to_numpy()
    rows = np.flatnonzero(keep)
    new = np.full(len(events) + 1, NO_ROW, dtype=np.int64)  # the last slot maps NO_ROW (-1) to itself
    new[rows] = np.arange(len(rows))
    out = events.iloc[rows].reset_index(drop=True)
    for col in LINK_COLUMNS:
        out[col] = new[out[col].to_numpy()]
    mem = memory[mem_keep].reset_index(drop=True)
    mem["op"] = new[mem["op"].to_numpy()]
    return out, mem
