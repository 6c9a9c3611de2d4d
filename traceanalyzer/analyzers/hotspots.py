"""Hotspots: ops and kernels ranked by total time, with count, mean, min, max, share and cumulative share.

Device work replayed from a CUDA/HIP graph has no recorded op: the op tables show it as one row,
``vocabulary.GRAPH_REPLAYED``, with its time (never under another op), and ``graph_launches`` groups it per launch.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum

import numpy as np
import pandas as pd

from traceanalyzer import humanize, intervals
from traceanalyzer.analyzers import advice, counters, roofline
from traceanalyzer.analyzers.attribution import in_steps
from traceanalyzer.analyzers.gemm import job_throughput
from traceanalyzer.analyzers.ledger import graph_launched, graph_replayed
from traceanalyzer.analyzers.summary import job_compute_step_time, step_table
from traceanalyzer.findings import Basis, Claims, Finding, StepTime, make
from traceanalyzer.groups import Groups
from traceanalyzer.jobdata import JobData
from traceanalyzer.memo import remember
from traceanalyzer.options import DEFAULT, Options
from traceanalyzer.schema import (
    BUSY,
    DEVICE,
    NO_ROW,
    NOT_COMPUTE,
    Kind,
    TraceMeta,
    category_text,
    codes_at,
    per_pair,
    positions,
)
from traceanalyzer.section import Per, Section, Table
from traceanalyzer.tables import stack
from traceanalyzer.tracedata import TraceData
from traceanalyzer.vocabulary import (
    ATTENTION_KERNEL,
    CONV_KERNEL,
    GEMM_KERNEL,
    GRAPH_REPLAYED,
    MATMUL_OP,
    NORMALISATION,
)


class Level(str, Enum):
    """What a hotspot table ranks."""

    KERNEL = "kernel"  # device kernels, copies, sets and collectives, by name
    CPU_OP = "cpu_op"  # CPU ops by name: self and inclusive host time, and the device time they caused
    OP_DEVICE = "op_device"  # device time per launching (innermost) CPU op
    CATEGORY = "category"  # device time per op category (gemm, elementwise, copy, ...)


GEMM_TARGET = 0.8
"""The share of the dense data-sheet peak a well-shaped GEMM reaches; a GEMM hotspot's saving is measured to it."""

HOTSPOT_COLUMNS = ["name", "kind", "count", "total_ns", "mean_ns", "min_ns", "max_ns", "share", "cum_share"]
LEVEL_COLUMNS = {
    Level.KERNEL: HOTSPOT_COLUMNS,
    Level.CPU_OP: [*HOTSPOT_COLUMNS[:-2], "inclusive_ns", "device_self_ns", "share", "cum_share"],
    Level.OP_DEVICE: [*HOTSPOT_COLUMNS[:-2], "kernels", "share", "cum_share"],
    Level.CATEGORY: HOTSPOT_COLUMNS,
}
"""The columns of each level's ranked table."""
USED = ["ts", "dur", "name", "kind", "parent", "launch", "op", "rank"]
"""The event-table columns the hotspot tables read."""
KEY = ["name", "kind"]
"""What a partial table's rows are per (besides the rank)."""
SUMMED = ["count", "total_ns", "inclusive_ns", "device_self_ns", "kernels"]
"""The additive columns of partial tables (those a level has); ``min_ns`` and ``max_ns`` combine by min and max."""


def hotspots(
    events: pd.DataFrame, level: Level | str = Level.KERNEL, top: int | None = None, table: pd.DataFrame | None = None
) -> pd.DataFrame:
    """Rank by total time at one level; ``events`` may be filtered by step, rank or kind, ``table`` is the whole
    event table that link columns point into (defaults to ``events``)."""
    level = Level(level)
    ranked = ranked_level(partial(events, level, table), level)
    return ranked.head(top).reset_index(drop=True) if top else ranked


def partial(events: pd.DataFrame, level: Level, table: pd.DataFrame | None = None) -> pd.DataFrame:
    """The per-rank stage of a level: per (rank, name, kind), in rank order then order of first appearance, the
    additive columns (count, total_ns, ..., min_ns, max_ns); ``ranked_level`` combines any number of them."""
    table = events if table is None else table
    events = events[USED]  # each level filters rows: of these columns only
    stage = {Level.KERNEL: _kernels, Level.CPU_OP: _cpu_ops, Level.OP_DEVICE: _op_device, Level.CATEGORY: _category}
    part = stage[level](events, table)
    return part.sort_values("rank", kind="stable").reset_index(drop=True)


