"""What one run contributes to a comparison: its compared units and, per unit, the values that are compared.

A unit is one (rank, step) pair of the run; when either run has no step markers, one rank's whole window. Every
quantity is read per unit, so a change can be set against the step-to-step variation and runs that profiled
different numbers of steps compare (per step: the sum over units divided by their number, or the median).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from traceanalyzer.analyzers.hotspots import Level
from traceanalyzer.analyzers.steps import device_busy
from traceanalyzer.errors import TraceError
from traceanalyzer.schema import DEVICE_KINDS, NO_ROW
from traceanalyzer.trace import Trace

STEP_TIME = "step_ns"
"""The step table's column that is THE step time."""

METRICS = ("step_ns", "device_busy_ns", "comm_exposed_ns", "comm_hidden_ns", "idle_ns")
"""Per-unit quantities of the summary: step time, device busy, exposed and hidden communication, device idle."""

DEVICE = [k.value for k in DEVICE_KINDS]
"""Device kinds by name."""


@dataclass(frozen=True)
class Scope:
    """The part of one run that is compared: its units, each a (rank, step) key (step None: the rank's window)."""

    trace: Trace
    rank: int | None
    keys: tuple[tuple[int, int | None], ...]

    @property
    def units(self) -> int:
        """How many units: the divisor of per-step totals and the sample size of the noise test."""
        return len(self.keys)

    @property
    def steps(self) -> list[int] | None:
        """The compared step numbers, or None when whole windows are compared."""
        if self.keys and self.keys[0][1] is None:
            return None
        return sorted({step for _, step in self.keys})


def rank_steps(trace: Trace, rank: int | None) -> pd.DataFrame:
    """The run's step table, of one rank or all; a rank the run does not have is bad input."""
    table = trace.steps()
    if rank is None:
        return table
    if rank not in trace.meta.ranks:
        raise TraceError("; ".join(trace.meta.paths), f"rank {rank} is not in this trace (ranks {trace.meta.ranks})")
    return table[table["rank"] == rank]


def scope(trace: Trace, rank: int | None, per_step: bool) -> Scope:
    """The run's units: its (rank, step) pairs, or its ranks' whole windows."""
    table = rank_steps(trace, rank)
    if per_step:
        return Scope(trace, rank, tuple(zip(table["rank"].astype(int), table["step"].astype(int), strict=True)))
    ranks = [rank] if rank is not None else trace.meta.ranks or [0]
    return Scope(trace, rank, tuple((int(r), None) for r in ranks))


def level(scope: Scope, of: Level) -> pd.DataFrame:
    """One row per (name, unit) of a hotspot level: ``name``, ``kind``, ``unit`` (index into the units),
    ``total_ns`` and ``count``."""
    parts = [
        scope.trace.hotspots(of, step=step, rank=rank)[["name", "kind", "total_ns", "count"]].assign(unit=i)
        for i, (rank, step) in enumerate(scope.keys)
    ]
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=["name", "kind", "total_ns", "count"])


def launching_ops(scope: Scope) -> pd.Series:
    """Per kernel name: the CPU op that launched most of its device time ('' where none did)."""
    events = scope.trace.select(step=scope.steps, rank=scope.rank, kind=DEVICE)
    names = events["name"].astype(str)
    linked = events["op"] != NO_ROW
    op = scope.trace.events["name"].astype(str).reindex(events.loc[linked, "op"].to_numpy()).to_numpy()
    frame = pd.DataFrame({"name": names[linked].to_numpy(), "op": op, "dur": events.loc[linked, "dur"].to_numpy()})
    top = frame.groupby(["name", "op"])["dur"].sum().sort_values(ascending=False).reset_index()
    ops = top.drop_duplicates("name").set_index("name")["op"]
    return ops.reindex(pd.Index(names.unique()), fill_value="")


def metrics(scope: Scope) -> pd.DataFrame:
    """One row per unit, one column per entry of ``METRICS`` (ns)."""
    overlap = scope.trace.overlap()
    key = ["rank", "step"]
    if scope.steps is None:
        overlap = overlap.groupby("rank").sum(numeric_only=True).reset_index().assign(step=None)
    units = pd.DataFrame(list(scope.keys), columns=key)
    parts = overlap.astype({"step": object}).merge(units.astype({"step": object}), on=key, how="right")
    table = pd.DataFrame({m: parts.get(m, pd.Series(0.0, index=parts.index)) for m in METRICS[2:]}).fillna(0.0)
    table.insert(0, "step_ns", _step_times(scope))
    table.insert(1, "device_busy_ns", _busy(scope))
    return table


def _step_times(scope: Scope) -> np.ndarray:
    """The step time of each unit; of a whole window, the span of the rank's events."""
    if scope.steps is not None:
        return _unit_column(scope, STEP_TIME)
    events = scope.trace.events
    ends = (events["ts"] + events["dur"]).groupby(events["rank"]).max() - events.groupby("rank")["ts"].min()
    return ends.reindex([rank for rank, _ in scope.keys]).to_numpy(dtype=float)


def _busy(scope: Scope) -> np.ndarray:
    if scope.steps is not None:
        return _unit_column(scope, "device_busy_ns")
    busy = device_busy(scope.trace.events).set_index("rank")["busy_ns"]
    return busy.reindex([rank for rank, _ in scope.keys], fill_value=0).to_numpy(dtype=float)


def _unit_column(scope: Scope, column: str) -> np.ndarray:
    table = rank_steps(scope.trace, scope.rank).set_index(["rank", "step"])[column]
    return table.reindex(pd.MultiIndex.from_tuples(scope.keys)).to_numpy(dtype=float)
