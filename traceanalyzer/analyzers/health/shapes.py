"""Dynamic shapes, one analysis for both platforms: ops (or, where only kernels record shapes, as on Ascend's
kernel_details, kernels) whose input shapes keep changing from step to step, with what they cost.

An op is dynamic when it meets at least ``DYNAMIC_SHAPE_MIN`` distinct input shapes and new ones in (nearly) every
later step; one step alone cannot tell a changing shape from layers of different sizes, so it gives no verdict.
Cost: the device time of those ops, and the first-call stalls of each new shape (the host time of a shape's first
call above the op's median call: re-planning such as cuDNN's SDPA plans or cuBLAS heuristics), plus the run-time
op compiles (CANN ``Compile`` calls).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from traceanalyzer import findings as fnd
from traceanalyzer import intervals
from traceanalyzer.analyzers import advice
from traceanalyzer.analyzers.attribution import kind_rows
from traceanalyzer.analyzers.health.part import Context, Part
from traceanalyzer.findings import Claims, Finding
from traceanalyzer.memo import per_trace
from traceanalyzer.schema import BUSY, NO_ROW, Kind, category_text, positions
from traceanalyzer.tables import stack
from traceanalyzer.tracedata import TraceData
from traceanalyzer.vocabulary import COMPILE_CALL

ANALYZER = "health"

DYNAMIC_SHAPE_MIN = 3
"""Fewest distinct input shapes of one op, some first seen after the first step, for it to count as dynamic."""

SHOWN_IN_TITLE = 5
"""How many of the dynamic ops a finding's title names (the finding's ``where`` lists all of them)."""

COLUMNS = ["rank", "name", "calls", "shapes", "new_shapes", "steps", "device_ns", "stall_ns"]


@per_trace
def dynamic_shapes(trace: TraceData) -> pd.DataFrame:
    """Ops whose input shapes keep changing across steps: shapes, those first seen later, device time and stalls."""
    return shape_changes(trace.events)


def shape_changes(events: pd.DataFrame) -> pd.DataFrame:
    """``dynamic_shapes`` of an event table (CPU ops with recorded shapes; kernels where no op records them)."""
    return merged_shapes([shape_rows(events)])


def shape_rows(events: pd.DataFrame) -> pd.DataFrame:
    """The dynamic ops of an event table per rank and name, in the order they first appear, with when that is
    (``first_ts``): the per-rank stage of ``shape_changes``."""
    rows = _shaped(events)
    if not len(rows):
        return pd.DataFrame(columns=[*COLUMNS, "first_ts"])
    table = _per_op(_Calls(events, rows))
    hit = (table["shapes"] >= DYNAMIC_SHAPE_MIN) & (table["new_shapes"] >= table["steps"] - 1) & (table["steps"] > 1)
    table = table[hit].reset_index(drop=True)
    table["name"] = pd.array(category_text(events["name"])[table["name"].to_numpy()], dtype="str")
    return table[[*COLUMNS, "first_ts"]]


def merged_shapes(tables: list[pd.DataFrame]) -> pd.DataFrame:
    """``dynamic_shapes`` of several parts' ranks: the most device time (then new shapes) first, ties in the order
    the ops first appear in the ranks' joined table (when first seen, then rank)."""
    table = stack(tables).sort_values(["first_ts", "rank"], kind="stable")
    table = table.sort_values(["device_ns", "new_shapes"], ascending=False, kind="stable").reset_index(drop=True)
    return table[COLUMNS]


def _shaped(events: pd.DataFrame) -> np.ndarray:
    """The positions of the in-step rows whose input shapes are recorded: CPU ops, or kernels where no CPU op has
    shapes."""
    dims = events["input_dims"]
    recorded = np.array([len(t) > 0 for t in category_text(dims)], dtype=bool)[dims.array.codes]
    in_step = np.flatnonzero((events["step"] != NO_ROW).to_numpy() & recorded)
    kinds = events["kind"]
    kind = category_text(kinds)[kinds.array.codes[in_step]]
    ops = in_step[kind == Kind.CPU_OP.value]
    return ops if len(ops) else in_step[kind == Kind.KERNEL.value]


