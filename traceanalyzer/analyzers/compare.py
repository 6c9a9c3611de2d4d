"""Compare two runs (baseline → candidate): step time, device busy, time by kind and per hotspot level, per step.

Times are per step, so runs that profiled different numbers of steps compare: step time, device busy and the
communication overlap are medians over the (rank, step) pairs; time by kind and the level tables are totals over
the steps divided by the number of (rank, step) pairs. When either trace has no ProfilerStep markers, both are
compared over their whole window per rank (``per_step`` is False and ``notes`` says so).

Names are matched exactly as the trace writes them: a kernel whose name differs only in template arguments or a
numeric suffix (``<float, 2ul>`` vs ``<float, 5ul>``) is one kernel gone and another new.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum

import numpy as np
import pandas as pd

from traceanalyzer.analyzers.hotspots import Level
from traceanalyzer.analyzers.steps import DEVICE, device_busy, time_by_kind
from traceanalyzer.errors import TraceError
from traceanalyzer.schema import NO_ROW
from traceanalyzer.trace import Trace

LEVELS = (Level.KERNEL, Level.CPU_OP, Level.OP_DEVICE)
"""Hotspot levels compared by name: device kernels, CPU ops (self host time), device time per launching op."""

DIFF_COLUMNS = [
    "name",
    "kind",
    "status",
    "baseline_ns",
    "candidate_ns",
    "delta_ns",
    "delta_share",
    "baseline_count",
    "candidate_count",
]
"""Columns of the level tables (time by kind: ``kind`` for ``name``): time and count per step in each run, delta."""

SUMMARY_COLUMNS = ["metric", "baseline_ns", "candidate_ns", "delta_ns", "delta_share"]
"""Columns of the summary table: one row per metric (a median per step)."""


class Status(str, Enum):
    """How a name changed from baseline to candidate."""

    NEW = "new"  # only in the candidate
    GONE = "gone"  # only in the baseline
    SLOWER = "slower"
    FASTER = "faster"
    SAME = "same"


@dataclass(frozen=True)
class Scope:
    """The part of one run that is compared: its steps (None: the whole window), rank, and the divisor."""

    trace: Trace
    steps: list[int] | None
    rank: int | None
    units: int  # (rank, step) pairs, or ranks when the whole window is compared


@dataclass
class Comparison:
    """Baseline → candidate: per-step summary, device time by kind, and one diff table per hotspot level."""

    baseline: Scope
    candidate: Scope
    per_step: bool
    summary: pd.DataFrame
    by_kind: pd.DataFrame
    levels: dict[str, pd.DataFrame]
    notes: list[str] = field(default_factory=list)

    def metric(self, name: str) -> pd.Series:
        """One summary row (``step_ns``, ``device_busy_ns``, ``comm_exposed_ns``, ``comm_hidden_ns``)."""
        return self.summary.set_index("metric").loc[name]

    def to_dict(self, top: int | None = None) -> dict:
        """Plain-data form (the JSON ``traceanalyze compare`` writes); ``top`` keeps that many rows per level."""
        from traceanalyzer.report import SCHEMA_VERSION, records

        return {
            "schema_version": SCHEMA_VERSION,
            "baseline": _facts(self.baseline),
            "candidate": _facts(self.candidate),
            "rank": self.baseline.rank,
            "per_step": self.per_step,
            "notes": self.notes,
            "summary": records(self.summary),
            "time_by_kind": records(self.by_kind),
            "levels": {level: records(table.head(top) if top else table) for level, table in self.levels.items()},
            "changes": {level: changes(table) for level, table in self.levels.items()},
        }


def changes(table: pd.DataFrame) -> dict:
    """Names per status at one level, and the time per step of the new (candidate) and gone (baseline) ones."""
    counts = table["status"].value_counts()
    out = {status.value: int(counts.get(status.value, 0)) for status in Status}
    out["new_ns"] = float(table.loc[table["status"] == Status.NEW.value, "candidate_ns"].sum())
    out["gone_ns"] = float(table.loc[table["status"] == Status.GONE.value, "baseline_ns"].sum())
    return out


def _facts(scope: Scope) -> dict:
    from traceanalyzer.report import trace_facts

    return {**trace_facts(scope.trace), "compared_steps": scope.steps, "units": scope.units}


def compare(baseline: Trace, candidate: Trace, rank: int | None = None) -> Comparison:
    """Compare two traces per step (or over their whole windows when either has no step markers)."""
    runs = {"baseline": baseline, "candidate": candidate}
    stepless = [role for role, trace in runs.items() if not len(_steps(trace, rank))]
    per_step = not stepless
    scopes = [_scope(t, rank, per_step) for t in runs.values()]
    notes = [f"no ProfilerStep markers in the {' and '.join(stepless)}: whole windows compared (per rank)"]
    return Comparison(
        baseline=scopes[0],
        candidate=scopes[1],
        per_step=per_step,
        summary=_summary(*scopes),
        by_kind=_diff(*(_by_kind(s) for s in scopes), key="kind"),
        levels={level.value: _diff(*(_level(s, level) for s in scopes)) for level in LEVELS},
        notes=notes if stepless else [],
    )


def _steps(trace: Trace, rank: int | None) -> pd.DataFrame:
    table = trace.steps()
    if rank is None:
        return table
    if rank not in trace.meta.ranks:
        raise TraceError("; ".join(trace.meta.paths), f"rank {rank} is not in this trace (ranks {trace.meta.ranks})")
    return table[table["rank"] == rank]


def _scope(trace: Trace, rank: int | None, per_step: bool) -> Scope:
    table = _steps(trace, rank)
    if per_step:
        return Scope(trace, sorted(set(table["step"].tolist())), rank, len(table))
    return Scope(trace, None, rank, 1 if rank is not None else max(len(trace.meta.ranks), 1))


def _events(scope: Scope) -> pd.DataFrame:
    return scope.trace.select(step=scope.steps, rank=scope.rank)


def _summary(baseline: Scope, candidate: Scope) -> pd.DataFrame:
    """Medians per (rank, step): step wall time, device busy, exposed and hidden communication."""
    metrics: dict[str, Callable[[Scope], float]] = {
        "step_ns": lambda s: _median_per_unit(s, "step_ns"),
        "device_busy_ns": lambda s: _median_per_unit(s, "device_busy_ns"),
        "comm_exposed_ns": lambda s: _median_overlap(s, "comm_exposed_ns"),
        "comm_hidden_ns": lambda s: _median_overlap(s, "comm_hidden_ns"),
    }
    rows = [(name, of(baseline), of(candidate)) for name, of in metrics.items()]
    table = pd.DataFrame(rows, columns=SUMMARY_COLUMNS[:3])
    table["delta_ns"] = table["candidate_ns"] - table["baseline_ns"]
    table["delta_share"] = _relative(table["delta_ns"], table["baseline_ns"])
    return table


def _median_per_unit(scope: Scope, column: str) -> float:
    """Median of a step-table column; over whole windows: each rank's span (wall) or busy time."""
    if scope.steps is not None:
        return float(_steps(scope.trace, scope.rank)[column].median())
    events = _events(scope)
    if column == "device_busy_ns":
        return float(device_busy(events)["busy_ns"].median())
    ends = (events["ts"] + events["dur"]).groupby(events["rank"]).max()
    return float((ends - events.groupby("rank")["ts"].min()).median())


