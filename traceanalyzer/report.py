"""Build the report: plain data with a stable schema (``trace``, ``summary``, ``hotspots``, ``findings``, ...)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from traceanalyzer import analyzers
from traceanalyzer.analyzers import steps
from traceanalyzer.schema import Kind

SCHEMA_VERSION = 1


@dataclass
class Options:
    """What the user asked the report to cover."""

    top: int = 15
    step: int | None = None
    rank: int | None = None
    kind: str | None = None  # restricts the kernel hotspot table to one event kind


def build(trace, options: Options) -> dict:
    """The report of a trace as JSON-ready data."""
    report = {
        "schema_version": SCHEMA_VERSION,
        "trace": trace_facts(trace),
        "summary": summary(trace, options),
        "hotspots": {
            level: records(
                trace.hotspots(
                    level,
                    step=options.step,
                    rank=options.rank,
                    top=options.top,
                    kind=options.kind if level == "kernel" else None,
                )
            )
            for level in ("kernel", "cpu_op", "op_device", "category")
        },
        "findings": [f.to_dict() for f in trace.findings()],
        "steps": records(_filtered_steps(trace, options)),
    }
    for name, section in analyzers.sections(trace, options).items():
        report[name] = section
    return report


def trace_facts(trace) -> dict:
    """What was loaded: files, platform, format, ranks, devices and the time window."""
    m = trace.meta
    return {
        "paths": m.paths,
        "platform": m.platform.value,
        "source_format": m.source_format,
        "format_version": m.format_version,
        "ranks": m.ranks,
        "world_size": m.world_size,
        "rank_known": m.rank_known,
        "devices": [{"index": d.index, "name": d.name, "memory_bytes": d.memory_bytes} for d in m.devices],
        "start_ns": m.start_ns,
        "end_ns": m.end_ns,
        "span_ns": m.span_ns,
        "events": len(trace.events),
        "memory_events": len(trace.memory_events),
        "warnings": m.warnings,
    }


def summary(trace, options: Options) -> dict:
    """Step time, device busy, time by kind and the communication share."""
    table = _filtered_steps(trace, options)
    events = trace.select(step=options.step, rank=options.rank)
    by_kind = steps.time_by_kind(events)
    busy = steps.device_busy(events)
    device = by_kind[by_kind["kind"].isin(steps.DEVICE)]
    device_total = int(device["total_ns"].sum())
    kernel_like = device[device["kind"].isin([Kind.KERNEL.value, Kind.COMMUNICATION.value])]
    comm = int(kernel_like.loc[kernel_like["kind"] == Kind.COMMUNICATION.value, "total_ns"].sum())
    kernel_total = int(kernel_like["total_ns"].sum())
    return {
        "steps": len(table),
        "step_wall_ns_median": _median(table, "wall_ns"),
        "device_busy_ns_per_step": _median(table, "device_busy_ns"),
        "kernel_ns_per_step": _median(table, f"{Kind.KERNEL.value}_ns", extra=f"{Kind.COMMUNICATION.value}_ns"),
        "kernels_per_step": _median(table, "kernels"),
        "device_time_ns": device_total,
        "communication_share": comm / kernel_total if kernel_total else 0.0,
        "device_busy_share": float(busy["busy_ns"].sum() / busy["span_ns"].sum()) if busy["span_ns"].sum() else 0.0,
        "time_by_kind": records(by_kind),
    }


def _filtered_steps(trace, options: Options) -> pd.DataFrame:
    table = trace.steps()
    if options.step is not None:
        table = table[table["step"] == options.step]
    if options.rank is not None:
        table = table[table["rank"] == options.rank]
    return table


def _median(table: pd.DataFrame, col: str, extra: str | None = None) -> float | None:
    if not len(table):
        return None
    values = table[col] + (table[extra] if extra else 0)
    return float(values.median())


def records(frame: pd.DataFrame) -> list[dict]:
    """DataFrame rows as JSON-ready dicts (numpy scalars to Python, NaN to None)."""
    return [{k: _plain(v) for k, v in row.items()} for row in frame.to_dict(orient="records")]


def _plain(value):
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating | float):
        return None if np.isnan(value) else float(value)
    if isinstance(value, np.bool_):
        return bool(value)
    return value
