"""torch_npu ``ascend_pytorch_profiler_{rank}.db`` and CANN ``msprof_*.db`` (SQLite, ns / bytes) → the tables.

Device tasks are ``TASK`` rows: compute when a ``COMPUTE_TASK_INFO`` row shares the globalTaskId, tasks of a
collective when a ``COMMUNICATION_TASK_INFO`` row does; whole collectives are ``COMMUNICATION_OP``. Host side:
``CANN_API`` (runtime), ``PYTORCH_API`` (ops, queue, Python frames), ``STEP_TIME``. The file is opened read-only
and immutable: nothing is written beside it.
"""

from __future__ import annotations

import json
import sqlite3
from decimal import Decimal
from pathlib import Path

import numpy as np
import pandas as pd
from traceanalyzer.parsers import counters as samples
from traceanalyzer.parsers.ascend import common as c
from traceanalyzer.parsers.ascend import integers, job, pmu, summaries
from traceanalyzer.parsers.ascend.sqlite import connect

from traceanalyzer.errors import TraceError
from traceanalyzer.schema import MODULE_MEMORY, NO_ROW, Kind

REQUIRED = ("STRING_IDS", "TASK")
API_QUEUE = 50002
API_KIND = {50001: Kind.CPU_OP, API_QUEUE: Kind.ANNOTATION, 50003: Kind.PYTHON, 50004: Kind.ANNOTATION}
"""PYTORCH_API.type (ENUM_API_TYPE: op, queue, trace, mstx) → kind."""
_MEMORY_COMPONENT = "PTA"
_GE_COMPONENT = "GE"


def parse(path: Path) -> tuple[pd.DataFrame, pd.DataFrame, c.TraceMeta]:
    """Parse one rank's profiler database without links."""
    warnings = c.Notes()
    with connect(path) as con:
        tables = _tables(path, con)
        strings = _strings(con)
        integers.count(path, con, tables, warnings)
        read = _Optional(path, warnings, con, strings, tables)
        parts = [_tasks(con, strings, tables)] + [read(f) for f in (_comm_ops, _cann, _pytorch, _steps, _overlap)]
        records = read(_memory_records)
        pmu_rows = read(_pmu)
        snapshots, blocks, modules = _memory(records), read(_blocks, records), read(_modules)
        db_metadata = _metadata(con, tables)
    events = pd.concat([p for p in parts if len(p)], ignore_index=True)
    if not len(events):
        raise TraceError(path, "is a profiler database with no tasks, API calls or steps")
    events = _categorize(c.sanitize(events, str(path), warnings))
    queue = _callers(events)
    events["caller"] = np.where(queue != NO_ROW, queue, _task_ops(events))
    events = events.drop(columns=["queue", "comm_op"], errors="ignore")
    fmt = "torch_npu-db" if "PYTORCH_API" in tables else "msprof-db"
    if "PYTORCH_API" not in tables:
        warnings.append(f"{path.name}: no framework (PyTorch) tables; device and CANN only")
    run_dir = path.parent.parent if path.parent.name == "ASCEND_PROFILER_OUTPUT" else None
    found = summaries.read(path.parent, warnings)
    memory = c.near_events(c.block_memory(events, blocks, snapshots), events, str(path), warnings, "memory rows")
    modules = c.near_events(modules, events, str(path), warnings, "module memory rows")
    meta = c.make_meta(path, events, fmt, job.describe(run_dir, path, warnings, db_metadata), warnings)
    meta.keep(MODULE_MEMORY, modules)
    summaries.keep(meta, found)
    if len(pmu_rows):
        events = samples.with_samples(events, pmu_rows)  # after the rows the caller links label
    return events, memory, meta


class _Optional:
    """Reads an optional table: one that cannot be read as expected (a renamed or missing column, a bad page) is
    left out with a warning, as if the database had no such table, instead of failing the whole database."""

    def __init__(self, path: Path, notes: c.Notes, con: sqlite3.Connection, strings: dict, tables: set[str]) -> None:
        self.path, self.notes, self.con, self.strings, self.tables = path, notes, con, strings, tables

    def __call__(self, read, *more) -> pd.DataFrame:
        try:
            return read(self.con, self.strings, self.tables, *more)
        except sqlite3.DatabaseError as e:
            self.notes.append(f"{self.path}: a table could not be read ({e}); its events are left out")
            return read(self.con, self.strings, set(), *more)


