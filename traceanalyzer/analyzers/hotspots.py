"""Hotspots: ops and kernels ranked by total time, with count, mean, min, max, share and cumulative share.

Device work replayed from a CUDA/HIP graph has no recorded op: the op tables show it as one row,
``vocabulary.GRAPH_REPLAYED``, with its time (never under another op), and ``graph_launches`` groups it per launch.
"""

from __future__ import annotations

import re
from enum import Enum

import numpy as np
import pandas as pd

from traceanalyzer.analyzers import advice
from traceanalyzer.analyzers.attribution import in_steps
from traceanalyzer.analyzers.gemm import gemm_throughput
from traceanalyzer.analyzers.ledger import graph_launched, graph_replayed
from traceanalyzer.analyzers.steps import step_time
from traceanalyzer.findings import Basis, Claims, Finding, StepTime, claims_of, make
from traceanalyzer.options import Options
from traceanalyzer.schema import (
    BUSY_KINDS,
    DEVICE_KINDS,
    NO_ROW,
    Kind,
    category_text,
    codes_at,
    per_pair,
    positions,
)
from traceanalyzer.section import Per, Section, Table
from traceanalyzer.tracedata import TraceData
from traceanalyzer.vocabulary import (
    ATTENTION_KERNEL,
    CONV_KERNEL,
    GEMM_KERNEL,
    GRAPH_REPLAYED,
    MATMUL_OP,
    NORMALISATION,
)

DEVICE = [k.value for k in DEVICE_KINDS]
BUSY = [k.value for k in BUSY_KINDS]


class Level(str, Enum):
    """What a hotspot table ranks."""

    KERNEL = "kernel"  # device kernels, copies, sets and collectives, by name
    CPU_OP = "cpu_op"  # CPU ops by name: self and inclusive host time, and the device time they caused
    OP_DEVICE = "op_device"  # device time per launching (innermost) CPU op
    CATEGORY = "category"  # device time per op category (gemm, elementwise, copy, ...)


GEMM_TARGET = 0.8
"""The share of the dense data-sheet peak a well-shaped GEMM reaches; a GEMM hotspot's saving is measured to it."""

HOTSPOT_COLUMNS = ["name", "kind", "count", "total_ns", "mean_ns", "min_ns", "max_ns", "share", "cum_share"]
USED = ["ts", "dur", "name", "kind", "parent", "launch", "op"]
"""The event-table columns the hotspot tables read."""


def hotspots(
    events: pd.DataFrame, level: Level | str = Level.KERNEL, top: int | None = None, table: pd.DataFrame | None = None
) -> pd.DataFrame:
    """Rank by total time at one level; ``events`` may be filtered by step, rank or kind, ``table`` is the whole
    event table that link columns point into (defaults to ``events``)."""
    level = Level(level)
    table = events if table is None else table
    events = events[USED]  # each level filters rows: of these columns only
    ranked = {Level.KERNEL: _kernels, Level.CPU_OP: _cpu_ops, Level.OP_DEVICE: _op_device, Level.CATEGORY: _category}[
        level
    ](events, table)
    return ranked.head(top).reset_index(drop=True) if top else ranked.reset_index(drop=True)


def _ranked(grouped: pd.DataFrame, total_col: str = "total_ns") -> pd.DataFrame:
    grouped = grouped.sort_values(total_col, ascending=False, kind="stable")
    whole = grouped[total_col].sum()
    grouped["share"] = grouped[total_col] / whole if whole else 0.0
    grouped["cum_share"] = grouped["share"].cumsum()
    return grouped


def _stats(frame: pd.DataFrame, by: str | list[str], value: str = "dur") -> pd.DataFrame:
    g = frame.groupby(by, observed=True, sort=False)[value]
    return pd.DataFrame(
        {"count": g.size(), "total_ns": g.sum(), "mean_ns": g.mean(), "min_ns": g.min(), "max_ns": g.max()}
    )


