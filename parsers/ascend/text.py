"""torch_npu text output (trace_view.json + CSVs) and msprof text export (msprof_*.json + op_summary_*.csv).

The trace JSON is a bare Chrome-trace array whose lanes are named by ``process_name`` metadata:
Python (framework ops), CANN (runtime calls), Ascend Hardware (device tasks), HCCL (collectives and
their tasks), Overlap Analysis (the profiler's own compute/communication intervals). kernel_details.csv
(≡ op_summary) adds each kernel's core type and input shapes; where the trace is missing the CSV alone
gives the device work.
"""

from __future__ import annotations

import re
from pathlib import Path

import msgspec
import numpy as np
import pandas as pd

from parsers.ascend import common as c
from traceanalyzer.errors import TraceError
from traceanalyzer.schema import NO_ROW, Kind

TRACE_NAMES = ("trace_view.json",)
TRACE_GLOB = "msprof_*.json"
KERNEL_NAMES = ("kernel_details.csv",)
KERNEL_GLOB = "op_summary_*.csv"
MEMORY_NAMES = ("memory_record.csv",)
MEMORY_GLOB = "memory_record_*.csv"
BLOCK_NAMES = ("operator_memory.csv",)
BLOCK_GLOB = "operator_memory_*.csv"
MODULE_NAMES = ("npu_module_mem.csv",)
MODULE_GLOB = "npu_module_mem_*.csv"
_FLOW_CAT = "HostToDevice"
_QUEUE_FLOW_CAT = "async_task_queue"
"""Flows ``enqueue_to_dequeue``: ``Enqueue`` (Python thread, inside the op) → ``Dequeue@<op>`` (task-queue thread)."""
_MEMORY_COMPONENT = "PTA"
"""memory_record rows of the framework caching allocator (the analogue of Kineto's [memory] events)."""


class Event(msgspec.Struct, gc=False):
    """One trace_view.json event, as written (``ts`` is a string of µs on the epoch)."""

    ph: str = ""
    name: str = ""
    pid: int | str = 0
    tid: int | str = 0
    ts: str | float | int = ""
    dur: float = 0.0
    cat: str | None = None
    id: int | str | None = None
    args: dict | None = None


def parse(path: Path) -> tuple[pd.DataFrame, pd.DataFrame, c.TraceMeta]:
    """Parse one rank's text output (an output folder, or a trace / kernel CSV file) without links."""
    folder = path if path.is_dir() else path.parent
    trace = path if path.is_file() and path.suffix == ".json" else _first(folder, TRACE_NAMES, TRACE_GLOB)
    kernels_csv = _first(folder, KERNEL_NAMES, KERNEL_GLOB)
    if path.is_file() and path.suffix == ".csv":
        kernels_csv = path
    warnings: list[str] = []
    kernels = c.kernel_details(kernels_csv) if kernels_csv else None
    if trace is not None:
        events = _trace_events(trace, kernels, warnings)
    elif kernels is not None:
        warnings.append(
            f"{folder}: no trace_view.json / msprof_*.json; device work and steps come from {kernels_csv.name}"
        )
        events = _csv_events(kernels)
    else:
        raise TraceError(path, "holds no Ascend trace (trace_view.json, msprof_*.json, kernel_details.csv, op_summary)")
    if kernels is None and trace is not None and trace.name in TRACE_NAMES:
        warnings.append(f"{folder}: no kernel_details.csv; core types come from the trace's task types")
    memory = c.block_memory(events, _blocks(folder, warnings), _memory(folder, warnings))
    run = _run_dir(folder)
    info = c.profiler_info(run)
    fmt = "torch_npu-text" if (trace or kernels_csv).name in TRACE_NAMES + KERNEL_NAMES else "msprof-text"
    meta = c.make_meta(path, events, fmt, c.rank_from(info, path), info, warnings)
    meta.extra["module_memory"] = _modules(folder)
    return events, memory, meta


def _first(folder: Path, names: tuple[str, ...], pattern: str) -> Path | None:
    for name in names:
        if (folder / name).is_file():
            return folder / name
    found = sorted(folder.glob(pattern))
    return found[0] if found else None


def _run_dir(folder: Path) -> Path | None:
    """The ``*_ascend_pt`` folder above an output folder (where profiler_info lives)."""
    return folder.parent if folder.name == "ASCEND_PROFILER_OUTPUT" else None


