"""Achieved matrix-multiply throughput and roofline: FLOPs and bytes from recorded shapes over the device time each
GEMM op caused.

A GEMM hotspot is only a problem when it runs far below what the device can do; this says how far, per op and the
math it ran (fp32 inputs on TF32 tensor cores are measured against the TF32 peak), against the device's dense peak
(``traceanalyzer.devices``, a data-sheet figure). A rate above the peak means the kernel time is suspect: the share
is clipped at 100 % and the row says so. Per shape, the roofline (``roofline``) judges each GEMM against the limit
that binds it: a GEMV or skinny GEMM (decode at batch 1) against HBM bandwidth, a large GEMM against the peak;
``limit_ns`` is the least time its calls could take, ``limit_share`` the share of that attainable rate reached.

Where hardware counters measured the kernels a GEMM ran (``analyzers.counters``: Ascend PMU ``aic_mac_ratio``, CUDA
tensor-pipe or SM throughput, or FLOPs counted by CUPTI's instruction counters over the kernel's time), the tables
say so: ``efficiency`` is the measured share of the compute unit's peak (weighted by the device time of the measured
kernels under the row) and ``bound`` the counters' verdict (memory- or compute-bound), each with its basis column
(``efficiency_basis``, ``bound_basis``); elsewhere both stay the model's (FLOPs / peak, the roofline). The
``gemm_measured`` table lists every GEMM kernel the counters measured, with or without recorded shapes.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from traceanalyzer import devices
from traceanalyzer.analyzers import counters, roofline
from traceanalyzer.jobdata import JobData
from traceanalyzer.memo import per_trace
from traceanalyzer.options import DEFAULT, Options
from traceanalyzer.schema import BUSY, NO_ROW, Kind, TraceMeta, category_text, per_pair
from traceanalyzer.section import Fact, Per, Section, Table, Unit
from traceanalyzer.tables import stack
from traceanalyzer.tracedata import TraceData
from traceanalyzer.vocabulary import CONV_KERNEL, GEMM_KERNEL, GEMM_OPS, TF32_KERNEL, dtype_bytes, dtype_key, matches

COLUMNS = [
    "op", "dtype", "calls", "flops", "bytes", "device_ns", "tflops", "peak_tflops", "peak_share",
    "bound", "limit_ns", "limit_share", "note",
]  # fmt: skip
ROOFLINE_COLUMNS = [
    "op", "dtype", "batch", "m", "n", "k", "calls", "flops", "bytes", "device_ns", "intensity", "ridge", "bound",
    "tflops", "gbps", "limit_tflops", "limit_ns", "limit_share", "note",
]  # fmt: skip
SHAPE = ["op", "dtype", "batch", "m", "n", "k"]
"""One GEMM shape (``batch`` 1 for mm/addmm; C[m, n] = A[m, k] · B[k, n])."""
PART_COLUMNS = [*SHAPE, "kernel", "calls", "flops", "bytes", "device_ns"]
"""A part's columns: per shape and main kernel (the call's longest device event), the additive half of the tables."""
MEASURED_COLUMNS = [
    "kernel", "calls", "device_ns", "efficiency", "efficiency_basis", "bound", "bound_share", "bound_basis",
    "measured_flops", "flops_math", "measured_tflops", "peak_tflops",
]  # fmt: skip
MEASURED_SHARES = (
    ("mac_busy_share", "aic_mac_ratio"),
    ("tensor_pipe_share", "tensor pipe % of peak"),
    ("fp32_pipe_share", "FP32 pipe % of peak"),
    ("sm_throughput_share", "SM throughput % of peak"),
)
"""The counters' compute-unit shares a GEMM kernel's measured efficiency is read from (the first recorded), and
the counter each names: the cube MAC busy share on Ascend, the tensor pipe (else the FP32 pipe, else SM throughput)
on CUDA."""
MODELLED_PEAK = "modelled (FLOPs / peak)"
MODELLED_ROOFLINE = "modelled (roofline: FLOPs and bytes / its limit)"
MODELLED_BOUND = "modelled (intensity vs ridge point)"
NOT_JUDGED = "not judged (no counters, no peak for the device)"
"""The basis of a row's efficiency or bound where no counter measured its kernels."""