def _kernels(events: pd.DataFrame, table: pd.DataFrame) -> pd.DataFrame:
    device = events[events["kind"].isin(DEVICE)]
    stats = _stats(device, ["name", "kind"]).reset_index()
    stats["name"] = stats["name"].astype(str)
    stats["kind"] = stats["kind"].astype(str)
    return _ranked(stats)[HOTSPOT_COLUMNS]


def _cpu_ops(events: pd.DataFrame, table: pd.DataFrame) -> pd.DataFrame:
    ops = events.loc[events["kind"] == Kind.CPU_OP.value, ["ts", "dur", "parent", "name"]]
    at = positions(table.index, ops.index)
    self_ns = ops["dur"].to_numpy() - _child_op_time(table, ops)[at]
    device = events.loc[events["kind"].isin(DEVICE), ["op", "dur", "launch"]]
    linked = device[device["op"] != NO_ROW]
    frame = pd.DataFrame(
        {
            "name": ops["name"].array.codes,
            "dur": ops["dur"].to_numpy(),
            "self": self_ns,
            "device": _sum_per_row(table, linked["op"].to_numpy(), linked["dur"].to_numpy())[at],
        }
    )
    g = frame.groupby("name", sort=False)
    stats = pd.DataFrame(
        {
            "kind": Kind.CPU_OP.value,
            "count": g.size(),
            "total_ns": g["self"].sum(),
            "inclusive_ns": g["dur"].sum(),
            "mean_ns": g["self"].mean(),
            "min_ns": g["self"].min(),
            "max_ns": g["self"].max(),
            "device_self_ns": g["device"].sum(),
        }
    ).reset_index()
    stats["name"] = _text(category_text(ops["name"])[stats["name"].to_numpy()])
    return _ranked(pd.concat([stats, _replayed_row(device, table)], ignore_index=True))[
        HOTSPOT_COLUMNS[:-2] + ["inclusive_ns", "device_self_ns", "share", "cum_share"]
    ]


def _replayed_row(device: pd.DataFrame, table: pd.DataFrame) -> pd.DataFrame:
    """The cpu_op table's row for graph-replayed device work (of the device rows given): no host op ran it, its
    device time is its own."""
    replayed = device[_replayed(device, table)]
    if not len(replayed):
        return pd.DataFrame()
    row = {"name": GRAPH_REPLAYED, "kind": "graph", "count": replayed["launch"].nunique(), "total_ns": 0}
    row |= {"inclusive_ns": 0, "mean_ns": 0.0, "min_ns": 0, "max_ns": 0, "device_self_ns": int(replayed["dur"].sum())}
    return pd.DataFrame([row])


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
    device, calls = _op_work(events, table)
    names = codes_at(table["name"], device["op"].to_numpy())  # -1: graph-replayed (no op)
    frame = pd.DataFrame({"name": names, "op": calls, "dur": device["dur"].to_numpy()})
    per_call = frame.groupby(["name", "op"], sort=False)["dur"].sum().reset_index()
    stats = _stats(per_call, "name").reset_index()
    stats["kernels"] = frame.groupby("name", sort=False).size().reindex(stats["name"]).to_numpy()
    text = category_text(table["name"])
    text[-1] = GRAPH_REPLAYED
    stats["name"] = _text(text[stats["name"].to_numpy()])
    stats["kind"] = np.where(stats["name"] == GRAPH_REPLAYED, "graph", Kind.CPU_OP.value)
    return _ranked(stats)[HOTSPOT_COLUMNS[:-2] + ["kernels", "share", "cum_share"]]


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
    """One row per graph launch (cudaGraphLaunch / hipGraphLaunch): the kernels, memsets and copies it replayed,
    their device time and the span from the first start to the last end (ns; ``launch_ns`` from the window start)."""
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
            "launch_ns": launches["ts"].to_numpy() - trace.meta.start_ns,
            "kernels": g["kernel"].sum().to_numpy(),
            "memsets": g["memset"].sum().to_numpy(),
            "memcpys": g["memcpy"].sum().to_numpy(),
            "device_ns": g["dur"].sum().to_numpy(),
            "span_ns": (g["end"].max() - g["ts"].min()).to_numpy(),
        }
    )
    return table.astype({c: np.int64 for c in GRAPH_LAUNCH_COLUMNS[2:]})


