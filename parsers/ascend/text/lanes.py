"""The trace's lanes (``process_name`` metadata) and how each lane's complete events become event-table rows."""

from __future__ import annotations

import numpy as np
import pandas as pd
from traceanalyzer.parsers.ascend import common as c
from traceanalyzer.parsers.ascend.text.trace_json import METADATA, Events, given
from traceanalyzer.parsers.columns import ABSENT

from traceanalyzer.schema import NO_ROW, Kind

_PROCESS_NAME = "process_name"
_THREAD_NAME = "thread_name"
_PROCESS_LABELS = "process_labels"
_SENTINEL_INTS = [int(v) for v in c.MISSING if v.isdigit() and int(v) < 2**63]
"""Integer args values that mean 'not recorded' (UINT32 max)."""


class Lanes:
    """Lane names from metadata events, keyed by pid code and (pid, tid) lane key."""

    def __init__(self, ev: Events) -> None:
        self.process: dict[int, str] = {}
        self.thread: dict[int, str] = {}
        self.labels: dict[int, str] = {}
        self.pids = len(ev.values["pid"])
        for i in np.flatnonzero(ev.among("ph", {METADATA}) & (ev.numbers["args"] == 1)):
            name, pid = ev.values["name"][ev.codes["name"][i]], int(ev.codes["pid"][i])
            if name == _PROCESS_NAME:
                self.process[pid] = _arg_text(ev, "arg_name", i)
            elif name == _THREAD_NAME:
                self.thread[int(ev.lane_keys(i))] = _arg_text(ev, "arg_name", i)
            elif name == _PROCESS_LABELS:
                self.labels[pid] = _arg_text(ev, "labels", i)
        hosts = [pid for pid, name in self.process.items() if name == c.PYTHON_LANE]
        self.host_pid = ev.values["pid"][hosts[0]] if hosts else None

    def read(self, ev: Events) -> np.ndarray:
        """Per event, whether its lane is one whose events become rows."""
        return np.array([self.process.get(p, "") in _LANE_ROWS for p in range(self.pids)], dtype=bool)[ev.codes["pid"]]

    def pids_of(self) -> dict[str, list[int]]:
        """The pid codes of each lane name."""
        out: dict[str, list[int]] = {}
        for pid, name in self.process.items():
            out.setdefault(name, []).append(pid)
        return out

    def device(self, ev: Events, at: np.ndarray) -> np.ndarray:
        """Device index from each event's 'NPU 1' process label; 0 when the label names none."""
        found = np.array([c.device_of(self.labels.get(p, "")) for p in range(self.pids)], dtype=np.int64)
        return np.where(found != NO_ROW, found, 0)[ev.codes["pid"][at]]

    def threads(self, ev: Events, at: np.ndarray, fn) -> np.ndarray:
        """``fn`` of the thread name of each event at ``at`` (of None where the thread has no name)."""
        known = pd.Index(list(self.thread), dtype=np.int64)
        table = np.array([fn(name) for name in [*self.thread.values(), None]] + [None], dtype=object)[:-1]
        return table[known.get_indexer(ev.lane_keys(at))]  # -1 (no name) takes the last entry


def _arg_text(ev: Events, key: str, i: int) -> str:
    return str(given(ev.value(key, ev.codes[key][i]), ""))


_TEXT_COLUMNS = ("name", "kind", "cat", "pid", "tid", "collective", "group", "core", "input_dims", "input_types")
_INT_COLUMNS = ("device", "stream", "correlation", "bytes")


def _blank(key: str, n: int) -> np.ndarray:
    """A column where no lane sets it: '' or NO_ROW."""
    return np.full(n, "", dtype=object) if key in _TEXT_COLUMNS else np.full(n, NO_ROW, dtype=np.int64)


def frame(ev: Events, src: np.ndarray, lanes: Lanes) -> pd.DataFrame:
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
    out = pd.DataFrame(
        {
            "ts": np.where(ts == ABSENT, NO_ROW, ts),
            "dur": dur,
            **{k: cols[k] for k in _INT_COLUMNS},
        }
    )
    for k in _TEXT_COLUMNS:
        out[k] = pd.Categorical(cols[k])
    return out


def _python(ev: Events, at: np.ndarray, lanes: Lanes, lane: str) -> dict:
    (kind,) = ev.combine(at, ("name", "cat"), lambda name, cat: (_python_kind(name, cat),), (object,))
    return {"kind": kind, "cat": ev.text("cat", at)}