def _decode(trace: Path) -> list[Event]:
    try:
        data = trace.read_bytes()
    except OSError as e:
        raise TraceError(trace, f"cannot be read ({e.strerror})") from None
    if not data.strip():
        raise TraceError(trace, "is empty")
    try:
        events = msgspec.json.decode(data, type=list[Event])
    except msgspec.ValidationError as e:
        raise TraceError(trace, f"is JSON but not an Ascend trace event array ({e})") from None
    except msgspec.DecodeError as e:
        raise TraceError(
            trace,
            f"is not valid JSON ({e}); old torch_npu versions (e.g. 2.1.0.post20240112) wrote broken "
            "trace_view.json files: upgrade torch_npu and re-run its offline analysis",
        ) from None
    if not events:
        raise TraceError(trace, "has an empty event array (no events to analyze)")
    return events


class _Lanes:
    """Lane names from metadata events, keyed by pid and (pid, tid)."""

    def __init__(self, events: list[Event]) -> None:
        self.process: dict = {}
        self.thread: dict = {}
        self.labels: dict = {}
        for e in events:
            if e.ph != "M" or not e.args:
                continue
            if e.name == "process_name":
                self.process[e.pid] = str(e.args.get("name", ""))
            elif e.name == "thread_name":
                self.thread[(e.pid, e.tid)] = str(e.args.get("name", ""))
            elif e.name == "process_labels":
                self.labels[e.pid] = str(e.args.get("labels", ""))
        hosts = [pid for pid, name in self.process.items() if name == c.PYTHON_LANE]
        self.host_pid = hosts[0] if hosts else None

    def device(self, pid) -> int:
        """Device index from an 'NPU 1' label; 0 when the label names none."""
        found = c.device_of(self.labels.get(pid, ""))
        return found if found != NO_ROW else 0


class _Rows:
    """Column lists of the event table, appended one row at a time."""

    COLUMNS = ("ts", "dur", "name", "kind", "cat", "pid", "tid", "device", "stream", "correlation", "bytes")
    COLUMNS += ("collective", "group", "core", "input_dims", "input_types")

    def __init__(self) -> None:
        self.cols: dict[str, list] = {k: [] for k in self.COLUMNS}
        self.keys: list[tuple] = []

    def add(self, e: Event, key: tuple, **values) -> None:
        values.setdefault("name", e.name)
        values.setdefault("dur", e.dur)
        for k in self.COLUMNS:
            self.cols[k].append(values.get(k, _DEFAULTS[k]))
        self.keys.append(key)


_DEFAULTS = {k: "" for k in _Rows.COLUMNS} | {k: NO_ROW for k in ("device", "stream", "correlation", "bytes")}
_DEFAULTS["ts"] = ""


def _trace_events(trace: Path, kernels: pd.DataFrame | None, warnings: list[str]) -> pd.DataFrame:
    events = _decode(trace)
    lanes = _Lanes(events)
    if not any(name in c.DEVICE_LANES | {c.PYTHON_LANE} for name in lanes.process.values()):
        raise TraceError(trace, "is a JSON event array without Python or Ascend Hardware lanes; not an Ascend trace")
    rows = _Rows()
    for e in events:
        if e.ph == "X":
            _add(rows, e, lanes)
    frame = _frame(rows)
    _bind_flows(frame, rows.keys, events)
    frame = _drop_task_twins(frame)
    frame["caller"] = _callers(frame, events)
    if kernels is not None:
        _join_kernels(frame, kernels, warnings)
    return frame


def _add(rows: _Rows, e: Event, lanes: _Lanes) -> None:
    lane = lanes.process.get(e.pid, "")
    args = e.args or {}
    key = (e.pid, e.tid, str(e.ts).strip())
    host = {"pid": str(e.pid), "tid": str(e.tid), "ts": e.ts, "cat": e.cat or ""}
    if lane == c.PYTHON_LANE:
        rows.add(e, key, kind=_python_kind(e), **host)
    elif lane == c.GC_LANE:
        rows.add(e, key, kind=Kind.ANNOTATION.value, **host)
    elif lane in c.HOST_API_LANES:
        pid = lanes.host_pid if lanes.host_pid is not None else e.pid
        tid = args.get("Thread Id", e.tid)
        rows.add(e, key, kind=Kind.RUNTIME.value, correlation=c.int_or_none(args.get("connection_id")), ts=e.ts,
                 pid=str(pid), tid=str(tid), cat=str(args.get("level", lane)))  # fmt: skip
    elif lane in c.DEVICE_LANES:
        rows.add(e, key, **_device_task(e, args, lanes))
    elif lane in c.COMM_LANES:
        rows.add(e, key, **_comm(e, args, lanes))
    elif lane == c.OVERLAP_LANE:
        name = lanes.thread.get((e.pid, e.tid), e.name)
        rows.add(e, key, kind=Kind.OVERLAP_LANE.value, name=name, ts=e.ts, pid=str(e.pid), tid=str(e.tid), cat=lane)


