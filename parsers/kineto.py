"""torch.profiler (Kineto) Chrome-trace JSON → the common event and memory tables.

Reads every vintage seen in the wild: 2021 legacy categories (``Operator``/``Runtime``/``Kernel``),
hardware counters (``counters``: counter tracks, CUPTI range-profiler ranges) as counter rows of the events,
2022 ``async_cpu_to_gpu`` flows, ``ac2g`` flows, µs floats with ns digits (integer ns without float
damage), ``baseTimeNanoseconds``, ROCm, MTIA and CPU-only traces. Runtime↔device links come from
the ``correlation`` arg, which every generation writes on both sides.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from traceanalyzer.parsers import counters, sizes
from traceanalyzer.parsers.columns import ABSENT, Coded, Columns, Field, Interner, Read, Reader, texts_in
from traceanalyzer.parsers.jsonstream import Stream, events_head, map_chunks, worker_count

from traceanalyzer import allocator, schema
from traceanalyzer.errors import TraceError
from traceanalyzer.schema import (
    MAX_DEVICE_INDEX,
    MAX_RANKS,
    NO_ROW,
    Device,
    Kind,
    Platform,
    TraceMeta,
)
from traceanalyzer.vocabulary import dtype_bytes

_EXACT_TS_FROM = 2**43
"""µs timestamps at or above this lose ns digits in a float64; such traces are decoded exactly."""

_KIND_BY_CAT = {
    "cpu_op": Kind.CPU_OP,
    "operator": Kind.CPU_OP,
    "python_function": Kind.PYTHON,
    "user_annotation": Kind.ANNOTATION,
    "cuda_runtime": Kind.RUNTIME,
    "cuda_driver": Kind.RUNTIME,
    "runtime": Kind.RUNTIME,
    "mtia_runtime": Kind.RUNTIME,
    "kernel": Kind.KERNEL,
    "mtia_ccp_events": Kind.KERNEL,
    "gpu_memcpy": Kind.MEMCPY,
    "memcpy": Kind.MEMCPY,
    "gpu_memset": Kind.MEMSET,
    "memset": Kind.MEMSET,
    "cuda_sync": Kind.SYNC,
    "gpu_user_annotation": Kind.GPU_ANNOTATION,
}
_SKIPPED_CATS = frozenset({"trace"})
_STEP_PREFIX = "ProfilerStep#"
_MEMORY_EVENT = "[memory]"


def _fields(exact: bool) -> tuple[Field, ...]:
    """What the table needs from each event; ``exact`` keeps every digit of epoch-µs timestamps with ns fractions."""
    return (
        Field("ph", ("ph",), Read.TEXT, default=""),
        Field("cat", ("cat",), Read.TEXT, nullable=True),
        Field("name", ("name",), Read.TEXT, nullable=True),
        Field("pid", ("pid",), Read.ID, default="0"),
        Field("tid", ("tid",), Read.ID, default="0"),
        Field("ts", ("ts",), Read.EXACT_NS if exact else Read.NS, nullable=True),
        Field("dur", ("dur",), Read.NS, nullable=True),
        Field("args", ("args",), Read.OBJECT, nullable=True),
        *(Field(name, ("args", key), Read.INT, nullable=True) for name, key in _INT_ARGS.items()),
        *(Field(name, ("args", key), Read.RAW) for name, key in _RAW_ARGS.items()),
        *(Field(name, ("args", key), Read.TEXT, nullable=True) for name, key in _TEXT_ARGS.items()),
    )


_INT_ARGS = {
    "external_id": "External id",
    "external_id_legacy": "external id",
    "correlation": "correlation",
    "stream": "stream",
    "device": "device",
    "bytes": "bytes",
    "total_allocated": "Total Allocated",
    "total_reserved": "Total Reserved",
    "mem_bytes": "Bytes",
    "addr": "Addr",
    "device_id": "Device Id",
    "device_type": "Device Type",
    "in_nelems": "In msg nelems",
    "out_nelems": "Out msg nelems",
}
"""Integer args (ROCm writes some as strings, ``"bytes": "9216"``, so any number or numeric string is read)."""
_RAW_ARGS = {"input_dims": "Input Dims", "input_types": "Input type", "grid": "grid", "block": "block"}
_TEXT_ARGS = {"collective": "Collective name", "dtype": "dtype", "group": "Process Group Name"}


_STRING_COLUMNS = ("name", "cat", "pid", "tid", "input_dims", "input_types", "collective", "group", "grid", "block")
_LAUNCH_SHAPES = ("grid", "block")
"""Kernel launch dimensions, read as JSON text (``[2, 66, 1]``) and kept as ``x,y,z``."""
_MEMORY_STRINGS = ("pid", "tid")
_MEMORY_NUMBERS = ("ts", "device_id", "mem_bytes", "total_allocated", "total_reserved", "addr", "device_type")
_MEMORY_RENAMES = {"device_id": "device", "mem_bytes": "bytes"}


@dataclass
class _Chunk:
    """One chunk's columns: numeric arrays, locally coded strings, and what was dropped."""

    numbers: dict[str, np.ndarray]
    strings: dict[str, Coded]
    mem_numbers: dict[str, np.ndarray]
    mem_strings: dict[str, Coded]
    skipped: int
    negative: int
    counters: int
    early: int


