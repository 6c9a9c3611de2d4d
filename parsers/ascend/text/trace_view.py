"""trace_view.json / msprof_*.json → event-table rows: lanes read, flows bound, task twins dropped, kernels joined."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from traceanalyzer.parsers.ascend import common as c
from traceanalyzer.parsers.ascend.text import flows, kernels, lanes, trace_json

from traceanalyzer.errors import TraceError
from traceanalyzer.schema import NO_ROW, Kind


def events(trace: Path, kernel_table: pd.DataFrame | None, warnings: c.Notes) -> pd.DataFrame:
    """The event table of a trace file: rows by lane, flows bound, task twins dropped, kernel_details joined."""
    ev = trace_json.read(trace, warnings)
    found = lanes.Lanes(ev)
    if not any(name in c.DEVICE_LANES | {c.PYTHON_LANE} for name in found.process.values()):
        raise TraceError(trace, "is a JSON event array without Python or Ascend Hardware lanes; not an Ascend trace")
    src = np.flatnonzero(ev.among("ph", {trace_json.COMPLETE}) & found.read(ev))
    frame = lanes.frame(ev, src, found)
    flows.bind_flows(frame, src, ev)
    frame = _drop_task_twins(frame)
    queue = flows.callers(frame, ev)
    frame["caller"] = np.where(queue != NO_ROW, queue, task_ops(frame))
    if kernel_table is not None:
        kernels.join_kernels(frame, kernel_table, warnings)
    return frame


def task_ops(frame: pd.DataFrame) -> np.ndarray:
    """Per row, for the tasks of collectives (COMM_TASK), the collective (COMMUNICATION row) of the same device that
    contains its start: the latest-starting one, where several do; NO_ROW for other rows and tasks outside any."""
    kind = frame["kind"].astype(str).to_numpy()
    device = frame["device"].to_numpy()
    out = np.full(len(frame), NO_ROW, dtype=np.int64)
    ops, tasks = kind == Kind.COMMUNICATION.value, np.flatnonzero(kind == Kind.COMM_TASK.value)
    lane = np.where(ops, device, NO_ROW - 1)
    out[tasks] = flows.slices_at(frame, lane, device[tasks], frame["ts"].to_numpy()[tasks])
    return out


def _drop_task_twins(frame: pd.DataFrame) -> pd.DataFrame:
    """A collective's tasks appear on the HCCL lane and again on an Ascend Hardware stream: keep one copy."""
    task = (frame["kind"] == Kind.COMM_TASK.value).to_numpy()
    hccl = task & (frame["core"] == c.HCCL_CORE).to_numpy()
    device_task = task & ~hccl
    if not hccl.any() or not device_task.any():
        return frame
    keys = pd.MultiIndex.from_arrays([frame["stream"], frame["ts"]])
    twin = device_task & keys.isin(keys[hccl])
    return frame[~twin].reset_index(drop=True)
