"""Hardware counters: each sample attributed to the kernel it was measured over and to its step, and a hardware
efficiency view of the hot kernels that says whether their efficiency is measured (counters) or only modelled.

A counter sample (a ``Kind.COUNTER`` event, ``schema.COUNTER_COLUMNS``) that names the kernel it measured
(``measured``: Ascend PMU columns of kernel_details, CUPTI range-profiler ranges) belongs to it; an unnamed sample
at an instant (a counter track) belongs to the kernel running on its rank (and device, where it says) at that time,
else to none. A kernel's value of a counter is the mean over its rows, weighted by the interval each covers
(instants weigh 1); a step's likewise over the rows that start in the step's span. Shares (ratios, percentages) are
achieved / peak as the hardware counts them: Ascend ``aic_mac_ratio`` (cube MAC busy share),
``cube_utilization(%)``, ``aiv_vec_ratio``, ``*_mte2_ratio`` and msprof's ``memory_bound`` = mte2 / max(mac, vec)
(anchors-ascend.md §4); on CUDA the Perfworks throughputs as a share of the sustained peak (SM, DRAM, tensor pipe)
where the trace records them.

Rank by rank, the part holds additive sums (weights, weighted sums, samples per kernel, step and counter; kernel
time and calls per name); the combining half divides and orders.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from traceanalyzer.analyzers.summary import step_spans
from traceanalyzer.jobdata import JobData
from traceanalyzer.options import DEFAULT, Options
from traceanalyzer.schema import NO_ROW, Kind
from traceanalyzer.section import Fact, Per, Section, Table, Unit
from traceanalyzer.tables import stack
from traceanalyzer.tracedata import TraceData

EFFICIENCY = {
    "cube_utilization_share": (("cube_utilization", 0.01),),
    "mac_busy_share": (("aic_mac_ratio", 1.0),),
    "vector_busy_share": (("aiv_vec_ratio", 1.0),),
    "mte2_busy_share": (("aic_mte2_ratio", 1.0), ("aiv_mte2_ratio", 1.0)),
    "sm_throughput_share": (("sm__throughput.avg.pct_of_peak_sustained_elapsed", 0.01),),
    "dram_throughput_share": (
        ("dram__throughput.avg.pct_of_peak_sustained_elapsed", 0.01),
        ("gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed", 0.01),
        ("dram_bw_util_pct", 0.01),
    ),
    "tensor_pipe_share": (
        ("sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active", 0.01),
        ("sm__inst_executed_pipe_tensor.avg.pct_of_peak_sustained_active", 0.01),
        ("any_tensor_util_pct", 0.01),
    ),
    "fp32_pipe_share": (("fp32_util_pct", 0.01),),
}
"""Efficiency columns (achieved / peak, 0..1) and the counters that measure them (the highest recorded wins), with
the factor that makes a share of each. A counter track's series (``<track>.<series>``: NVML GPM's
``any_tensor_util_pct``, ``dram_bw_util_pct``, ``fp32_util_pct``, each a percent of the GPU's peak over its sampled
interval) matches by its series name."""
FLOP_COUNTERS = {
    f"smsp__sass_thread_inst_executed_op_{math}{op}_pred_on.sum": (dtype, 2 if op == "fma" else 1)
    for math, dtype in (("f", "fp32"), ("h", "fp16"), ("d", "fp64"))
    for op in ("add", "mul", "fma")
}
"""CUDA's per-thread floating-point instruction counts (CUPTI range profiler) → the math they run and the FLOPs per
instruction (a fused multiply-add is two): their sum over a kernel's ranges is the FLOPs it executed, measured."""
MODELLED = "modelled: no counters recorded for this kernel (the GEMM roofline is a model)"
MEASURED = "measured ({sources})"
"""The basis of a kernel's efficiency: its counters (by source), or none (the roofline's model only)."""
BOUND_BY = {
    "memory_bound": "msprof's memory_bound = mte2 / max(mac, vec): over 1 is memory-bound",
    "dram_throughput_share": "DRAM throughput share above the busiest compute share (SM throughput, tensor or FP32"
    " pipe) is memory-bound",
}
"""How the measured bound of a kernel is judged, by the counter that decides it."""
ACHIEVED = {
    "compute": (
        ("mac_busy_share", "vector_busy_share"),
        ("tensor_pipe_share", "fp32_pipe_share"),
        ("sm_throughput_share",),
    ),
    "memory": (("mte2_busy_share",), ("dram_throughput_share",)),
}
"""The efficiency columns that say how busy a measured kernel keeps the unit that bounds it: the busiest of the
first group recorded (a cube kernel's MAC, a vector kernel's vector unit)."""
CUDA_COMPUTE = ("sm_throughput_share", "tensor_pipe_share", "fp32_pipe_share")
"""The CUDA efficiency columns a kernel's compute side is the busiest of (against its DRAM share)."""
KEY = ["kernel", "name", "unit", "source"]
STEP_KEY = ["rank", "step", "name", "unit"]