def _chunk_columns(cols: Columns) -> _Chunk:
    """One chunk's work events and memory events as table columns (runs in a worker when reading in parallel)."""
    v = cols.values
    ph = texts_in(v["ph"], {"X"})
    work = ph & ~texts_in(v["cat"], _SKIPPED_CATS, str.lower)
    complete = (v["ts"] != ABSENT) & (v["dur"] != ABSENT) & (v["name"][0] >= 0)
    memory = texts_in(v["ph"], {"i"}) & texts_in(v["name"], {_MEMORY_EVENT})
    mem_complete = (
        (v["args"] == 1) & (v["ts"] != ABSENT) & _plausible(v, ("mem_bytes", "total_allocated", "total_reserved"))
    )
    complete &= _plausible_device(v["device"])
    mem_complete &= _plausible_device(v["device_id"])
    early = (v["ts"] < 0) & (v["ts"] != ABSENT)
    keep, mem_keep = work & complete & ~early, memory & mem_complete & ~early
    rows, mem_rows = np.flatnonzero(keep), np.flatnonzero(mem_keep)  # taken by index: 5x faster than by mask
    dur = v["dur"].take(rows)
    numbers = {
        "ts": v["ts"].take(rows),
        "dur": np.maximum(dur, 0),
        "device": _no_row(v["device"].take(rows)),
        "stream": _no_row(v["stream"].take(rows)),
        "correlation": _no_row(v["correlation"].take(rows)),
        "external_id": _no_row(_first_present(v["external_id"], v["external_id_legacy"]).take(rows)),
        "bytes": _message_bytes(v, rows),
    }
    mem_numbers = {_MEMORY_RENAMES.get(k, k): _no_row(v[k].take(mem_rows)) for k in _MEMORY_NUMBERS}
    return _Chunk(
        numbers,
        {key: _subset(v[key], rows) for key in _STRING_COLUMNS},
        mem_numbers,
        {key: _subset(v[key], mem_rows) for key in _MEMORY_STRINGS},
        int((work & ~complete).sum() + (memory & ~mem_complete).sum()),
        int((dur < 0).sum()),
        int((texts_in(v["ph"], {"C"}) | (ph & texts_in(v["cat"], {counters.RANGE_CATEGORY}))).sum()),
        int(((work & complete) | (memory & mem_complete))[early].sum()),
    )


def _plausible(v: dict, keys: tuple[str, ...]) -> np.ndarray:
    """Rows whose byte counts (absent, or below 2**50 either way) cannot overflow a sum of int64."""
    ok = np.ones(len(v["ts"]), dtype=bool)
    for key in keys:
        ok &= (v[key] == ABSENT) | (np.abs(np.where(v[key] == ABSENT, 0, v[key])) < sizes.MAX_BYTES)
    return ok


def _plausible_device(device: np.ndarray) -> np.ndarray:
    """Rows whose device index is absent or within [-1, MAX_DEVICE_INDEX] (an int32 column)."""
    return (device == ABSENT) | ((device >= -1) & (device <= MAX_DEVICE_INDEX))