def _tables(path: Path, con: sqlite3.Connection) -> set[str]:
    tables = {r[0] for r in con.execute("select name from sqlite_master where type='table'")}
    missing = [t for t in REQUIRED if t not in tables]
    if missing:
        shown = ", ".join(sorted(tables)[:8]) or "no tables"
        raise TraceError(path, f"is not an Ascend profiler database: no {', '.join(missing)} table (has {shown})")
    return tables


_METADATA_KEYS = ("distributed_args", "parallel_group_info")


def _metadata(con: sqlite3.Connection, tables: set[str]) -> dict:
    """profiler_metadata.json keys as torch_npu copies them into META_DATA (JSON text; ENV_VARIABLES in samples)."""
    if "META_DATA" not in tables:
        return {}
    rows = con.execute("select name, value from META_DATA where name in (?, ?)", _METADATA_KEYS).fetchall()
    out = {}
    for name, value in rows:
        try:
            out[name] = json.loads(value)
        except (TypeError, ValueError):
            continue
    return out


def _strings(con: sqlite3.Connection) -> dict[int, str]:
    """STRING_IDS as id → text (rows whose id is not an integer ignored)."""
    return {i: str(v) for i, v in con.execute("select id, value from STRING_IDS") if isinstance(i, int)}


def _required(table: pd.DataFrame, *columns: str) -> pd.DataFrame:
    """The table, if it has the columns (a ``select *`` reads those by name); else the sqlite3 error a named select
    would raise."""
    missing = [col for col in columns if col not in table]
    if missing:
        raise sqlite3.OperationalError(f"no such column: {missing[0]}")
    return table


def _ints(values) -> np.ndarray:
    """SQLite values as int64: integers (and integral numbers or digit strings) as they are; NULL, text, blobs,
    fractions and values beyond int64 as NO_ROW (SQLite stores any type in any column)."""
    series = pd.Series(values).reset_index(drop=True)
    if pd.api.types.is_integer_dtype(series.dtype):
        return series.to_numpy(np.int64)
    numbers = pd.to_numeric(series.map(lambda v: v if isinstance(v, int | float | str) else None), errors="coerce")
    arr = numbers.to_numpy(float)
    ok = np.isfinite(arr) & (np.abs(arr) < 9.2e18) & (arr == np.round(arr))
    out = np.full(len(series), NO_ROW, dtype=np.int64)
    exact = series[ok].map(_exact_int)
    out[ok] = exact.to_numpy(np.int64)
    return out


def _exact_int(value) -> int:
    """An integral number or numeric string as an int, exactly as written (19-digit ns, "1700000000123456789.0")."""
    if isinstance(value, str):
        return int(Decimal(value.strip()))
    return int(value)


def _durations(start, end) -> np.ndarray:
    """end - start in ns; c.BAD_NS where either is not an integer or the difference overflows (sanitize drops it)."""
    a, b = _ints(start), _ints(end)
    bad = (a == NO_ROW) | (b == NO_ROW) | (np.abs(b.astype(float) - a.astype(float)) >= 9.2e18)
    return np.where(bad, c.BAD_NS, b - np.where(bad, 0, a))


def _sql(con: sqlite3.Connection, query: str) -> pd.DataFrame:
    """The query's rows; a failing query raises the sqlite3 error (pandas wraps it in its own)."""
    try:
        return pd.read_sql_query(query, con)
    except pd.errors.DatabaseError as e:
        raise sqlite3.DatabaseError(str(e.__cause__ or e)) from None


def _names(ids: pd.Series, strings: dict[int, str]) -> np.ndarray:
    return np.array([strings.get(int(i), "") for i in _ints(ids)], dtype=object)


def _columns(con: sqlite3.Connection, table: str) -> set[str]:
    return {r[1] for r in con.execute(f"pragma table_info({table})")}