def graph_summary(trace: TraceData) -> pd.DataFrame:
    """Per rank: graph launches, work items per launch (median), device time per launch (median) and in all."""
    table = graph_launches(trace)
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


def findings(trace: TraceData) -> list[Finding]:
    """The ops (or, where device work is not linked to ops, kernels) that dominate step time, with advice. Only a
    GEMM has a modelled saving (the time above running at ``GEMM_TARGET`` of the device's dense peak); the others
    state the time they concern and leave the saving to the analyses that can model it (fusion, idle, overlap)."""
    ev = trace.events
    events = in_steps(trace, ev.loc[ev["kind"].isin(DEVICE), [*USED, "rank", "step"]])  # the levels ranked read these
    table, main_kernel = _dominant(events, trace.events)
    step = step_time(trace)
    busy = events[events["kind"].isin(BUSY)]
    device_ns = int(busy["dur"].sum())
    rates = _gemm_rates(trace)
    rows = table.head(HOTSPOT_FINDINGS).to_dict(orient="records")
    works = _work_of(busy, trace.events, [row["name"] for row in rows])
    return [
        _hotspot_finding(
            row, main_kernel.get(row["name"], ""), step, device_ns, rates.get(row["name"]), claims_of(work), trace
        )
        for row, work in zip(rows, works, strict=True)
    ]


def _work_of(busy: pd.DataFrame, whole: pd.DataFrame, names: list[str]) -> list[pd.DataFrame]:
    """The busy device rows of each hotspot: launched by ops of that name, or kernels of that name."""
    op = codes_at(whole["name"], busy["op"].to_numpy())  # -1: no op
    kernel = busy["name"].array.codes
    op_code = whole["name"].array.categories.get_indexer(names)  # -1: no op of that name
    kernel_code = busy["name"].array.categories.get_indexer(names)
    return [
        busy[((op == o) & (o >= 0)) | ((kernel == k) & (k >= 0))] for o, k in zip(op_code, kernel_code, strict=True)
    ]


def _gemm_rates(trace: TraceData) -> dict[str, dict]:
    """Achieved throughput of each GEMM op name (its dtype with the most device time)."""
    table = gemm_throughput(trace).drop_duplicates("op")
    return {row["op"]: row for row in table.to_dict(orient="records")}


def _dominant(events: pd.DataFrame, whole: pd.DataFrame) -> tuple[pd.DataFrame, dict]:
    """The op-level table when ops account for most device time, else the kernel table; plus each op's top kernel.
    Waits are left out (a stream waiting on an event is not a hotspot), and so is communication: it costs the step
    only what compute does not hide, which the distributed findings report (transfer and waiting for peers apart)."""
    events = events[~events["kind"].isin([Kind.SYNC.value, Kind.COMMUNICATION.value])]
    device = events[events["kind"].isin(BUSY)]
    linked = device[device["op"] != NO_ROW]
    if linked["dur"].sum() * 2 < device["dur"].sum():
        return hotspots(events, Level.KERNEL, table=whole), {}
    op, kernel = codes_at(whole["name"], linked["op"].to_numpy()), linked["name"].array.codes
    pairs = pd.DataFrame({"op": op, "kernel": kernel, "dur": linked["dur"].to_numpy()})
    pairs = pairs.groupby(["op", "kernel"], sort=False)["dur"].sum().reset_index()  # each (op, kernel) once
    per_kernel = pd.DataFrame(
        {
            "op": _text(category_text(whole["name"])[pairs["op"].to_numpy()]),
            "kernel": _text(category_text(linked["name"])[pairs["kernel"].to_numpy()]),
            "dur": pairs["dur"],
        }
    )
    top = per_kernel.groupby(["op", "kernel"])["dur"].sum().sort_values(ascending=False).reset_index()
    return hotspots(events, Level.OP_DEVICE, table=whole), top.drop_duplicates("op").set_index("op")["kernel"].to_dict()


