"""What one run contributes to a comparison: its compared units and, per unit, the values that are compared.

A unit is one (rank, step) pair of the run; when either run has no step markers, one rank's whole window. Every
quantity is read per unit, so a change can be set against the step-to-step variation and runs that profiled
different numbers of steps compare (per step: the sum over units divided by their number, or the median).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from traceanalyzer.analyzers.hotspots import Level, hotspots
from traceanalyzer.errors import TraceError
from traceanalyzer.schema import DEVICE, NO_ROW, Kind
from traceanalyzer.trace import Trace

STEP_TIME = "step_ns"
"""The step table's column that is THE step time."""

METRICS = ("step_ns", "device_busy_ns", "comm_exposed_ns", "comm_hidden_ns", "idle_ns")
"""Per-unit quantities of the summary: step time, device busy, exposed and hidden communication, device idle."""


@dataclass(frozen=True)
class Compared:
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


def scope(trace: Trace, rank: int | None, per_step: bool) -> Compared:
    """The run's units: its (rank, step) pairs, or its ranks' whole windows."""
    table = rank_steps(trace, rank)
    if per_step:
        return Compared(trace, rank, tuple(zip(table["rank"].astype(int), table["step"].astype(int), strict=True)))
    ranks = [rank] if rank is not None else trace.meta.ranks or [0]
    return Compared(trace, rank, tuple((int(r), None) for r in ranks))


def level(scope: Compared, of: Level) -> pd.DataFrame:
    """One row per (name, unit) of a hotspot level: ``name``, ``kind``, ``unit`` (index into the units),
    ``total_ns`` and ``count``."""
    trace = scope.trace  # each unit's rows selected from the whole table (no scoped view per unit: 20x faster)
    parts = [
        hotspots(trace.select(step=step, rank=rank), of, table=trace.events)[
            ["name", "kind", "total_ns", "count"]
        ].assign(unit=i)
        for i, (rank, step) in enumerate(scope.keys)
    ]
    empty = pd.DataFrame(columns=["name", "kind", "total_ns", "count", "unit"])
    return pd.concat(parts, ignore_index=True) if parts else empty


def launching_ops(scope: Compared) -> pd.Series:
    """Per kernel name: the CPU op that launched most of its device time ('' where none did)."""
    events = scope.trace.select(step=scope.steps, rank=scope.rank, kind=DEVICE)
    names = events["name"].astype(str)
    linked = events["op"] != NO_ROW
    op = scope.trace.events["name"].astype(str).reindex(events.loc[linked, "op"].to_numpy()).to_numpy()
    frame = pd.DataFrame({"name": names[linked].to_numpy(), "op": op, "dur": events.loc[linked, "dur"].to_numpy()})
    top = frame.groupby(["name", "op"])["dur"].sum().sort_values(ascending=False).reset_index()
    ops = top.drop_duplicates("name").set_index("name")["op"]
    return ops.reindex(pd.Index(names.unique()), fill_value="")


def metrics(scope: Compared, kernels: pd.DataFrame, ops: pd.DataFrame) -> pd.DataFrame:
    """One row per unit: its ``window`` parts, the ``WORK`` (ns, counts) from the unit's device-kernel and CPU-op
    samples (``level``), and ``host_bound`` (the step model's bound; False for a whole window)."""
    return pd.concat([window(scope), _work(scope, kernels, ops)], axis=1)


def window(scope: Compared) -> pd.DataFrame:
    """One row per unit: the ``METRICS``, ``memory_exposed_ns`` and ``compute_ns`` (the union of compute kernels),
    measured inside the unit's window (the step model's step span), so that the step time is exactly compute +
    exposed communication + exposed copies + idle, and busy never exceeds the step."""
    overlap = scope.trace.overlap()
    key = ["rank", "step"]
    if scope.steps is None:
        overlap = overlap.groupby("rank").sum(numeric_only=True).reset_index().assign(step=None)
    units = pd.DataFrame(list(scope.keys), columns=key)
    parts = overlap.astype({"step": object}).merge(units.astype({"step": object}), on=key, how="right")
    column = {c: parts.get(c, pd.Series(0.0, index=parts.index)).fillna(0.0).to_numpy(float) for c in _OVERLAP}
    table = pd.DataFrame({"step_ns": _step_times(scope)})
    table["device_busy_ns"] = column["span_ns"] - column["idle_ns"]
    for name in ("comm_exposed_ns", "comm_hidden_ns", "idle_ns", "memory_exposed_ns"):
        table[name] = column[name]
    table["compute_ns"] = column["compute_only_ns"] + column["comm_hidden_ns"]
    return table


_OVERLAP = ("span_ns", "idle_ns", "comm_exposed_ns", "comm_hidden_ns", "memory_exposed_ns", "compute_only_ns")
WORK = ("device_work_ns", "kernels", "cpu_ops", "cpu_op_ns")
"""Per unit, what the code asks for: device time of the work launched in the unit (kernels, copies and sets, summed,
not their union; collectives left out, their time includes waiting for late peers), its count, and the CPU ops it
ran and their self host time."""


def _work(scope: Compared, kernels: pd.DataFrame, ops: pd.DataFrame) -> pd.DataFrame:
    """The ``WORK`` columns and ``host_bound`` of each unit."""
    ops = ops.groupby("unit")[["count", "total_ns"]].sum().reindex(range(scope.units), fill_value=0)
    work = kernels[kernels["kind"] != Kind.COMMUNICATION.value]  # a collective's time includes its peers' lateness
    device = work.groupby("unit")[["total_ns", "count"]].sum()
    device = device.reindex(range(scope.units), fill_value=0)
    table = pd.DataFrame(
        {
            "device_work_ns": device["total_ns"].to_numpy(float),
            "kernels": device["count"].to_numpy(float),
            "cpu_ops": ops["count"].to_numpy(float),
            "cpu_op_ns": ops["total_ns"].to_numpy(float),
        }
    )
    table["host_bound"] = _unit_column(scope, "bound") == "host" if scope.steps is not None else False
    return table


def _step_times(scope: Compared) -> np.ndarray:
    """The step time of each unit; of a whole window, the span of the rank's events."""
    if scope.steps is not None:
        return _unit_column(scope, STEP_TIME)
    events = scope.trace.events
    ends = (events["ts"] + events["dur"]).groupby(events["rank"]).max() - events.groupby("rank")["ts"].min()
    return ends.reindex([rank for rank, _ in scope.keys]).to_numpy(dtype=float)


def _unit_column(scope: Compared, column: str) -> np.ndarray:
    table = rank_steps(scope.trace, scope.rank).set_index(["rank", "step"])[column]
    values = table.reindex(pd.MultiIndex.from_tuples(scope.keys)).to_numpy()
    return values if values.dtype == object else values.astype(float)