def _task_query(con: sqlite3.Connection, tables: set[str]) -> str:
    """TASK rows joined with their compute or communication task info, where the database has those tables."""
    compute = "COMPUTE_TASK_INFO" in tables
    comm = "COMMUNICATION_TASK_INFO" in tables
    shapes = compute and "inputShapes" in _columns(con, "COMPUTE_TASK_INFO")
    planes = comm and "planeId" in _columns(con, "COMMUNICATION_TASK_INFO")
    return (
        "select t.startNs, t.endNs, t.deviceId, t.connectionId, t.streamId, t.taskType, "
        + ("k.name as kname, k.taskType as core, " if compute else "null as kname, null as core, ")
        + ("k.inputShapes, k.inputDataTypes, " if shapes else "null as inputShapes, null as inputDataTypes, ")
        + (
            "m.taskType as ctask, m.size as csize, m.opId as cop, "
            if comm
            else "null as ctask, null as csize, null as cop, "
        )
        + ("m.planeId as cplane " if planes else "null as cplane ")
        + "from TASK t "
        + ("left join COMPUTE_TASK_INFO k on k.globalTaskId = t.globalTaskId " if compute else "")
        + ("left join COMMUNICATION_TASK_INFO m on m.globalTaskId = t.globalTaskId" if comm else "")
    )


def _tasks(con: sqlite3.Connection, strings: dict[int, str], tables: set[str]) -> pd.DataFrame:
    """Device tasks: compute kernels, tasks of collectives, and the rest by their task type."""
    t = _sql(con, _task_query(con, tables))
    task_type = _names(t["taskType"], strings)
    is_kernel = t["kname"].notna().to_numpy()
    is_comm = t["ctask"].notna().to_numpy() & ~is_kernel
    kind = np.array([c.TASK_KIND.get(x, Kind.OTHER).value for x in task_type], dtype=object)
    kind[is_kernel] = Kind.KERNEL.value
    kind[is_comm] = Kind.COMM_TASK.value
    name = task_type.copy()
    name[is_kernel] = _names(t["kname"][is_kernel], strings)
    name[is_comm] = _names(t["ctask"][is_comm], strings)
    core = np.where(is_kernel, _names(t["core"], strings), "")
    core[is_comm] = c.HCCL_CORE
    return pd.DataFrame(
        {
            "ts": _ints(t["startNs"]),
            "dur": _durations(t["startNs"], t["endNs"]),
            "name": name,
            "kind": kind,
            "cat": task_type,
            "pid": "device",
            "tid": _task_lanes(t, is_comm),
            "device": _ints(t["deviceId"]),
            "stream": _ints(t["streamId"]),
            "correlation": np.where(is_comm, NO_ROW, _ints(t["connectionId"])),
            "bytes": np.where(is_comm, _ints(t["csize"]), NO_ROW),
            "comm_op": np.where(is_comm, _ints(t["cop"]), NO_ROW),
            "core": core,
            "input_dims": [c.shapes_json(s) for s in _names(t["inputShapes"], strings)],
            "input_types": _names(t["inputDataTypes"], strings),
        }
    )


def _task_lanes(t: pd.DataFrame, is_comm: np.ndarray) -> np.ndarray:
    """The lane of each task: its stream; an HCCL task's plane (``planeId``) where recorded, as the text export's
    trace lays the planes out, so the transfer of an op is read from its main plane there too."""
    lane = t["streamId"].astype(str).to_numpy(dtype=object)
    plane = _ints(t["cplane"])
    on_plane = is_comm & (plane != NO_ROW)
    lane[on_plane] = plane[on_plane].astype(str)
    return lane


def _comm_ops(con: sqlite3.Connection, strings: dict[int, str], tables: set[str]) -> pd.DataFrame:
    if "COMMUNICATION_OP" not in tables:
        return pd.DataFrame()
    t = _required(
        _sql(con, "select * from COMMUNICATION_OP"), "opName", "startNs", "endNs", "connectionId", "groupName"
    )
    names = _names(t["opName"], strings)
    dtypes = _names(t["dataType"], strings) if "dataType" in t else [""] * len(t)
    coll = [
        c.collective_and_bytes(n, d, k) for n, d, k in zip(names, dtypes, t.get("count", [None] * len(t)), strict=True)
    ]
    return pd.DataFrame(
        {
            "ts": _ints(t["startNs"]),
            "dur": _durations(t["startNs"], t["endNs"]),
            "name": names,
            "kind": Kind.COMMUNICATION.value,
            "cat": _names(t["algType"], strings) if "algType" in t else "",
            "pid": "device",
            "tid": "communication",
            "device": _ints(t["deviceId"]) if "deviceId" in t else NO_ROW,
            "correlation": _ints(t["connectionId"]),
            "collective": [x[0] for x in coll],
            "bytes": np.array([x[1] for x in coll], dtype=np.int64),
            "group": _names(t["groupName"], strings),
            "comm_op": _ints(t["opId"]) if "opId" in t else NO_ROW,
            "core": c.HCCL_CORE,
        }
    )