def _python_kind(e: Event) -> str:
    cat = (e.cat or "").lower()
    if e.name.startswith(c.STEP_PREFIX):
        return Kind.STEP.value
    if cat == "python_function":
        return Kind.PYTHON.value
    if cat == "cpu_op":
        return Kind.CPU_OP.value
    if cat == c.DEQUEUE_CAT:
        return Kind.RUNTIME.value
    return Kind.ANNOTATION.value


def _device_task(e: Event, args: dict, lanes: _Lanes) -> dict:
    task = str(args.get("Task Type", ""))
    if task in c.COMPUTE_CORES:
        kind, core = Kind.KERNEL, task
    elif task in c.COMM_TASK_TYPES:
        kind, core = Kind.COMM_TASK, ""
    else:
        kind, core = c.TASK_KIND.get(task, Kind.KERNEL), ""
    stream = args.get("Physic Stream Id", args.get("Stream Id", e.tid))
    size = args.get("data size(Byte)", args.get("size(B)"))
    return {
        "kind": kind.value,
        "core": core,
        "cat": task,
        "ts": e.ts,
        "pid": str(e.pid),
        "tid": str(e.tid),
        "device": lanes.device(e.pid),
        "stream": c.int_or_none(stream),
        "correlation": c.int_or_none(args.get("connection_id")),
        "bytes": c.int_or_none(size),
    }


def _comm(e: Event, args: dict, lanes: _Lanes) -> dict:
    thread = lanes.thread.get((e.pid, e.tid), "")
    common = {"ts": e.ts, "pid": str(e.pid), "tid": str(e.tid), "device": lanes.device(e.pid)}
    group = c.COMM_OP_THREAD.match(thread)
    if group:
        collective, size = c.collective_and_bytes(e.name, args.get("data_type"), args.get("count"))
        return common | {
            "kind": Kind.COMMUNICATION.value,
            "cat": str(args.get("alg_type", "")),
            "correlation": c.int_or_none(args.get("connection_id")),
            "collective": collective,
            "group": group.group(1),
            "bytes": size,
            "core": c.HCCL_CORE,
        }
    return common | {
        "kind": Kind.COMM_TASK.value,
        "core": c.HCCL_CORE,
        "name": str(args.get("task type") or e.name),
        "cat": str(args.get("transport type", "")),
        "stream": c.int_or_none(args.get("stream id")),
        "bytes": c.int_or_none(args.get("size(Byte)")),
        "correlation": NO_ROW,
    }


def _frame(rows: _Rows) -> pd.DataFrame:
    cols = rows.cols
    frame = pd.DataFrame(
        {
            "ts": c.us_text_to_ns(cols["ts"]),
            "dur": np.maximum(c.us_float_to_ns(cols["dur"]), 0),
            **{k: np.asarray(cols[k], dtype=np.int64) for k in ("device", "stream", "correlation", "bytes")},
        }
    )
    for k in ("name", "kind", "cat", "pid", "tid", "collective", "group", "core", "input_dims", "input_types"):
        frame[k] = pd.Categorical(cols[k])
    return frame


def _bind_flows(frame: pd.DataFrame, keys: list[tuple], events: list[Event]) -> None:
    """Rows a HostToDevice flow starts or ends on (or inside) take its id; older traces' connection ids don't pair."""
    lanes: dict[tuple, list[int]] = {}
    for i, key in enumerate(keys):
        lanes.setdefault(key[:2], []).append(i)
    starts = frame["ts"].to_numpy()
    ends = starts + frame["dur"].to_numpy()
    order = {lane: np.asarray(sorted(rows, key=lambda r: starts[r]), dtype=np.int64) for lane, rows in lanes.items()}
    corr = frame["correlation"].to_numpy().copy()
    for e in events:
        if e.cat != _FLOW_CAT or e.ph not in ("s", "f"):
            continue
        rows = order.get((e.pid, e.tid))
        flow_id = c.int_or_none(e.id)
        if rows is None or not 0 <= flow_id < 2**63:
            continue
        t = int(c.us_text_to_ns([e.ts])[0])
        j = int(np.searchsorted(starts[rows], t, side="right")) - 1
        if j >= 0 and ends[rows[j]] >= t:
            corr[rows[j]] = flow_id
    frame["correlation"] = corr