def _subset(coded: Coded, rows: np.ndarray) -> Coded:
    return coded[0].take(rows), coded[1]


def _no_row(values: np.ndarray) -> np.ndarray:
    return np.where(values == ABSENT, NO_ROW, values)


def _first_present(first: np.ndarray, second: np.ndarray) -> np.ndarray:
    return np.where(first != ABSENT, first, second)


class _Columns:
    """The chunks' columns merged: numeric parts, globally coded strings, counts."""

    def __init__(self, chunks: list[_Chunk]) -> None:
        self.strings = {name: Interner() for name in _STRING_COLUMNS}
        self.mem_strings = {name: Interner() for name in _MEMORY_STRINGS}
        self.parts: dict[str, list[np.ndarray]] = {}
        self.mem_parts: dict[str, list[np.ndarray]] = {}
        self.skipped = sum(c.skipped for c in chunks)
        self.negative = sum(c.negative for c in chunks)
        self.counters = sum(c.counters for c in chunks)
        self.early = sum(c.early for c in chunks)
        for c in chunks:
            _append(self.parts, c.numbers | {k: self.strings[k].merge(v) for k, v in c.strings.items()})
            _append(self.mem_parts, c.mem_numbers | {k: self.mem_strings[k].merge(v) for k, v in c.mem_strings.items()})

    def column(self, key: str) -> np.ndarray:
        return np.concatenate(self.parts.get(key) or [np.empty(0, dtype=np.int64)])

    def mem_column(self, key: str) -> np.ndarray:
        return np.concatenate(self.mem_parts.get(key) or [np.empty(0, dtype=np.int64)])


def _append(parts: dict[str, list[np.ndarray]], arrays: dict[str, np.ndarray]) -> None:
    for key, arr in arrays.items():
        parts.setdefault(key, []).append(arr)


def parse(path: Path) -> tuple[pd.DataFrame, pd.DataFrame, TraceMeta]:
    """Parse one Kineto trace file into (events, memory, meta) without links or steps; impossible values are dropped
    or clipped, each kind counted in ``meta.adjustments`` with a warning."""
    stream = Stream()
    exact = _needs_exact_ts(path)
    read = Reader(_fields(exact))
    chunks = map_chunks(path, read, stream, _chunk_columns, worker_count(path), threads=read.native)
    cols = _Columns(chunks)
    del chunks
    skipped = stream.skipped + cols.skipped
    with allocator.reusing():  # the frames' transients reuse pages; cols (the reader threads' blocks) freed after
        events, memory, strays = _without_strays(_events_frame(cols), _memory_frame(cols))
    if not len(events) and not len(memory):
        early = f"; {cols.early:,} were dropped for a negative timestamp" if cols.early else ""
        raise TraceError(path, _nothing_to_analyze(stream.events, skipped) + early)
    adjusted = {
        _SKIPPED: skipped,
        _NEGATIVE: cols.negative,
        _EARLY: cols.early,
        _STRAY: strays,
        _OVERLONG: _clip_overlong(events, memory),
    }
    meta = _meta(path, stream.header, events, stream.warnings + _data_warnings(path, adjusted))
    for reason, count in adjusted.items():
        meta.adjust(reason, count)
    if cols.counters:
        events = counters.with_samples(events, counters.read(path, exact))
    return events, memory, meta


_SKIPPED = "events with missing or wrongly typed fields dropped"
_NEGATIVE = "negative durations clipped to 0 ns"
_EARLY = "events with a negative timestamp dropped"
_STRAY = "events far outside the trace's time window dropped"
_OVERLONG = "durations reaching far past the trace's time window clipped to its end"
_STRAY_FACTOR = 10
"""An event is stray when it starts (or, for a duration, ends) further from the bulk of the trace's events (the 1st
to the 99th percentile of their starts) than this many times the bulk's length and at least _STRAY_MIN_NS: a clock
that jumped or a broken value, never a real event of the profiled window (a first step that waits 13 s for Triton to
compile its kernels, in a trace whose other events span 1.5 ms, is well inside)."""
_STRAY_MIN_NS = 3600 * 1_000_000_000
_WINDOW_LIMIT = 1 << 61
"""Window bounds are kept within this, so that differences of times inside it cannot overflow int64."""


