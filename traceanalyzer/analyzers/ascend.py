"""Ascend-only analyses: core-type breakdown, AI_CPU fallbacks, msprof-style overlap per step (dynamic shapes are
the one analysis of ``health.shapes``, for both platforms).

Overlap follows msprof's OverlapAnalysis (anchors-ascend.md §13): Computing = ∪ compute kernels, Communication =
∪ whole collectives, Communication(Not Overlapped) = Communication \\ Computing, Free = the span of both minus their
union; each clipped to the step.

Rank by rank, each table has an additive half (``core_totals``, ``kernel_totals``, ``aicpu_totals``: counts, sums,
maxes per key) and a combining half (shares, means, order, truncation); ``rank_part`` gives a rank's halves, its
overlap rows and its AI_CPU task unions, and the joined path is the combining half over the whole trace's part.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from traceanalyzer import humanize, intervals
from traceanalyzer.analyzers import distributed
from traceanalyzer.analyzers.health.shapes import shape_changes
from traceanalyzer.analyzers.summary import job_step_time
from traceanalyzer.findings import Basis, Claims, Finding, StepTime, make
from traceanalyzer.intervals import Intervals
from traceanalyzer.jobdata import JobData
from traceanalyzer.memo import remember
from traceanalyzer.options import DEFAULT, Options
from traceanalyzer.schema import (
    BUSY,
    CORE_WORK,
    HCCL_LINKS,
    HCCL_MATRIX,
    HOST_CALLS,
    PROFILER_LEVEL,
    STEP_TRACE,
    Kind,
    Platform,
    Scalar,
    TraceMeta,
)
from traceanalyzer.section import Fact, Per, Section, Table, Unit
from traceanalyzer.tables import stack
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
AI_CPU_SAVING = (
    "an upper bound: the AI Core idle while these AI_CPU tasks ran (no other device work beside them), which "
    "running them on the AI Core would mostly give back"
)
dynamic_shape_ops = shape_changes
"""The dynamic-shape analysis of an event table (``health.shapes.shape_changes``), under the name this module used."""


def is_ascend(trace) -> bool:
    """Was the trace recorded on Ascend?"""
    return trace.meta.platform == Platform.ASCEND


def core_totals(events: pd.DataFrame) -> pd.DataFrame:
    """Per core group: count and total device time (ns), the additive half of the
    section's ``core_breakdown`` table."""
    device = events[events["kind"].isin(CORE_WORK)]
    group = device["core"].astype(str).map(CORE_GROUPS).fillna("other")
    group = group.where(device["kind"] != Kind.COMMUNICATION.value, "communication")
    table = device.groupby(group.to_numpy())["dur"].agg(["size", "sum"]).reset_index()
    table.columns = ["core_group", "count", "total_ns"]
    return table


def _core_shares(totals: list[pd.DataFrame]) -> pd.DataFrame:
    """``core_totals`` of several parts added up, with each group's share, largest first."""
    table = _added(totals, ["core_group"], {"count": "sum", "total_ns": "sum"})
    whole = table["total_ns"].sum()
    table["share"] = table["total_ns"] / whole if whole else 0.0
    return table.sort_values("total_ns", ascending=False).reset_index(drop=True)


def kernel_totals(events: pd.DataFrame) -> pd.DataFrame:
    """Per compute kernel or collective name and core type: count and total time (ns), untruncated."""
    device = events[events["kind"].isin(CORE_WORK)]
    g = device.groupby([device["name"].astype(str), device["core"].astype(str)])["dur"]
    table = pd.DataFrame({"count": g.size(), "total_ns": g.sum()}).reset_index()
    table.columns = ["name", "core", "count", "total_ns"]
    return table


def _kernel_shares(totals: list[pd.DataFrame], top: int) -> pd.DataFrame:
    """``kernel_totals`` of several parts added up: the ``top`` by total time, with mean and share."""
    table = _added(totals, ["name", "core"], {"count": "sum", "total_ns": "sum"})
    table["mean_ns"] = table["total_ns"] / table["count"]
    table["share"] = table["total_ns"] / max(int(table["total_ns"].sum()), 1)
    return table.sort_values("total_ns", ascending=False).head(top).reset_index(drop=True)