def _callers(frame: pd.DataFrame, events: list[Event]) -> np.ndarray:
    """Per row, the row a task-queue flow starts on when the flow ends on it (``Dequeue@op`` ← its ``Enqueue``)."""
    ends: dict = {}
    for e in events:
        if e.cat == _QUEUE_FLOW_CAT and e.ph in ("s", "f"):
            ends.setdefault(e.id, {})[e.ph] = e
    pairs = [(f["s"], f["f"]) for f in ends.values() if "s" in f and "f" in f]
    out = np.full(len(frame), NO_ROW, dtype=np.int64)
    if not pairs:
        return out
    src, dst = _slices_at(frame, [s for s, _ in pairs]), _slices_at(frame, [f for _, f in pairs])
    ok = (src != NO_ROW) & (dst != NO_ROW)
    out[dst[ok]] = src[ok]
    return out


def _slices_at(frame: pd.DataFrame, points: list[Event]) -> np.ndarray:
    """Row of the slice on each point's (pid, tid) lane that starts last at or before it and still contains it."""
    lanes = frame.groupby(["pid", "tid"], observed=True, sort=False).indices
    starts = frame["ts"].to_numpy()
    ends = starts + frame["dur"].to_numpy()
    times = c.us_text_to_ns([e.ts for e in points])
    keys = np.array([f"{e.pid}\0{e.tid}" for e in points])
    out = np.full(len(points), NO_ROW, dtype=np.int64)
    for key in set(keys.tolist()):
        rows = lanes.get(tuple(key.split("\0")))
        if rows is None:
            continue
        rows = rows[np.argsort(starts[rows], kind="stable")]
        mine = np.flatnonzero(keys == key)
        found = rows[np.maximum(np.searchsorted(starts[rows], times[mine], side="right") - 1, 0)]
        ok = (starts[found] <= times[mine]) & (ends[found] >= times[mine])
        out[mine[ok]] = found[ok]
    return out


def _drop_task_twins(frame: pd.DataFrame) -> pd.DataFrame:
    """A collective's tasks appear on the HCCL lane and again on an Ascend Hardware stream: keep one copy."""
    task = frame["kind"] == Kind.COMM_TASK.value
    hccl = task & (frame["core"] == c.HCCL_CORE)
    hccl_keys = set(zip(frame.loc[hccl, "stream"], frame.loc[hccl, "ts"], strict=True))
    device_task = task & ~hccl
    if not hccl_keys or not device_task.any():
        return frame
    twin = [k in hccl_keys for k in zip(frame.loc[device_task, "stream"], frame.loc[device_task, "ts"], strict=True)]
    drop = frame.index[device_task][np.asarray(twin, dtype=bool)]
    return frame.drop(index=drop).reset_index(drop=True)


def _join_kernels(frame: pd.DataFrame, kernels: pd.DataFrame, warnings: list[str]) -> None:
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
    for col, source in (("input_dims", "Input Shapes"), ("input_types", "Input Data Types")):
        if source in matched:
            values = frame[col].astype(str).to_numpy().copy()
            cells = matched[source].to_numpy()
            values[hit] = [c.shapes_json(v) for v in cells] if col == "input_dims" else cells
            frame[col] = pd.Categorical(values)
    missing = len(compute) - int(hit.sum())
    if missing > 0:
        warnings.append(f"{missing} kernel_details rows have no matching task in the trace")


def _csv_events(kernels: pd.DataFrame) -> pd.DataFrame:
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
            "cat": kernels.get("Type", pd.Series("", index=kernels.index)).to_numpy(),
            "pid": "device",
            "tid": kernels.get("Stream ID", pd.Series("", index=kernels.index)).to_numpy(),
            "device": [c.device_of(v) for v in kernels.get("Device_id", pd.Series("0", index=kernels.index))],
            "stream": [c.int_or_none(v) for v in kernels.get("Stream ID", pd.Series("", index=kernels.index))],
            "core": np.where(comm, c.HCCL_CORE, kernels["core"].to_numpy()),
            "collective": collective,
            "input_dims": [c.shapes_json(v) for v in kernels.get("Input Shapes", pd.Series("", index=kernels.index))],
            "input_types": kernels.get("Input Data Types", pd.Series("", index=kernels.index)).to_numpy(),
        }
    )
    frame = pd.concat([frame, _csv_steps(kernels)], ignore_index=True)
    for col in ("device", "stream"):
        frame[col] = frame[col].fillna(NO_ROW).astype(np.int64)
    for col in ("name", "kind", "cat", "pid", "tid", "core", "collective", "input_dims", "input_types"):
        frame[col] = frame[col].fillna("").astype(str).astype("category")
    return frame


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