def _window(events: pd.DataFrame, memory: pd.DataFrame) -> tuple[int, int]:
    """The times (ns) within which a real event of this trace starts and ends."""
    ts = events["ts"].to_numpy() if len(events) else memory["ts"].to_numpy()
    if not len(ts):
        return -_WINDOW_LIMIT, _WINDOW_LIMIT
    low, high = (int(q) for q in np.quantile(ts, [0.01, 0.99], method="nearest"))
    margin = max(_STRAY_FACTOR * (high - low), _STRAY_MIN_NS)
    return max(low - margin, -_WINDOW_LIMIT), min(high + margin, _WINDOW_LIMIT)


def _without_strays(events: pd.DataFrame, memory: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame, int]:
    """The events and memory events that start inside the trace's window, and how many did not."""
    low, high = _window(events, memory)
    keep = [(df["ts"].to_numpy() >= low) & (df["ts"].to_numpy() <= high) for df in (events, memory)]
    strays = sum(int((~k).sum()) for k in keep)
    if not strays:
        return events, memory, 0
    events, memory = (df[k].reset_index(drop=True) for df, k in zip((events, memory), keep, strict=True))
    return events, memory, strays


def _clip_overlong(events: pd.DataFrame, memory: pd.DataFrame) -> int:
    """End events that reach past the window at the last end inside it; how many were clipped."""
    if not len(events):
        return 0
    high = _window(events, memory)[1]
    ts, dur = events["ts"].to_numpy(), events["dur"].to_numpy()
    over = dur > high - ts
    if not over.any():
        return 0
    inside = ts[~over] + dur[~over]
    last = int(inside.max()) if len(inside) else int(ts.max())
    events.loc[over, "dur"] = np.maximum(last - ts[over], 0)
    return int(over.sum())


def _nothing_to_analyze(read: int, skipped: int) -> str:
    if skipped:
        return f"has no usable events: all {skipped:,} had missing or wrongly typed fields"
    if read:
        return f"has {read:,} events but none to analyze (no complete 'X' events, no [memory] events)"
    return "has an empty traceEvents array (no events to analyze)"


def _data_warnings(path: Path, adjusted: dict[str, int]) -> list[str]:
    """Warnings about events that were dropped or clipped while reading."""
    texts = {
        _SKIPPED: "skipped {:,} events with missing or wrongly typed fields",
        _NEGATIVE: "{:,} events have a negative duration; counted them as 0 ns",
        _EARLY: "dropped {:,} events with a negative timestamp (a trace's times count up from a time base)",
        _STRAY: f"dropped {{:,}} events that start far outside the trace's time window (more than {_STRAY_FACTOR}x "
        "the length of the bulk of its events, and more than an hour, away from it)",
        _OVERLONG: "clipped {:,} durations that reach far past the trace's time window to the last end inside it",
    }
    return [f"{path}: {texts[reason].format(count)}" for reason, count in adjusted.items() if count]


def _needs_exact_ts(path: Path) -> bool:
    """Do the first events' timestamps have more digits than a float64 keeps?"""
    head = events_head(path) or b""
    start = head.find(b'"ts"')
    if start < 0:
        return False
    text = head[start + 4 : start + 64].lstrip(b": \t\r\n").split(b",")[0].split(b"}")[0].strip()
    whole, _, frac = text.partition(b".")
    return bool(frac) and whole.isdigit() and int(whole) >= _EXACT_TS_FROM


def _message_bytes(v: dict, rows: np.ndarray) -> np.ndarray:
    """Bytes moved: the ``bytes`` arg, else a collective's element count times its dtype's size."""
    codes, dtypes = v["dtype"]
    element_bytes = np.array(
        [dtype_bytes(d) or dtype_bytes(d.lower().replace("c10::", "")) for d in dtypes] + [0], dtype=np.int64
    )
    size = element_bytes[codes.take(rows)]
    nelems = _first_present(v["in_nelems"], v["out_nelems"]).take(rows)
    moved = _no_row(v["bytes"].take(rows))
    derived = (moved == NO_ROW) & (size > 0) & (nelems != ABSENT)
    plausible = np.abs(np.where(derived, nelems, 0)) < sizes.MAX_ELEMENTS
    # an impossible count (negative, or bytes beyond int64) stays impossible, for sizes.check to count and clear
    return np.where(derived, np.where(plausible, nelems * size, -sizes.MAX_ELEMENTS), moved)