SAMPLE_COLUMNS = ["rank", "ts", "dur", "device", "name", "value", "unit", "cat", "measured"]
"""The event columns a counter sample is read by."""


def counter_rows(trace: TraceData) -> pd.DataFrame:
    """Every counter sample of the trace's scope (``Kind.COUNTER`` events) with its rank, ``source`` (the event's
    ``cat``), the kernel it belongs to and the step its start falls in."""
    events = trace.events
    rows = events.loc[events["kind"] == Kind.COUNTER.value, SAMPLE_COLUMNS].reset_index(drop=True)
    rows = rows.rename(columns={"cat": "source"})
    rows = rows.assign(kernel=_kernels(events, rows), step=_steps(step_spans(trace), rows))
    return rows.assign(weight=np.where(rows["dur"] > 0, rows["dur"], 1).astype(float))


def _kernels(events: pd.DataFrame, rows: pd.DataFrame) -> np.ndarray:
    """Per row: the kernel it names, else the kernel of its rank (and device) running at its time, else ''."""
    named = rows["measured"].astype(str).to_numpy().astype(object)
    if not len(rows):
        return named
    kernels = events[events["kind"] == Kind.KERNEL.value]
    for rank, lane in kernels.groupby("rank", observed=True):
        lane = lane.sort_values("ts", kind="stable")
        starts, ends = lane["ts"].to_numpy(), (lane["ts"] + lane["dur"]).to_numpy()
        mine = np.flatnonzero((rows["rank"].to_numpy() == rank) & (named == ""))
        at = np.searchsorted(starts, rows["ts"].to_numpy()[mine], side="right") - 1
        inside = (at >= 0) & (rows["ts"].to_numpy()[mine] < ends[np.maximum(at, 0)])
        device = rows["device"].to_numpy()[mine]
        same = (device == NO_ROW) | (device == lane["device"].to_numpy()[np.maximum(at, 0)])
        hit = inside & same
        named[mine[hit]] = lane["name"].astype(str).to_numpy()[at[hit]]
    return named


def _steps(spans: pd.DataFrame, rows: pd.DataFrame) -> np.ndarray:
    """Per row: the step whose span holds its start on its rank (NO_ROW outside every step)."""
    out = np.full(len(rows), NO_ROW, dtype=np.int64)
    for rank, mine in spans.groupby("rank"):
        mine = mine.sort_values("start_ns")
        at_rank = np.flatnonzero(rows["rank"].to_numpy() == rank)
        ts = rows["ts"].to_numpy()[at_rank]
        at = np.searchsorted(mine["start_ns"].to_numpy(), ts, side="right") - 1
        inside = (at >= 0) & (ts < mine["end_ns"].to_numpy()[np.maximum(at, 0)])
        out[at_rank[inside]] = mine["step"].to_numpy()[at[inside]]
    return out


@dataclass(frozen=True)
class CountersPart:
    """The part of a rank (or a whole trace): weighted sums per kernel and counter (``by_kernel``), per step and
    counter (``by_step``), samples by source (``sources``), and device time (ns) and calls per kernel name
    (``kernels``); the job's are these of every rank (``stacked``), added up where read."""

    by_kernel: pd.DataFrame
    by_step: pd.DataFrame
    sources: pd.DataFrame
    kernels: pd.DataFrame


def rank_part(trace: TraceData, options: Options = DEFAULT) -> CountersPart:
    """The part of a rank (or a whole trace)."""
    rows = counter_rows(trace)
    return CountersPart(
        by_kernel=_sums(rows, ["rank", *KEY]),
        by_step=_sums(rows[rows["step"] != NO_ROW], STEP_KEY),
        sources=rows.groupby(rows["source"].astype(str), sort=True).size().rename("samples").reset_index(),
        kernels=kernel_times(trace.events),
    )


def kernel_times(events: pd.DataFrame) -> pd.DataFrame:
    """Per kernel name (in name order, kernels without one left out): ``calls`` and device time ``total_ns``."""
    kernel = (events["kind"] == Kind.KERNEL.value).to_numpy()
    codes = events["name"].cat.codes.to_numpy()[kernel].astype(np.int64)
    named = codes >= 0
    width = len(events["name"].cat.categories)
    calls = np.bincount(codes[named], minlength=width)
    total = np.zeros(width, dtype=np.int64)
    np.add.at(total, codes[named], events["dur"].to_numpy()[kernel][named].astype(np.int64))
    used = np.flatnonzero(calls)
    text = np.asarray(events["name"].cat.categories[used].astype(str), dtype=object)
    order = np.argsort(text, kind="stable")  # the categories are distinct: one name each
    return pd.DataFrame(
        {"kernel": text[order], "calls": calls[used][order].astype(np.int64), "total_ns": total[used][order]}
    )