def aicpu_totals(events: pd.DataFrame) -> pd.DataFrame:
    """Per AI_CPU kernel name: count, total (time on the AI_CPU lane), max, tasks over 20 µs and ``exposed_ns``
    (the AI Core idle it causes: its tasks' time with no other device work running on the rank), the additive half
    of the section's ``ai_cpu_ops`` table."""
    ops = events[(events["kind"] == Kind.KERNEL.value) & (events["core"] == AI_CPU)]
    ops = ops.assign(slow=ops["dur"] > AI_CPU_SLOW_NS, exposed=ops["dur"] - _covered_by_other_work(events, ops))
    g = ops.groupby(ops["name"].astype(str))
    table = pd.DataFrame(
        {
            "count": g.size(),
            "total_ns": g["dur"].sum(),
            "max_ns": g["dur"].max(),
            "slow": g["slow"].sum(),
            "exposed_ns": g["exposed"].sum(),
        }
    )
    return table.reset_index(names="name")


def _covered_by_other_work(events: pd.DataFrame, ops: pd.DataFrame) -> np.ndarray:
    """Per AI_CPU task: how much of it other device work of its rank (AI Core and vector kernels, communication,
    copies) runs beside."""
    other = events[events["kind"].isin(BUSY) & (events["core"] != AI_CPU)]
    out = np.zeros(len(ops), dtype=np.int64)
    for rank, mine in other.groupby("rank", observed=True):
        at = np.flatnonzero(ops["rank"].to_numpy() == rank)
        if len(at):
            busy = intervals.union(mine["ts"].to_numpy(), (mine["ts"] + mine["dur"]).to_numpy())
            start = ops["ts"].to_numpy()[at]
            out[at] = intervals.covered_within(busy, start, start + ops["dur"].to_numpy()[at])
    return out


def _aicpu_table(totals: list[pd.DataFrame]) -> pd.DataFrame:
    """``aicpu_totals`` of several parts added up, largest total first."""
    how = {"count": "sum", "total_ns": "sum", "max_ns": "max", "slow": "sum", "exposed_ns": "sum"}
    table = _added(totals, ["name"], how)
    return table.sort_values("total_ns", ascending=False).reset_index(drop=True)


def _added(parts: list[pd.DataFrame], keys: list[str], how: dict[str, str]) -> pd.DataFrame:
    """Per-key partial tables combined: one row per key (sorted by key), each column aggregated as ``how`` says."""
    return stack(parts).groupby(keys, sort=True).agg(how).reset_index()


def aicpu_work(events: pd.DataFrame) -> dict[int, dict[str, Intervals]]:
    """Per rank and op name: the union of that op's AI_CPU tasks (what an AI_CPU finding claims)."""
    tasks = events.loc[events["core"] == AI_CPU, ["rank", "name", "ts", "dur"]]
    return {
        int(rank): {
            str(name): intervals.union(group.ts.to_numpy(), (group.ts + group.dur).to_numpy())
            for name, group in by_rank.groupby(by_rank["name"].astype(str), sort=True)
        }
        for rank, by_rank in tasks.groupby("rank", sort=True, observed=True)
    }


MSPROF_COLUMNS = {
    "compute_ns": "computing_ns",
    "comm_ns": "communication_ns",
    "comm_exposed_ns": "communication_not_overlapped_ns",
    "device_free_ns": "free_ns",
    "preparing_ns": "preparing_ns",
    "work_span_ns": "e2e_ns",
}
"""The overlap breakdown's columns under msprof's StepTraceTime names."""
BASIS_EVENTS = "events"
BASIS_STEP_TRACE = "step_trace_time.csv (no kernels recorded)"
BASIS_PREPARING = "events; preparing: step_trace_time.csv (no host step start recorded)"
"""Where a rank's overlap row comes from: our computation over its events, or msprof's own per-step figures for a
rank whose kernels the profiler did not write (its communication ops alone are events)."""


def overlap(trace: TraceData) -> pd.DataFrame:
    """Per rank and step marker: msprof-style computing / communication / not-overlapped / free / preparing (ns)
    over the marker's window (as msprof's StepTraceTime), from the one overlap computation, the trace's own lanes
    beside; a rank with no kernels takes msprof's figures (``basis`` says which)."""
    table = distributed.window_overlap(trace, _marker_windows(trace.events))
    if not len(table):
        return pd.DataFrame(columns=["rank", "step", *MSPROF_COLUMNS.values(), "basis"])
    lanes = [c for c in distributed.LANES.values() if c in table]
    table = table[["rank", "step", *MSPROF_COLUMNS, *lanes]].rename(columns=MSPROF_COLUMNS)
    table["basis"] = BASIS_EVENTS
    ev = trace.events
    kernels = set(ev.loc[ev["kind"] == Kind.KERNEL.value, "rank"].unique())
    host = set(ev.loc[ev["kind"].isin(HOST_CALLS), "rank"].unique())
    return _from_step_trace(table, step_traces(trace.meta), kernels, host)