class _Calls:
    """The shaped rows (positions ``rows`` of ``events``) by start time, as arrays: rank, name, shape, step, pid,
    tid (names, shapes and threads by their category codes: one to one with their text), ts, dur, device time,
    and each row's op (rank and name) numbered in the order the ops first appear."""

    def __init__(self, events: pd.DataFrame, rows: np.ndarray) -> None:
        rows = rows[np.argsort(events["ts"].to_numpy()[rows], kind="stable")]
        self.rank = events["rank"].to_numpy()[rows]
        self.name, self.shape, self.pid, self.tid = (
            np.asarray(events[c].array.codes[rows], dtype=np.int64) for c in ("name", "input_dims", "pid", "tid")
        )
        self.step, self.ts, self.dur = (events[c].to_numpy()[rows] for c in ("step", "ts", "dur"))
        self.device_ns = _device_ns(events, rows)
        self.op = _numbered(self.rank, self.name)
        self.first = np.flatnonzero(_firsts(self.op))  # per op: its first row


def _numbered(*columns: np.ndarray) -> np.ndarray:
    """Per row: its distinct value of the integer columns (each at least -1), numbered in the order first seen."""
    key = np.zeros(len(columns[0]), dtype=np.int64)
    for column in columns:
        column = np.asarray(column, dtype=np.int64) + 1
        key = key * (int(column.max(initial=0)) + 1) + column
    return pd.factorize(key, sort=False)[0]


def _firsts(numbers: np.ndarray) -> np.ndarray:
    """Per row of values numbered in the order first seen (``_numbered``): is it the first of its value?"""
    seen = np.maximum.accumulate(numbers)
    return np.r_[True, seen[1:] > seen[:-1]] if len(numbers) else np.zeros(0, dtype=bool)


def _device_ns(events: pd.DataFrame, rows: np.ndarray) -> np.ndarray:
    """Per row (positions): its own duration for a kernel, else the busy device time of the work it launched
    (innermost op)."""
    op, dur = events["op"].to_numpy(), events["dur"].to_numpy()
    work = kind_rows(events, BUSY)
    work = work[op[work] != NO_ROW]
    launched = np.zeros(len(events) + 1, dtype=np.int64)  # the last: work whose op is not a row of the table
    np.add.at(launched, positions(events.index, op[work]), dur[work])
    kernel = (category_text(events["kind"]) == Kind.KERNEL.value)[events["kind"].array.codes[rows]]
    return np.where(kernel, dur[rows], launched[rows])


def _per_op(calls: _Calls) -> pd.DataFrame:
    """Per (rank, name), in the order they first appear: calls, distinct shapes, shapes first seen after the rank's
    first step, steps, device time, the first-call stalls of the shapes seen later, and the first call's start."""
    op, ops = calls.op, len(calls.first)
    first = np.flatnonzero(_firsts(_numbered(op, calls.shape)))  # each op's shapes' first calls
    rank, step = calls.rank[first], calls.step[first]
    ranks, of_rank = np.unique(rank, return_inverse=True)
    lowest = np.full(len(ranks), np.iinfo(step.dtype).max, dtype=step.dtype)
    np.minimum.at(lowest, of_rank.reshape(-1), step)
    lowest = lowest[of_rank.reshape(-1)]  # the rank's first step
    new = step > lowest
    stall = np.zeros(len(first), dtype=np.float64)
    late = np.flatnonzero(new)
    stall[late] = np.clip(calls.dur[first[late]] - _medians(op, calls.dur, op[first[late]]), 0, None)
    stalled = np.flatnonzero(stall > 0)
    if len(stalled):
        stalled_calls = {c: getattr(calls, c)[first[stalled]] for c in ("rank", "pid", "tid", "ts", "dur")}
        stall[stalled[_nested(pd.DataFrame(stalled_calls)).sort_index().to_numpy()]] = 0
    op_steps = op[_firsts(_numbered(op, calls.step))]  # per op and step it runs in: the op
    return pd.DataFrame(
        {
            "rank": calls.rank[calls.first],
            "name": calls.name[calls.first],
            "calls": np.bincount(op, minlength=ops),
            "steps": np.bincount(op_steps, minlength=ops),
            "device_ns": _sums(op, calls.device_ns, ops),
            "first_ts": calls.ts[calls.first],
            "shapes": np.bincount(op[first], minlength=ops),
            "new_shapes": np.bincount(op[first], weights=new, minlength=ops).astype(np.int64),
            "stall_ns": np.bincount(op[first], weights=stall, minlength=ops).astype(np.int64),
        }
    )