def job_parts(job: JobData) -> list[CountersPart]:
    """The job's counters parts, in rank order (of the analyzers that need ``counters``)."""
    parts: list[CountersPart] = job.merged("counters")
    return parts


def _sums(rows: pd.DataFrame, key: list[str]) -> pd.DataFrame:
    """Per key: samples, the interval weight, the weighted sum of the values (the additive half of a mean) and
    their plain sum (of counts such as instructions executed)."""
    if not len(rows):
        return pd.DataFrame(columns=[*key, "samples", "weight", "weighted", "total"])
    frame = rows.assign(**{k: rows[k].astype(str) for k in key if k not in ("rank", "step")})
    frame = frame.assign(weighted=frame["value"] * frame["weight"])
    table = frame.groupby(key, sort=True).agg(
        samples=("value", "size"), weight=("weight", "sum"), weighted=("weighted", "sum"), total=("value", "sum")
    )
    return table.reset_index()


def _means(parts: list[pd.DataFrame], key: list[str]) -> pd.DataFrame:
    """Parts' sums (per rank, ranks in order) added up, with each key's weighted mean value: the same sums in the
    same order whether the parts are a joined trace's or its ranks'."""
    table = stack(parts)
    if not len(table):
        return table.assign(value=pd.Series(dtype=float))
    sums = ["samples", "weight", "weighted", "total"]
    table = table.sort_values("rank", kind="stable").groupby(key, sort=True)[sums].sum()
    table = table.reset_index()
    return table.assign(value=table["weighted"] / table["weight"].where(table["weight"] > 0))


def efficiency(parts: list[CountersPart], top: int) -> pd.DataFrame:
    """The hot kernels (most device time first, then those only counters name, ``top`` of them) with their measured
    efficiency (shares of the peak, from their counters), the FLOPs their instruction counters say they executed,
    and the basis: which counters measured them, or that none did (modelled)."""
    means = _means([p.by_kernel for p in parts], KEY)
    out = _hot(stack([p.kernels for p in parts]), means).head(top)
    if not len(out):
        return pd.DataFrame(columns=["kernel", "calls", "total_ns", "basis"])
    measured = means[means["kernel"].isin(out["kernel"])]
    for column, choices in EFFICIENCY.items():
        out[column] = _highest(out["kernel"], measured, choices)
    sources = measured.groupby("kernel")["source"].agg(lambda s: ", ".join(sorted(set(s))))
    out["basis"] = [MEASURED.format(sources=sources[k]) if k in sources.index else MODELLED for k in out["kernel"]]
    busiest = out[["mac_busy_share", "vector_busy_share"]].max(axis=1)
    out["memory_bound"] = out["mte2_busy_share"] / busiest.where(busiest > 0)
    out["bound"] = _bound(out)
    out["achieved_share"] = _achieved(out)
    out["measured_flops"], out["flops_math"] = _flops(out["kernel"], measured)
    return out.dropna(axis=1, how="all")


def _hot(kernels: pd.DataFrame, means: pd.DataFrame) -> pd.DataFrame:
    """Kernels by device time (most first), then the kernels only counter samples name (a range profiler that
    replays each kernel records no kernel events): their calls the most samples of one counter, no device time."""
    hot = kernels.groupby("kernel")[["calls", "total_ns"]].sum().sort_values("total_ns", ascending=False)
    named = means[(means["kernel"] != "") & ~means["kernel"].isin(hot.index)] if len(means) else means
    calls = named.groupby("kernel")["samples"].max() if len(named) else pd.Series(dtype=np.int64)
    unseen = pd.DataFrame({"calls": calls, "total_ns": np.nan}).sort_values("calls", ascending=False, kind="stable")
    return pd.concat([hot, unseen]).rename_axis("kernel").reset_index() if len(unseen) else hot.reset_index()