def _from_step_trace(table: pd.DataFrame, figures: pd.DataFrame, kernel_ranks: set, host_ranks: set) -> pd.DataFrame:
    """The rows of ranks without kernels replaced by msprof's figures of their step, and the preparing time of
    ranks without host events (their steps start at their first device work: no framework step start to measure
    from) taken from them, where the rank has them."""
    if not len(figures):
        return table
    theirs = figures.assign(e2e_ns=figures["stage_ns"] + figures["bubble_ns"]).set_index(["rank", "step"])
    key = pd.MultiIndex.from_frame(table[["rank", "step"]])
    known = key.isin(theirs.index)
    use = ~table["rank"].isin(kernel_ranks).to_numpy() & known
    for column in set(MSPROF_COLUMNS.values()) & set(theirs.columns):
        table.loc[use, column] = theirs[column].reindex(key[use]).to_numpy()
    table.loc[use, "basis"] = BASIS_STEP_TRACE
    hostless = ~use & ~table["rank"].isin(host_ranks).to_numpy() & known
    if "preparing_ns" in theirs and hostless.any():
        table.loc[hostless, "preparing_ns"] = theirs["preparing_ns"].reindex(key[hostless]).to_numpy()
        table.loc[hostless, "basis"] = BASIS_PREPARING
    return table


def step_traces(meta: TraceMeta) -> pd.DataFrame:
    """msprof's own per-step figures of every rank of the trace (step_trace_time.csv / analysis.db), with their rank;
    empty when no rank has them."""
    return meta.side_table(STEP_TRACE)


def _marker_windows(events: pd.DataFrame):
    """Per rank, (step, first marker start, last marker end) of each step's markers."""
    steps = events[events["kind"] == Kind.STEP.value]
    spans = steps.assign(end=steps["ts"] + steps["dur"]).groupby(["rank", "step"], sort=True)
    table = pd.DataFrame({"lo": spans["ts"].min(), "hi": spans["end"].max()}).reset_index()
    return lambda _events, rank: [
        (int(r.step), int(r.lo), int(r.hi)) for r in table[table["rank"] == rank].itertuples(index=False)
    ]


@dataclass(frozen=True)
class AscendPart:
    """The part of a rank (or of a whole trace): totals per core group (``core_totals``), per kernel and core
    (``kernel_totals``), per AI_CPU op (``aicpu_totals``), the AI_CPU ops' task unions per rank and op name, the
    overlap rows, and msprof's step figures and HCCL link tables of the rank."""

    cores: pd.DataFrame
    kernels: pd.DataFrame
    ai_cpu: pd.DataFrame
    ai_cpu_work: dict[int, dict[str, Intervals]]
    overlap: pd.DataFrame
    step_trace: pd.DataFrame
    hccl_links: pd.DataFrame
    hccl_matrix: pd.DataFrame


def rank_part(trace: TraceData, options: Options = DEFAULT) -> AscendPart | None:
    """The part of a rank (or of a whole trace); None off Ascend."""
    return _part(trace) if is_ascend(trace) else None


def _part(trace: TraceData) -> AscendPart:
    """The part of an Ascend trace (see ``rank_part``), once per trace."""
    return remember(trace, "ascend.part", lambda: _part_of(trace))


def _part_of(trace: TraceData) -> AscendPart:
    """The part of an Ascend trace, computed."""
    events = trace.events
    return AscendPart(
        cores=core_totals(events),
        kernels=kernel_totals(events),
        ai_cpu=aicpu_totals(events),
        ai_cpu_work=aicpu_work(events),
        overlap=overlap(trace),
        step_trace=step_traces(trace.meta),
        hccl_links=trace.meta.side_table(HCCL_LINKS),
        hccl_matrix=trace.meta.side_table(HCCL_MATRIX),
    )


def merge(parts: list[AscendPart | None], job: JobData) -> list[AscendPart]:
    """The analyzer's merge rule: the ranks' Ascend parts in rank order, added up where read (none off Ascend)."""
    return [p for p in parts if p is not None] if is_ascend(job) else []


def job_findings(parts: list[AscendPart], job: JobData) -> list[Finding]:
    """AI_CPU fallbacks over 20 µs of a job's merged part (none off Ascend: the part is then empty)."""
    return _aicpu_finding(parts, job_step_time(job)) if parts else []


