"""torch_npu text output (trace_view.json + CSVs) and msprof text export (msprof_*.json + op_summary_*.csv).

The trace JSON is a bare Chrome-trace array whose lanes are named by ``process_name`` metadata:
Python (framework ops), CANN (runtime calls), Ascend Hardware (device tasks), HCCL (collectives and
their tasks), Overlap Analysis (the profiler's own compute/communication intervals). kernel_details.csv
(≡ op_summary) adds each kernel's core type and input shapes; where the trace is missing the CSV alone
gives the device work.
"""

from __future__ import annotations

import io
import math
import os
import re
import zlib
from dataclasses import dataclass
from pathlib import Path

import msgspec
import numpy as np
import pandas as pd
from traceanalyzer.parsers.ascend import common as c
from traceanalyzer.parsers.columns import ABSENT, Coded, Columns, Field, Interner, Read, Reader, texts_in
from traceanalyzer.parsers.jsonstream import Stream, map_chunks, open_binary, read_all, worker_count

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


class _Event(msgspec.Struct, gc=False):
    """The types a trace_view.json event's fields must have: checked to explain a file the column reader rejects."""

    ph: str = ""
    name: str = ""
    pid: int | str = 0
    tid: int | str = 0
    ts: str | float | int = ""
    dur: float = 0.0
    cat: str | None = None
    id: int | str | None = None
    args: dict | None = None


_COMPLETE = "X"
_METADATA = "M"
_FLOW_START = "s"
_FLOW_PHASES = frozenset({_FLOW_START, "f"})
_BOUND_FLOW_CATS = frozenset({_FLOW_CAT, _QUEUE_FLOW_CAT})
_PROCESS_NAME = "process_name"
_THREAD_NAME = "thread_name"
_PROCESS_LABELS = "process_labels"

_RAW_ARGS = {
    "arg_name": "name",
    "labels": "labels",
    "thread_id": "Thread Id",
    "level": "level",
    "task_type": "Task Type",
    "physic_stream": "Physic Stream Id",
    "stream_id": "Stream Id",
    "data_size": "data size(Byte)",
    "size_b": "size(B)",
    "data_type": "data_type",
    "count": "count",
    "alg_type": "alg_type",
    "task_name": "task type",
    "transport": "transport type",
    "hccl_stream": "stream id",
    "hccl_size": "size(Byte)",
}
"""args the rows use, by field name: read as JSON text (any type is valid), decoded once per distinct value."""

FIELDS = (
    Field("ph", ("ph",), Read.TEXT, default=""),
    Field("name", ("name",), Read.TEXT, default=""),
    Field("pid", ("pid",), Read.ID, default="0"),
    Field("tid", ("tid",), Read.ID, default="0"),
    Field("ts", ("ts",), Read.EXACT_NS),
    Field("dur", ("dur",), Read.RAW),
    Field("cat", ("cat",), Read.TEXT, nullable=True),
    Field("id", ("id",), Read.ID, nullable=True),
    Field("args", ("args",), Read.OBJECT, nullable=True),
    Field("connection_id", ("args", "connection_id"), Read.INT, nullable=True),
    *(Field(name, ("args", key), Read.RAW) for name, key in _RAW_ARGS.items()),
)
"""What the parser reads of each trace event (``ts``: µs on the epoch, often a string, kept to the ns digit)."""

_NUMBERS = frozenset(f.name for f in FIELDS if f.read in (Read.EXACT_NS, Read.INT, Read.OBJECT)) | {"dur"}
"""Fields kept as int64 arrays; ``dur`` is read as text and made ns per chunk, as float µs rounded (``rint(v * 1000)``,
which the NS read does not match at half-ns ties)."""
_NUMBER_START = frozenset("-0123456789")
_SENTINEL_INTS = [int(v) for v in c.MISSING if v.isdigit() and int(v) < 2**63]
"""Integer args values that mean 'not recorded' (UINT32 max)."""
_PEEK_BYTES = 4096


class _Missing:
    """An args key the event does not have (``null`` decodes to None, which is a value)."""


_MISSING = _Missing()