def ranked_level(partials: pd.DataFrame, level: Level) -> pd.DataFrame:
    """The combining stage: a level's table from partial rows of any ranks (concatenated in rank order), summed per
    (name, kind), with mean, share and cumulative share, largest total first (ties in order of first appearance)."""
    if level is Level.CPU_OP:  # graph-replayed work ranks after every op of the same total
        partials = partials.iloc[np.argsort(partials["kind"].to_numpy() == "graph", kind="stable")]
    out = _combined(partials)
    out["mean_ns"] = out["total_ns"] / out["count"]
    return _ranked(out)[LEVEL_COLUMNS[level]].reset_index(drop=True)


def _combined(partials: pd.DataFrame) -> pd.DataFrame:
    """Partial rows combined per (name, kind) in order of first appearance: the ``SUMMED`` columns summed,
    ``min_ns`` and ``max_ns`` by min and max."""
    groups = Groups([partials[column] for column in KEY])
    out = partials.iloc[groups.first][KEY].reset_index(drop=True)
    for column in [c for c in SUMMED if c in partials]:
        out[column] = groups.sum(partials[column].to_numpy())
    out["min_ns"] = groups.reduce(np.minimum, partials["min_ns"].to_numpy())
    out["max_ns"] = groups.max(partials["max_ns"].to_numpy())
    return out


def _ranked(grouped: pd.DataFrame, total_col: str = "total_ns") -> pd.DataFrame:
    """Rows largest total first (stable), with each one's share of the total and the cumulative share."""
    grouped = grouped.sort_values(total_col, ascending=False, kind="stable")
    whole = grouped[total_col].sum()
    grouped["share"] = grouped[total_col] / whole if whole else 0.0
    grouped["cum_share"] = grouped["share"].cumsum()
    return grouped


def _stats(frame: pd.DataFrame, by: list[str], value: str = "dur") -> pd.DataFrame:
    """Count, total, min and max of ``value`` per group (groups in order of first appearance), keys as columns."""
    groups = Groups([frame[column] for column in by])
    out = frame.iloc[groups.first][by].reset_index(drop=True)
    out["count"] = groups.sizes
    for column, ufunc in (("total_ns", np.add), ("min_ns", np.minimum), ("max_ns", np.maximum)):
        out[column] = groups.reduce(ufunc, frame[value].to_numpy())
    return out


def _kernels(events: pd.DataFrame, table: pd.DataFrame) -> pd.DataFrame:
    """Level.KERNEL's partial: device rows per (rank, name, kind)."""
    stats = _stats(events[events["kind"].isin(DEVICE)], ["rank", *KEY])
    return stats.astype({"name": str, "kind": str})


def _cpu_ops(events: pd.DataFrame, table: pd.DataFrame) -> pd.DataFrame:
    """Level.CPU_OP's partial: per (rank, op name) self and inclusive host time and the device time its calls
    launched directly; then per rank one row of graph-replayed work."""
    ops = events.loc[events["kind"] == Kind.CPU_OP.value, ["ts", "dur", "parent", "name", "rank"]]
    at = positions(table.index, ops.index)
    self_ns = ops["dur"].to_numpy() - _child_op_time(table, ops)[at]
    device = events.loc[events["kind"].isin(DEVICE), ["op", "dur", "launch", "rank"]]
    linked = device[device["op"] != NO_ROW]
    frame = pd.DataFrame(
        {
            "rank": ops["rank"].to_numpy(),
            "name": ops["name"].array.codes,
            "dur": ops["dur"].to_numpy(),
            "self": self_ns,
            "device": _sum_per_row(table, linked["op"].to_numpy(), linked["dur"].to_numpy())[at],
        }
    )
    g = frame.groupby(["rank", "name"], sort=False)
    stats = pd.DataFrame(
        {
            "count": g.size(),
            "total_ns": g["self"].sum(),
            "inclusive_ns": g["dur"].sum(),
            "min_ns": g["self"].min(),
            "max_ns": g["self"].max(),
            "device_self_ns": g["device"].sum(),
        }
    ).reset_index()
    stats["name"] = _text(category_text(ops["name"])[stats["name"].to_numpy()])
    stats.insert(2, "kind", Kind.CPU_OP.value)
    return pd.concat([stats, _replayed_rows(device, table)], ignore_index=True)