ABOVE_PEAK = "above the data-sheet peak: the kernel time is suspect, the share is clipped at 100 %"
"""The note of a row whose computed rate exceeds the device's peak."""


@per_trace
def gemm_throughput(trace: TraceData) -> pd.DataFrame:
    """Per GEMM op name and math dtype: calls, FLOPs, bytes, device time caused, achieved TFLOP/s, share of the dense
    peak, and the roofline's least time for its calls (``limit_ns``) with the limit that binds most of it."""
    return _rated([rank_part(trace)], trace.meta)


@per_trace
def gemm_roofline(trace: TraceData) -> pd.DataFrame:
    """Per GEMM shape: FLOPs and bytes, intensity against the device's ridge point, the binding limit (memory or
    compute), achieved TFLOP/s and GB/s, the attainable TFLOP/s and the share of it reached."""
    return _roofline([rank_part(trace)], trace.meta)


GemmPart = pd.DataFrame
"""A rank's part: one row per GEMM shape, math dtype and main kernel (``PART_COLUMNS``, added up across ranks)."""


@dataclass(frozen=True)
class GemmJob:
    """The job part: ``gemm_throughput`` and ``gemm_roofline`` of the ranks' parts added up per shape."""

    throughput: pd.DataFrame
    roofline: pd.DataFrame
    kernels: pd.DataFrame
    """Device time (ns) per shape and main kernel of its calls, for the counters' upgrade (``_upgraded``)."""


def merge(parts: list[GemmPart], job: JobData) -> GemmJob:
    """The job's GEMMs: the ranks' shapes added up, rated against the job's device."""
    return GemmJob(_rated(parts, job.meta), _roofline(parts, job.meta), _by_kernel(parts))


def _by_kernel(parts: list[GemmPart]) -> pd.DataFrame:
    """Device time (ns) per shape and main kernel of the parts' calls."""
    table = stack(parts)
    if not len(table):
        return pd.DataFrame(columns=[*SHAPE, "kernel", "device_ns"])
    return table.groupby([*SHAPE, "kernel"], as_index=False)["device_ns"].sum()


def job_throughput(job: JobData) -> pd.DataFrame:
    """``gemm_throughput`` of a job (of the analyzers that need ``gemm``)."""
    merged: GemmJob = job.merged("gemm")
    return merged.throughput.copy(deep=False)


def rank_part(trace: TraceData, options: Options = DEFAULT) -> GemmPart:
    """A rank's part (or a joined trace's): per GEMM shape and math dtype, the calls, FLOPs, bytes and device time."""
    ev = trace.events
    ops = ev[(ev["kind"] == Kind.CPU_OP.value) & ev["name"].isin(list(GEMM_OPS))]
    op = ev["op"].to_numpy()
    launched = (op != NO_ROW) & ev["kind"].isin(BUSY).to_numpy()
    launched[launched] = np.isin(op[launched], ops.index.to_numpy())  # only a GEMM op's work is read
    device = ev.loc[launched, ["name", "dur", "op"]]
    device_ns = device.groupby("op")["dur"].sum().reindex(ops.index, fill_value=0).to_numpy()
    longest = device.sort_values("dur", kind="stable").groupby("op")["name"].last()
    kernel = longest.astype(str).reindex(ops.index, fill_value="").to_numpy(dtype=object)
    tf32_name = matches(np.asarray(device["name"].array.categories, dtype=object), TF32_KERNEL)
    tf32 = pd.Series(tf32_name[device["name"].array.codes]).groupby(device["op"].to_numpy()).any()
    shapes = _per_distinct(ops["name"], ops["input_dims"], lambda name, dims: geometry(GEMM_OPS.get(name, ""), dims))
    shape = np.array(list(shapes), dtype=np.int64).reshape(-1, 5)
    dtype = _per_distinct(ops["input_types"], ops["input_types"], lambda types, _: _dtype(types))
    elem = _per_distinct(ops["input_types"], ops["input_types"], lambda types, _: elem_bytes(types)).astype(float)
    on_tf32 = tf32.reindex(ops.index, fill_value=False).to_numpy(dtype=bool) & (dtype == "fp32")
    batch, m, n, k, extra = shape.T
    fb, fm, fn, fk = (x.astype(float) for x in (batch, m, n, k))  # products of dims below 2**50 overflow int64
    frame = pd.DataFrame(
        {
            "op": category_text(ops["name"])[ops["name"].array.codes],
            "dtype": np.where(on_tf32, "tf32", dtype),
            "batch": batch,
            "m": m,
            "n": n,
            "k": k,
            "flops": 2.0 * fb * fm * fn * fk,
            "bytes": elem * (fb * (fm * fk + fk * fn + fm * fn) + extra),
            "device_ns": device_ns,
            "kernel": kernel,
        }
    )
    frame = frame[(frame["flops"] > 0) & (frame["device_ns"] > 0)]
    return _totals(frame.assign(calls=1), [*SHAPE, "kernel"])