def _trace_events(trace: Path, kernels: pd.DataFrame | None, warnings: list[str]) -> pd.DataFrame:
    """The event table of a trace file: rows by lane, flows bound, task twins dropped, kernel_details joined."""
    ev = _read(trace, warnings)
    lanes = _Lanes(ev)
    if not any(name in c.DEVICE_LANES | {c.PYTHON_LANE} for name in lanes.process.values()):
        raise TraceError(trace, "is a JSON event array without Python or Ascend Hardware lanes; not an Ascend trace")
    src = np.flatnonzero(ev.among("ph", {_COMPLETE}) & lanes.read(ev))
    frame = _frame(ev, src, lanes)
    _bind_flows(frame, src, ev)
    frame = _drop_task_twins(frame)
    frame["caller"] = _callers(frame, ev)
    if kernels is not None:
        _join_kernels(frame, kernels, warnings)
    return frame


# ---------------------------------------------------------------- reading the trace into columns


def _read(trace: Path, warnings: list[str]) -> _Events:
    """The trace's complete, metadata and bound flow events; the TraceErrors of a file that is not such a trace."""
    first, last = _edges(trace)
    if not first:
        raise TraceError(trace, "is empty")
    if first != b"[" or last not in (b"]", None):
        _explain(trace)
    stream = Stream()
    try:
        read = Reader(FIELDS)
        chunks = map_chunks(trace, read, stream, _kept, worker_count(trace) if read.native else 1, threads=True)
    except TraceError:
        _explain(trace)
        raise
    if stream.truncated or any(chunk.wrong for chunk in chunks):
        _explain(trace)
    if stream.skipped:
        _explain(trace)
        warnings.append(f"{trace}: skipped {stream.skipped:,} events whose fields have the wrong type")
    if not stream.events:
        raise TraceError(trace, "has an empty event array (no events to analyze)")
    warnings.extend(stream.warnings)
    return _Events([chunk.values for chunk in chunks])


def _edges(trace: Path) -> tuple[bytes, bytes | None]:
    """The first byte of the (decompressed) file that is not blank (b'' if none) and, of a plain file, the last one
    (None for a gzip file: parsers.jsonstream reads it to its end and says if it ends early)."""
    try:
        with open_binary(trace) as f:
            first = next((block.lstrip()[:1] for block in iter(lambda: f.read(_PEEK_BYTES), b"") if block.strip()), b"")
            if not isinstance(f, io.BufferedReader):
                return first, None
            f.seek(max(0, f.seek(0, os.SEEK_END) - _PEEK_BYTES))
            return first, f.read().rstrip()[-1:]
    except (OSError, EOFError, zlib.error) as e:
        raise TraceError(trace, f"cannot be read ({getattr(e, 'strerror', None) or e})") from None


def _explain(trace: Path) -> None:
    """Raise the TraceError that says why the file is not an event array, if msgspec finds a reason."""
    data = read_all(trace)
    try:
        msgspec.json.decode(data, type=list[_Event])
    except msgspec.ValidationError as e:
        raise TraceError(trace, f"is JSON but not an Ascend trace event array ({e})") from None
    except msgspec.DecodeError as e:
        raise TraceError(
            trace,
            f"is not valid JSON ({e}); old torch_npu versions (e.g. 2.1.0.post20240112) wrote broken "
            "trace_view.json files: upgrade torch_npu and re-run its offline analysis",
        ) from None


@dataclass
class _Chunk:
    """A chunk's kept events, and how many have a ``dur`` that is not a number (the file is then not a trace)."""

    values: dict[str, np.ndarray | Coded]
    wrong: int


def _kept(cols: Columns) -> _Chunk:
    """A chunk's complete and metadata events and the flows rows are bound by (counters and the rest dropped)."""
    v = cols.values
    phase = texts_in(v["ph"], {_COMPLETE, _METADATA})
    keep = phase | (texts_in(v["ph"], _FLOW_PHASES) & texts_in(v["cat"], _BOUND_FLOW_CATS))
    codes, texts = v["dur"]
    number = np.array([t[:1] in _NUMBER_START for t in texts] + [True], dtype=bool)[codes]
    v["dur"] = np.append(c.us_float_to_ns(texts), 0)[codes]  # absent (code -1) is 0
    kept = {k: x[keep] if k in _NUMBERS else (x[0][keep], x[1]) for k, x in v.items()}
    return _Chunk(kept, int((~number).sum()))


