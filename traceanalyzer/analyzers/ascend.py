"""Ascend-only analyses: core-type breakdown, AI_CPU fallbacks, msprof-style overlap per step (dynamic shapes are
the one analysis of ``health.shapes``, for both platforms).

Overlap follows msprof's OverlapAnalysis (anchors-ascend.md §13): Computing = ∪ compute kernels, Communication =
∪ whole collectives, Communication(Not Overlapped) = Communication \\ Computing, Free = the span of both minus their
union; each clipped to the step.
"""

from __future__ import annotations

import pandas as pd

from traceanalyzer.analyzers import distributed
from traceanalyzer.analyzers.health.shapes import DYNAMIC_SHAPE_MIN, shape_changes
from traceanalyzer.analyzers.steps import step_time
from traceanalyzer.findings import Finding, claims_of, make
from traceanalyzer.options import Options
from traceanalyzer.schema import Kind, Platform
from traceanalyzer.section import Fact, Per, Section, Table, Unit
from traceanalyzer.tracedata import TraceData

CORE_GROUPS = {
    "AI_CORE": "cube",
    "MIX_AIC": "cube",
    "AI_VECTOR_CORE": "vector",
    "MIX_AIV": "vector",
    "AI_CPU": "ai_cpu",
    "HCCL": "communication",
}
"""Core type → the group the breakdown reports (others, e.g. DSA_SQE, FFTS_PLUS, are 'other')."""

AI_CPU = "AI_CPU"
AI_CPU_SLOW_NS = 20_000
"""msprof-analyze's AICPU rule flags AI_CPU tasks longer than 20 µs."""
DYNAMIC_SHAPES_MIN = DYNAMIC_SHAPE_MIN
"""The dynamic-shape threshold (``health.shapes``), under the name this module used."""
dynamic_shape_ops = shape_changes
"""The dynamic-shape analysis of an event table (``health.shapes.shape_changes``), under the name this module used."""


def is_ascend(trace) -> bool:
    """Was the trace recorded on Ascend?"""
    return trace.meta.platform == Platform.ASCEND


def core_breakdown(events: pd.DataFrame) -> pd.DataFrame:
    """Device time by core group (cube, vector, ai_cpu, communication, other): count, total and share."""
    device = events[events["kind"].isin([Kind.KERNEL.value, Kind.COMMUNICATION.value])]
    group = device["core"].astype(str).map(CORE_GROUPS).fillna("other")
    group = group.where(device["kind"] != Kind.COMMUNICATION.value, "communication")
    table = device.groupby(group.to_numpy())["dur"].agg(["size", "sum"]).reset_index()
    table.columns = ["core_group", "count", "total_ns"]
    whole = table["total_ns"].sum()
    table["share"] = table["total_ns"] / whole if whole else 0.0
    return table.sort_values("total_ns", ascending=False).reset_index(drop=True)


def top_kernels(events: pd.DataFrame, top: int) -> pd.DataFrame:
    """Compute kernels and collectives by total time, with their core type and share of that time."""
    device = events[events["kind"].isin([Kind.KERNEL.value, Kind.COMMUNICATION.value])]
    g = device.groupby([device["name"].astype(str), device["core"].astype(str)])["dur"]
    table = pd.DataFrame({"count": g.size(), "total_ns": g.sum(), "mean_ns": g.mean()}).reset_index()
    table.columns = ["name", "core", "count", "total_ns", "mean_ns"]
    table["share"] = table["total_ns"] / max(int(table["total_ns"].sum()), 1)
    return table.sort_values("total_ns", ascending=False).head(top).reset_index(drop=True)


def aicpu_ops(events: pd.DataFrame) -> pd.DataFrame:
    """AI_CPU kernels by name: count, total, max, and how many ran longer than 20 µs."""
    ops = events[(events["kind"] == Kind.KERNEL.value) & (events["core"] == AI_CPU)]
    g = ops.assign(slow=ops["dur"] > AI_CPU_SLOW_NS).groupby(ops["name"].astype(str))
    table = pd.DataFrame(
        {"count": g.size(), "total_ns": g["dur"].sum(), "max_ns": g["dur"].max(), "slow": g["slow"].sum()}
    )
    return table.reset_index(names="name").sort_values("total_ns", ascending=False).reset_index(drop=True)


