"""Achieved matrix-multiply throughput and roofline: FLOPs and bytes from recorded shapes over the device time each
GEMM op caused.

A GEMM hotspot is only a problem when it runs far below what the device can do; this says how far, per op and the
math it ran (fp32 inputs on TF32 tensor cores are measured against the TF32 peak), against the device's dense peak
(``traceanalyzer.devices``, a data-sheet figure). A rate above the peak means the kernel time is suspect: the share
is clipped at 100 % and the row says so. Per shape, the roofline (``roofline``) judges each GEMM against the limit
that binds it: a GEMV or skinny GEMM (decode at batch 1) against HBM bandwidth, a large GEMM against the peak;
``limit_ns`` is the least time its calls could take, ``limit_share`` the share of that attainable rate reached.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from traceanalyzer import devices
from traceanalyzer.analyzers import roofline
from traceanalyzer.jobdata import JobData
from traceanalyzer.memo import per_trace
from traceanalyzer.options import DEFAULT, Options
from traceanalyzer.schema import BUSY, NO_ROW, Kind, TraceMeta, category_text, per_pair
from traceanalyzer.section import Fact, Per, Section, Table, Unit
from traceanalyzer.tables import stack
from traceanalyzer.tracedata import TraceData
from traceanalyzer.vocabulary import GEMM_OPS, TF32_KERNEL, dtype_bytes, dtype_key, matches

COLUMNS = [
    "op", "dtype", "calls", "flops", "bytes", "device_ns", "tflops", "peak_tflops", "peak_share",
    "bound", "limit_ns", "limit_share", "note",
]  # fmt: skip
ROOFLINE_COLUMNS = [
    "op", "dtype", "batch", "m", "n", "k", "calls", "flops", "bytes", "device_ns", "intensity", "ridge", "bound",
    "tflops", "gbps", "limit_tflops", "limit_ns", "limit_share", "note",
]  # fmt: skip
SHAPE = ["op", "dtype", "batch", "m", "n", "k"]
"""A part's key: one GEMM shape (``batch`` 1 for mm/addmm; C[m, n] = A[m, k] · B[k, n])."""
PART_COLUMNS = [*SHAPE, "calls", "flops", "bytes", "device_ns"]
"""A part's columns: per shape, the additive half of the tables."""

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
"""A rank's part: one row per GEMM shape and math dtype (``PART_COLUMNS``, added up across ranks per ``SHAPE``)."""


@dataclass(frozen=True)
class GemmJob:
    """The job part: ``gemm_throughput`` and ``gemm_roofline`` of the ranks' parts added up per shape."""

    throughput: pd.DataFrame
    roofline: pd.DataFrame


def merge(parts: list[GemmPart], job: JobData) -> GemmJob:
    """The job's GEMMs: the ranks' shapes added up, rated against the job's device."""
    return GemmJob(_rated(parts, job.meta), _roofline(parts, job.meta))


def job_throughput(job: JobData) -> pd.DataFrame:
    """``gemm_throughput`` of a job (of the analyzers that need ``gemm``)."""
    merged: GemmJob = job.merged("gemm")
    return merged.throughput.copy(deep=False)


def rank_part(trace: TraceData, options: Options = DEFAULT) -> GemmPart:
    """A rank's part (or a joined trace's): per GEMM shape and math dtype, the calls, FLOPs, bytes and device time."""
    ev = trace.events
    ops = ev[(ev["kind"] == Kind.CPU_OP.value) & ev["name"].isin(list(GEMM_OPS))]
    device = ev.loc[ev["kind"].isin(BUSY) & (ev["op"] != NO_ROW), ["name", "dur", "op"]]
    device_ns = device.groupby("op")["dur"].sum().reindex(ops.index, fill_value=0).to_numpy()
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
        }
    )
    frame = frame[(frame["flops"] > 0) & (frame["device_ns"] > 0)]
    return _totals(frame.assign(calls=1), SHAPE)


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


def section(trace: TraceData, options: Options) -> Section | None:
    """Achieved GEMM throughput against the device's dense peak, and each shape against its roofline limit."""
    return _section(gemm_throughput(trace), gemm_roofline(trace), trace.meta, options)


def job_section(part: GemmJob, job: JobData, options: Options) -> Section | None:
    """``section`` of a job's merged part."""
    return _section(part.throughput.copy(deep=False), part.roofline.copy(deep=False), job.meta, options)


ROOFLINE_UNITS = {
    "batch": Unit.COUNT,
    "m": Unit.COUNT,
    "n": Unit.COUNT,
    "k": Unit.COUNT,
    "intensity": Unit.NUMBER,
    "ridge": Unit.NUMBER,
}
ROOFLINE_NOTE = (
    "intensity and ridge in FLOPs per byte; bytes: both inputs and the output (and a bias) moved once, from the "
    "recorded shapes and dtype; limit_ns: the least time the calls could take, max(FLOPs / peak, bytes / bandwidth); "
    "limit_share: the share of that attainable rate reached (memory-bound shapes are judged against bandwidth)"
)


def _section(table: pd.DataFrame, shapes: pd.DataFrame, meta: TraceMeta, options: Options) -> Section | None:
    """The section of the throughput and roofline tables (their ``options.top`` rows); None when no GEMM was rated."""
    if not len(table):
        return None
    return Section(
        "gemm",
        "Matrix multiplies: achieved throughput and roofline",
        facts=[
            Fact("peak_source", "peak source", "vendor data sheets, dense (no sparsity)"),
            Fact("bandwidth_source", "bandwidth source", devices.bandwidth(meta)[1]),
        ],
        tables=[
            Table("gemm_throughput", "Achieved throughput per GEMM op and dtype", table.head(options.top), Per.TOTAL),
            Table(
                "gemm_roofline",
                "Roofline per GEMM shape: memory- or compute-bound, and the share of its limit reached",
                shapes.head(options.top),
                Per.TOTAL,
                ROOFLINE_UNITS,
                ROOFLINE_NOTE,
            ),
        ],
    )