def _lanes(global_tid: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """globalTid = pid << 32 | tid → (pid, tid) strings."""
    g = np.maximum(_ints(global_tid), 0)
    return (g >> 32).astype(str), (g & 0xFFFFFFFF).astype(str)


def _cann(con: sqlite3.Connection, strings: dict[int, str], tables: set[str]) -> pd.DataFrame:
    if "CANN_API" not in tables:
        return pd.DataFrame()
    t = _sql(con, "select startNs, endNs, type, globalTid, connectionId, name from CANN_API")
    pid, tid = _lanes(t["globalTid"])
    return pd.DataFrame(
        {
            "ts": _ints(t["startNs"]),
            "dur": _durations(t["startNs"], t["endNs"]),
            "name": _names(t["name"], strings),
            "kind": Kind.RUNTIME.value,
            "cat": t["type"].astype(str),
            "pid": pid,
            "tid": tid,
            "correlation": _ints(t["connectionId"]),
        }
    )


def _pytorch(con: sqlite3.Connection, strings: dict[int, str], tables: set[str]) -> pd.DataFrame:
    if "PYTORCH_API" not in tables:
        return pd.DataFrame()
    columns = "startNs, endNs, globalTid, connectionId, name, inputDtypes, inputShapes, type"
    t = _sql(con, f"select {columns} from PYTORCH_API")
    # PYTORCH_API times are TEXT holding integer ns
    start = _ints(t["startNs"])
    names = _names(t["name"], strings)
    kind = np.array([API_KIND.get(int(x), Kind.ANNOTATION).value for x in _ints(t["type"])], dtype=object)
    kind[[n.startswith(c.DEQUEUE_PREFIX) for n in names]] = Kind.RUNTIME.value
    kind[[n.startswith(c.STEP_PREFIX) for n in names]] = Kind.STEP.value
    pid, tid = _lanes(t["globalTid"])
    return pd.DataFrame(
        {
            "ts": start,
            "dur": _durations(t["startNs"], t["endNs"]),
            "name": names,
            "kind": kind,
            "cat": t["type"].astype(str),
            "pid": pid,
            "tid": tid,
            "input_dims": [c.shapes_json(s.replace("\r\n", "")) for s in _names(t["inputShapes"], strings)],
            "input_types": _names(t["inputDtypes"], strings),
            "queue": _queue_ids(con, t, tables),
        }
    )


def _queue_ids(con: sqlite3.Connection, api: pd.DataFrame, tables: set[str]) -> np.ndarray:
    """Per PYTORCH_API row, the connection id an ``Enqueue`` shares with its ``Dequeue@op`` (queue rows only)."""
    out = np.full(len(api), NO_ROW, dtype=np.int64)
    if "CONNECTION_IDS" not in tables:
        return out
    pairs = _sql(con, "select id, connectionId from CONNECTION_IDS")
    pairs = pd.DataFrame({"id": _ints(pairs["id"]), "connection": _ints(pairs["connectionId"])})
    pairs = pairs[(pairs["id"] != NO_ROW) & (pairs["connection"] != NO_ROW)]
    ids = pairs.groupby("id")["connection"].min()
    queue = (_ints(api["type"]) == API_QUEUE) & (_ints(api["connectionId"]) != NO_ROW)
    out[queue] = ids.reindex(_ints(api.loc[queue, "connectionId"])).fillna(NO_ROW).to_numpy()
    return out


def _callers(events: pd.DataFrame) -> np.ndarray:
    """Per row, the ``Enqueue`` row that handed a ``Dequeue@op`` row its work (same queue connection id)."""
    out = np.full(len(events), NO_ROW, dtype=np.int64)
    if "queue" not in events:
        return out
    queue = events["queue"].fillna(NO_ROW).astype(np.int64).to_numpy()
    dequeue = events["name"].astype(str).str.startswith(c.DEQUEUE_PREFIX).to_numpy() & (queue != NO_ROW)
    enqueue = (queue != NO_ROW) & ~dequeue
    by_id = pd.Series(np.flatnonzero(enqueue), index=queue[enqueue])
    found = by_id[~by_id.index.duplicated()].reindex(queue[dequeue]).to_numpy()
    ok = ~np.isnan(found)
    out[np.flatnonzero(dequeue)[ok]] = found[ok].astype(np.int64)
    return out


def _task_ops(events: pd.DataFrame) -> np.ndarray:
    """Per row, for the tasks of collectives (COMM_TASK), the COMMUNICATION row of the same opId; NO_ROW elsewhere."""
    out = np.full(len(events), NO_ROW, dtype=np.int64)
    if "comm_op" not in events:
        return out
    op_id = events["comm_op"].fillna(NO_ROW).astype(np.int64).to_numpy()
    kind = events["kind"].astype(str).to_numpy()
    ops = np.flatnonzero((kind == Kind.COMMUNICATION.value) & (op_id != NO_ROW))
    by_id = pd.Series(ops, index=op_id[ops])
    by_id = by_id[~by_id.index.duplicated()]
    tasks = np.flatnonzero((kind == Kind.COMM_TASK.value) & (op_id != NO_ROW))
    found = by_id.reindex(op_id[tasks]).to_numpy()
    ok = ~np.isnan(found)
    out[tasks[ok]] = found[ok].astype(np.int64)
    return out


def _steps(con: sqlite3.Connection, strings: dict[int, str], tables: set[str]) -> pd.DataFrame:
    """STEP_TIME rows, only when PYTORCH_API has no ProfilerStep markers of its own (msprof DBs)."""
    if "STEP_TIME" not in tables or "PYTORCH_API" in tables:
        return pd.DataFrame()
    t = _sql(con, "select id, startNs, endNs from STEP_TIME")
    return pd.DataFrame(
        {
            "ts": _ints(t["startNs"]),
            "dur": _durations(t["startNs"], t["endNs"]),
            "name": [f"{c.STEP_PREFIX}{i}" for i in t["id"]],
            "kind": Kind.STEP.value,
            "pid": "steps",
            "tid": "STEP_TIME",
        }
    )


def _overlap(con: sqlite3.Connection, strings: dict[int, str], tables: set[str]) -> pd.DataFrame:
    if "OVERLAP_ANALYSIS" not in tables:
        return pd.DataFrame()
    t = _sql(con, "select deviceId, startNs, endNs, type from OVERLAP_ANALYSIS")
    names = [c.OVERLAP_NAMES[x] if 0 <= x < len(c.OVERLAP_NAMES) else str(x) for x in _ints(t["type"])]
    return pd.DataFrame(
        {
            "ts": _ints(t["startNs"]),
            "dur": _durations(t["startNs"], t["endNs"]),
            "name": names,
            "kind": Kind.OVERLAP_LANE.value,
            "cat": c.OVERLAP_LANE,
            "pid": c.OVERLAP_LANE,
            "tid": names,
            "device": _ints(t["deviceId"]),
        }
    )


def _pmu(con: sqlite3.Connection, strings: dict[int, str], tables: set[str]) -> pd.DataFrame:
    """TASK_PMU_INFO: one counter row per compute task and PMU metric (times in ns, as the database's; ratios,
    cycles as written), over the task's interval."""
    if not {"TASK_PMU_INFO", "COMPUTE_TASK_INFO"} <= tables:
        return samples.samples(samples.no_samples())
    t = _sql(
        con,
        "select t.startNs, t.endNs, t.deviceId, k.name as kname, p.name as metric, p.value from TASK_PMU_INFO p "
        "join TASK t on t.globalTaskId = p.globalTaskId join COMPUTE_TASK_INFO k on k.globalTaskId = p.globalTaskId",
    )
    metric = _names(t["metric"], strings)
    units = [pmu.unit_of(m)[1] or ("ns" if m.endswith("_time") else "") for m in metric]
    frame = pd.DataFrame(
        {
            "ts": _ints(t["startNs"]),
            "dur": _durations(t["startNs"], t["endNs"]),
            "device": _ints(t["deviceId"]),
            "name": metric,
            "value": pd.to_numeric(t["value"], errors="coerce").to_numpy(dtype=float),
            "unit": units,
            "source": pmu.DB_SOURCE,
            "kernel": _names(t["kname"], strings),
        }
    )
    frame = frame[(frame["ts"] != NO_ROW) & (frame["dur"] != c.BAD_NS) & frame["value"].notna()]
    return samples.samples(frame.reset_index(drop=True))


def _memory_records(con: sqlite3.Connection, strings: dict[int, str], tables: set[str]) -> pd.DataFrame:
    """MEMORY_RECORD with component names (PTA, GE, PTA+GE)."""
    if "MEMORY_RECORD" not in tables:
        return pd.DataFrame(columns=["component", "timestamp", "totalAllocated", "totalReserved", "deviceId"])
    t = _sql(con, "select component, timestamp, totalAllocated, totalReserved, deviceId from MEMORY_RECORD")
    return t.assign(component=_names(t["component"], strings))


def _memory(records: pd.DataFrame) -> pd.DataFrame:
    t = records[records["component"] == _MEMORY_COMPONENT]
    return c.memory_frame(
        _ints(t["timestamp"]),
        _ints(t["deviceId"]),
        _ints(t["totalAllocated"]),
        _ints(t["totalReserved"]),
    )


def _blocks(con: sqlite3.Connection, strings: dict[int, str], tables: set[str], records: pd.DataFrame) -> pd.DataFrame:
    """OP_MEMORY (≡ operator_memory.csv, ns and bytes) as c.BLOCK_COLUMNS; GE's rows (a GE snapshot at their
    allocation time and total) named ``cann::<op>`` as the text export names them."""
    if "OP_MEMORY" not in tables:
        return pd.DataFrame(columns=list(c.BLOCK_COLUMNS))
    ints = {
        "size": "size",
        "alloc_ts": "allocationTime",
        "release_ts": "releaseTime",
        "device": "deviceId",
        "alloc_allocated": "allocationTotalAllocated",
        "alloc_reserved": "allocationTotalReserved",
        "release_allocated": "releaseTotalAllocated",
        "release_reserved": "releaseTotalReserved",
    }
    t = _sql(con, f"select name, {', '.join(ints.values())} from OP_MEMORY")
    out = {k: _ints(t[col]) for k, col in ints.items()}
    ge = records[records["component"] == _GE_COMPONENT]
    ge_keys = pd.MultiIndex.from_arrays([_ints(ge["timestamp"]), _ints(ge["totalAllocated"])])
    is_ge = pd.MultiIndex.from_arrays([out["alloc_ts"], out["alloc_allocated"]]).isin(ge_keys)
    names = _names(t["name"], strings)
    return pd.DataFrame({"name": np.where(is_ge, c.GE_OP_PREFIX + names.astype(str), names)} | out)


def _modules(con: sqlite3.Connection, strings: dict[int, str], tables: set[str]) -> pd.DataFrame:
    """NPU_MODULE_MEM with ENUM_MODULE names: reserved bytes per CANN module over time."""
    if "NPU_MODULE_MEM" not in tables:
        return c.module_memory([], [], [], [])
    t = _sql(con, "select moduleId, timestampNs, totalReserved, deviceId from NPU_MODULE_MEM")
    names = dict(con.execute("select id, name from ENUM_MODULE")) if "ENUM_MODULE" in tables else {}
    return c.module_memory(
        _ints(t["timestampNs"]),
        _ints(t["deviceId"]),
        [names.get(m, str(m)) for m in _ints(t["moduleId"])],
        _ints(t["totalReserved"]),
    )


_STRING_COLS = ("name", "kind", "cat", "pid", "tid", "collective", "group", "core", "input_dims", "input_types")


def _categorize(events: pd.DataFrame) -> pd.DataFrame:
    for col in _STRING_COLS:
        if col not in events:
            events[col] = ""
        events[col] = events[col].fillna("").astype(str).astype("category")
    for col in ("device", "stream", "correlation", "bytes"):
        events[col] = events[col].fillna(NO_ROW).astype(np.int64) if col in events else NO_ROW
    return events.sort_values("ts", kind="stable").reset_index(drop=True)