def _aicpu_finding(parts: list[AscendPart], step: StepTime) -> list[Finding]:
    """The AI_CPU finding from the parts (none when no task ran over 20 µs)."""
    ops = _aicpu_table([p.ai_cpu for p in parts])
    slow = ops[ops["slow"] > 0]
    if not len(slow):
        return []
    names = ", ".join(slow["name"].head(5))
    return [
        make(
            "ascend",
            "ai_cpu",
            f"{int(slow['slow'].sum())} AI_CPU task(s) over {humanize.duration(AI_CPU_SLOW_NS, 0)} "
            f"({len(slow)} op(s): {names})",
            "These ops fell back to the AI CPU. Check their dtypes (e.g. int64/double inputs often force AI_CPU: "
            "cast to int32/float32), replace index/nonzero/argmin-style ops with AI Core-supported formulations, "
            "or move them off the hot path.",
            step,
            concerns_ns=int(slow["total_ns"].sum()),
            saving_ns=int(slow["exposed_ns"].sum()),
            basis=Basis.MEASURED,
            model=AI_CPU_SAVING,
            claims=_claims([p.ai_cpu_work for p in parts], set(slow["name"])),
            where={"ops": slow["name"].head(10).tolist()},
            evidence={
                "tasks_over_20us": int(slow["slow"].sum()),
                "ai_cpu_ns": int(ops["total_ns"].sum()),
                "ai_core_idle_ns": int(ops["exposed_ns"].sum()),
            },
        )
    ]


def _claims(works: list[dict[int, dict[str, Intervals]]], names: set[str]) -> Claims:
    """Per rank, the union of the AI_CPU tasks of the given op names."""
    out: Claims = {}
    for work in works:
        for rank, by_name in sorted(work.items()):
            picked = [by_name[n] for n in sorted(names & by_name.keys())]
            if picked:
                starts, ends = (np.concatenate([ivs[i] for ivs in picked]) for i in (0, 1))
                out[rank] = intervals.union(starts, ends)
    return out


def job_section(parts: list[AscendPart], job: JobData, options: Options) -> Section | None:
    """The Ascend section of a job's merged part: core-type breakdown, msprof-style overlap per step and AI_CPU
    ops (None off Ascend)."""
    return _section(parts, job.meta.facts, options) if parts else None


def _links(parts: list[pd.DataFrame]) -> pd.DataFrame:
    """msprof's per-op, per-link transfers of the ranks, most bytes first (start times left out: the op and step
    name it)."""
    table = stack(parts)
    if not len(table):
        return pd.DataFrame(columns=["rank", "step", "name", "transport", "bytes", "transit_ns", "bandwidth_gbps"])
    return table.drop(columns=["ts"]).sort_values(["bytes", "rank"], ascending=[False, True]).reset_index(drop=True)


def _matrix(parts: list[pd.DataFrame]) -> pd.DataFrame:
    """msprof's per-link step totals of the ranks, links between ranks first (on-chip LOCAL copies last), most bytes
    first."""
    table = stack(parts)
    if not len(table):
        return pd.DataFrame(columns=["rank", "step", "op_type", "link", "transport", "bytes", "bandwidth_gbps"])
    order = table.assign(local=table["transport"] == "LOCAL")
    order = order.sort_values(["local", "bytes", "rank"], ascending=[True, False, True])
    return order.drop(columns=["local"]).reset_index(drop=True)


def _section(parts: list[AscendPart], recorded: dict[str, Scalar], options: Options) -> Section:
    """The section from the parts of the ranks (or the one part of a joined trace) and the facts the trace records
    (``TraceMeta.facts``)."""
    cores = _core_shares([p.cores for p in parts])
    by_group = dict(zip(cores["core_group"], cores["total_ns"], strict=True))
    share = dict(zip(cores["core_group"], cores["share"], strict=True))
    facts = [Fact("profiler_level", "profiler level", recorded.get(PROFILER_LEVEL, ""))]
    aicpu = _aicpu_table([p.ai_cpu for p in parts])
    facts.append(
        Fact("ai_core_idle_ns", "AI Core idle during AI_CPU tasks", int(aicpu["exposed_ns"].sum()), Unit.NS, Per.TOTAL)
    )
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
            Table("top_kernels", "Top kernels", _kernel_shares([p.kernels for p in parts], options.top), Per.TOTAL),
            Table("overlap", "Overlap per step (msprof lanes)", stack([p.overlap for p in parts]), Per.STEP),
            Table(
                "step_trace",
                "msprof's own figures per step (step_trace_time.csv or analysis.db)",
                stack([p.step_trace for p in parts]),
                Per.STEP,
            ),
            Table("ai_cpu_ops", "AI_CPU ops", aicpu.head(options.top), Per.TOTAL),
            Table(
                "hccl_links",
                "HCCL transfers per op and link (msprof's communication.json)",
                _links([p.hccl_links for p in parts]).head(options.top),
            ),
            Table(
                "hccl_matrix",
                "HCCL links (src-dst: ranks in the group) per op type, msprof's communication_matrix.json step totals",
                _matrix([p.hccl_matrix for p in parts]).head(options.top),
                Per.STEP,
            ),
        ],
    )