def _hotspot_finding(
    row: dict, kernel: str, step: StepTime, device_ns: int, rate: dict | None, claims: Claims, trace: TraceData
) -> Finding:
    kind = category(row["name"], kernel)
    count = int(row["count"])
    saving, basis, model = _gemm_saving(rate)
    per_step = row["total_ns"] / max(step.steps, 1)
    return make(
        "hotspots",
        "op",
        f"{row['name']}: {per_step / 1e6:.2f} ms of device time per step in {count / max(step.steps, 1):,.0f} calls "
        f"(mean {row['mean_ns'] / 1e3:.1f} µs, {row['total_ns'] / max(device_ns, 1):.0%} of device time)",
        _rate_sentence(rate) + advice.category_advice(kind, trace.meta, kernel or row["name"]),
        step,
        concerns_ns=int(row["total_ns"]),
        saving_ns=saving,
        basis=basis,
        model=model,
        claims=claims,
        where={"name": row["name"], "category": kind},
        evidence={
            "count": count,
            "total_ns": int(row["total_ns"]),
            "mean_ns": float(row["mean_ns"]),
            "device_share": row["total_ns"] / device_ns if device_ns else 0.0,
            "main_kernel": kernel,
        },
    )


def _gemm_saving(rate: dict | None) -> tuple[int, Basis, str]:
    """A GEMM's saving if it ran at ``GEMM_TARGET`` of the dense peak for its dtype (total ns), and its basis."""
    if not rate or rate["peak_tflops"] != rate["peak_tflops"] or rate.get("note"):  # no rate, no peak, or suspect
        return 0, Basis.NONE, ""
    target_ns = rate["flops"] / (GEMM_TARGET * rate["peak_tflops"] * 1e3)
    model = (
        f"the GEMM at {GEMM_TARGET:.0%} of the device's dense {rate['dtype']} peak ({rate['peak_tflops']:.0f} TFLOP/s)"
    )
    return max(int(rate["device_ns"] - target_ns), 0), Basis.MODELLED, model


def _rate_sentence(rate: dict | None) -> str:
    """What the GEMM achieves, against the device's peak for its dtype, as the advice's first sentence."""
    if not rate:
        return ""
    text = f"It runs at {rate['tflops']:.0f} TFLOP/s ({rate['dtype']})"
    if rate["peak_tflops"] == rate["peak_tflops"]:  # not NaN: the device family is known
        text += f", {rate['peak_share']:.0%} of the device's dense {rate['dtype']} peak"
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
    stats = _stats(pd.DataFrame({"name": cat, "dur": device["dur"].to_numpy()}), "name").reset_index()
    stats["name"] = _text(np.asarray(names, dtype=object)[stats["name"].to_numpy()])
    stats["kind"] = ""
    return _ranked(stats)[HOTSPOT_COLUMNS]


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


def section(trace: TraceData, options: Options) -> Section:
    """The hotspot tables at every level (the kernel table restricted to ``options.kind`` when given)."""
    tables = []
    for level, (title, columns) in HOTSPOT_TABLES.items():
        events = trace.events
        if level is Level.KERNEL and options.kind:
            events = events[events["kind"] == options.kind]
        table = hotspots(events, level, options.top, table=trace.events)
        tables.append(Table(level.value, title, table[[c for c in columns if c in table]], Per.TOTAL))
    return Section("hotspots", "Hotspots", tables=tables + _graph_tables(trace, options))


GRAPH_NOTE = "the trace records no graph node ids or capture, so replayed work is attributed per launch, not per op"


def _graph_tables(trace: TraceData, options: Options) -> list[Table]:
    """Graph replays per rank and the largest launches, when the trace replays graphs."""
    launches = graph_launches(trace)
    if not len(launches):
        return []
    return [
        Table("graph_replays", "Graph replays per rank", graph_summary(trace), Per.TOTAL, note=GRAPH_NOTE),
        Table(
            "graph_launches",
            "Graph launches, one row per launch (largest first)",
            launches.sort_values("device_ns", ascending=False, kind="stable").head(options.top),
            Per.NONE,
        ),
    ]
