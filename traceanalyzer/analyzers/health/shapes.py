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
from traceanalyzer.analyzers import advice
from traceanalyzer.analyzers.attribution import busy_work
from traceanalyzer.analyzers.health.part import Context, Part, stack
from traceanalyzer.findings import Finding
from traceanalyzer.memo import per_trace
from traceanalyzer.schema import NO_ROW, Kind, category_text
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
    frame = pd.DataFrame(  # names, shapes and threads by their category codes: one to one with their text
        {
            "rank": rows["rank"].to_numpy(),
            "name": rows["name"].array.codes,
            "shape": rows["input_dims"].array.codes,
            "step": rows["step"].to_numpy(),
            "pid": rows["pid"].array.codes,
            "tid": rows["tid"].array.codes,
            "ts": rows["ts"].to_numpy(),
            "dur": rows["dur"].to_numpy(),
            "device_ns": _device_ns(events, rows),
        }
    )
    table = _per_op(frame)
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


def _shaped(events: pd.DataFrame) -> pd.DataFrame:
    """The in-step rows whose input shapes are recorded: CPU ops, or kernels where no CPU op has shapes."""
    dims = events["input_dims"]
    recorded = np.array([len(t) > 0 for t in category_text(dims)], dtype=bool)[dims.array.codes]
    columns = ["rank", "name", "input_dims", "step", "pid", "tid", "ts", "dur", "kind"]
    in_step = events.loc[(events["step"] != NO_ROW).to_numpy() & recorded, columns]
    ops = in_step[in_step["kind"] == Kind.CPU_OP.value]
    return ops if len(ops) else in_step[in_step["kind"] == Kind.KERNEL.value]


def _device_ns(events: pd.DataFrame, rows: pd.DataFrame) -> np.ndarray:
    """Per row: its own duration for a kernel, else the busy device time of the work it launched (innermost op)."""
    work = busy_work(events[["kind", "op", "dur"]])
    launched = work[work["op"] != NO_ROW].groupby("op")["dur"].sum().reindex(rows.index, fill_value=0).to_numpy()
    return np.where((rows["kind"] == Kind.KERNEL.value).to_numpy(), rows["dur"].to_numpy(), launched)


def _per_op(frame: pd.DataFrame) -> pd.DataFrame:
    """Per (rank, name), in the order they first appear: calls, distinct shapes, shapes first seen after the rank's
    first step, steps, device time, the first-call stalls of the shapes seen later, and the first call's start."""
    keys = ["rank", "name"]
    frame = frame.sort_values("ts", kind="stable")
    frame["median_ns"] = frame.groupby(keys)["dur"].transform("median")
    first = frame.drop_duplicates(keys + ["shape"])
    first = first.assign(new=first["step"] > first.groupby("rank")["step"].transform("min"))
    first = first.assign(stall=np.where(first["new"], (first["dur"] - first["median_ns"]).clip(lower=0), 0))
    first = first.assign(
        stall=np.where(_nested(first[first["stall"] > 0]).reindex(first.index, fill_value=False), 0, first["stall"])
    )
    per_shape = first.groupby(keys, sort=False).agg(
        shapes=("shape", "size"), new_shapes=("new", "sum"), stall_ns=("stall", "sum")
    )
    totals = frame.groupby(keys, sort=False).agg(
        calls=("step", "size"), steps=("step", "nunique"), device_ns=("device_ns", "sum"), first_ts=("ts", "min")
    )
    table = totals.join(per_shape).reset_index()
    return table.astype({"stall_ns": np.int64, "new_shapes": np.int64})


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