def _events_frame(cols: _Columns) -> pd.DataFrame:
    columns = {key: cols.column(key) for key in ("ts", "dur")}
    columns |= {key: cols.strings[key].categorical(cols.parts.get(key, [])) for key in _STRING_COLUMNS}
    columns |= {key: cols.column(key) for key in ("device", "stream", "correlation", "external_id", "bytes")}
    columns |= {key: _launch_shape(columns[key]) for key in _LAUNCH_SHAPES}
    df = pd.DataFrame(columns, copy=False)
    df["kind"] = _kinds(df["cat"].array, df["name"].array)
    _fill_device_lanes(df)
    return df


def _launch_shape(raw: pd.Categorical) -> pd.Categorical:
    """Launch dimensions as ``x,y,z`` (brackets and blanks of the JSON text dropped; other text kept as it is)."""
    text = [_xyz(str(c)) for c in raw.categories]
    distinct = {t: i for i, t in enumerate(dict.fromkeys(text))}
    remap = np.array([distinct[t] for t in text] + [-1], dtype=np.int32)
    return pd.Categorical.from_codes(remap[raw.codes], categories=pd.Index(list(distinct), dtype=object))


def _xyz(text: str) -> str:
    """``[2, 66, 1]`` as ``2,66,1``; text that is not a JSON array as it is."""
    inner = "".join(text.split())
    return inner[1:-1] if inner.startswith("[") and inner.endswith("]") else text


_KIND_ORDER = [k.value for k in Kind]
_STEP_KIND_CODES = [_KIND_ORDER.index(k) for k in schema.PATH]
"""Kinds a ``ProfilerStep#N`` event can have before it is re-kinded as a step marker."""


def _kinds(cat: pd.Categorical, name: pd.Categorical) -> pd.Categorical:
    """Kind of each event: by its ``cat``, and a step marker where a CPU op or annotation is named ProfilerStep#N."""
    by_cat = [_KIND_ORDER.index(_KIND_BY_CAT.get(c.lower(), Kind.OTHER).value) for c in cat.categories]
    kind = np.array(by_cat, dtype=np.int8)[cat.codes]
    step_name = np.array([n.startswith(_STEP_PREFIX) for n in name.categories], dtype=bool)[name.codes]
    kind[step_name & np.isin(kind, _STEP_KIND_CODES)] = _KIND_ORDER.index(Kind.STEP.value)
    return pd.Categorical.from_codes(kind, categories=_KIND_ORDER)


def _fill_device_lanes(df: pd.DataFrame) -> None:
    """Device work without device/stream args (MTIA, old traces) takes them from pid/tid."""
    device_rows = df["kind"].isin(schema.ON_DEVICE_LANE).to_numpy()
    for col, lane in (("device", "pid"), ("stream", "tid")):
        missing = device_rows & (df[col].to_numpy() == NO_ROW)
        if missing.any():
            digits = df.loc[missing, lane].astype(str).str.extract(r"(\d+)\s*$")[0]
            df.loc[missing, col] = pd.to_numeric(digits, errors="coerce").fillna(NO_ROW).astype(np.int64)


def _memory_frame(cols: _Columns) -> pd.DataFrame:
    df = pd.DataFrame(
        {
            key: cols.mem_column(key)
            for key in ("ts", "device", "bytes", "total_allocated", "total_reserved", "addr", "device_type")
        }
    )
    for key in _MEMORY_STRINGS:
        df[key] = cols.mem_strings[key].categorical(cols.mem_parts.get(key, []))
    return df.sort_values("ts", kind="stable").reset_index(drop=True)


