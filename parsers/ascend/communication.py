"""communication.json → communication ops: the rows of a rank folder torch_npu wrote no trace, kernel table or
database for (one row per op: start, elapsed time, collective, group; one step per step key spanning them), and the
group names a kernel table's communication ops lack (the file's keys are ``name@group``).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
from traceanalyzer.parsers.ascend import common as c
from traceanalyzer.parsers.ascend import job
from traceanalyzer.parsers.ascend.outputs import COMMUNICATION_FILE

from traceanalyzer.errors import TraceError
from traceanalyzer.schema import NO_ROW, Kind

_TIME_INFO = "Communication Time Info"
_START = "Start Timestamp(us)"
_ELAPSED = "Elapse Time(ms)"
_STEP = re.compile(r"^step(\d+)$")
_STEP_TRACE = "step_trace_time.csv"
_TOTALS = "Total Op Info"
"""The key of each kind's totals (no start time): not an op."""
_MAX_US = 9.2e15
"""Start times at or beyond this many µs overflow int64 ns."""


def parse(path: Path) -> tuple[pd.DataFrame, pd.DataFrame, c.TraceMeta]:
    """Parse the communication.json of one rank's output folder (a rank torch_npu wrote nothing else for)."""
    folder = path if path.is_dir() else path.parent
    warnings = c.Notes()
    warnings.append(
        f"{folder}: no trace, kernel table or profiler database; only its communication ops ({COMMUNICATION_FILE}) "
        "are loaded: no compute, host or memory data for this rank"
    )
    ops = _ops(folder / COMMUNICATION_FILE, warnings)
    if not len(ops):
        raise TraceError(folder / COMMUNICATION_FILE, "has no communication ops with a start time and duration")
    events = _table(ops, _device(folder))
    described = job.describe(folder.parent, path, warnings)
    return events, c.empty_memory(), c.make_meta(path, events, "torch_npu-communication", described, warnings)


def _ops(file: Path, warnings: c.Notes) -> pd.DataFrame:
    """Per op of every step and kind (p2p, collective): step, name, group, start ns, duration ns."""
    rows = []
    for step, kinds in _object(_load(file)).items():
        number = _STEP.match(str(step))
        for ops in _object(kinds).values():
            for key, op in _object(ops).items():
                if key != _TOTALS:
                    rows.append(_op(number, str(key), _object(_object(op).get(_TIME_INFO))))
    table = pd.DataFrame(rows, columns=["step", "name", "group", "ts", "dur"])
    bad = table["ts"].isna() | table["dur"].isna()
    warnings.adjust(str(file), "communication ops without a valid start time or elapsed time dropped", int(bad.sum()))
    return table[~bad].astype({"ts": np.int64, "dur": np.int64}).sort_values("ts", kind="stable")


def _op(step: re.Match | None, key: str, times: dict) -> tuple:
    name, _, group = key.partition("@")
    start, elapsed = _number(times.get(_START)), _number(times.get(_ELAPSED))
    ts = round(start * 1000) if start is not None and 0 <= start < _MAX_US else None
    dur = round(elapsed * 1e6) if elapsed is not None and 0 <= elapsed < _MAX_US / 1e3 else None
    return int(step.group(1)) if step else NO_ROW, name, group, ts, dur


def _table(ops: pd.DataFrame, device: int) -> pd.DataFrame:
    """The op rows and one step row per step number spanning its ops."""
    names = ops["name"].to_numpy(dtype=object)
    frame = pd.DataFrame(
        {
            "ts": ops["ts"].to_numpy(),
            "dur": ops["dur"].to_numpy(),
            "name": names,
            "kind": Kind.COMMUNICATION.value,
            "pid": "device",
            "tid": "communication",
            "device": device,
            "collective": [c.collective_and_bytes(n, None, None)[0] for n in names],
            "group": ops["group"].to_numpy(dtype=object),
            "core": c.HCCL_CORE,
        }
    )
    frame = pd.concat([frame, _steps(ops)], ignore_index=True)
    frame["device"] = frame["device"].fillna(NO_ROW).astype(np.int64)
    for col in ("name", "kind", "pid", "tid", "collective", "group", "core"):
        frame[col] = frame[col].fillna("").astype(str).astype("category")
    return frame


def _steps(ops: pd.DataFrame) -> pd.DataFrame:
    """One step marker per step key, spanning its ops (the file records no step times)."""
    stepped = ops[ops["step"] != NO_ROW].assign(end=ops["ts"] + ops["dur"]).groupby("step")
    start = stepped["ts"].min()
    return pd.DataFrame(
        {
            "ts": start.to_numpy(),
            "dur": (stepped["end"].max() - start).to_numpy(),
            "name": [f"{c.STEP_PREFIX}{s}" for s in start.index],
            "kind": Kind.STEP.value,
            "pid": "steps",
            "tid": f"{COMMUNICATION_FILE} steps",
        }
    )


def groups(folder: Path) -> dict[str, str]:
    """Group of each communication op name in the folder's communication.json ({} when absent or unreadable)."""
    file = folder / COMMUNICATION_FILE
    if not file.is_file():
        return {}
    try:
        data = _load(file)
    except TraceError:
        return {}
    keys = [str(k) for kinds in _object(data).values() for ops in _object(kinds).values() for k in _object(ops)]
    return dict(k.partition("@")[::2] for k in keys if "@" in k)


def _device(folder: Path) -> int:
    """The rank's device: step_trace_time.csv's Device_id in the folder (NO_ROW when not recorded)."""
    csv = folder / _STEP_TRACE
    if not csv.is_file():
        return NO_ROW
    try:
        table = c.read_csv(csv)
    except TraceError:
        return NO_ROW
    return c.int_or_none(table["Device_id"].iloc[0]) if "Device_id" in table and len(table) else NO_ROW


def _load(file: Path):
    try:
        return json.loads(file.read_bytes())
    except (OSError, ValueError, RecursionError) as e:
        raise TraceError(file, f"is not readable JSON ({type(e).__name__}: {e})") from None


def _object(value) -> dict:
    return value if isinstance(value, dict) else {}


def _number(value) -> float | None:
    """A JSON number as a float; None for anything else (NaN included)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or value != value:
        return None
    return float(value)