def _totals(frame: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Calls, FLOPs, bytes and device time (and the roofline time, where present) summed per key, in key order."""
    sums = [c for c in ("calls", "flops", "bytes", "device_ns", "limit_ns", "memory_limit_ns") if c in frame]
    return frame.groupby(keys)[sums].sum().reset_index()


def _rated(parts: list[GemmPart], meta: TraceMeta) -> pd.DataFrame:
    """The throughput table from parts (any ranks): their shapes' roofline times added up per (op, dtype), rated
    against the device's peak, the GEMMs with the most device time first."""
    shapes = _limited(_totals(stack(parts), SHAPE), meta)
    if not len(shapes):
        return pd.DataFrame(columns=COLUMNS)
    shapes["memory_limit_ns"] = np.where(shapes["bound"] == roofline.MEMORY, shapes["limit_ns"], 0.0)
    table = _totals(shapes, ["op", "dtype"])
    table = _against_peak(table, meta)
    table["bound"] = np.where(table["memory_limit_ns"] * 2 > table["limit_ns"], roofline.MEMORY, roofline.COMPUTE)
    table["bound"] = np.where(np.isnan(table["peak_tflops"]), roofline.UNKNOWN, table["bound"])
    table["limit_share"] = (table["limit_ns"] / table["device_ns"]).clip(upper=1.0)
    return table.sort_values("device_ns", ascending=False).reset_index(drop=True)[COLUMNS]


def _roofline(parts: list[GemmPart], meta: TraceMeta) -> pd.DataFrame:
    """The per-shape roofline table from parts (any ranks), the shapes with the most device time first."""
    table = _limited(_totals(stack(parts), SHAPE), meta)
    if not len(table):
        return pd.DataFrame(columns=ROOFLINE_COLUMNS)
    table["intensity"] = table["flops"] / table["bytes"]
    table["tflops"] = table["flops"] / table["device_ns"] / 1e3
    table["gbps"] = table["bytes"] / table["device_ns"]
    table["limit_tflops"] = table["flops"] / table["limit_ns"] / 1e3
    share = table["limit_ns"] / table["device_ns"]
    table["note"] = np.where(share > 1, ABOVE_PEAK, "")
    table["limit_share"] = share.clip(upper=1.0)
    return table.sort_values("device_ns", ascending=False).reset_index(drop=True)[ROOFLINE_COLUMNS]


def _limited(shapes: pd.DataFrame, meta: TraceMeta) -> pd.DataFrame:
    """Shapes with the device's roofline for their dtype: ridge point, binding limit and least time of their calls."""
    roofs = {d: roofline.roof(meta, d) for d in shapes["dtype"].unique()}
    peak = np.array([roofs[d].peak_tflops for d in shapes["dtype"]], dtype=float)
    bandwidth = np.array([roofs[d].bandwidth for d in shapes["dtype"]], dtype=float)
    flops, nbytes = shapes["flops"].to_numpy(float), shapes["bytes"].to_numpy(float)
    shapes["ridge"] = peak * 1e12 / bandwidth
    shapes["bound"] = roofline.bound(flops, nbytes, peak, bandwidth)
    shapes["limit_ns"] = roofline.minimum_ns(flops, nbytes, peak, bandwidth)
    return shapes


def _per_distinct(first: pd.Series, second: pd.Series, value: Callable[[str, str], object]) -> np.ndarray:
    """``value(a, b)`` of each row's texts of two category columns, computed once per distinct pair."""
    return per_pair(first.array.codes, category_text(first), second.array.codes, category_text(second), value)


def _against_peak(table: pd.DataFrame, meta: TraceMeta) -> pd.DataFrame:
    """The table with achieved TFLOP/s, the device's peak for each dtype and the share of it (never above 1)."""
    device = devices.of_trace(meta)
    peaks = device.peak_tflops if device else {}
    table["tflops"] = table["flops"] / table["device_ns"] / 1e3
    table["peak_tflops"] = [peaks.get(d, np.nan) for d in table["dtype"]]
    share = table["tflops"] / table["peak_tflops"]
    table["note"] = np.where(share > 1, ABOVE_PEAK, "")
    table["peak_share"] = share.clip(upper=1.0)
    return table


NO_GEOMETRY = (0, 0, 0, 0, 0)


def geometry(rule: str, dims_text: str) -> tuple[int, int, int, int, int]:
    """(batch, m, n, k, extra elements read such as a bias) from the recorded input shapes; zeros when they are
    missing or unexpected."""
    try:
        dims = json.loads(dims_text) if dims_text else []
    except ValueError:
        return NO_GEOMETRY
    biased = rule in ("addmm", "baddbmm")  # they record the bias (self) first; an out= variant records out last
    operands = dims[1:3] if biased else dims[:2]
    if len(operands) < 2 or not all(isinstance(d, list) and len(d) >= 2 for d in operands):
        return NO_GEOMETRY
    a, b = operands
    extra = int(np.prod(dims[0])) if biased and isinstance(dims[0], list) else 0
    if rule in ("mm", "addmm") and len(a) == 2 and len(b) == 2 and a[1] == b[0]:
        return 1, a[0], b[1], a[1], extra
    if rule in ("bmm", "baddbmm") and len(a) == 3 and len(b) == 3 and a[2] == b[1]:
        return a[0], a[1], b[2], a[2], extra
    return NO_GEOMETRY


def _first_type(types_text: str) -> str:
    """An op's first recorded input type ('' when none is recorded)."""
    try:
        types = json.loads(types_text) if types_text else []
    except ValueError:
        return ""
    return next((t for t in types if t), "")


def _dtype(types_text: str) -> str:
    """The dtype key of an op's first recorded input type ('unknown' when none is recorded)."""
    first = _first_type(types_text)
    return dtype_key(first) if first else "unknown"


def elem_bytes(types_text: str) -> int:
    """The element size of an op's first recorded input type (0 when unknown: its bytes are then not counted)."""
    return dtype_bytes(_first_type(types_text))


def measured_gemms(counter_parts: list[counters.CountersPart], meta: TraceMeta) -> pd.DataFrame:
    """Per GEMM kernel (by name; convolutions excluded) that counters measured (``counters.summarize`` parts), most
    device time first: its efficiency (the compute unit's share of its peak) and bound with their bases, and the
    FLOPs its instruction counters counted (with the TFLOP/s and the peak share they give over its device time)."""
    if not sum(len(p.sources) for p in counter_parts):
        return pd.DataFrame(columns=MEASURED_COLUMNS)
    table = counters.efficiency(counter_parts, top=1 << 62)
    names = table["kernel"].astype(str).to_numpy(dtype=object)
    gemm = matches(names, GEMM_KERNEL) & ~matches(names, CONV_KERNEL) & table["basis"].str.startswith("measured")
    table = table[gemm].reset_index(drop=True)
    if not len(table):
        return pd.DataFrame(columns=MEASURED_COLUMNS)
    out = pd.DataFrame({"kernel": table["kernel"], "calls": table["calls"]})
    out["device_ns"] = table.get("total_ns", np.nan)
    out["efficiency"], out["efficiency_basis"] = np.nan, ""
    for column, counter in reversed(MEASURED_SHARES):  # the first recorded wins
        share = table[column] if column in table else pd.Series(np.nan, index=table.index)
        found = share.notna()
        out.loc[found, "efficiency"] = share[found]
        out.loc[found, "efficiency_basis"] = [
            f"measured ({counter}, from {_sources(b)})" for b in table["basis"][found]
        ]
    out["measured_flops"] = table.get("measured_flops", np.nan)
    out["flops_math"] = table.get("flops_math", None)
    device = devices.of_trace(meta)
    out["peak_tflops"] = [device.peak_tflops.get(m, np.nan) if device and m else np.nan for m in out["flops_math"]]
    out["measured_tflops"] = out["measured_flops"] / out["device_ns"].where(out["device_ns"] > 0) / 1e3
    counted = out["efficiency"].isna() & (out["measured_tflops"] / out["peak_tflops"]).notna()
    out.loc[counted, "efficiency"] = (out["measured_tflops"] / out["peak_tflops"])[counted]
    out.loc[counted, "efficiency_basis"] = (
        "measured (FP instructions executed / kernel time, against the peak of their math)"
    )
    out.loc[out["efficiency"].isna(), "efficiency_basis"] = [
        _unmeasured(row) for row in out[out["efficiency"].isna()].itertuples()
    ]
    out["bound"] = table["bound"].replace("", np.nan) if "bound" in table else np.nan
    out["bound_share"] = table.get("achieved_share", np.nan)
    out["bound_basis"] = np.where(out["bound"].notna(), [f"measured ({_sources(b)})" for b in table["basis"]], "")
    return out.sort_values("device_ns", ascending=False, kind="stable").reset_index(drop=True)[MEASURED_COLUMNS]


def _sources(basis: str) -> str:
    """The counter sources a ``counters.MEASURED`` basis names ('kernel_details PMU, l2_cache.csv')."""
    return basis.removeprefix("measured (").removesuffix(")")


def _unmeasured(row) -> str:
    """Why a GEMM kernel with counters has no measured efficiency: FLOPs counted without a kernel time or a peak
    for their math, or no counter of a compute unit."""
    if row.measured_flops == row.measured_flops:
        if row.device_ns != row.device_ns:
            return "not measured: FLOPs counted, no kernel time recorded (a range profiler replays each kernel)"
        return f"not measured: FLOPs counted, no {row.flops_math} peak for the device"
    return "not measured: its counters measure no compute unit"


def _upgraded(table: pd.DataFrame, kernels: pd.DataFrame, measured: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """A throughput (``keys`` op, dtype) or roofline (``keys`` SHAPE) table with ``efficiency`` and ``bound`` from
    the counters where they measured the main kernels of the row's calls (the efficiency weighted by those kernels'
    device time, the bound of the one with the most), else the model's (peak share, limit share, intensity), each
    with its basis column."""
    modelled = "limit_share" if "intensity" in table else "peak_share"
    out = table.copy()
    judged = out[modelled].notna() & (out["bound"] != roofline.UNKNOWN)
    out["efficiency"] = out[modelled]
    out["efficiency_basis"] = np.where(
        judged, MODELLED_ROOFLINE if modelled == "limit_share" else MODELLED_PEAK, NOT_JUDGED
    )
    out["bound_basis"] = np.where(judged, MODELLED_BOUND, NOT_JUDGED)
    rated = measured[measured["efficiency"].notna()]
    if not len(out) or not len(rated):
        return out
    calls = kernels.groupby([*keys, "kernel"], as_index=False)["device_ns"].sum()
    calls = calls.merge(rated[["kernel", "efficiency", "efficiency_basis", "bound", "bound_basis"]], on="kernel")
    if not len(calls):
        return out
    calls = calls.assign(weighted=calls["efficiency"] * calls["device_ns"]).sort_values("device_ns", kind="stable")
    g = calls.groupby(keys)
    per = g[["weighted", "device_ns"]].sum()
    per["efficiency"] = per["weighted"] / per["device_ns"]
    per = per.join(g[["efficiency_basis", "bound", "bound_basis"]].last())
    found = out.set_index(keys).index.isin(per.index)
    at = per.reindex(out.set_index(keys).index[found])
    out.loc[found, "efficiency"] = at["efficiency"].to_numpy()
    out.loc[found, "efficiency_basis"] = at["efficiency_basis"].to_numpy()
    bounded = found.copy()
    bounded[found] = at["bound"].notna().to_numpy()
    out.loc[bounded, "bound"] = at["bound"].dropna().to_numpy()
    out.loc[bounded, "bound_basis"] = at["bound_basis"].dropna().to_numpy()
    return out


def job_section(part: GemmJob, job: JobData, options: Options) -> Section | None:
    """Of a job's merged part (and the counters' parts of its ranks): achieved GEMM throughput against the
    device's dense peak, each shape against its roofline limit, both upgraded to measured where counters measured
    their kernels, and the GEMM kernels the counters measured."""
    measured = measured_gemms(counters.job_parts(job), job.meta)
    throughput, roofs = part.throughput.copy(deep=False), part.roofline.copy(deep=False)
    return _section(throughput, roofs, part.kernels, measured, job.meta, options)


ROOFLINE_UNITS = {
    "batch": Unit.COUNT,
    "m": Unit.COUNT,
    "n": Unit.COUNT,
    "k": Unit.COUNT,
    "intensity": Unit.NUMBER,
    "ridge": Unit.NUMBER,
    "efficiency": Unit.SHARE,
}
ROOFLINE_NOTE = (
    "intensity and ridge in FLOPs per byte; bytes: both inputs and the output (and a bias) moved once, from the "
    "recorded shapes and dtype; limit_ns: the least time the calls could take, max(FLOPs / peak, bytes / bandwidth); "
    "limit_share: the share of that attainable rate reached (memory-bound shapes are judged against bandwidth)"
)


MEASURED_UNITS = {"efficiency": Unit.SHARE, "calls": Unit.COUNT, "measured_flops": Unit.COUNT}
MEASURED_NOTE = (
    "efficiency: the compute unit's busy share of its peak as the counters measure it (Ascend aic_mac_ratio; CUDA "
    "tensor pipe or SM throughput % of peak; else FLOPs counted by the FP instruction counters over the kernel's "
    "time against the data-sheet peak of their math); bound and bound_share: the unit the counters say limits the "
    "kernel (msprof's memory_bound on Ascend, DRAM vs SM throughput on CUDA) and its busy share; measured_flops: "
    "2 per fused multiply-add, 1 per add or multiply, summed over the kernel's ranges"
)


def _section(
    table: pd.DataFrame,
    shapes: pd.DataFrame,
    kernels: pd.DataFrame,
    measured: pd.DataFrame,
    meta: TraceMeta,
    options: Options,
) -> Section | None:
    """The section of the throughput and roofline tables, upgraded by the counters, and the measured GEMM kernels
    (their ``options.top`` rows each); None when no GEMM was rated or measured."""
    if not len(table) and not len(measured):
        return None
    tables = []
    if len(table):
        throughput = _upgraded(table, kernels, measured, ["op", "dtype"])
        roofs = _upgraded(shapes, kernels, measured, SHAPE)
        tables += [
            Table(
                "gemm_throughput",
                "Achieved throughput per GEMM op and dtype",
                throughput.head(options.top),
                Per.TOTAL,
                {"efficiency": Unit.SHARE},
            ),
            Table(
                "gemm_roofline",
                "Roofline per GEMM shape: memory- or compute-bound, and the share of its limit reached",
                roofs.head(options.top),
                Per.TOTAL,
                ROOFLINE_UNITS,
                ROOFLINE_NOTE,
            ),
        ]
    if len(measured):
        tables.append(
            Table(
                "gemm_measured",
                "Measured efficiency per GEMM kernel (hardware counters)",
                measured.head(options.top),
                Per.TOTAL,
                MEASURED_UNITS,
                MEASURED_NOTE,
            )
        )
    return Section(
        "gemm",
        "Matrix multiplies: achieved throughput and roofline",
        facts=[
            Fact("peak_source", "peak source", "vendor data sheets, dense (no sparsity)"),
            Fact("bandwidth_source", "bandwidth source", devices.bandwidth(meta)[1]),
            Fact("measured_kernels", "GEMM kernels measured by counters", len(measured), Unit.COUNT, Per.TOTAL),
        ],
        tables=tables,
    )