MSPROF_COLUMNS = {
    "compute_ns": "computing_ns",
    "comm_ns": "communication_ns",
    "comm_exposed_ns": "communication_not_overlapped_ns",
    "device_free_ns": "free_ns",
    "work_span_ns": "e2e_ns",
}
"""The overlap breakdown's columns under msprof's StepTraceTime names."""


def overlap(trace: TraceData) -> pd.DataFrame:
    """Per rank and step marker: msprof-style computing / communication / not-overlapped / free (ns) over the
    marker's window (as msprof's StepTraceTime), from the one overlap computation; the trace's own lanes beside."""
    table = distributed.window_overlap(trace, _marker_windows(trace.events))
    if not len(table):
        return pd.DataFrame(columns=["rank", "step", *MSPROF_COLUMNS.values()])
    return table[["rank", "step", *MSPROF_COLUMNS, *[c for c in distributed.LANES.values() if c in table]]].rename(
        columns=MSPROF_COLUMNS
    )


def _marker_windows(events: pd.DataFrame):
    """Per rank, (step, first marker start, last marker end) of each step's markers."""
    steps = events[events["kind"] == Kind.STEP.value]
    spans = steps.assign(end=steps["ts"] + steps["dur"]).groupby(["rank", "step"], sort=True)
    table = pd.DataFrame({"lo": spans["ts"].min(), "hi": spans["end"].max()}).reset_index()
    return lambda _events, rank: [
        (int(r.step), int(r.lo), int(r.hi)) for r in table[table["rank"] == rank].itertuples(index=False)
    ]


def findings(trace) -> list[Finding]:
    """AI_CPU fallbacks over 20 µs, on Ascend traces only."""
    if not is_ascend(trace):
        return []
    return _aicpu_finding(trace)


def _aicpu_finding(trace) -> list[Finding]:
    ops = aicpu_ops(trace.events)
    slow = ops[ops["slow"] > 0]
    if not len(slow):
        return []
    names = ", ".join(slow["name"].head(5))
    return [
        make(
            "ascend",
            "ai_cpu",
            f"{int(slow['slow'].sum())} AI_CPU task(s) over 20 µs ({len(slow)} op(s): {names})",
            "These ops fell back to the AI CPU. Check their dtypes (e.g. int64/double inputs often force AI_CPU: "
            "cast to int32/float32), replace index/nonzero/argmin-style ops with AI Core-supported formulations, "
            "or move them off the hot path.",
            step_time(trace),
            concerns_ns=int(slow["total_ns"].sum()),
            claims=claims_of(_aicpu_work(trace.events, slow["name"])),
            where={"ops": slow["name"].head(10).tolist()},
            evidence={"tasks_over_20us": int(slow["slow"].sum()), "ai_cpu_ns": int(ops["total_ns"].sum())},
        )
    ]


def _aicpu_work(events: pd.DataFrame, names: pd.Series) -> pd.DataFrame:
    """The AI_CPU tasks of the given op names."""
    return events[(events["core"] == "AI_CPU") & events["name"].isin(list(names))]


def section(trace: TraceData, options: Options) -> Section | None:
    """The Ascend section: core-type breakdown, msprof-style overlap per step and AI_CPU ops."""
    if not is_ascend(trace):
        return None
    events = trace.events
    cores = core_breakdown(events)
    by_group = dict(zip(cores["core_group"], cores["total_ns"], strict=True))
    share = dict(zip(cores["core_group"], cores["share"], strict=True))
    facts = [Fact("profiler_level", "profiler level", trace.meta.extra.get("profiler_level", ""))]
    for group in ("cube", "vector", "ai_cpu", "communication"):
        facts.append(
            Fact(f"{group}_ns", f"{group.replace('_', ' ')} time", int(by_group.get(group, 0)), Unit.NS, Per.TOTAL)
        )
        facts.append(
            Fact(f"{group}_share", f"{group.replace('_', ' ')} share", float(share.get(group, 0.0)), Unit.SHARE)
        )
    return Section(
        "ascend",
        "Ascend: core types, overlap and AI_CPU",
        facts=facts,
        tables=[
            Table("core_breakdown", "Device time by core type", cores, Per.TOTAL),
            Table("top_kernels", "Top kernels", top_kernels(events, options.top), Per.TOTAL),
            Table("overlap", "Overlap per step (msprof lanes)", overlap(trace), Per.STEP),
            Table("ai_cpu_ops", "AI_CPU ops", aicpu_ops(events).head(options.top), Per.TOTAL),
        ],
    )