def _meta(path: Path, header: dict, events: pd.DataFrame, warnings: list[str]) -> TraceMeta:
    h = _Header(header, path)
    dist = h.table(header, "distributedInfo")
    rank = h.integer(dist, "rank", None, low=0, where="distributedInfo.", high=MAX_RANKS - 1)
    ends = events["ts"].to_numpy() + events["dur"].to_numpy()
    meta = TraceMeta(
        platform=Platform.CPU,
        source_format="kineto",
        format_version=h.text(header, "schemaVersion"),
        paths=[str(path)],
        ranks=[rank or 0],
        world_size=h.integer(dist, "world_size", 1, low=1, where="distributedInfo.", high=MAX_RANKS),
        rank_known=rank is not None,
        devices=h.devices(),
        base_time_ns=h.integer(header, "baseTimeNanoseconds", 0, low=0),
        start_ns=int(events["ts"].min()) if len(events) else 0,
        end_ns=int(ends.max()) if len(events) else 0,
        process_groups=h.process_groups(dist),
        warnings=warnings,
        facts={k: h.scalar(header, k) for k in _FACT_KEYS if k in header}
        | ({k: h.scalar(dist, k) for k in ("backend", "nccl_version")} if rank is not None else {}),
    )
    meta.job_ids = _job_ids(dist, meta)
    h.check_display_unit()
    meta.platform = _platform(events, meta.devices)
    meta.warnings.extend(h.warnings)
    return meta


def _job_ids(dist: dict, meta: TraceMeta) -> dict:
    """What every rank of the job records alike in its distributedInfo: world size, backend, NCCL version."""
    ids = {"world size": meta.world_size if dist.get("world_size") == meta.world_size else None}
    ids |= {"backend": meta.facts.get("backend"), "NCCL version": meta.facts.get("nccl_version")}
    return {k: v for k, v in ids.items() if isinstance(v, str | int) and v != ""}


_FACT_KEYS = ("trace_id", "cuda_runtime_version", "cuda_driver_version", "cupti_version", "roctracer_version")
_NUMERIC_DEVICE_KEYS = frozenset(
    {
        *("id", "totalGlobalMem", "computeMajor", "computeMinor", "numSms", "warpSize"),
        *("maxThreadsPerBlock", "maxThreadsPerMultiprocessor", "regsPerBlock", "regsPerMultiprocessor"),
        *("sharedMemPerBlock", "sharedMemPerBlockOptin", "sharedMemPerMultiprocessor"),
        *("maxSharedMemoryPerMultiProcessor", "maxGridHeight", "maxGridWidth"),
        *("runtimeMajorVersion", "runtimeMinorVersion"),
    }
)
"""deviceProperties that Kineto writes as numbers (seen in CUDA and ROCm traces); a string there is dropped."""
_SCALARS = (str, int, float, bool)