def _flops(kernels: pd.Series, means: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Per kernel: the FLOPs its floating-point instruction counters (``FLOP_COUNTERS``) sum to over its samples and
    the math most of them ran (fp32, fp16, fp64); NaN and None without such counters."""
    counted = means[means["name"].isin(list(FLOP_COUNTERS))]
    if not len(counted):
        return np.full(len(kernels), np.nan), np.full(len(kernels), None, dtype=object)
    math, per = zip(*(FLOP_COUNTERS[n] for n in counted["name"]), strict=True)
    counted = counted.assign(math=list(math), flops=counted["total"].to_numpy(float) * np.array(per))
    by_math = counted.groupby(["kernel", "math"])["flops"].sum().unstack(fill_value=0.0)
    total = by_math.sum(axis=1).where(lambda t: t > 0)
    main = by_math.idxmax(axis=1).where(total.notna())
    return kernels.map(total).to_numpy(dtype=float), kernels.map(main).to_numpy(dtype=object)


def _bound(table: pd.DataFrame) -> np.ndarray:
    """Per kernel, what its counters say bounds it (``BOUND_BY``): memory or compute; '' where they do not say."""
    ascend = np.where(table["memory_bound"] > 1, "memory", "compute")
    compute = table[[c for c in CUDA_COMPUTE if c in table]].max(axis=1)
    cuda = np.where(table["dram_throughput_share"] > compute, "memory", "compute")
    judged = np.where(table["memory_bound"].notna(), ascend, np.where(compute.notna(), cuda, ""))
    return judged.astype(object)


def _achieved(table: pd.DataFrame) -> np.ndarray:
    """Per kernel, the share of its bounding unit's peak it keeps busy (``ACHIEVED``); NaN where not measured."""
    out = np.full(len(table), np.nan)
    for side, groups in ACHIEVED.items():
        for group in reversed(groups):  # the first recorded wins
            present = [c for c in group if c in table]
            busiest = table[present].max(axis=1).to_numpy(dtype=float) if present else np.full(len(table), np.nan)
            mine = (table["bound"] == side).to_numpy() & ~np.isnan(busiest)
            out[mine] = busiest[mine]
    return out


def measured_kernels(parts: list[CountersPart]) -> dict[str, dict]:
    """Per kernel with counters: its measured bound, achieved share of that unit's peak and basis (``efficiency`` of
    every kernel of the parts), for the findings that judge a kernel's efficiency; none without counter samples."""
    if not any(len(p.by_kernel) for p in parts):
        return {}
    table = efficiency(parts, top=1 << 62)
    if "achieved_share" not in table:
        return {}
    table = table[table["achieved_share"].notna()]
    return {row["kernel"]: row for row in table.to_dict(orient="records")}


def _highest(kernels: pd.Series, means: pd.DataFrame, choices: tuple) -> np.ndarray:
    """Per kernel: the highest of its means of ``choices``' counters, each times its factor (NaN where it has none
    of them): a cube kernel's MTE2 share is its ``aic_`` one, a vector kernel's its ``aiv_`` one (the other is 0)."""
    names = means["name"].astype(str)
    found = [
        kernels.map(means[(names == n) | names.str.endswith("." + n)].groupby("kernel")["value"].mean() * f)
        for n, f in choices
    ]
    return pd.concat(found, axis=1).max(axis=1).to_numpy(dtype=float)


def job_section(parts: list[CountersPart], job: JobData, options: Options) -> Section | None:
    """The counters section of a job's parts, stacked in rank order (None when no rank recorded counters)."""
    return _section(parts, options)


def _section(parts: list[CountersPart], options: Options) -> Section | None:
    """Samples by source, the hot kernels' efficiency, and each counter per kernel and per step."""
    sources = stack([p.sources for p in parts])
    if not len(sources):
        return None
    sources = sources.groupby("source", sort=True)["samples"].sum().reset_index()
    per_kernel = _means([p.by_kernel for p in parts], KEY).sort_values(["weight"], ascending=False)
    per_step = _means([p.by_step for p in parts], STEP_KEY)
    count = int(sources["samples"].sum())
    return Section(
        "counters",
        "Hardware counters: efficiency of the hot kernels",
        facts=[Fact("counter_samples", "counter samples read", count, Unit.COUNT, Per.TOTAL)],
        tables=[
            Table("efficiency", "Hardware efficiency of hot kernels (achieved / peak)", efficiency(parts, options.top)),
            Table("sources", "Counter samples by source", sources, Per.TOTAL, units={"samples": Unit.COUNT}),
            Table(
                "per_kernel",
                "Counters per kernel (mean over its intervals)",
                per_kernel[["kernel", "name", "unit", "source", "samples", "value"]].head(options.top),
                units={"samples": Unit.COUNT},
            ),
            Table(
                "per_step",
                "Counters per step (mean over the step)",
                per_step[["rank", "step", "name", "unit", "samples", "value"]].head(options.top),
                Per.STEP,
                units={"samples": Unit.COUNT},
            ),
        ],
    )