def _sums(group: np.ndarray, values: np.ndarray, groups: int) -> np.ndarray:
    """Per group 0..groups-1: the sum of its integer values."""
    out = np.zeros(groups, dtype=np.int64)
    np.add.at(out, group, values)
    return out


def _medians(group: np.ndarray, values: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """The median of the values of each wanted group (as pandas takes it: float64), only those groups sorted."""
    picked, at = np.unique(wanted, return_inverse=True)
    mine = np.flatnonzero(np.isin(group, picked))
    own = np.searchsorted(picked, group[mine])
    order = np.lexsort((values[mine], own))
    ordered = values[mine][order].astype(np.float64)
    count = np.bincount(own, minlength=len(picked))
    start = np.r_[0, np.cumsum(count)[:-1]]
    median = (ordered[start + (count - 1) // 2] + ordered[start + count // 2]) / 2
    return median[at.reshape(-1)]


def _nested(calls: pd.DataFrame) -> pd.Series:
    """Per call: does it run inside an earlier call of the set on the same thread (its stall is in that one's)?"""
    calls = calls.sort_values(["rank", "pid", "tid", "ts"], kind="stable")
    thread = [calls["rank"], calls["pid"], calls["tid"]]
    reach = (calls["ts"] + calls["dur"]).groupby(thread).cummax()
    return calls["ts"] < reach.groupby(thread).shift(fill_value=np.iinfo(np.int64).min)


def compile_ns(events: pd.DataFrame) -> int:
    """Host time in run-time op compiles (CANN ``Compile`` calls) inside steps."""
    compiling = np.array([COMPILE_CALL in t for t in category_text(events["name"])], dtype=bool)
    calls = (events["kind"] == Kind.RUNTIME.value).to_numpy() & (events["step"] != NO_ROW).to_numpy()
    return int(events["dur"].to_numpy()[calls & compiling[events["name"].array.codes]].sum())


def _stall_claims(health: Part) -> Claims:
    """The idle the first-call and compile causes explain, every rank's: the stalls this finding prices (so the
    cause's own finding, pushed first, covers it)."""
    out: Claims = {}
    for (rank, cause), packed in health.cause_idle.items():
        if cause in ("first_call", "compile"):
            ivs = packed.unpacked()
            have = out.get(rank, intervals.EMPTY)
            out[rank] = intervals.union(np.r_[have[0], ivs[0]], np.r_[have[1], ivs[1]])
    return out


def shape_findings(health: Part, context: Context) -> list[Finding]:
    """One finding naming every op whose shapes change, costed by their device time and first-call stalls."""
    table = health.shapes
    if not len(table):
        return []
    names = table["name"].drop_duplicates().tolist()
    shown = ", ".join(names[:SHOWN_IN_TITLE]) + (
        f", … {len(names) - SHOWN_IN_TITLE} more" if len(names) > SHOWN_IN_TITLE else ""
    )
    stalls, compiles = int(table["stall_ns"].sum()), health.compile_ns
    return [
        fnd.make(
            ANALYZER,
            "dynamic_shapes",
            f"Dynamic shapes: {len(names)} ops see new input shapes in later steps ({shown})",
            advice.DYNAMIC_SHAPES[advice.platform(context.meta)],
            context.step,
            concerns_ns=int(table["device_ns"].sum()) + stalls + compiles,
            saving_ns=stalls + compiles,
            basis=fnd.Basis.MODELLED,
            model="the first calls of new shapes would take the op's median host time (no re-planning) and no op "
            "would be compiled at run time; the device time of the ops themselves stays",
            claims=_stall_claims(health),
            where={"ops": names},
            evidence={
                "ops_with_device_work": int(table.loc[table["device_ns"] > 0, "name"].nunique()),
                "device_ns": int(table["device_ns"].sum()),
                "first_call_stall_ns": stalls,
                "compile_ns": compiles,
                "ops": table.to_dict(orient="records"),
            },
        )
    ]