def _python_kind(name: str, cat: str) -> str:
    if name.startswith(c.STEP_PREFIX):
        return Kind.STEP.value
    return _PYTHON_KINDS.get(cat.lower(), Kind.ANNOTATION).value


_PYTHON_KINDS = {"python_function": Kind.PYTHON, "cpu_op": Kind.CPU_OP, c.DEQUEUE_CAT: Kind.RUNTIME}


def _gc(ev: Events, at: np.ndarray, lanes: Lanes, lane: str) -> dict:
    return {"kind": Kind.ANNOTATION.value, "cat": ev.text("cat", at)}


def _host_api(ev: Events, at: np.ndarray, lanes: Lanes, lane: str) -> dict:
    def tid_and_cat(thread, tid, level) -> tuple[str, str]:
        return str(given(thread, tid)), str(given(level, lane))

    tid, cat = ev.combine(at, ("thread_id", "tid", "level"), tid_and_cat, (object, object))
    pid = ev.text("pid", at) if lanes.host_pid is None else lanes.host_pid
    return {"kind": Kind.RUNTIME.value, "correlation": _connection(ev, at), "pid": pid, "tid": tid, "cat": cat}


def _connection(ev: Events, at: np.ndarray) -> np.ndarray:
    """The connection_id arg (runtime↔device link); NO_ROW where absent or a 'not recorded' sentinel."""
    ids = ev.numbers["connection_id"][at]
    return np.where((ids == ABSENT) | np.isin(ids, _SENTINEL_INTS), NO_ROW, ids)


def _device_task(ev: Events, at: np.ndarray, lanes: Lanes, lane: str) -> dict:
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
    task = str(given(value, ""))
    if task in c.COMPUTE_CORES:
        return Kind.KERNEL.value, task, task
    if task in c.COMM_TASK_TYPES:
        return Kind.COMM_TASK.value, "", task
    return c.TASK_KIND.get(task, Kind.KERNEL).value, "", task


def _int_of_first(*values) -> tuple[int]:
    """The first present of the values as an int (NO_ROW for none or a sentinel)."""
    return (c.int_or_none(given(*values, None)),)


def _comm(ev: Events, at: np.ndarray, lanes: Lanes, lane: str) -> dict:
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


def _comm_ops(ev: Events, at: np.ndarray) -> dict:
    """Whole collectives: their algorithm, collective and message size."""

    def op(name: str, dtype, count, alg) -> tuple[str, int, str]:
        return *c.collective_and_bytes(name, given(dtype, None), given(count, None)), str(given(alg, ""))

    keys = ("name", "data_type", "count", "alg_type")
    collective, size, cat = ev.combine(at, keys, op, (object, np.int64, object))
    return {"cat": cat, "correlation": _connection(ev, at), "collective": collective, "bytes": size}


def _comm_tasks(ev: Events, at: np.ndarray) -> dict:
    """The tasks of collectives (threads ``Plane k``): task type, transport, stream and size."""

    def task(kind, name: str, transport, stream, size) -> tuple[str, str, int, int]:
        text = str(given(kind, None) or name)
        return text, str(given(transport, "")), c.int_or_none(given(stream, None)), c.int_or_none(given(size, None))

    keys = ("task_name", "name", "transport", "hccl_stream", "hccl_size")
    name, cat, stream, size = ev.combine(at, keys, task, (object, object, np.int64, np.int64))
    return {"name": name, "cat": cat, "stream": stream, "bytes": size}


def _overlap(ev: Events, at: np.ndarray, lanes: Lanes, lane: str) -> dict:
    thread = lanes.threads(ev, at, lambda name: name)
    name = np.where(np.not_equal(thread, None), thread, ev.text("name", at))
    return {"kind": Kind.OVERLAP_LANE.value, "name": name, "cat": lane}


_LANE_ROWS = {c.PYTHON_LANE: _python, c.GC_LANE: _gc, c.OVERLAP_LANE: _overlap}
_LANE_ROWS |= {lane: _host_api for lane in c.HOST_API_LANES} | {lane: _device_task for lane in c.DEVICE_LANES}
_LANE_ROWS |= {lane: _comm for lane in c.COMM_LANES}
"""How each lane's complete events become rows (events of other lanes do not)."""
