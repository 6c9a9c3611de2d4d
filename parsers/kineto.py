"""torch.profiler (Kineto) Chrome-trace JSON → the common event and memory tables.

Reads every vintage seen in the wild: 2021 legacy categories (``Operator``/``Runtime``/``Kernel``),
2022 ``async_cpu_to_gpu`` flows, ``ac2g`` flows, µs floats with ns digits (integer ns without float
damage), ``baseTimeNanoseconds``, ROCm, MTIA and CPU-only traces. Runtime↔device links come from
the ``correlation`` arg, which every generation writes on both sides.
"""

from __future__ import annotations

import decimal
import functools
from dataclasses import dataclass
from operator import attrgetter
from pathlib import Path

import msgspec
import numpy as np
import pandas as pd

from parsers.jsonstream import Stream, map_chunks, worker_count
from traceanalyzer import schema
from traceanalyzer.errors import TraceError
from traceanalyzer.schema import NO_ROW, Device, Kind, Platform, TraceMeta

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
_Int = int | float | str | None
"""An integer arg as written: ROCm runtime calls write some as strings (``"bytes": "9216"``), so accept any."""
_STEP_PREFIX = "ProfilerStep#"
_MEMORY_EVENT = "[memory]"


class Args(
    msgspec.Struct,
    gc=False,
    rename={
        "external_id": "External id",
        "external_id_legacy": "external id",
        "input_dims": "Input Dims",
        "input_types": "Input type",
        "total_allocated": "Total Allocated",
        "total_reserved": "Total Reserved",
        "mem_bytes": "Bytes",
        "addr": "Addr",
        "device_id": "Device Id",
        "device_type": "Device Type",
        "collective": "Collective name",
        "in_nelems": "In msg nelems",
        "out_nelems": "Out msg nelems",
        "dtype": "dtype",
        "group": "Process Group Name",
        "group_desc": "Process Group Description",
    },
):
    """The args fields the table needs; everything else in ``args`` is skipped while decoding."""

    external_id: _Int = None
    external_id_legacy: _Int = None
    correlation: _Int = None
    stream: _Int = None
    device: _Int = None
    bytes: _Int = None
    input_dims: msgspec.Raw = msgspec.Raw(b"")
    input_types: msgspec.Raw = msgspec.Raw(b"")
    total_allocated: _Int = None
    total_reserved: _Int = None
    mem_bytes: _Int = None
    addr: _Int = None
    device_id: _Int = None
    device_type: _Int = None
    collective: str | None = None
    in_nelems: _Int = None
    out_nelems: _Int = None
    dtype: str | None = None
    group: str | None = None
    group_desc: str | None = None
    name: str | None = None


_NO_ARGS = Args()


class Event(msgspec.Struct, gc=False):
    """One Chrome-trace event, decoded with the fields the table needs."""

    ph: str = ""
    cat: str | None = None
    name: str | None = None
    pid: int | str = 0
    tid: int | str = 0
    ts: float | None = None
    dur: float | None = None
    args: Args | None = None


class ExactEvent(Event, gc=False):
    """An event whose ``ts`` keeps every digit (epoch-µs timestamps with ns fractions)."""

    ts: int | decimal.Decimal | None = None


class _Interner:
    """Map values to dense integer codes across chunks, so each distinct value is stored once."""

    def __init__(self) -> None:
        self.codes: dict = {}

    def merge(self, coded: _Coded) -> np.ndarray:
        """Global codes of a chunk's locally coded values."""
        codes, uniques = coded
        setdefault, table = self.codes.setdefault, self.codes
        remap = np.array([setdefault(v, len(table)) for v in uniques], dtype=np.int32)
        return remap[codes] if len(remap) else codes

    def categorical(self, parts: list[np.ndarray]) -> pd.Categorical:
        """The coded values as text (None and b'' become ''; 7 and '7' become one category)."""
        codes = np.concatenate(parts) if parts else np.empty(0, dtype=np.int32)
        texts = np.asarray([_text(k) for k in self.codes] + [""], dtype=object)
        remap, categories = pd.factorize(texts)
        return pd.Categorical.from_codes(remap[codes], categories=categories)


_Coded = tuple[np.ndarray, list]
"""A chunk's values as (codes, distinct values in order of first appearance)."""


