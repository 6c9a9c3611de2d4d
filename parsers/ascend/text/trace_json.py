"""trace_view.json / msprof_*.json bytes → the kept events as columns (``Events``), or the TraceError saying why not."""

from __future__ import annotations

import io
import math
import os
import zlib
from dataclasses import dataclass
from pathlib import Path

import msgspec
import numpy as np
import pandas as pd
from traceanalyzer.parsers.ascend import common as c
from traceanalyzer.parsers.columns import Coded, Columns, Field, Interner, Read, Reader, texts_in
from traceanalyzer.parsers.jsonstream import Stream, map_chunks, open_binary, read_all, worker_count

from traceanalyzer.errors import TraceError

COMPLETE = "X"
METADATA = "M"
FLOW_START = "s"
FLOW_PHASES = frozenset({FLOW_START, "f"})
FLOW_CAT = "HostToDevice"
QUEUE_FLOW_CAT = "async_task_queue"
"""Flows ``enqueue_to_dequeue``: ``Enqueue`` (Python thread, inside the op) → ``Dequeue@<op>`` (task-queue thread)."""
_BOUND_FLOW_CATS = frozenset({FLOW_CAT, QUEUE_FLOW_CAT})


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


RAW_ARGS = {
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
    *(Field(name, ("args", key), Read.RAW) for name, key in RAW_ARGS.items()),
)
"""What the parser reads of each trace event (``ts``: µs on the epoch, often a string, kept to the ns digit)."""

NUMBERS = frozenset(f.name for f in FIELDS if f.read in (Read.EXACT_NS, Read.INT, Read.OBJECT)) | {"dur"}
"""Fields kept as int64 arrays; ``dur`` is read as text and made ns per chunk, as float µs rounded (``rint(v * 1000)``,
which the NS read does not match at half-ns ties)."""
_NUMBER_START = frozenset("-0123456789")
_PEEK_BYTES = 4096


class _Missing:
    """An args key the event does not have (``null`` decodes to None, which is a value)."""


MISSING = _Missing()


def given(*values):
    """The first value that is not MISSING (the last one always counts)."""
    return next((v for v in values if v is not MISSING), values[-1])


def read(trace: Path, warnings: c.Notes) -> Events:
    """The trace's complete, metadata and bound flow events; the TraceErrors of a file that is not such a trace."""
    first, last = _edges(trace)
    if not first:
        raise TraceError(trace, "is empty")
    if first != b"[" or last not in (b"]", None):
        _explain(trace)
    stream = Stream()
    try:
        reader = Reader(FIELDS)
        workers = worker_count(trace) if reader.native else 1
        chunks = map_chunks(trace, reader, stream, _kept, workers, threads=True)
    except TraceError:
        _explain(trace)
        raise
    if stream.truncated or any(chunk.wrong for chunk in chunks):
        _explain(trace)
    if stream.skipped:
        _explain(trace)
        warnings.adjust(str(trace), "events whose fields have the wrong type skipped", stream.skipped)
    if not stream.events:
        raise TraceError(trace, "has an empty event array (no events to analyze)")
    warnings.extend(stream.warnings)
    return Events([chunk.values for chunk in chunks])


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
    phase = texts_in(v["ph"], {COMPLETE, METADATA})
    keep = phase | (texts_in(v["ph"], FLOW_PHASES) & texts_in(v["cat"], _BOUND_FLOW_CATS))
    codes, texts = v["dur"]
    number = np.array([t[:1] in _NUMBER_START for t in texts] + [True], dtype=bool)[codes]
    v["dur"] = np.append(c.us_float_to_ns(texts), 0)[codes]  # absent (code -1) is 0
    kept = {k: x[keep] if k in NUMBERS else (x[0][keep], x[1]) for k, x in v.items()}
    return _Chunk(kept, int((~number).sum()))


class Events:
    """Kept events of the whole file: numeric fields as arrays, text fields as codes into their distinct values.

    Code 0 is '' (absent); an args value is its JSON text.
    """

    def __init__(self, parts: list[dict[str, np.ndarray | Coded]]) -> None:
        interners = {f.name: Interner() for f in FIELDS if f.name not in NUMBERS}
        self.numbers = {k: _concat([p[k] for p in parts], np.int64) for k in NUMBERS}
        self.codes = {k: _concat([i.merge(p[k]) for p in parts], np.int32) for k, i in interners.items()}
        self.values = {k: list(i.codes) for k, i in interners.items()}

    def among(self, key: str, texts: set[str] | frozenset[str]) -> np.ndarray:
        """Per event, whether the text field is one of ``texts``."""
        return np.array([v in texts for v in self.values[key]], dtype=bool)[self.codes[key]]

    def text(self, key: str, at: np.ndarray) -> np.ndarray:
        """The text field of the events at ``at`` (an object array)."""
        return np.asarray(self.values[key], dtype=object)[self.codes[key][at]]

    def value(self, key: str, code: int):
        """A distinct value as the old per-event code saw it: args decoded from JSON (MISSING where absent)."""
        text = self.values[key][code]
        if key not in RAW_ARGS:
            return text
        return msgspec.json.decode(text) if text else MISSING

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