class _Header:
    """Reads the trace's top-level keys leniently: a value of the wrong type is a warning and the default."""

    def __init__(self, header: dict, path: Path) -> None:
        self.header = header
        self.path = path
        self.warnings: list[str] = []

    def _wrong(self, where: str, value: object, expected: str, used: object) -> None:
        shown = repr(value)[:40] if isinstance(value, _SCALARS) else f"a JSON {_json_type(value)}"
        self.warnings.append(f"{self.path}: header field {where} is {shown}, not {expected}; used {used}")

    def table(self, owner: dict, key: str) -> dict:
        """``owner[key]`` when it is an object, else {} (with a warning when present)."""
        value = owner.get(key)
        if value is None or isinstance(value, dict):
            return value or {}
        self._wrong(key, value, "an object", "none")
        return {}

    def integer(
        self, owner: dict, key: str, default: int | None, low: int, where: str = "", high: int = (1 << 63) - 1
    ) -> int | None:
        """``owner[key]`` as an int in [``low``, ``high``] (from an int, a number or a numeric string)."""
        if key not in owner or owner[key] is None:
            return default
        value = _as_int(owner[key])
        if value is None or not low <= value <= high:
            shown = "none" if default is None else default
            self._wrong(where + key, owner[key], f"a whole number in [{low:,}, {high:,}]", shown)
            return default
        return value

    def text(self, owner: dict, key: str) -> str:
        value = owner.get(key, "")
        if isinstance(value, str | int | float):
            return str(value)
        self._wrong(key, value, "a string or number", "''")
        return ""

    def scalar(self, owner: dict, key: str) -> str | int | float | bool | None:
        value = owner.get(key)
        if value is None or isinstance(value, _SCALARS):
            return value
        self._wrong(key, value, "a string or number", "none")
        return None

    def check_display_unit(self) -> None:
        unit = self.header.get("displayTimeUnit", "ms")
        if unit not in ("ms", "ns"):
            self._wrong("displayTimeUnit", unit, "'ms' or 'ns'", "'ms' (it only sets how trace viewers show times)")

    def devices(self) -> list[Device]:
        """The deviceProperties entries that are objects, with numeric properties that are numbers."""
        entries = self.header.get("deviceProperties") or []
        if not isinstance(entries, list):
            self._wrong("deviceProperties", entries, "an array", "none")
            return []
        out = []
        for i, p in enumerate(entries):
            if not isinstance(p, dict):
                self._wrong(f"deviceProperties[{i}]", p, "an object", "none")
                continue
            props = {key: value for key, value in p.items() if self._device_property(i, key, value)}
            name = props.get("name", "")
            memory = _as_int(props.get("totalGlobalMem"))
            out.append(
                Device(
                    index=self.integer(props, "id", i, low=0, where=f"deviceProperties[{i}].", high=MAX_DEVICE_INDEX),
                    name=name if isinstance(name, str) else str(name),
                    memory_bytes=memory if memory and memory > 0 else None,
                    properties=props,
                )
            )
        return out

    def _device_property(self, i: int, key: str, value: object) -> bool:
        """Is ``value`` fit to keep: a number where one belongs, else a scalar? (null: absent, silently)"""
        if value is None:
            return False
        if key in _NUMERIC_DEVICE_KEYS:
            fit = isinstance(value, int | float) and not isinstance(value, bool) and _as_int(value) is not None
        else:
            fit = isinstance(value, _SCALARS)
        if not fit:
            self._wrong(
                f"deviceProperties[{i}].{key}", value, "a number" if key in _NUMERIC_DEVICE_KEYS else "a scalar", "none"
            )
        return fit

    def process_groups(self, dist: dict) -> list[dict]:
        """The pg_config entries that are objects, a pg_size that is not a count left out."""
        groups = dist.get("pg_config") or []
        if not isinstance(groups, list):
            self._wrong("distributedInfo.pg_config", groups, "an array", "none")
            return []
        out = []
        for i, pg in enumerate(groups):
            if not isinstance(pg, dict):
                self._wrong(f"distributedInfo.pg_config[{i}]", pg, "an object", "none")
                continue
            size = self.integer(pg, "pg_size", None, low=0, where=f"distributedInfo.pg_config[{i}].")
            out.append(
                {k: v for k, v in pg.items() if k != "pg_size"} | ({"pg_size": size} if size is not None else {})
            )
        return out


def _as_int(value: object) -> int | None:
    """An int from an int, a finite number or a numeric string within int64; None for anything else."""
    if isinstance(value, str):
        text = value.strip()
        try:
            value = int(text)
        except ValueError:
            try:
                value = float(text)
            except ValueError:
                return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return int(value) if abs(value) < 2**63 else None


def _json_type(value: object) -> str:
    return "object" if isinstance(value, dict) else "array" if isinstance(value, list) else "null"


def _platform(events: pd.DataFrame, devices: list[Device]) -> Platform:
    cats = set(events["cat"].cat.categories.str.lower())
    if any(c.startswith("mtia") for c in cats):
        return Platform.MTIA
    names = " ".join(d.name for d in devices)
    if "AMD" in names or "Instinct" in names or "Radeon" in names:
        return Platform.ROCM
    kind, name = events["kind"].array, events["name"].array
    runtime = name.codes[kind.codes == kind.categories.get_loc(Kind.RUNTIME.value)]
    hip = np.array([str(n).startswith("hip") for n in name.categories] + [False])  # per name, not per row
    if len(runtime) and hip[runtime].mean() > 0.5:
        return Platform.ROCM
    device_work = np.isin(kind.codes, kind.categories.get_indexer(list(schema.DEVICE))).any()
    return Platform.CUDA if device_work or devices else Platform.CPU