def _replayed_rows(device: pd.DataFrame, table: pd.DataFrame) -> pd.DataFrame:
    """The cpu_op partial's row per rank for graph-replayed device work (of the device rows given): no host op ran
    it, its device time is its own."""
    replayed = device[_replayed(device, table)]
    if not len(replayed):
        return pd.DataFrame()
    g = replayed.groupby("rank", sort=True)
    rows = pd.DataFrame({"count": g["launch"].nunique(), "device_self_ns": g["dur"].sum().astype(np.int64)})
    rows = rows.assign(name=GRAPH_REPLAYED, kind="graph", total_ns=0, inclusive_ns=0, min_ns=0, max_ns=0)
    return rows.reset_index()


def _child_op_time(events: pd.DataFrame, ops: pd.DataFrame) -> np.ndarray:
    """Per row of ``events`` (by position), the summed time of the ``ops`` directly beneath it (via any non-op
    frames), each counted only inside its parent: a child that outlasts its parent (a record_function range ending
    after the op around it) must not make the parent's self time negative."""
    index = events.index
    parent = positions(index, ops["parent"].to_numpy())  # positions; -1: no parent
    owner = np.where(parent >= 0, events["op"].to_numpy()[parent], NO_ROW)  # the parent's op
    linked = owner != NO_ROW
    start = ops["ts"].to_numpy()[linked]
    end = start + ops["dur"].to_numpy()[linked]
    at = positions(index, owner[linked])
    owner_end = events["ts"].to_numpy()[at] + events["dur"].to_numpy()[at]
    return _sum_per_row(events, owner[linked], np.clip(np.minimum(end, owner_end) - start, 0, None))


