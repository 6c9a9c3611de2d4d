"""kernel_details.csv / op_summary_*.csv → core types and shapes joined onto the trace's kernels, or device rows."""

from __future__ import annotations

import numpy as np
import pandas as pd
from traceanalyzer.parsers.ascend import common as c

from traceanalyzer.schema import NO_ROW, Kind


def join_kernels(frame: pd.DataFrame, kernels: pd.DataFrame, warnings: list[str]) -> None:
    """Kernel rows take duration (ns-rounded, as the CSV totals), core type, shapes and dtypes from kernel_details.

    Rows are matched by exact start time.
    """
    compute = kernels[~kernels["core"].isin(c.COMM_CORES)]
    by_ts = compute.drop_duplicates("ts").set_index("ts")
    device = frame["kind"].isin([Kind.KERNEL.value]).to_numpy()
    ts = frame["ts"].to_numpy()
    hit = device & np.isin(ts, by_ts.index.to_numpy())
    matched = by_ts.reindex(ts[hit])
    core = frame["core"].astype(str).to_numpy().copy()
    found_core = matched["core"].to_numpy()
    core[np.flatnonzero(hit)[found_core != ""]] = found_core[found_core != ""]
    frame["core"] = pd.Categorical(core)
    dur = frame["dur"].to_numpy().copy()
    dur[hit] = matched["dur"].to_numpy()
    frame["dur"] = dur
    _join_shapes(frame, matched, hit)
    missing = len(compute) - int(hit.sum())
    if missing > 0:
        warnings.append(f"{missing} kernel_details rows have no matching task in the trace")


def _join_shapes(frame: pd.DataFrame, matched: pd.DataFrame, hit: np.ndarray) -> None:
    """Matched kernel rows take the CSV's input shapes (as JSON text) and dtypes."""
    for col, source in (("input_dims", "Input Shapes"), ("input_types", "Input Data Types")):
        if source in matched:
            values = frame[col].astype(str).to_numpy().copy()
            cells = matched[source].to_numpy()
            values[hit] = [c.shapes_json(v) for v in cells] if col == "input_dims" else cells
            frame[col] = pd.Categorical(values)


def csv_events(kernels: pd.DataFrame) -> pd.DataFrame:
    """Device work from kernel_details alone, plus step spans from its Step Id column."""
    comm = kernels["core"].isin(c.COMM_CORES).to_numpy()
    names = kernels["Name"].astype(str)
    collective = [c.collective_and_bytes(n, None, None)[0] if m else "" for n, m in zip(names, comm, strict=True)]
    frame = pd.DataFrame(
        {
            "ts": kernels["ts"].to_numpy(),
            "dur": kernels["dur"].to_numpy(),
            "name": names.to_numpy(),
            "kind": np.where(comm, Kind.COMMUNICATION.value, Kind.KERNEL.value),
            "cat": _cells(kernels, "Type", "").to_numpy(),
            "pid": "device",
            "tid": _cells(kernels, "Stream ID", "").to_numpy(),
            "device": [c.device_of(v) for v in _cells(kernels, "Device_id", "0")],
            "stream": [c.int_or_none(v) for v in _cells(kernels, "Stream ID", "")],
            "core": np.where(comm, c.HCCL_CORE, kernels["core"].to_numpy()),
            "collective": collective,
            "input_dims": [c.shapes_json(v) for v in _cells(kernels, "Input Shapes", "")],
            "input_types": _cells(kernels, "Input Data Types", "").to_numpy(),
        }
    )
    frame = pd.concat([frame, _csv_steps(kernels)], ignore_index=True)
    for col in ("device", "stream"):
        frame[col] = frame[col].fillna(NO_ROW).astype(np.int64)
    for col in ("name", "kind", "cat", "pid", "tid", "core", "collective", "input_dims", "input_types"):
        frame[col] = frame[col].fillna("").astype(str).astype("category")
    return frame


def _cells(kernels: pd.DataFrame, column: str, default: str) -> pd.Series:
    """A column of the table, or ``default`` in every row where the table has no such column."""
    return kernels.get(column, pd.Series(default, index=kernels.index))


def _csv_steps(kernels: pd.DataFrame) -> pd.DataFrame:
    """One step marker per Step Id, spanning its device work (the CSV records no host step times)."""
    if "Step Id" not in kernels:
        return pd.DataFrame()
    step = pd.to_numeric(kernels["Step Id"], errors="coerce")
    ok = step.notna() & (kernels["ts"] != NO_ROW)
    end = kernels["ts"] + kernels["dur"]
    spans = pd.DataFrame({"step": step[ok], "ts": kernels["ts"][ok], "end": end[ok]}).groupby("step")
    start, stop = spans["ts"].min(), spans["end"].max()
    return pd.DataFrame(
        {
            "ts": start.to_numpy(),
            "dur": (stop - start).to_numpy(),
            "name": [f"{c.STEP_PREFIX}{int(s)}" for s in start.index],
            "kind": Kind.STEP.value,
            "pid": "steps",
            "tid": "kernel_details Step Id",
        }
    )