def _code(values: list) -> _Coded:
    uniques = list(dict.fromkeys(values))
    index = dict(zip(uniques, range(len(uniques)), strict=True))
    return np.array(list(map(index.__getitem__, values)), dtype=np.int32), uniques


def _text(value: object) -> str:
    if value is None or value != value:  # None, or the NaN factorize uses for it
        return ""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def _ints(values: list) -> np.ndarray:
    """Optional ints (or numbers written as strings) → int64 with NO_ROW for None or non-numbers."""
    try:
        return np.array(values, dtype=np.int64)
    except (TypeError, ValueError, OverflowError):
        pass
    try:
        arr = np.array(values, dtype=np.float64)  # None → NaN
        return np.where(np.isnan(arr), NO_ROW, arr).astype(np.int64)
    except (TypeError, ValueError):
        return np.fromiter((_int_or_none(v) for v in values), np.int64, len(values))


_int_any_base = functools.partial(int, base=0)


def _int_or_none(value: object) -> int:
    """An int from an int, a float or a numeric string (decimal or 0x hex); NO_ROW otherwise."""
    if isinstance(value, str):
        for convert in (int, float, _int_any_base):
            try:
                value = convert(value)
                break
            except ValueError:
                continue
    if isinstance(value, int | float) and value == value and abs(value) < 2**63:
        return int(value)
    return NO_ROW


_STRING_COLUMNS = ("name", "cat", "pid", "tid", "input_dims", "input_types", "collective", "group")
_MEMORY_STRINGS = ("pid", "tid")


@dataclass
class _Chunk:
    """One chunk's columns: numeric arrays, locally coded strings, and what was dropped or repaired."""

    numbers: dict[str, np.ndarray]
    strings: dict[str, _Coded]
    mem_numbers: dict[str, np.ndarray]
    mem_strings: dict[str, _Coded]
    skipped: int
    negative: int


def _chunk_columns(chunk: list[Event], exact: bool) -> _Chunk:
    """Turn one decoded chunk into column arrays (runs in a worker process when decoding in parallel)."""
    xs = _complete(_durations_events(chunk), ("ts", "dur", "name"))
    skipped = len(xs[1])
    xs = xs[0]
    args = [e.args or _NO_ARGS for e in xs]
    dur = _ns(_field(xs, "dur"), False)
    numbers = {
        "ts": _ns(_field(xs, "ts"), exact),
        "dur": np.maximum(dur, 0),
        "device": _ints(_field(args, "device")),
        "stream": _ints(_field(args, "stream")),
        "correlation": _ints(_field(args, "correlation")),
        "external_id": _ints([a.external_id if a.external_id is not None else a.external_id_legacy for a in args]),
        "bytes": _message_bytes(args),
    }
    strings = {key: _code(_field(xs, key)) for key in ("name", "cat", "pid", "tid")}
    strings["input_dims"] = _code(list(map(bytes, _field(args, "input_dims"))))
    strings["input_types"] = _code(list(map(bytes, _field(args, "input_types"))))
    strings["collective"] = _code(_field(args, "collective"))
    strings["group"] = _code(_field(args, "group"))
    memory, dropped = _complete([e for e in chunk if e.ph == "i" and e.name == _MEMORY_EVENT], ("args", "ts"))
    mem_numbers, mem_strings = _memory_columns(memory, exact)
    return _Chunk(numbers, strings, mem_numbers, mem_strings, skipped + len(dropped), int((dur < 0).sum()))


def _field(items: list, name: str) -> list:
    return list(map(attrgetter(name), items))


def _durations_events(chunk: list[Event]) -> list[Event]:
    """The chunk's complete ("X") events, without the categories that are not work (the profiler's own span)."""
    xs = [e for e in chunk if e.ph == "X"]
    skip = {c for c in set(_field(xs, "cat")) if (c or "").lower() in _SKIPPED_CATS}
    return [e for e in xs if e.cat not in skip] if skip else xs


def _complete(events: list[Event], fields: tuple[str, ...]) -> tuple[list[Event], list[Event]]:
    """(events with every field present, the others)."""
    missing = attrgetter(*fields)
    bad = [e for e in events if None in missing(e)]
    return ([e for e in events if None not in missing(e)], bad) if bad else (events, bad)