def _median_overlap(scope: Scope, column: str) -> float:
    table = scope.trace.overlap()
    if scope.rank is not None:
        table = table[table["rank"] == scope.rank]
    table = table[table["step"] != NO_ROW] if scope.steps is not None else table
    return float(table[column].median()) if len(table) else 0.0


def _by_kind(scope: Scope) -> pd.DataFrame:
    """Device time and count per step, by kind (kernel, communication, memcpy, ...)."""
    table = time_by_kind(_events(scope))
    table = table[table["kind"].isin(DEVICE)].set_index("kind")
    return _per_unit(table, scope.units)


def _level(scope: Scope, level: Level) -> pd.DataFrame:
    """Time and count per step of each name at one hotspot level, with its kind."""
    table = scope.trace.hotspots(level, step=scope.steps, rank=scope.rank)
    grouped = table.groupby("name", sort=False).agg(kind=("kind", "first"), total_ns=("total_ns", "sum"))
    grouped["count"] = table.groupby("name", sort=False)["count"].sum()
    return _per_unit(grouped, scope.units)


def _per_unit(table: pd.DataFrame, units: int) -> pd.DataFrame:
    out = table.copy()
    out["total_ns"] = out["total_ns"] / units
    out["count"] = out["count"] / units
    return out


def _diff(baseline: pd.DataFrame, candidate: pd.DataFrame, key: str = "name") -> pd.DataFrame:
    """Per name (the index): time and count per step in each run, the delta, and the status; ranked by |delta|."""
    names = baseline.index.union(candidate.index, sort=False)
    b, c = baseline.reindex(names), candidate.reindex(names)
    b_ns, c_ns = b["total_ns"].fillna(0.0), c["total_ns"].fillna(0.0)
    delta = c_ns - b_ns
    table = pd.DataFrame(
        {
            "name": names.astype(str),
            "kind": (c["kind"].fillna(b["kind"]) if "kind" in b else names).astype(str),
            "status": _status(b["count"].isna(), c["count"].isna(), delta),
            "baseline_ns": b_ns,
            "candidate_ns": c_ns,
            "delta_ns": delta,
            "delta_share": _relative(delta, b_ns),
            "baseline_count": b["count"].fillna(0.0),
            "candidate_count": c["count"].fillna(0.0),
        }
    )
    order = np.argsort(-delta.abs().to_numpy(), kind="stable")
    table = table.iloc[order].reset_index(drop=True)
    return table.drop(columns="name").rename(columns={"kind": key}) if key != "name" else table


def _status(new: pd.Series, gone: pd.Series, delta: pd.Series) -> np.ndarray:
    conditions = [new.to_numpy(), gone.to_numpy(), delta.to_numpy() > 0, delta.to_numpy() < 0]
    choices = [Status.NEW.value, Status.GONE.value, Status.SLOWER.value, Status.FASTER.value]
    return np.select(conditions, choices, default=Status.SAME.value)


def _relative(delta: pd.Series, base: pd.Series) -> pd.Series:
    """delta / base, NaN where the base is zero."""
    return delta / base.where(base != 0)