def _sum_per_row(table: pd.DataFrame, labels: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Per row of ``table`` (by position): the sum of the values whose label is that row's (int64)."""
    at = positions(table.index, labels)
    out = np.zeros(len(table), dtype=np.int64)
    np.add.at(out, at[at >= 0], np.asarray(values, dtype=np.int64)[at >= 0])
    return out


def _op_device(events: pd.DataFrame, table: pd.DataFrame) -> pd.DataFrame:
    """Level.OP_DEVICE's partial: per (rank, launching op name) the device time of each call (count, total, min,
    max over calls) and the device rows (``kernels``)."""
    device, calls = _op_work(events, table)
    names = codes_at(table["name"], device["op"].to_numpy())  # -1: graph-replayed (no op)
    frame = pd.DataFrame(
        {"rank": device["rank"].to_numpy(), "name": names, "op": calls, "dur": device["dur"].to_numpy()}
    )
    per_call = frame.groupby(["rank", "name", "op"], sort=False)["dur"].sum().reset_index()
    stats = _stats(per_call, ["rank", "name"])
    kernels = frame.groupby(["rank", "name"], sort=False).size()
    stats["kernels"] = kernels.reindex(pd.MultiIndex.from_frame(stats[["rank", "name"]])).to_numpy()
    text = category_text(table["name"])
    text[-1] = GRAPH_REPLAYED
    stats["name"] = _text(text[stats["name"].to_numpy()])
    stats.insert(2, "kind", np.where(stats["name"] == GRAPH_REPLAYED, "graph", Kind.CPU_OP.value))
    return stats


def _op_work(events: pd.DataFrame, table: pd.DataFrame) -> tuple[pd.DataFrame, np.ndarray]:
    """Device rows with a launching op, or replayed by a graph launch; and the call each belongs to (the op row,
    or the graph launch row)."""
    device = events[events["kind"].isin(DEVICE)]
    op = device["op"].to_numpy()
    replayed = _replayed(device, table)
    keep = (op != NO_ROW) | replayed
    return device[keep], np.where(op != NO_ROW, op, device["launch"].to_numpy())[keep]


def _replayed(device: pd.DataFrame, table: pd.DataFrame) -> np.ndarray:
    """Per device row: launched by a graph replay and linked to no op?"""
    return (device["op"].to_numpy() == NO_ROW) & graph_launched(table, device["launch"].to_numpy())


def _text(values: np.ndarray) -> pd.Series:
    """Names of a (small) result table as a text column."""
    return pd.Series(values, dtype=str)


GRAPH_LAUNCH_COLUMNS = ["rank", "step", "launch_ns", "kernels", "memsets", "memcpys", "device_ns", "span_ns"]


def graph_launches(trace: TraceData) -> pd.DataFrame:
    """One row per graph launch (cudaGraphLaunch / hipGraphLaunch), in rank order: the kernels, memsets and copies
    it replayed, their device time and the span from the first start to the last end (ns; ``launch_ns`` from the
    window start)."""
    return _from_start(_launch_rows(trace), trace.meta.start_ns)


def _launch_rows(trace: TraceData) -> pd.DataFrame:
    """``graph_launches`` with ``launch_ns`` on the rank's clock (its launch's timestamp), the part a rank sends."""
    work = graph_replayed(trace)
    if not len(work):
        return pd.DataFrame(columns=GRAPH_LAUNCH_COLUMNS)
    kind = work["kind"].astype(str)
    g = work.assign(
        end=work["ts"] + work["dur"],
        kernel=kind == Kind.KERNEL.value,
        memset=kind == Kind.MEMSET.value,
        memcpy=kind == Kind.MEMCPY.value,
    ).groupby("launch", sort=True)
    launches = trace.events.loc[g.size().index]
    table = pd.DataFrame(
        {
            "rank": launches["rank"].to_numpy(),
            "step": g["step"].max().to_numpy(),
            "launch_ns": launches["ts"].to_numpy(),
            "kernels": g["kernel"].sum().to_numpy(),
            "memsets": g["memset"].sum().to_numpy(),
            "memcpys": g["memcpy"].sum().to_numpy(),
            "device_ns": g["dur"].sum().to_numpy(),
            "span_ns": (g["end"].max() - g["ts"].min()).to_numpy(),
        }
    )
    table = table.astype({c: np.int64 for c in GRAPH_LAUNCH_COLUMNS[2:]})
    return table.sort_values("rank", kind="stable").reset_index(drop=True)


def _from_start(launches: pd.DataFrame, start_ns: int) -> pd.DataFrame:
    """Launch rows with ``launch_ns`` from the window start."""
    return launches.assign(launch_ns=launches["launch_ns"] - start_ns) if len(launches) else launches


def _graph_summary(table: pd.DataFrame) -> pd.DataFrame:
    """Per rank of graph launch rows (``graph_launches``): launches, median work items and device time per launch,
    and device time in all."""
    g = table.groupby("rank", sort=True)
    return pd.DataFrame(
        {
            "launches": g.size(),
            "kernels_per_launch": g["kernels"].median(),
            "memsets_per_launch": g["memsets"].median(),
            "memcpys_per_launch": g["memcpys"].median(),
            "device_ns_per_launch": g["device_ns"].median(),
            "device_ns": g["device_ns"].sum(),
        }
    ).reset_index()


# ---------------------------------------------------------------- findings: what dominates step time

HOTSPOT_FINDINGS = 5
"""How many of the top ops (or kernels) become findings."""

OP_CATEGORIES: tuple[tuple[str, tuple[re.Pattern, ...]], ...] = (
    (
        "communication",
        (re.compile(r"nccl|rccl|hccl|hcom|c10d|record_param_comms|all_?reduce|all_?gather|reduce_?scatter", re.I),),
    ),
    ("copy", (re.compile(r"copy|::to$|_to_copy|contiguous|clone|::cat$|Memcpy|index_select|::stack$", re.I),)),
    ("attention", (ATTENTION_KERNEL,)),
    ("gemm", (MATMUL_OP, GEMM_KERNEL, CONV_KERNEL)),
    ("memset", (re.compile(r"Memset|::zero_$|::fill_$", re.I),)),
    ("normalisation", (NORMALISATION,)),
    (
        "elementwise",
        (
            re.compile(
                r"elementwise|foreach|::(mul|add|sub|div|pow|sin|cos|exp|log|neg|rsqrt|sqrt|relu|gelu|silu|sigmoid|tanh"
                r"|clamp|where|masked_fill|threshold)_?$",
                re.I,
            ),
        ),
    ),
    ("reduction", (re.compile(r"reduce|::sum$|::mean$|::max$|::min$|::norm$|argmax", re.I),)),
)
"""Op/kernel categories by name (kernel families from ``vocabulary``), checked in order; the first match wins."""


def category(*names: str) -> str:
    """The category of an op or kernel, from its name (and its main kernel's name)."""
    for name, patterns in OP_CATEGORIES:
        if any(p.search(n) for p in patterns for n in names if n):
            return name
    return "other"


def job_findings(parts: list[HotspotsPart], job: JobData) -> list[Finding]:
    """Of a job's parts (stacked in rank order): the ops (or, where device work is not linked to ops, kernels) that
    dominate step time, with advice. Only a GEMM has a modelled saving (the time above running at ``GEMM_TARGET``
    of the device's dense peak); the others state the time they concern and leave the saving to the analyses that
    can model it (fusion, idle, overlap)."""
    works = [part.work for part in parts]
    measured = counters.measured_kernels(counters.job_parts(job))
    return _findings(works, job.meta, job_compute_step_time(job), job_throughput(job), measured)


@dataclass
class Work:
    """The device work in steps of a rank (or a joined trace: of each of its ranks) that the findings rank and
    claim: its kernel and op partials, and per (rank, linked, op name, kernel name) of its busy work the compute
    rows and time (communication left out) and the union of its intervals, as a slice of ``spans`` (packed)."""

    has_steps: bool  # the scope has steps: only work in steps counts (a job: when any rank has steps)
    kernels: pd.DataFrame  # Level.KERNEL partial of the device work
    ops: pd.DataFrame  # Level.OP_DEVICE partial of the device work, waits and communication left out
    pairs: pd.DataFrame  # rank, linked, op, kernel (NaN: none), compute, compute_ns, first, last
    spans: intervals.Packed  # starts and ends, each pair's [first, last) sorted and disjoint (``intervals.pack``)


def _work(trace: TraceData) -> Work:
    """The trace's ``Work`` (once per trace)."""
    return remember(trace, "hotspots.work", lambda: _work_of(trace))


def _work_of(trace: TraceData) -> Work:
    """The device work in steps (all of it without steps) as partials and busy intervals per (op, kernel)."""
    ev = trace.events
    events = in_steps(trace, ev.loc[ev["kind"].isin(DEVICE), [*USED, "step"]])
    compute = events[~events["kind"].isin(NOT_COMPUTE)]
    pairs, spans = _pairs(events[events["kind"].isin(BUSY)], ev)
    return Work(
        bool(len(step_table(trace))),
        partial(events, Level.KERNEL, ev),
        partial(compute, Level.OP_DEVICE, ev),
        pairs,
        spans,
    )


def _pairs(busy: pd.DataFrame, whole: pd.DataFrame) -> tuple[pd.DataFrame, intervals.Packed]:
    """Busy device rows per (rank, linked, launching op's name, kernel name): the rows and time that are not
    communication, and the union of all their intervals (``Work.pairs`` and ``Work.spans``)."""
    op = busy["op"].to_numpy()
    ts = busy["ts"].to_numpy()
    compute = (busy["kind"] != Kind.COMMUNICATION.value).to_numpy()
    frame = pd.DataFrame(
        {
            "rank": busy["rank"].to_numpy(),
            "linked": op != NO_ROW,
            "op": codes_at(whole["name"], op),  # -1: no op, or an op without a name
            "kernel": busy["name"].array.codes,  # -1: no name
            "compute": compute,
            "compute_ns": np.where(compute, busy["dur"].to_numpy(), 0),
        }
    )
    g = frame.groupby(["rank", "linked", "op", "kernel"], sort=False)
    pairs = g[["compute", "compute_ns"]].sum().reset_index().astype({"compute": np.int64})
    pairs["op"] = _names(whole["name"], pairs["op"].to_numpy())
    pairs["kernel"] = _names(busy["name"], pairs["kernel"].to_numpy())
    spans, owner = _grouped_union(g.ngroup().to_numpy(), ts, ts + busy["dur"].to_numpy())
    bounds = np.searchsorted(owner, np.arange(len(pairs) + 1))
    return pairs.assign(first=bounds[:-1], last=bounds[1:]), intervals.pack(*spans)


def _names(column: pd.Series, codes: np.ndarray) -> np.ndarray:
    """The texts of a category column's codes (None at -1)."""
    return np.append(np.asarray(column.array.categories, dtype=object), None)[codes]


def _grouped_union(group: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> tuple[intervals.Intervals, np.ndarray]:
    """Each group's intervals merged as ``intervals.union`` merges them, in one sort: the starts and ends, by group
    then start, and the group of each."""
    order = np.lexsort((starts, group))
    group, starts, ends = group[order], starts[order], ends[order]
    reach = pd.Series(ends).groupby(group).cummax().to_numpy()
    first = np.ones(len(starts), dtype=bool)
    first[1:] = (group[1:] != group[:-1]) | (starts[1:] > reach[:-1])  # a merged interval starts here
    last = np.ones(len(starts), dtype=bool)
    last[:-1] = first[1:]
    return (starts[first].astype(np.int64), reach[last].astype(np.int64)), group[first]


@dataclass
class _Counted:
    """The works of the parts that count, as one: their tables one after another, the pairs' slices into ``spans``,
    the busy intervals of all of them unpacked one after another."""

    kernels: pd.DataFrame
    ops: pd.DataFrame
    pairs: pd.DataFrame
    spans: intervals.Intervals


def _counted(works: list[Work]) -> _Counted:
    """The works of several parts as one: the step rule of ``in_steps`` over all of them (a part without steps
    counts only when no part has steps), their tables one after another, the pairs' slices moved along."""
    any_steps = any(w.has_steps for w in works)
    works = [w for w in works if w.has_steps or not any_steps]
    offsets = np.cumsum([0] + [w.spans.count for w in works])[:-1]
    pairs = [
        w.pairs.assign(first=w.pairs["first"] + o, last=w.pairs["last"] + o)
        for w, o in zip(works, offsets, strict=True)
    ]
    spans = [w.spans.unpacked() for w in works]
    return _Counted(
        stack([w.kernels for w in works]),
        stack([w.ops for w in works]),
        stack(pairs),
        (np.concatenate([s[0] for s in spans]), np.concatenate([s[1] for s in spans])),
    )


def _findings(
    works: list[Work], meta: TraceMeta, step: StepTime, gemms: pd.DataFrame, measured: dict[str, dict]
) -> list[Finding]:
    """The hotspot findings from the works of the ranks, their step time, the GEMM throughput table and the
    kernels whose efficiency counters measured (``counters.measured_kernels``)."""
    work = _counted(works)
    busy = work.kernels[work.kernels["kind"].isin(BUSY)]
    device_ns = int(busy["total_ns"].sum())
    table, main_kernel = _dominant(work)
    rates = {row["op"]: row for row in gemms.drop_duplicates("op").to_dict(orient="records")}  # dtype most time
    return [
        _hotspot_finding(
            row,
            main_kernel.get(row["name"], ""),
            step,
            device_ns,
            rates.get(row["name"]),
            _claims(work, row),
            meta,
            measured.get(main_kernel.get(row["name"], "") or row["name"]),
        )
        for row in table.head(HOTSPOT_FINDINGS).to_dict(orient="records")
    ]


def _claims(work: _Counted, row: dict) -> Claims:
    """The device intervals per rank of a hotspot's busy work: launched by ops of its name, or kernels of it."""
    pairs = work.pairs
    mine = ((pairs["op"] == row["name"]) | (pairs["kernel"] == row["name"])).to_numpy()
    ranks, first, last = (pairs[c].to_numpy()[mine] for c in ("rank", "first", "last"))
    starts, ends = work.spans
    claims: Claims = {}
    for rank in np.unique(ranks):
        slices = [slice(a, b) for a, b in zip(first[ranks == rank], last[ranks == rank], strict=True)]
        claims[int(rank)] = intervals.union(
            np.concatenate([starts[s] for s in slices]), np.concatenate([ends[s] for s in slices])
        )
    return claims


def _dominant(work: _Counted) -> tuple[pd.DataFrame, dict]:
    """The op-level table when ops account for most device time, else the kernel table; plus each op's top kernel.
    Waits are left out (a stream waiting on an event is not a hotspot), and so is communication: it costs the step
    only what compute does not hide, which the distributed findings report (transfer and waiting for peers apart)."""
    kernels = work.kernels[~work.kernels["kind"].isin(NOT_COMPUTE)]
    linked = work.pairs[work.pairs["linked"] & (work.pairs["compute"] > 0)]
    if linked["compute_ns"].sum() * 2 < kernels["total_ns"].sum():
        return ranked_level(kernels, Level.KERNEL), {}
    per_kernel = pd.DataFrame(
        {"op": linked["op"].fillna(""), "kernel": linked["kernel"].fillna(""), "dur": linked["compute_ns"]}
    )
    top = per_kernel.groupby(["op", "kernel"])["dur"].sum().sort_values(ascending=False).reset_index()
    return ranked_level(work.ops, Level.OP_DEVICE), top.drop_duplicates("op").set_index("op")["kernel"].to_dict()


def _hotspot_finding(
    row: dict,
    kernel: str,
    step: StepTime,
    device_ns: int,
    rate: dict | None,
    claims: Claims,
    meta: TraceMeta,
    measured: dict | None,
) -> Finding:
    """The finding of one ranked hotspot row (op or kernel; ``kernel``: an op's main kernel): its time per step and
    share of device time, advice for its category, and for a GEMM the saving at ``GEMM_TARGET``: of its measured
    efficiency where counters measured its kernel, else of its modelled ``rate`` (the roofline)."""
    kind = category(row["name"], kernel)
    count = int(row["count"])
    gemm = kind == "gemm"
    if gemm and measured:
        saving, basis, model = _measured_saving(int(row["total_ns"]), measured)
    else:
        saving, basis, model = _gemm_saving(rate)
    per_step = row["total_ns"] / max(step.steps, 1)
    return make(
        "hotspots",
        "op",
        f"{row['name']}: {humanize.duration(per_step)} of device time per step in "
        f"{count / max(step.steps, 1):,.0f} calls (mean {humanize.duration(row['mean_ns'], 1)}, "
        f"{humanize.share(row['total_ns'] / max(device_ns, 1), 0)} of device time)",
        _rate_sentence(rate) + advice.category_advice(kind, meta, kernel or row["name"]),
        step,
        concerns_ns=int(row["total_ns"]),
        saving_ns=saving,
        basis=basis,
        model=model,
        claims=claims,
        device_time=True,
        where={"name": row["name"], "category": kind},
        evidence={
            "count": count,
            "total_ns": int(row["total_ns"]),
            "mean_ns": float(row["mean_ns"]),
            "device_share": row["total_ns"] / device_ns if device_ns else 0.0,
            "main_kernel": kernel,
            **(_efficiency(measured, rate) if gemm else {}),
        },
    )


def _efficiency(measured: dict | None, rate: dict | None) -> dict:
    """A GEMM's efficiency evidence: measured by its counters (bound, achieved share of that unit's peak, by which
    source), else modelled by the roofline (its peak share), else not judged."""
    if measured:
        return {
            "efficiency_basis": measured["basis"],
            "bound": measured["bound"],
            "achieved_share": float(measured["achieved_share"]),
        }
    if rate and rate["peak_tflops"] == rate["peak_tflops"]:
        return {"efficiency_basis": "modelled (roofline)", "bound": rate.get("bound", ""),
                "achieved_share": float(rate.get("limit_share", rate.get("peak_share", float("nan"))))}  # fmt: skip
    return {"efficiency_basis": "not judged (no counters, no peak for the device)"}


def _measured_saving(total_ns: int, measured: dict) -> tuple[int, Basis, str]:
    """A GEMM's saving if its kernel kept the unit that bounds it (counters: MAC or vector on Ascend, tensor pipe or
    SM on CUDA; MTE2 or DRAM when memory-bound) busy at ``GEMM_TARGET`` instead of the measured share, total ns."""
    achieved = float(measured["achieved_share"])
    saving = int(total_ns * max(0.0, 1 - achieved / GEMM_TARGET))
    model = (
        f"the GEMM at {humanize.share(GEMM_TARGET, 0)} of its busiest unit's peak; its efficiency "
        f"{measured['basis']}: {measured['bound']}-bound, that unit at {humanize.share(achieved, 0)} of peak"
    )
    return saving, Basis.MODELLED, model


def _gemm_saving(rate: dict | None) -> tuple[int, Basis, str]:
    """A GEMM's saving if it ran at ``GEMM_TARGET`` of its roofline (the device's bandwidth for a memory-bound shape,
    its dense peak for the dtype for a compute-bound one; the peak alone where the roofline is not known), total ns,
    and its basis."""
    if not rate or rate["peak_tflops"] != rate["peak_tflops"] or rate.get("note"):  # no rate, no peak, or suspect
        return 0, Basis.NONE, ""
    limit = rate.get("limit_ns", float("nan"))
    if limit == limit and limit > 0:  # the roofline's least time for these calls
        target_ns = limit / GEMM_TARGET
        side = "memory bandwidth" if rate.get("bound") == roofline.MEMORY else f"dense {rate['dtype']} peak"
        bound = rate.get("bound", "")
        model = f"the GEMM at {humanize.share(GEMM_TARGET, 0)} of its roofline ({bound}-bound: the device's {side})"
    else:
        target_ns = rate["flops"] / (GEMM_TARGET * rate["peak_tflops"] * 1e3)
        peak = f"dense {rate['dtype']} peak ({humanize.tflops(rate['peak_tflops'])})"
        model = f"the GEMM at {humanize.share(GEMM_TARGET, 0)} of the device's {peak}"
    return max(int(rate["device_ns"] - target_ns), 0), Basis.MODELLED, model


def _rate_sentence(rate: dict | None) -> str:
    """What the GEMM achieves, against the device's peak for its dtype, as the advice's first sentence."""
    if not rate:
        return ""
    text = f"It runs at {humanize.tflops(rate['tflops'])} ({rate['dtype']})"
    if rate["peak_tflops"] == rate["peak_tflops"]:  # not NaN: the device family is known
        text += f", {humanize.share(rate['peak_share'], 0)} of the device's dense {rate['dtype']} peak"
    if rate.get("note"):
        text += f" — {rate['note']}"
    return text + ". "


def _category(events: pd.DataFrame, table: pd.DataFrame) -> pd.DataFrame:
    """Device time per op category (gemm, elementwise, copy, ...), from the causing op's and the kernel's names."""
    device = events[events["kind"].isin(DEVICE)]
    op = codes_at(table["name"], device["op"].to_numpy()).astype(np.int64)  # -1: no launching op
    kernel = device["name"].array.codes.astype(np.int64)
    named = per_pair(op, category_text(table["name"]), kernel, category_text(device["name"]), category)
    ids, names = pd.factorize(np.array([*named, "communication", "wait"], dtype=object))
    kind = category_text(device["kind"])[device["kind"].array.codes]
    cat = np.where(kind == Kind.COMMUNICATION.value, ids[-2], np.where(kind == Kind.SYNC.value, ids[-1], ids[:-2]))
    frame = pd.DataFrame({"rank": device["rank"].to_numpy(), "name": cat, "dur": device["dur"].to_numpy()})
    stats = _stats(frame, ["rank", "name"])
    stats["name"] = _text(np.asarray(names, dtype=object)[stats["name"].to_numpy()])
    stats.insert(2, "kind", "")
    return stats


_SHARES = ["share", "cum_share"]
HOTSPOT_TABLES = {
    Level.KERNEL: ("Top device kernels", [*HOTSPOT_COLUMNS[:-2], *_SHARES]),
    Level.CPU_OP: (
        "Top CPU ops (self time)",
        ["name", "count", "total_ns", "inclusive_ns", "device_self_ns", *_SHARES],
    ),
    Level.OP_DEVICE: ("Device time by launching op", ["name", "count", "kernels", "total_ns", "mean_ns", *_SHARES]),
    Level.CATEGORY: ("Device time by op category", ["name", "count", "total_ns", *_SHARES]),
}
"""The hotspot tables of the report: title and columns shown per level."""


def job_section(parts: list[HotspotsPart], job: JobData, options: Options) -> Section:
    """The hotspot tables at every level of a job's parts (stacked in rank order; the kernel table restricted to
    ``options.kind`` when given)."""
    return _section([part.tables for part in parts], job.meta.start_ns, options)


@dataclass
class Tables:
    """The section's half of a part: each level's partial table and the graph launches (on the ranks' clocks)."""

    levels: dict[Level, pd.DataFrame]
    launches: pd.DataFrame


@dataclass
class HotspotsPart:
    """A rank's hotspots part (or a joined trace's, of all its ranks): untruncated, per rank and key."""

    tables: Tables
    work: Work


def rank_part(trace: TraceData, options: Options = DEFAULT) -> HotspotsPart:
    """A rank's part: the partial tables of every level, its graph launches, and the work its findings rank."""
    return HotspotsPart(_tables(trace), _work(trace))


def _tables(trace: TraceData) -> Tables:
    """The trace's ``Tables`` (once per trace)."""
    return remember(
        trace,
        "hotspots.tables",
        lambda: Tables({level: partial(trace.events, level) for level in Level}, _launch_rows(trace)),
    )


def _section(parts: list[Tables], start_ns: int, options: Options) -> Section:
    """The hotspot section from the tables of the parts (in rank order) and the window's start."""
    tables = []
    for level, (title, columns) in HOTSPOT_TABLES.items():
        rows = stack([part.levels[level] for part in parts])
        if level is Level.KERNEL and options.kind:
            rows = rows[rows["kind"] == options.kind]
        table = ranked_level(rows, level)
        table = table.head(options.top) if options.top else table
        tables.append(Table(level.value, title, table[[c for c in columns if c in table]], Per.TOTAL))
    launches = _from_start(stack([part.launches for part in parts]), start_ns)
    return Section("hotspots", "Hotspots", tables=tables + _graph_tables(launches, options))


GRAPH_NOTE = "the trace records no graph node ids or capture, so replayed work is attributed per launch, not per op"


def _graph_tables(launches: pd.DataFrame, options: Options) -> list[Table]:
    """Graph replays per rank and the largest launches, when the trace replays graphs."""
    if not len(launches):
        return []
    return [
        Table("graph_replays", "Graph replays per rank", _graph_summary(launches), Per.TOTAL, note=GRAPH_NOTE),
        Table(
            "graph_launches",
            "Graph launches, one row per launch (largest first)",
            launches.sort_values("device_ns", ascending=False, kind="stable").head(options.top),
            Per.NONE,
        ),
    ]