def _memory_columns(events: list[Event], exact: bool) -> tuple[dict[str, np.ndarray], dict[str, _Coded]]:
    args = _field(events, "args")
    numbers = {
        "ts": _ns(_field(events, "ts"), exact),
        "device": _ints(_field(args, "device_id")),
        "bytes": _ints(_field(args, "mem_bytes")),
        "total_allocated": _ints(_field(args, "total_allocated")),
        "total_reserved": _ints(_field(args, "total_reserved")),
        "addr": _ints(_field(args, "addr")),
        "device_type": _ints(_field(args, "device_type")),
    }
    return numbers, {"pid": _code(_field(events, "pid")), "tid": _code(_field(events, "tid"))}


class _Columns:
    """The chunks' columns merged: numeric parts, globally coded strings, counts."""

    def __init__(self, chunks: list[_Chunk]) -> None:
        self.strings = {name: _Interner() for name in _STRING_COLUMNS}
        self.mem_strings = {name: _Interner() for name in _MEMORY_STRINGS}
        self.parts: dict[str, list[np.ndarray]] = {}
        self.mem_parts: dict[str, list[np.ndarray]] = {}
        self.skipped = sum(c.skipped for c in chunks)
        self.negative = sum(c.negative for c in chunks)
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
    """Parse one Kineto trace file into (events, memory, meta) without links or steps."""
    stream = Stream()
    exact = _needs_exact_ts(path)
    event_type = ExactEvent if exact else Event
    chunks = map_chunks(path, event_type, stream, functools.partial(_chunk_columns, exact=exact), worker_count(path))
    cols = _Columns(chunks)
    del chunks
    events = _events_frame(cols)
    memory = _memory_frame(cols)
    if not len(events) and not len(memory):
        raise TraceError(path, _nothing_to_analyze(stream.skipped + cols.skipped))
    meta = _meta(
        path, stream.header, events, stream.warnings + _data_warnings(path, stream.skipped + cols.skipped, cols)
    )
    return events, memory, meta


def _nothing_to_analyze(skipped: int) -> str:
    if skipped:
        return f"has no usable events: all {skipped:,} had missing or wrongly typed fields"
    return "has an empty traceEvents array (no events to analyze)"


def _data_warnings(path: Path, skipped: int, cols: _Columns) -> list[str]:
    """Warnings about events that were dropped or repaired while reading."""
    out = []
    if skipped:
        out.append(f"{path}: skipped {skipped:,} events with missing or wrongly typed fields")
    if cols.negative:
        out.append(f"{path}: {cols.negative:,} events have a negative duration; counted them as 0 ns")
    return out


def _needs_exact_ts(path: Path) -> bool:
    from parsers.jsonstream import open_binary

    with open_binary(path) as f:
        try:
            head = f.read(1 << 16)
        except (OSError, EOFError):
            return False
    start = head.find(b'"ts"')
    if start < 0:
        return False
    text = head[start + 4 : start + 64].lstrip(b": \t\r\n").split(b",")[0].split(b"}")[0].strip()
    whole, _, frac = text.partition(b".")
    return bool(frac) and whole.isdigit() and int(whole) >= _EXACT_TS_FROM


_DTYPE_BYTES = {
    "float": 4,
    "float32": 4,
    "int": 4,
    "int32": 4,
    "double": 8,
    "float64": 8,
    "long": 8,
    "int64": 8,
    "half": 2,
    "float16": 2,
    "bfloat16": 2,
    "short": 2,
    "int16": 2,
    "byte": 1,
    "char": 1,
    "int8": 1,
    "uint8": 1,
    "bool": 1,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
}


def _message_bytes(args: list[Args]) -> np.ndarray:
    """Bytes moved: the ``bytes`` arg, else a collective's element count times its dtype's size."""
    out = _ints([a.bytes for a in args])
    for i in [i for i, a in enumerate(args) if a.dtype is not None]:
        if out[i] == NO_ROW:
            out[i] = _collective_bytes(args[i])
    return out


def _collective_bytes(a: Args) -> int:
    nelems = _int_or_none(a.in_nelems if a.in_nelems is not None else a.out_nelems)
    size = _DTYPE_BYTES.get((a.dtype or "").lower().replace("c10::", ""))
    return nelems * size if size and nelems != NO_ROW else NO_ROW