def _memory(folder: Path, warnings: list[str]) -> pd.DataFrame:
    path = _first(folder, MEMORY_NAMES, MEMORY_GLOB)
    if path is None:
        return c.empty_memory()
    table = c.read_csv(path)
    alloc_col = _column(table, r"^Total Allocated\(")
    reserved_col = _column(table, r"^Total Reserved\(")
    ts_col = _column(table, r"^Timestamp\(")
    if alloc_col is None or ts_col is None:
        warnings.append(f"{path.name}: no Timestamp/Total Allocated columns; memory not read")
        return c.empty_memory()
    if "Component" in table:
        table = table[table["Component"] == _MEMORY_COMPONENT]
    device_col = "Device Type" if "Device Type" in table else ("Device" if "Device" in table else None)
    device = [c.device_of(v) for v in table[device_col]] if device_col else np.zeros(len(table), dtype=np.int64)
    return c.memory_frame(
        c.us_text_to_ns(table[ts_col].to_numpy()),
        device,
        _scaled(table, alloc_col),
        _scaled(table, reserved_col) if reserved_col else np.full(len(table), NO_ROW),
    )


def _blocks(folder: Path, warnings: list[str]) -> pd.DataFrame:
    """operator_memory.csv (torch_npu: MB/KB; raw msprof: KB, Duration instead of Release Time) as c.BLOCK_COLUMNS."""
    path = _first(folder, BLOCK_NAMES, BLOCK_GLOB)
    table = c.read_csv(path) if path is not None else pd.DataFrame()
    size_col, alloc_col = _column(table, r"^Size\("), _column(table, r"^Allocation Time\(")
    if path is None or size_col is None or alloc_col is None or "Name" not in table:
        if path is not None:
            warnings.append(f"{path.name}: no Name/Size/Allocation Time columns; allocations not read")
        return pd.DataFrame(columns=list(c.BLOCK_COLUMNS))
    alloc = c.us_text_to_ns(table[alloc_col].to_numpy())
    device_col = _column(table, r"^Device( Type)?$")
    out = {
        "name": table["Name"].to_numpy(),
        "size": _scaled(table, size_col),
        "alloc_ts": alloc,
        "release_ts": _release(table, alloc),
        "device": [c.device_of(v) for v in table[device_col]] if device_col else np.zeros(len(table), dtype=np.int64),
    }
    for when, label in (("alloc", "Allocation"), ("release", "Release")):
        for total in ("Allocated", "Reserved"):
            col = _column(table, rf"^{label} Total {total}\(")
            out[f"{when}_{total.lower()}"] = _scaled(table, col) if col else np.full(len(table), NO_ROW)
    return pd.DataFrame(out)


def _release(table: pd.DataFrame, alloc: np.ndarray) -> np.ndarray:
    """Release times in ns: the Release Time column, else (raw msprof) allocation time + Duration; NO_ROW if never."""
    release_col, duration_col = _column(table, r"^Release Time\("), _column(table, r"^Duration\(")
    if release_col is not None:
        return c.us_text_to_ns(table[release_col].to_numpy())
    if duration_col is None:
        return np.full(len(table), NO_ROW, dtype=np.int64)
    never = table[duration_col].isin(c.MISSING).to_numpy() | (alloc == NO_ROW)
    return np.where(never, NO_ROW, alloc + c.us_float_to_ns(table[duration_col].to_numpy()))


def _modules(folder: Path) -> pd.DataFrame:
    """npu_module_mem.csv: reserved bytes per CANN module over time (torch_npu MB, raw msprof KB)."""
    path = _first(folder, MODULE_NAMES, MODULE_GLOB)
    table = c.read_csv(path) if path is not None else pd.DataFrame()
    ts_col, reserved_col = _column(table, r"^Timestamp\("), _column(table, r"^Total Reserved\(")
    if ts_col is None or reserved_col is None or "Component" not in table:
        return c.module_memory([], [], [], [])
    device_col = _column(table, r"^Device( Type)?$")
    device = [c.device_of(v) for v in table[device_col]] if device_col else np.zeros(len(table), dtype=np.int64)
    return c.module_memory(
        c.us_text_to_ns(table[ts_col].to_numpy()), device, table["Component"], _scaled(table, reserved_col)
    )


def _column(table: pd.DataFrame, pattern: str) -> str | None:
    return next((col for col in table.columns if re.match(pattern, col)), None)


def _scaled(table: pd.DataFrame, col: str) -> np.ndarray:
    values = pd.to_numeric(table[col], errors="coerce").to_numpy(float) * c.unit_bytes(col)
    return np.where(np.isnan(values), NO_ROW, np.rint(values)).astype(np.int64)