class _Events:
    """Kept events of the whole file: numeric fields as arrays, text fields as codes into their distinct values.

    Code 0 is '' (absent); an args value is its JSON text.
    """

    def __init__(self, parts: list[dict[str, np.ndarray | Coded]]) -> None:
        interners = {f.name: Interner() for f in FIELDS if f.name not in _NUMBERS}
        self.numbers = {k: _concat([p[k] for p in parts], np.int64) for k in _NUMBERS}
        self.codes = {k: _concat([i.merge(p[k]) for p in parts], np.int32) for k, i in interners.items()}
        self.values = {k: list(i.codes) for k, i in interners.items()}

    def among(self, key: str, texts: set[str] | frozenset[str]) -> np.ndarray:
        """Per event, whether the text field is one of ``texts``."""
        return np.array([v in texts for v in self.values[key]], dtype=bool)[self.codes[key]]

    def text(self, key: str, at: np.ndarray) -> np.ndarray:
        """The text field of the events at ``at`` (an object array)."""
        return np.asarray(self.values[key], dtype=object)[self.codes[key][at]]

    def value(self, key: str, code: int):
        """A distinct value as the old per-event code saw it: args decoded from JSON (_MISSING where absent)."""
        text = self.values[key][code]
        if key not in _RAW_ARGS:
            return text
        return msgspec.json.decode(text) if text else _MISSING

    def combine(self, at: np.ndarray, keys: tuple[str, ...], fn, dtypes: tuple) -> tuple[np.ndarray, ...]:
        """``fn`` of the ``keys`` values of each event at ``at`` (a tuple of outputs), called once per distinct
        combination of values."""
        if not len(at):
            return tuple(np.empty(0, dtype=d) for d in dtypes)
        inverse, first = _combinations([self.codes[k][at] for k in keys], [len(self.values[k]) for k in keys])
        outputs = [fn(*(self.value(k, self.codes[k][at[i]]) for k in keys)) for i in first]
        return tuple(np.array(col, dtype=d)[inverse] for col, d in zip(zip(*outputs, strict=True), dtypes, strict=True))

    def lane_keys(self, at: np.ndarray) -> np.ndarray:
        """One int per (pid, tid) of the events at ``at``."""
        return self.codes["pid"][at].astype(np.int64) * len(self.values["tid"]) + self.codes["tid"][at]


def _concat(parts: list[np.ndarray], dtype) -> np.ndarray:
    return np.concatenate(parts) if parts else np.empty(0, dtype=dtype)