def _ns(values: list, exact: bool = False) -> np.ndarray:
    """µs numbers (float, int or Decimal) → integer ns, exactly where the input allows."""
    if not values:
        return np.empty(0, dtype=np.int64)
    if exact:
        return np.fromiter((int(decimal.Decimal(v) * 1000) for v in values), np.int64, len(values))
    arr = np.asarray(values, dtype=np.float64)
    whole = np.floor(arr)
    return whole.astype(np.int64) * 1000 + np.rint((arr - whole) * 1000).astype(np.int64)


def _events_frame(cols: _Columns) -> pd.DataFrame:
    df = pd.DataFrame({key: cols.column(key) for key in ("ts", "dur")})
    for key in _STRING_COLUMNS:
        df[key] = cols.strings[key].categorical(cols.parts.get(key, []))
    for key in ("device", "stream", "correlation", "external_id", "bytes"):
        df[key] = cols.column(key)
    kinds, step_names = _kinds(df)
    kind = kinds[df["cat"].cat.codes.to_numpy()]
    kind = np.where(step_names[df["name"].cat.codes.to_numpy()] & np.isin(kind, _STEP_KINDS), Kind.STEP.value, kind)
    df["kind"] = pd.Categorical(kind, categories=[k.value for k in Kind])
    _fill_device_lanes(df)
    return df


_STEP_KINDS = [Kind.CPU_OP.value, Kind.ANNOTATION.value]


def _kinds(df: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Kind by ``cat`` category code, and whether each ``name`` category is a step marker."""
    cats = df["cat"].cat.categories
    kinds = np.array([_KIND_BY_CAT.get(c.lower(), Kind.OTHER).value for c in cats], dtype=object)
    steps = np.array([n.startswith(_STEP_PREFIX) for n in df["name"].cat.categories], dtype=bool)
    return kinds, steps


def _fill_device_lanes(df: pd.DataFrame) -> None:
    """Device work without device/stream args (MTIA, old traces) takes them from pid/tid."""
    device_rows = df["kind"].isin([k.value for k in schema.DEVICE_KINDS | {Kind.GPU_ANNOTATION}]).to_numpy()
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
    dist = header.get("distributedInfo") or {}
    rank_known = isinstance(dist, dict) and "rank" in dist
    rank = int(dist.get("rank", 0)) if rank_known else 0
    devices = [
        Device(
            index=int(p.get("id", i)),
            name=str(p.get("name", "")),
            memory_bytes=p.get("totalGlobalMem"),
            properties=p,
        )
        for i, p in enumerate(header.get("deviceProperties") or [])
        if isinstance(p, dict)
    ]
    ends = events["ts"].to_numpy() + events["dur"].to_numpy()
    return TraceMeta(
        platform=_platform(events, devices),
        source_format="kineto",
        format_version=str(header.get("schemaVersion", "")),
        paths=[str(path)],
        ranks=[rank],
        world_size=int(dist.get("world_size", 1)) if isinstance(dist, dict) else 1,
        rank_known=rank_known,
        devices=devices,
        base_time_ns=int(header.get("baseTimeNanoseconds") or 0),
        start_ns=int(events["ts"].min()) if len(events) else 0,
        end_ns=int(ends.max()) if len(events) else 0,
        process_groups=list(dist.get("pg_config") or []) if isinstance(dist, dict) else [],
        warnings=warnings,
        extra={
            k: header[k]
            for k in ("trace_id", "cuda_runtime_version", "cuda_driver_version", "cupti_version", "roctracer_version")
            if k in header
        }
        | ({"backend": dist.get("backend"), "nccl_version": dist.get("nccl_version")} if rank_known else {}),
    )


def _platform(events: pd.DataFrame, devices: list[Device]) -> Platform:
    cats = set(events["cat"].cat.categories.str.lower())
    if any(c.startswith("mtia") for c in cats):
        return Platform.MTIA
    names = " ".join(d.name for d in devices)
    if "AMD" in names or "Instinct" in names or "Radeon" in names:
        return Platform.ROCM
    runtime = events.loc[events["kind"] == Kind.RUNTIME.value, "name"]
    if len(runtime) and runtime.astype(str).str.startswith("hip").mean() > 0.5:
        return Platform.ROCM
    device_work = events["kind"].isin([k.value for k in schema.DEVICE_KINDS]).any()
    return Platform.CUDA if device_work or devices else Platform.CPU
