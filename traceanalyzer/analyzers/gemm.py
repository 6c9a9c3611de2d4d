"""Achieved matrix-multiply throughput: FLOPs from recorded shapes over the device time each GEMM op caused.

A GEMM hotspot is only a problem when it runs far below what the device can do; this says how far, per op and the
math it ran (fp32 inputs on TF32 tensor cores are measured against the TF32 peak), against the device's dense peak
(``traceanalyzer.devices``, a data-sheet figure). A rate above the peak means the kernel time is suspect: the share
is clipped at 100 % and the row says so.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import numpy as np
import pandas as pd

from traceanalyzer import devices
from traceanalyzer.jobdata import JobData
from traceanalyzer.memo import per_trace, remember
from traceanalyzer.options import DEFAULT, Options
from traceanalyzer.schema import BUSY_KINDS, NO_ROW, Kind, TraceMeta, category_text, per_pair
from traceanalyzer.section import Fact, Per, Section, Table
from traceanalyzer.tables import stack
from traceanalyzer.tracedata import TraceData
from traceanalyzer.vocabulary import GEMM_OPS, TF32_KERNEL, dtype_key, matches

COLUMNS = ["op", "dtype", "calls", "flops", "device_ns", "tflops", "peak_tflops", "peak_share", "note"]
PART_COLUMNS = ["op", "dtype", "calls", "flops", "device_ns"]
"""A part's columns: per (op, dtype), the additive half of the table."""

ABOVE_PEAK = "above the data-sheet peak: the kernel time is suspect, the share is clipped at 100 %"
"""The note of a row whose computed rate exceeds the device's peak."""


@per_trace
def gemm_throughput(trace: TraceData) -> pd.DataFrame:
    """Per GEMM op name and math dtype: calls, FLOPs, device time caused, achieved TFLOP/s, share of the dense peak."""
    return _rated([summarize(trace)], trace.meta)


def job_throughput(job: JobData) -> pd.DataFrame:
    """``gemm_throughput`` of a job analysed rank by rank (once per job)."""
    return remember(job, "gemm.throughput", lambda: _rated(job.parts("gemm"), job.meta)).copy(deep=False)


def summarize(trace: TraceData, options: Options = DEFAULT) -> pd.DataFrame:
    """A rank's part (or a joined trace's): per GEMM op name and math dtype, the calls, FLOPs and device time."""
    ev = trace.events
    ops = ev[(ev["kind"] == Kind.CPU_OP.value) & ev["name"].isin(list(GEMM_OPS))]
    device = ev.loc[ev["kind"].isin([k.value for k in BUSY_KINDS]) & (ev["op"] != NO_ROW), ["name", "dur", "op"]]
    device_ns = device.groupby("op")["dur"].sum().reindex(ops.index, fill_value=0).to_numpy()
    tf32_name = matches(np.asarray(device["name"].array.categories, dtype=object), TF32_KERNEL)
    tf32 = pd.Series(tf32_name[device["name"].array.codes]).groupby(device["op"].to_numpy()).any()
    flops = _per_distinct(ops["name"], ops["input_dims"], lambda name, dims: _flops(GEMM_OPS[name], dims)).astype(float)
    dtype = _per_distinct(ops["input_types"], ops["input_types"], lambda types, _: _dtype(types))
    on_tf32 = tf32.reindex(ops.index, fill_value=False).to_numpy(dtype=bool) & (dtype == "fp32")
    frame = pd.DataFrame(
        {
            "op": category_text(ops["name"])[ops["name"].array.codes],
            "dtype": np.where(on_tf32, "tf32", dtype),
            "flops": flops,
            "device_ns": device_ns,
        }
    )
    frame = frame[(frame["flops"] > 0) & (frame["device_ns"] > 0)]
    return _totals(frame.assign(calls=1))


def _totals(frame: pd.DataFrame) -> pd.DataFrame:
    """Calls, FLOPs and device time summed per (op, dtype), in (op, dtype) order."""
    return frame.groupby(["op", "dtype"])[PART_COLUMNS[2:]].sum().reset_index()


def _rated(parts: list[pd.DataFrame], meta: TraceMeta) -> pd.DataFrame:
    """The throughput table from parts (any ranks): their totals added up, rated against the device's peak, the
    GEMMs with the most device time first."""
    table = _totals(stack(parts))
    if not len(table):
        return pd.DataFrame(columns=COLUMNS)
    return _against_peak(table, meta).sort_values("device_ns", ascending=False).reset_index(drop=True)[COLUMNS]


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


def _flops(rule: str, dims_text: str) -> float:
    """2·M·N·K (times the batch) from the recorded input shapes; 0 when they are missing or unexpected."""
    try:
        dims = json.loads(dims_text) if dims_text else []
    except ValueError:
        return 0.0
    shapes = [d for d in dims if isinstance(d, list) and len(d) >= 2]
    if len(shapes) < 2:
        return 0.0
    a, b = shapes[-2], shapes[-1]  # addmm/baddbmm record the bias/input first
    if rule in ("mm", "addmm") and len(a) == 2 and len(b) == 2 and a[1] == b[0]:
        return 2.0 * a[0] * a[1] * b[1]
    if rule in ("bmm", "baddbmm") and len(a) == 3 and len(b) == 3 and a[2] == b[1]:
        return 2.0 * a[0] * a[1] * a[2] * b[2]
    return 0.0


def _dtype(types_text: str) -> str:
    """The dtype key of an op's first recorded input type ('unknown' when none is recorded)."""
    try:
        types = json.loads(types_text) if types_text else []
    except ValueError:
        return "unknown"
    first = next((t for t in types if t), "")
    return dtype_key(first) if first else "unknown"


def section(trace: TraceData, options: Options) -> Section | None:
    """Achieved GEMM throughput against the device's dense peak."""
    return _section(gemm_throughput(trace), options)


def job_section(job: JobData, options: Options) -> Section | None:
    """``section`` of a job analysed rank by rank."""
    return _section(job_throughput(job), options)


def _section(table: pd.DataFrame, options: Options) -> Section | None:
    """The section of a throughput table (its ``options.top`` rows); None when no GEMM was rated."""
    if not len(table):
        return None
    return Section(
        "gemm",
        "Matrix multiplies: achieved throughput",
        facts=[Fact("peak_source", "peak source", "vendor data sheets, dense (no sparsity)")],
        tables=[
            Table("gemm_throughput", "Achieved throughput per GEMM op and dtype", table.head(options.top), Per.TOTAL)
        ],
    )