def _combinations(codes: list[np.ndarray], sizes: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """Per row, the number of its combination of codes; and the first row of each combination."""
    if math.prod(sizes) < 2**63:
        key = np.zeros(len(codes[0]), dtype=np.int64)
        for part, size in zip(codes, sizes, strict=True):
            key = key * size + part
        inverse = pd.factorize(key)[0]
    else:
        inverse = np.unique(np.stack(codes, axis=1), axis=0, return_inverse=True)[1].ravel()
    return inverse, np.unique(inverse, return_index=True)[1]


def _given(*values):
    """The first value that is not _MISSING (the last one always counts)."""
    return next((v for v in values if v is not _MISSING), values[-1])


# ---------------------------------------------------------------- lanes and rows


class _Lanes:
    """Lane names from metadata events, keyed by pid code and (pid, tid) lane key."""

    def __init__(self, ev: _Events) -> None:
        self.process: dict[int, str] = {}
        self.thread: dict[int, str] = {}
        self.labels: dict[int, str] = {}
        self.pids = len(ev.values["pid"])
        for i in np.flatnonzero(ev.among("ph", {_METADATA}) & (ev.numbers["args"] == 1)):
            name, pid = ev.values["name"][ev.codes["name"][i]], int(ev.codes["pid"][i])
            if name == _PROCESS_NAME:
                self.process[pid] = _arg_text(ev, "arg_name", i)
            elif name == _THREAD_NAME:
                self.thread[int(ev.lane_keys(i))] = _arg_text(ev, "arg_name", i)
            elif name == _PROCESS_LABELS:
                self.labels[pid] = _arg_text(ev, "labels", i)
        hosts = [pid for pid, name in self.process.items() if name == c.PYTHON_LANE]
        self.host_pid = ev.values["pid"][hosts[0]] if hosts else None

    def read(self, ev: _Events) -> np.ndarray:
        """Per event, whether its lane is one whose events become rows."""
        return np.array([self.process.get(p, "") in _LANE_ROWS for p in range(self.pids)], dtype=bool)[ev.codes["pid"]]

    def pids_of(self) -> dict[str, list[int]]:
        """The pid codes of each lane name."""
        out: dict[str, list[int]] = {}
        for pid, name in self.process.items():
            out.setdefault(name, []).append(pid)
        return out

    def device(self, ev: _Events, at: np.ndarray) -> np.ndarray:
        """Device index from each event's 'NPU 1' process label; 0 when the label names none."""
        found = np.array([c.device_of(self.labels.get(p, "")) for p in range(self.pids)], dtype=np.int64)
        return np.where(found != NO_ROW, found, 0)[ev.codes["pid"][at]]

    def threads(self, ev: _Events, at: np.ndarray, fn) -> np.ndarray:
        """``fn`` of the thread name of each event at ``at`` (of None where the thread has no name)."""
        known = pd.Index(list(self.thread), dtype=np.int64)
        table = np.array([fn(name) for name in [*self.thread.values(), None]] + [None], dtype=object)[:-1]
        return table[known.get_indexer(ev.lane_keys(at))]  # -1 (no name) takes the last entry


def _arg_text(ev: _Events, key: str, i: int) -> str:
    return str(_given(ev.value(key, ev.codes[key][i]), ""))


_TEXT_COLUMNS = ("name", "kind", "cat", "pid", "tid", "collective", "group", "core", "input_dims", "input_types")
_INT_COLUMNS = ("device", "stream", "correlation", "bytes")


def _blank(key: str, n: int) -> np.ndarray:
    """A column where no lane sets it: '' or NO_ROW."""
    return np.full(n, "", dtype=object) if key in _TEXT_COLUMNS else np.full(n, NO_ROW, dtype=np.int64)


def _frame(ev: _Events, src: np.ndarray, lanes: _Lanes) -> pd.DataFrame:
    """The event table rows of the complete events at ``src``, each filled as its lane says."""
    cols = {k: _blank(k, len(src)) for k in _TEXT_COLUMNS + _INT_COLUMNS}
    cols |= {k: ev.text(k, src) for k in ("name", "pid", "tid")}
    pid = ev.codes["pid"][src]
    for lane, pids in lanes.pids_of().items():
        mine = np.isin(pid, pids)
        if lane in _LANE_ROWS and mine.any():
            for k, values in _LANE_ROWS[lane](ev, src[mine], lanes, lane).items():
                cols[k][mine] = values
    ts, dur = ev.numbers["ts"][src], ev.numbers["dur"][src]
    frame = pd.DataFrame(
        {
            "ts": np.where(ts == ABSENT, NO_ROW, ts),
            "dur": np.maximum(dur, 0),
            **{k: cols[k] for k in _INT_COLUMNS},
        }
    )
    for k in _TEXT_COLUMNS:
        frame[k] = pd.Categorical(cols[k])
    return frame


def _python(ev: _Events, at: np.ndarray, lanes: _Lanes, lane: str) -> dict:
    (kind,) = ev.combine(at, ("name", "cat"), lambda name, cat: (_python_kind(name, cat),), (object,))
    return {"kind": kind, "cat": ev.text("cat", at)}


def _python_kind(name: str, cat: str) -> str:
    if name.startswith(c.STEP_PREFIX):
        return Kind.STEP.value
    return _PYTHON_KINDS.get(cat.lower(), Kind.ANNOTATION).value


_PYTHON_KINDS = {"python_function": Kind.PYTHON, "cpu_op": Kind.CPU_OP, c.DEQUEUE_CAT: Kind.RUNTIME}


def _gc(ev: _Events, at: np.ndarray, lanes: _Lanes, lane: str) -> dict:
    return {"kind": Kind.ANNOTATION.value, "cat": ev.text("cat", at)}


def _host_api(ev: _Events, at: np.ndarray, lanes: _Lanes, lane: str) -> dict:
    def tid_and_cat(thread, tid, level) -> tuple[str, str]:
        return str(_given(thread, tid)), str(_given(level, lane))

    tid, cat = ev.combine(at, ("thread_id", "tid", "level"), tid_and_cat, (object, object))
    pid = ev.text("pid", at) if lanes.host_pid is None else lanes.host_pid
    return {"kind": Kind.RUNTIME.value, "correlation": _connection(ev, at), "pid": pid, "tid": tid, "cat": cat}


def _connection(ev: _Events, at: np.ndarray) -> np.ndarray:
    """The connection_id arg (runtime↔device link); NO_ROW where absent or a 'not recorded' sentinel."""
    ids = ev.numbers["connection_id"][at]
    return np.where((ids == ABSENT) | np.isin(ids, _SENTINEL_INTS), NO_ROW, ids)


def _device_task(ev: _Events, at: np.ndarray, lanes: _Lanes, lane: str) -> dict:
    kind, core, task = ev.combine(at, ("task_type",), _task_kind, (object, object, object))
    (stream,) = ev.combine(at, ("physic_stream", "stream_id", "tid"), _int_of_first, (np.int64,))
    (size,) = ev.combine(at, ("data_size", "size_b"), _int_of_first, (np.int64,))
    return {
        "kind": kind,
        "core": core,
        "cat": task,
        "device": lanes.device(ev, at),
        "stream": stream,
        "correlation": _connection(ev, at),
        "bytes": size,
    }


def _task_kind(value) -> tuple[str, str, str]:
    """(kind, core, task type) of a device task from its Task Type arg."""
    task = str(_given(value, ""))
    if task in c.COMPUTE_CORES:
        return Kind.KERNEL.value, task, task
    if task in c.COMM_TASK_TYPES:
        return Kind.COMM_TASK.value, "", task
    return c.TASK_KIND.get(task, Kind.KERNEL).value, "", task


def _int_of_first(*values) -> tuple[int]:
    """The first present of the values as an int (NO_ROW for none or a sentinel)."""
    return (c.int_or_none(_given(*values, None)),)


def _comm(ev: _Events, at: np.ndarray, lanes: _Lanes, lane: str) -> dict:
    group = lanes.threads(ev, at, _group)
    op = np.not_equal(group, None)
    cols = {"name": ev.text("name", at), "core": c.HCCL_CORE, "device": lanes.device(ev, at)}
    cols |= {"kind": np.where(op, Kind.COMMUNICATION.value, Kind.COMM_TASK.value), "group": np.where(op, group, "")}
    for part, fill in ((op, _comm_ops), (~op, _comm_tasks)):
        for k, values in fill(ev, at[part]).items():
            cols.setdefault(k, _blank(k, len(at)))[part] = values
    return cols


def _group(thread: str | None) -> str | None:
    """The group of a thread of whole collectives (``Group {name} Communication``), None for other threads."""
    found = c.COMM_OP_THREAD.match(thread or "")
    return found.group(1) if found else None


def _comm_ops(ev: _Events, at: np.ndarray) -> dict:
    """Whole collectives: their algorithm, collective and message size."""

    def op(name: str, dtype, count, alg) -> tuple[str, int, str]:
        return *c.collective_and_bytes(name, _given(dtype, None), _given(count, None)), str(_given(alg, ""))

    keys = ("name", "data_type", "count", "alg_type")
    collective, size, cat = ev.combine(at, keys, op, (object, np.int64, object))
    return {"cat": cat, "correlation": _connection(ev, at), "collective": collective, "bytes": size}


def _comm_tasks(ev: _Events, at: np.ndarray) -> dict:
    """The tasks of collectives (threads ``Plane k``): task type, transport, stream and size."""

    def task(kind, name: str, transport, stream, size) -> tuple[str, str, int, int]:
        text = str(_given(kind, None) or name)
        return text, str(_given(transport, "")), c.int_or_none(_given(stream, None)), c.int_or_none(_given(size, None))

    keys = ("task_name", "name", "transport", "hccl_stream", "hccl_size")
    name, cat, stream, size = ev.combine(at, keys, task, (object, object, np.int64, np.int64))
    return {"name": name, "cat": cat, "stream": stream, "bytes": size}


def _overlap(ev: _Events, at: np.ndarray, lanes: _Lanes, lane: str) -> dict:
    thread = lanes.threads(ev, at, lambda name: name)
    name = np.where(np.not_equal(thread, None), thread, ev.text("name", at))
    return {"kind": Kind.OVERLAP_LANE.value, "name": name, "cat": lane}


_LANE_ROWS = {c.PYTHON_LANE: _python, c.GC_LANE: _gc, c.OVERLAP_LANE: _overlap}
_LANE_ROWS |= {lane: _host_api for lane in c.HOST_API_LANES} | {lane: _device_task for lane in c.DEVICE_LANES}
_LANE_ROWS |= {lane: _comm for lane in c.COMM_LANES}
"""How each lane's complete events become rows (events of other lanes do not)."""


# ---------------------------------------------------------------- links


def _bind_flows(frame: pd.DataFrame, src: np.ndarray, ev: _Events) -> None:
    """Rows a HostToDevice flow starts or ends on (or inside) take its id; older traces' connection ids don't pair."""
    flows = np.flatnonzero(ev.among("ph", _FLOW_PHASES) & ev.among("cat", {_FLOW_CAT}))
    ids = np.array([_flow_id(v) for v in ev.values["id"]], dtype=np.int64)[ev.codes["id"][flows]]
    found = _slices_at(frame, ev.lane_keys(src), ev.lane_keys(flows), _times(ev, flows))
    ok = (found != NO_ROW) & (ids != NO_ROW)
    corr = frame["correlation"].to_numpy().copy()
    _assign_last(corr, found[ok], ids[ok])
    frame["correlation"] = corr


def _flow_id(text: str) -> int:
    value = c.int_or_none(text)
    return value if 0 <= value < 2**63 else NO_ROW


def _times(ev: _Events, at: np.ndarray) -> np.ndarray:
    ts = ev.numbers["ts"][at]
    return np.where(ts == ABSENT, NO_ROW, ts)


def _assign_last(target: np.ndarray, at: np.ndarray, values: np.ndarray) -> None:
    """``target[at] = values`` where, of repeated positions, the last value counts."""
    last = len(at) - 1 - np.unique(at[::-1], return_index=True)[1]
    target[at[last]] = values[last]


def _callers(frame: pd.DataFrame, ev: _Events) -> np.ndarray:
    """Per row, the row a task-queue flow starts on when the flow ends on it (``Dequeue@op`` ← its ``Enqueue``)."""
    out = np.full(len(frame), NO_ROW, dtype=np.int64)
    pairs = _flow_pairs(ev, np.flatnonzero(ev.among("ph", _FLOW_PHASES) & ev.among("cat", {_QUEUE_FLOW_CAT})))
    if not len(pairs):
        return out
    rows = _row_lanes(frame)
    src, dst = (_slices_at(frame, rows, _point_lanes(frame, ev, at), _times(ev, at)) for at in pairs.T)
    ok = (src != NO_ROW) & (dst != NO_ROW)
    _assign_last(out, dst[ok], src[ok])
    return out


def _flow_pairs(ev: _Events, flows: np.ndarray) -> np.ndarray:
    """(start, finish) events of each flow id that has both (the last of each), in order of the id's first event."""
    if not len(flows):
        return np.empty((0, 2), dtype=np.int64)
    ids = ev.codes["id"][flows]
    found = pd.DataFrame({"id": ids, "start": ev.among("ph", {_FLOW_START})[flows], "at": flows})
    last = found.groupby(["id", "start"])["at"].last().unstack()
    return last.reindex(index=pd.unique(ids), columns=[True, False]).dropna().to_numpy(np.int64)


def _row_lanes(frame: pd.DataFrame) -> np.ndarray:
    """One int per (pid, tid) of each row."""
    tids = len(frame["tid"].cat.categories)
    return frame["pid"].cat.codes.to_numpy(np.int64) * tids + frame["tid"].cat.codes.to_numpy(np.int64)


def _point_lanes(frame: pd.DataFrame, ev: _Events, at: np.ndarray) -> np.ndarray:
    """The _row_lanes key of each event's (pid, tid); -1 where no row has it."""
    pids, tids = frame["pid"].cat.categories, frame["tid"].cat.categories
    pid, tid = pids.get_indexer(ev.text("pid", at)), tids.get_indexer(ev.text("tid", at))
    return np.where((pid >= 0) & (tid >= 0), pid.astype(np.int64) * len(tids) + tid, -1)


def _slices_at(frame: pd.DataFrame, row_lanes: np.ndarray, lanes: np.ndarray, times: np.ndarray) -> np.ndarray:
    """Row of the slice on each point's lane that starts last at or before its time and still contains it."""
    starts = frame["ts"].to_numpy()
    ends = starts + frame["dur"].to_numpy()
    rows_of = pd.Series(np.arange(len(row_lanes))).groupby(row_lanes).indices
    out = np.full(len(times), NO_ROW, dtype=np.int64)
    for lane, mine in pd.Series(np.arange(len(lanes))).groupby(lanes).indices.items():
        rows = rows_of.get(lane)
        if rows is None:
            continue
        rows = rows[np.argsort(starts[rows], kind="stable")]
        found = rows[np.maximum(np.searchsorted(starts[rows], times[mine], side="right") - 1, 0)]
        ok = (starts[found] <= times[mine]) & (ends[found] >= times[mine])
        out[mine[ok]] = found[ok]
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
