"""Achieved matrix-multiply throughput: FLOPs from recorded shapes over the device time each GEMM op caused.

A GEMM hotspot is only a problem when it runs far below what the device can do; this says how far, per op and
dtype, against the device's dense peak (a data-sheet figure, stated as an assumption).
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from traceanalyzer.memo import per_trace
from traceanalyzer.options import Options
from traceanalyzer.schema import BUSY_KINDS, NO_ROW, Kind
from traceanalyzer.section import Fact, Per, Section, Table
from traceanalyzer.tracedata import TraceData

GEMM_OPS = {
    "aten::mm": "mm",
    "aten::addmm": "addmm",
    "aten::bmm": "bmm",
    "aten::baddbmm": "baddbmm",
}
"""CPU ops whose recorded input shapes give their FLOPs, and the shape rule for each."""

PEAK_TFLOPS = {
    "H200": {"bf16": 989.0, "fp16": 989.0, "tf32": 494.0, "fp32": 67.0},
    "H100": {"bf16": 989.0, "fp16": 989.0, "tf32": 494.0, "fp32": 67.0},
    "A100": {"bf16": 312.0, "fp16": 312.0, "tf32": 156.0, "fp32": 19.5},
    "B200": {"bf16": 2250.0, "fp16": 2250.0, "tf32": 1100.0, "fp32": 80.0},
    "V100": {"fp16": 125.0, "fp32": 15.7},
    "MI300X": {"bf16": 1307.0, "fp16": 1307.0, "fp32": 163.4},
}
"""Dense (no sparsity) peak TFLOP/s by device family and dtype, from the vendors' data sheets."""

DTYPES = {"c10::BFloat16": "bf16", "c10::Half": "fp16", "float": "fp32", "double": "fp64"}
"""Recorded input type → dtype key."""

COLUMNS = ["op", "dtype", "calls", "flops", "device_ns", "tflops", "peak_tflops", "peak_share"]


@per_trace
def gemm_throughput(trace: TraceData) -> pd.DataFrame:
    """Per GEMM op name and dtype: calls, FLOPs, device time caused, achieved TFLOP/s and share of the dense peak."""
    ev = trace.events
    ops = ev[(ev["kind"] == Kind.CPU_OP.value) & ev["name"].isin(list(GEMM_OPS))]
    if not len(ops):
        return pd.DataFrame(columns=COLUMNS)
    device = ev[ev["kind"].isin([k.value for k in BUSY_KINDS]) & (ev["op"] != NO_ROW)]
    device_ns = device.groupby("op")["dur"].sum().reindex(ops.index, fill_value=0).to_numpy()
    flops = np.array([_flops(GEMM_OPS[str(n)], d) for n, d in zip(ops["name"], ops["input_dims"], strict=True)])
    frame = pd.DataFrame(
        {
            "op": ops["name"].astype(str).to_numpy(),
            "dtype": [_dtype(t) for t in ops["input_types"].astype(str)],
            "flops": flops,
            "device_ns": device_ns,
        }
    )
    frame = frame[(frame["flops"] > 0) & (frame["device_ns"] > 0)]
    table = (
        frame.groupby(["op", "dtype"])
        .agg(calls=("flops", "size"), flops=("flops", "sum"), device_ns=("device_ns", "sum"))
        .reset_index()
    )
    table["tflops"] = table["flops"] / table["device_ns"] / 1e3
    peaks = _peaks(trace)
    table["peak_tflops"] = [peaks.get(d, np.nan) for d in table["dtype"]]
    table["peak_share"] = table["tflops"] / table["peak_tflops"]
    return table.sort_values("device_ns", ascending=False).reset_index(drop=True)[COLUMNS]


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
    try:
        types = json.loads(types_text) if types_text else []
    except ValueError:
        return "unknown"
    first = next((t for t in types if t), "")
    return DTYPES.get(first, first or "unknown")


def _peaks(trace) -> dict[str, float]:
    """Peak TFLOP/s by dtype of the trace's device family ({} when the family is not in the table)."""
    names = " ".join(d.name for d in trace.meta.devices)
    family = next((f for f in PEAK_TFLOPS if f in names), None)
    return PEAK_TFLOPS.get(family, {})


def section(trace: TraceData, options: Options) -> Section | None:
    """Achieved GEMM throughput against the device's dense peak."""
    table = gemm_throughput(trace)
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
