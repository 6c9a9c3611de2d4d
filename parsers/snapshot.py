"""PyTorch CUDA memory snapshots (``torch.cuda.memory._dump_snapshot`` pickles) → the common event and memory tables.

A snapshot is a pickle of plain data: ``segments`` (the allocator's segments at the dump, each with its ``blocks``:
address, size, requested_size, state, frames), ``device_traces`` (per device, the recorded history: ``alloc``,
``free_requested``, ``free_completed``, ``segment_alloc``/``segment_free`` (``segment_map``/``segment_unmap`` with
expandable segments), ``oom``; each with addr, size, time_us and the Python frames that made it) and
``external_annotations`` (record_function ranges: START/END with time_us). It is read by an unpickler that builds
only what pickle's own opcodes build (dicts, lists, tuples, strings, bytes, numbers, booleans, None) and refuses
every global (``find_class`` raises), so a pickle that would import or call anything is refused before anything
in it runs.

The history is replayed into memory events: an allocation adds its block's size (the request rounded up to the
allocator's 512 B, or the block's recorded size when it is still live at the dump), ``free_completed`` subtracts
it, segments change the reserve. Totals are anchored at the state the dump records, so a history that lost its
oldest entries (``max_entries``) still ends at the dump's allocated and reserved bytes. Each allocation's Python
stack becomes a chain of ``python`` rows (outermost first, nested a nanosecond apart at the allocation's time, on
one host lane with the annotations), and the allocation's ``op`` is its innermost frame (its innermost annotation
where no frame was recorded); C++ frames (``stacks="all"``) are left out of the chain. Segments (at the peak, at
each out-of-memory error and at the dump) and the out-of-memory errors are side tables (``schema.MEMORY_SEGMENTS``,
``schema.MEMORY_OOM``).
"""

from __future__ import annotations

import gzip
import io
import pickle
import re
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
from traceanalyzer.parsers import pickles

from traceanalyzer.errors import TraceError
from traceanalyzer.humanize import byte_count, size
from traceanalyzer.schema import MEMORY_OOM, MEMORY_SEGMENTS, NO_ROW, Device, Kind, Platform, TraceMeta, column_names

SUFFIXES = (".pickle", ".pkl", ".pickle.gz", ".pkl.gz")
"""File names read as snapshots (any file that starts with a pickle's PROTO opcode is, too)."""
ROWS_PER_BYTE = 0.25
"""History entries, frames and blocks per byte of pickle at most (a real snapshot has one per 14 bytes)."""
MAX_BYTES = 4 << 30
"""A (decompressed) snapshot larger than this is refused: a snapshot of 100,000 history entries is about 10 MB."""
MAX_DEVICES = 1 << 16
"""A segment on a device index outside [0, MAX_DEVICES) is dropped (and counted) as wrongly typed."""
BLOCK_ROUND = 512
"""The caching allocator's smallest block and rounding (kMinBlockSize)."""
LANE = ("memory snapshot", "python")
"""pid and tid of the host lane that holds the annotations and the allocation stacks."""

_STEP_NAME = re.compile(r"^ProfilerStep#\d+$")
_RANK_IN_NAME = re.compile(r"rank[-_]?(\d{1,6})(?!\d)", re.IGNORECASE)  # below schema.MAX_RANKS
_READ_CHUNK = 16 << 20
_LIMIT = 1 << 52
"""Addresses, sizes and µs times of a real snapshot are far below this (epoch µs ~1.8e15); larger is not a snapshot."""
_PACKAGES = re.compile(r"/(?:site|dist)-packages/")
_ALLOCS = frozenset({"alloc"})
_FREES = frozenset({"free_completed"})
_SEGMENT_UP = frozenset({"segment_alloc", "segment_map"})
_SEGMENT_DOWN = frozenset({"segment_free", "segment_unmap"})
_IGNORED = frozenset({"free_requested", "snapshot"})
_ACTIONS = _ALLOCS | _FREES | _SEGMENT_UP | _SEGMENT_DOWN | _IGNORED | {"oom"}


class _Refused(Exception):
    """The pickle names a global (a class or function): never imported, never called."""


class _PlainUnpickler(pickle.Unpickler):
    """Builds what pickle's opcodes build by themselves; every global is refused before anything is looked up."""

    def find_class(self, module: str, name: str) -> object:
        raise _Refused(f"{module}.{name}")

    def persistent_load(self, pid: object) -> object:
        raise _Refused(f"persistent id {pid!r:.60}")


def is_snapshot(path: Path) -> bool:
    """Is the file named as a pickle, or does it start with a pickle's PROTO opcode (gzipped or not)?"""
    if path.name.lower().endswith(SUFFIXES):
        return True
    head = _head(path)
    return len(head) >= 2 and head[0] == 0x80 and 2 <= head[1] <= 5


def _head(path: Path) -> bytes:
    try:
        with path.open("rb") as f:
            head = f.read(2)
            if head != b"\x1f\x8b":
                return head
            f.seek(0)
            with gzip.GzipFile(fileobj=f) as z:
                return z.read(2)
    except (OSError, EOFError, zlib.error):
        return b""


def parse(path: Path) -> tuple[pd.DataFrame, pd.DataFrame, TraceMeta]:
    """Parse one memory snapshot into (events, memory events, meta); a pickle that is not plain data, or is not a
    snapshot, is a TraceError."""
    doc, size = _document(path)
    _check_rows(doc, size, path)
    snap = _Snapshot.of(doc, path)
    replays = [_replay(entries, snap.dump_blocks(device), device) for device, entries in snap.traces.items()]
    for rep in replays:
        rep.anchor(sum(b["size"] for b in snap.dump_blocks(rep.device).values()), snap.dump_reserved(rep.device))
    if not any(r.rows for r in replays):
        replays = [_from_dump(snap, device) for device in snap.devices()]
    if not any(r.rows for r in replays):
        raise TraceError(path, "is a memory snapshot with no allocation history and no allocated block")
    if (
        max(
            max(abs(r.allocated + rep.shift_allocated), abs(r.reserved + rep.shift_reserved))
            for rep in replays
            for r in rep.rows
        )
        >= 1 << 62
    ):
        raise TraceError(path, "adds up to more than 2**62 bytes allocated: not a real memory snapshot")
    events, ops = _events(snap, replays)
    memory = _memory(replays, ops)
    meta = _meta(path, snap, replays, events, memory)
    return events, memory, meta


def _document(path: Path) -> tuple[object, int]:
    """The unpickled document, built from plain data only, and the pickle's size in bytes."""
    data = _bytes(path)
    try:
        pickles.check(data)
    except pickles.Unsafe as e:
        raise TraceError(path, f"is refused: it holds {e}, which no memory snapshot does; nothing was built") from None
    try:
        return _PlainUnpickler(io.BytesIO(data)).load(), len(data)
    except _Refused as e:
        raise TraceError(
            path,
            f"is refused: the pickle asks for {e}, which unpickling would import and run; a memory snapshot holds "
            "only plain data, so nothing in this file was run",
        ) from None
    except Exception as e:  # noqa: BLE001 -- any failure to decode untrusted bytes is bad input, not our bug
        raise TraceError(path, f"is not a readable pickle ({_one_line(e)})") from None


def _check_rows(doc: object, size: int, path: Path) -> None:
    """Refuse a document with more history entries, frames and blocks than ROWS_PER_BYTE allows for its pickle's
    size: shared references can make a small pickle hold millions of them."""
    budget = int(size * ROWS_PER_BYTE) + 10_000
    rows = 0
    for items in _row_lists(doc):
        rows += len(items)
        if rows > budget:
            raise TraceError(
                path,
                f"is refused: its {size:,} bytes hold more than {budget:,} history entries, frames and blocks "
                "(shared references repeated): not a real memory snapshot",
            )


def _row_lists(doc: object) -> Iterator[list]:
    """Every list of rows the parser reads: history per device, segments, blocks, and each one's frames."""
    if not isinstance(doc, dict):
        return
    for key in ("device_traces", "segments", "external_annotations"):
        outer = doc.get(key)
        if not isinstance(outer, list):
            continue
        yield outer
        for inner in outer:
            items = inner if key == "device_traces" else inner.get("blocks") if isinstance(inner, dict) else None
            if not isinstance(items, list):
                continue
            yield items
            for item in items:
                frames = item.get("frames") if isinstance(item, dict) else None
                if isinstance(frames, list):
                    yield frames


def _bytes(path: Path) -> bytes:
    """The file's bytes, inflated when it is gzip, at most MAX_BYTES."""
    with path.open("rb") as f:
        if f.read(2) != b"\x1f\x8b":
            f.seek(0)
            data = f.read(MAX_BYTES + 1)
        else:
            f.seek(0)
            data = _inflated(f, path)
    if not data:
        raise TraceError(path, "is empty")
    if len(data) > MAX_BYTES:
        raise TraceError(path, f"is larger than {size(MAX_BYTES)} (decompressed): too large for a memory snapshot")
    return data


def _inflated(f: io.BufferedReader, path: Path) -> bytes:
    parts, total = [], 0
    try:
        with gzip.GzipFile(fileobj=f) as z:
            while total <= MAX_BYTES and (part := z.read(_READ_CHUNK)):
                parts.append(part)
                total += len(part)
    except (OSError, EOFError, zlib.error) as e:
        raise TraceError(path, f"is a damaged gzip file ({_one_line(e)})") from None
    return b"".join(parts)


def _one_line(e: BaseException) -> str:
    text = " ".join(str(e).split())[:200]
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


def _int(entry: dict, key: str) -> int | None:
    """An integer field (not a bool) of a plausible size, None when absent, of another type or beyond 2**52."""
    value = entry.get(key)
    ok = isinstance(value, int) and not isinstance(value, bool) and -_LIMIT < value < _LIMIT
    return value if ok else None


@dataclass(frozen=True)
class _Frame:
    name: str
    filename: str
    line: int

    @property
    def python(self) -> bool:
        """A Python frame (C++ frames of stacks="all" name .cpp/.h files or '??')."""
        return self.filename.endswith(".py") or self.filename.startswith("<")

    @property
    def label(self) -> str:
        """As torch.profiler names a Python frame, ``file(line): function``, with an installed package's file named
        from its package (``torch/nn/functional.py``, not the site-packages path before it)."""
        return f"{_PACKAGES.split(self.filename)[-1]}({self.line}): {self.name}"


@dataclass(frozen=True)
class _Entry:
    """One history entry, checked."""

    action: str
    addr: int
    size: int
    ts: int
    frames: tuple[_Frame, ...]
    device_free: int


@dataclass
class _Snapshot:
    """The parts of a snapshot document the parser reads, type-checked; what did not check is counted."""

    segments: list[dict]
    traces: dict[int, list[_Entry]]
    annotations: list[tuple[str, str, int]]
    skipped: int = 0
    timeless: bool = False

    @classmethod
    def of(cls, doc: object, path: Path) -> _Snapshot:
        """Check the document's shape (a TraceError where it is not a snapshot)."""
        if not isinstance(doc, dict) or not isinstance(doc.get("segments"), list):
            what = f"a dict with keys {', '.join(sorted(map(str, doc))[:6])}" if isinstance(doc, dict) else "no dict"
            raise TraceError(path, f"is a pickle but not a PyTorch memory snapshot (no 'segments' list; {what})")
        snap = cls([], {}, [])
        for s in doc["segments"]:
            dropped = _dropped_blocks(s)
            if dropped is None:
                snap.skipped += 1
            else:
                snap.segments.append(s)
                snap.skipped += dropped
        traces = doc.get("device_traces") or []
        for device, entries in enumerate(traces if isinstance(traces, list) else []):
            snap.traces[device] = snap._entries(entries if isinstance(entries, list) else [])
        snap.annotations = snap._annotations(doc.get("external_annotations"))
        return snap

    def _entries(self, raw: list) -> list[_Entry]:
        out = []
        for i, e in enumerate(raw):
            entry = self._entry(e, i) if isinstance(e, dict) else None
            if entry is None:
                self.skipped += 1
            else:
                out.append(entry)
        return out

    def _entry(self, e: dict, index: int) -> _Entry | None:
        action, addr, nbytes, us = e.get("action"), _int(e, "addr"), _int(e, "size"), _int(e, "time_us")
        if action not in _ACTIONS or nbytes is None or nbytes < 0 or (addr is None and action != "oom"):
            return None
        if us is None:
            self.timeless = True
            us = index
        return _Entry(action, addr or 0, nbytes, us * 1000, _frames(e.get("frames")), _int(e, "device_free") or 0)

    def _annotations(self, raw: object) -> list[tuple[str, str, int]]:
        out = set()
        for a in raw if isinstance(raw, list) else []:
            ok = isinstance(a, dict) and a.get("stage") in ("START", "END") and isinstance(a.get("name"), str)
            if ok and _int(a, "time_us") is not None:
                out.add((a["stage"], a["name"], a["time_us"] * 1000))
            else:
                self.skipped += 1
        return sorted(out, key=lambda a: (a[2], a[0] != "END"))

    def devices(self) -> list[int]:
        """Devices the segments or the history name."""
        return sorted({int(s["device"]) for s in self.segments} | set(self.traces))

    def dump_blocks(self, device: int) -> dict[int, dict]:
        """Blocks allocated at the dump on one device, by address."""
        return {
            b["address"]: b
            for s in self.segments
            if s["device"] == device
            for b in s["blocks"]
            if b["state"] == "active_allocated"
        }

    def dump_reserved(self, device: int) -> int:
        """Bytes of the device's segments at the dump."""
        return sum(s["total_size"] for s in self.segments if s["device"] == device)


def _dropped_blocks(s: object) -> int | None:
    """None where s is not a segment dict with the fields the parser reads; else its blocks are checked in place and
    the number of bad ones (a negative size, a missing field) dropped is returned."""
    if not isinstance(s, dict) or not isinstance(s.get("blocks"), list):
        return None
    if any(_int(s, k) is None for k in ("device", "address", "total_size")):
        return None
    if not 0 <= s["device"] < MAX_DEVICES or s["total_size"] < 0:
        return None
    before = len(s["blocks"])
    s["blocks"] = [
        b
        for b in s["blocks"]
        if isinstance(b, dict)
        and _int(b, "address") is not None
        and (_int(b, "size") or 0) >= 0
        and _int(b, "size") is not None
        and isinstance(b.get("state"), str)
    ]
    return before - len(s["blocks"])


def _frames(raw: object) -> tuple[_Frame, ...]:
    """The Python frames of an entry or block, innermost first."""
    out = []
    for f in raw if isinstance(raw, list) else []:
        if isinstance(f, dict) and isinstance(f.get("name"), str) and isinstance(f.get("filename"), str):
            frame = _Frame(f["name"], f["filename"], _int(f, "line") or 0)
            if frame.python:
                out.append(frame)
    return tuple(out)


def rounded(nbytes: int) -> int:
    """The block the caching allocator gives a request: at least 512 B, a multiple of 512 B."""
    return max(BLOCK_ROUND, -(-nbytes // BLOCK_ROUND) * BLOCK_ROUND)


@dataclass
class _Row:
    """One memory event of the replay; ``entry`` is the history entry whose stack it carries (None: none)."""

    ts: int
    bytes: int
    allocated: int
    reserved: int
    addr: int
    entry: _Entry | None


@dataclass
class _Replay:
    """One device's history replayed: memory rows, segments and out-of-memory errors, and how it met the dump."""

    device: int
    rows: list[_Row] = field(default_factory=list)
    segments: list[dict] = field(default_factory=list)
    ooms: list[dict] = field(default_factory=list)
    unknown_frees: int = 0
    missing_at_dump: int = 0
    end_allocated: int = 0
    end_reserved: int = 0
    shift_allocated: int = 0
    shift_reserved: int = 0
    residual: int = 0

    def anchor(self, dump_allocated: int, dump_reserved: int) -> None:
        """Shift the totals so that they end at the dump's state where the history lost its oldest entries (a free
        of a block it never saw allocated, or a block live at the dump it never saw allocated); a complete history
        keeps its own totals, and what it ends away from the dump is ``residual``."""
        self.shift_reserved = dump_reserved - self.end_reserved
        if self.unknown_frees or self.missing_at_dump:
            self.shift_allocated = dump_allocated - self.end_allocated
        else:
            self.residual = dump_allocated - self.end_allocated


class _State:
    """The allocator's live blocks and segments while the history is replayed."""

    def __init__(self) -> None:
        self.blocks: dict[int, int] = {}
        self.segments: dict[int, int] = {}
        self.allocated = 0
        self.reserved = 0

    def segment_rows(self, device: int, at: str) -> list[dict]:
        """Per live segment: bytes, allocated, unused (reserved − allocated), largest free range, live blocks."""
        starts = sorted(self.segments)
        inside: dict[int, list[tuple[int, int]]] = {s: [] for s in starts}
        for addr, nbytes in self.blocks.items():
            i = np.searchsorted(starts, addr, side="right") - 1
            if i >= 0 and addr < starts[i] + self.segments[starts[i]]:
                inside[starts[i]].append((addr, nbytes))
        return [_segment_row(device, at, s, self.segments[s], sorted(inside[s])) for s in starts]


def _segment_row(device: int, at: str, start: int, total: int, blocks: list[tuple[int, int]]) -> dict:
    allocated, cursor, largest = 0, start, 0
    for addr, nbytes in blocks:
        largest = max(largest, addr - cursor)
        cursor = max(cursor, addr + nbytes)
        allocated += nbytes
    largest = max(largest, start + total - cursor)
    return {
        "at": at,
        "device": device,
        "address": f"{start:#x}",
        "bytes": total,
        "allocated_bytes": allocated,
        "unused_bytes": total - allocated,
        "largest_free_bytes": largest,
        "blocks": len(blocks),
    }


def _replay(entries: list[_Entry], dump: dict[int, dict], device: int) -> _Replay:
    """Memory rows of one device's history, with the segments at its peak and out-of-memory errors."""
    out = _Replay(device)
    state = _State()
    last_alloc = {e.addr: i for i, e in enumerate(entries) if e.action in _ALLOCS}
    peak, peak_at = -1, -1
    for i, e in enumerate(entries):
        if e.action in _ALLOCS:
            block = dump.get(e.addr) if last_alloc[e.addr] == i else None
            nbytes = block["size"] if block and _holds(block, e.size) else rounded(e.size)
            state.blocks[e.addr] = nbytes
            state.allocated += nbytes
            out.rows.append(_Row(e.ts, nbytes, state.allocated, state.reserved, e.addr, e))
            if state.allocated > peak:
                peak, peak_at = state.allocated, i
        elif e.action in _FREES:
            known = e.addr in state.blocks
            nbytes = state.blocks.pop(e.addr) if known else rounded(e.size)
            out.unknown_frees += not known
            state.allocated -= nbytes
            out.rows.append(_Row(e.ts, -nbytes, state.allocated, state.reserved, e.addr, None))
        elif e.action in _SEGMENT_UP or e.action in _SEGMENT_DOWN:
            _segment(state, e)
            out.rows.append(_Row(e.ts, 0, state.allocated, state.reserved, NO_ROW, None))
        elif e.action == "oom":
            out.ooms.append(_oom_row(device, e, state))
            out.segments += state.segment_rows(device, f"out of memory {len(out.ooms)}")
    out.missing_at_dump = sum(addr not in state.blocks for addr in dump)
    out.end_allocated, out.end_reserved = state.allocated, state.reserved
    if peak_at >= 0:
        out.segments = _replayed_to(entries, dump, last_alloc, peak_at).segment_rows(device, "peak") + out.segments
    return out


def _holds(block: dict, requested: int) -> bool:
    """Is a block live at the dump the one this request got (its recorded request, or a size the request fits)?"""
    recorded = _int(block, "requested_size")
    return recorded == requested if recorded is not None else block["size"] >= rounded(requested)


def _segment(state: _State, e: _Entry) -> None:
    if e.action in _SEGMENT_UP:
        state.segments[e.addr] = state.segments.get(e.addr, 0) + e.size
        state.reserved += e.size
    else:
        state.segments[e.addr] = state.segments.get(e.addr, e.size) - e.size
        if state.segments[e.addr] <= 0:
            del state.segments[e.addr]
        state.reserved -= e.size


def _replayed_to(entries: list[_Entry], dump: dict[int, dict], last_alloc: dict[int, int], stop: int) -> _State:
    """The allocator's state right after entry ``stop``."""
    state = _State()
    for i, e in enumerate(entries[: stop + 1]):
        if e.action in _ALLOCS:
            block = dump.get(e.addr) if last_alloc[e.addr] == i else None
            state.blocks[e.addr] = block["size"] if block and _holds(block, e.size) else rounded(e.size)
        elif e.action in _FREES:
            state.blocks.pop(e.addr, None)
        elif e.action in _SEGMENT_UP or e.action in _SEGMENT_DOWN:
            _segment(state, e)
    state.allocated = sum(state.blocks.values())
    return state


def _oom_row(device: int, e: _Entry, state: _State) -> dict:
    segments = state.segment_rows(device, "")
    return {
        "ts": e.ts,
        "device": device,
        "requested_bytes": e.size,
        "allocated_bytes": state.allocated,
        "reserved_bytes": state.reserved,
        "unused_reserved_bytes": state.reserved - state.allocated,
        "largest_free_bytes": max((s["largest_free_bytes"] for s in segments), default=0),
        "device_free_bytes": e.device_free,
        "stack": " › ".join(f.label for f in reversed(e.frames)),
    }


def _from_dump(snap: _Snapshot, device: int) -> _Replay:
    """Without a history: the blocks allocated at the dump, as allocations at time 0."""
    out = _Replay(device)
    allocated, reserved = 0, snap.dump_reserved(device)
    for addr, block in sorted(snap.dump_blocks(device).items()):
        allocated += block["size"]
        entry = _Entry("alloc", addr, block["size"], 0, _frames(block.get("frames")), 0)
        out.rows.append(_Row(0, block["size"], allocated, reserved, addr, entry))
    out.end_allocated, out.end_reserved = allocated, reserved
    return out


def _events(snap: _Snapshot, replays: list[_Replay]) -> tuple[pd.DataFrame, dict[int, int]]:
    """Host rows (annotations, then every allocation's stack as nested python rows) and each stack's op row, by
    ``id`` of its history entry."""
    names, kinds, starts, durs = _annotation_rows(snap.annotations, _window(replays, snap))
    allocs = sorted(
        (r.entry for rep in replays for r in rep.rows if r.entry is not None and r.bytes > 0),
        key=lambda e: e.ts,
    )
    ops: dict[int, int] = {}
    bare = [e for e in allocs if not e.frames]
    for e, row in zip(bare, _innermost(starts, durs, [e.ts for e in bare]), strict=True):
        ops[id(e)] = row
    cursor = None
    for e in (e for e in allocs if e.frames):
        start = e.ts if cursor is None else max(e.ts, cursor)
        chain = e.frames[::-1]
        for depth, frame in enumerate(chain):
            names.append(frame.label)
            kinds.append(Kind.PYTHON.value)
            starts.append(start)
            durs.append(len(chain) - depth)
        ops[id(e)] = len(names) - 1
        cursor = start + len(chain)
    events = pd.DataFrame(
        {
            "ts": np.asarray(starts, dtype=np.int64),
            "dur": np.asarray(durs, dtype=np.int64),
            "name": pd.Categorical(names),
            "kind": pd.Categorical(kinds),
            "cat": pd.Categorical(["memory_snapshot"] * len(names)),
            "pid": pd.Categorical([LANE[0]] * len(names)),
            "tid": pd.Categorical([LANE[1]] * len(names)),
            "device": np.full(len(names), NO_ROW, dtype=np.int32),
            "stream": np.full(len(names), NO_ROW, dtype=np.int64),
        }
    )
    return events, ops


def _window(replays: list[_Replay], snap: _Snapshot) -> tuple[int, int]:
    times = [r.ts for rep in replays for r in rep.rows] + [a[2] for a in snap.annotations]
    return min(times), max(times)


def _annotation_rows(
    annotations: list[tuple[str, str, int]], window: tuple[int, int]
) -> tuple[list[str], list[str], list[int], list[int]]:
    """record_function ranges from START/END pairs (an END without START dropped; a START without END ends at the
    window's end); ProfilerStep#N ranges are steps."""
    open_at: dict[str, list[int]] = {}
    names, kinds, starts, durs = [], [], [], []
    for stage, name, ts in annotations:
        if stage == "START":
            open_at.setdefault(name, []).append(ts)
        elif open_at.get(name):
            _range(names, kinds, starts, durs, name, open_at[name].pop(), ts)
    for name, left in open_at.items():
        for ts in left:
            _range(names, kinds, starts, durs, name, ts, max(window[1], ts))
    return names, kinds, starts, durs


def _range(names: list, kinds: list, starts: list, durs: list, name: str, start: int, end: int) -> None:
    names.append(name)
    kinds.append(Kind.STEP.value if _STEP_NAME.match(name) else Kind.ANNOTATION.value)
    starts.append(start)
    durs.append(end - start)


def _innermost(starts: list[int], durs: list[int], times: list[int]) -> Iterator[int]:
    """For each of the (sorted) times, the row of the innermost range that contains it (NO_ROW if none)."""
    order = sorted(range(len(starts)), key=lambda i: (starts[i], -durs[i]))
    stack: list[int] = []
    j = 0
    for t in times:
        while j < len(order) and starts[order[j]] <= t:
            stack.append(order[j])
            j += 1
        while stack and starts[stack[-1]] + durs[stack[-1]] <= t:
            stack.pop()
        yield stack[-1] if stack else NO_ROW


def _memory(replays: list[_Replay], ops: dict[int, int]) -> pd.DataFrame:
    """The memory events of every device, totals shifted by what was allocated before the history began."""
    parts = []
    for rep in replays:
        parts.append(
            pd.DataFrame(
                {
                    "ts": np.asarray([r.ts for r in rep.rows], dtype=np.int64),
                    "device": np.full(len(rep.rows), rep.device, dtype=np.int32),
                    "bytes": np.asarray([r.bytes for r in rep.rows], dtype=np.int64),
                    "total_allocated": np.asarray([r.allocated for r in rep.rows], dtype=np.int64)
                    + rep.shift_allocated,
                    "total_reserved": np.asarray([r.reserved for r in rep.rows], dtype=np.int64) + rep.shift_reserved,
                    "addr": np.asarray([r.addr for r in rep.rows], dtype=np.int64),
                    "op": np.asarray(
                        [ops.get(id(r.entry), NO_ROW) if r.entry is not None else NO_ROW for r in rep.rows],
                        dtype=np.int64,
                    ),
                }
            )
        )
    memory = pd.concat(parts, ignore_index=True).sort_values("ts", kind="stable").reset_index(drop=True)
    memory["pid"] = pd.Categorical([LANE[0]] * len(memory))
    memory["tid"] = pd.Categorical([LANE[1]] * len(memory))
    return memory


def _meta(path: Path, snap: _Snapshot, replays: list[_Replay], events: pd.DataFrame, memory: pd.DataFrame) -> TraceMeta:
    rank = _RANK_IN_NAME.search(path.name)
    times = np.concatenate(
        [memory["ts"].to_numpy(), events["ts"].to_numpy(), (events["ts"] + events["dur"]).to_numpy()]
    )
    meta = TraceMeta(
        platform=Platform.CUDA,
        source_format="torch memory snapshot",
        format_version="with allocation history" if any(snap.traces.values()) else "segments only",
        paths=[str(path)],
        ranks=[int(rank.group(1)) if rank else 0],
        world_size=1,
        rank_known=rank is not None,
        devices=[Device(index=d, name="") for d in sorted({r.device for r in replays})],
        start_ns=int(times.min()),
        end_ns=int(times.max()),
        warnings=[w for rep in replays for w in _warnings(path, rep)],
    )
    meta.keep(MEMORY_SEGMENTS, _segment_table(snap, replays))
    meta.keep(MEMORY_OOM, _oom_table(replays))
    if snap.skipped:
        meta.warnings.append(f"{path}: skipped {snap.skipped:,} snapshot entries with missing or wrongly typed fields")
        meta.adjust("snapshot entries with missing or wrongly typed fields dropped", snap.skipped)
    if snap.timeless:
        meta.warnings.append(f"{path}: the history records no time_us (PyTorch before 2.1): times are entry order")
    if not any(snap.traces.values()):
        meta.warnings.append(
            f"{path}: the snapshot has no allocation history (record it with "
            "torch.cuda.memory._record_memory_history): only the blocks allocated at the dump are known, so the peak "
            "shown is the memory allocated at the dump"
        )
    return meta


def _warnings(path: Path, rep: _Replay) -> list[str]:
    """What a user must know about one device's replay: a partial history, a residual, out-of-memory errors."""
    out = []
    if rep.shift_allocated:
        out.append(
            f"{path}: device {rep.device}: the history does not reach back to the first allocation (it keeps the "
            f"last max_entries events): {byte_count(rep.shift_allocated)} allocated before its first entry are "
            "counted in every total, taken from the blocks allocated at the dump"
        )
    if rep.residual:
        out.append(
            f"{path}: device {rep.device}: replaying the history ends {byte_count(rep.residual)} away from the blocks "
            "allocated at the dump: blocks the allocator did not split, freed before the dump, are counted at their "
            "request rounded up to 512 B"
        )
    for oom in rep.ooms:
        out.append(
            f"{path}: device {rep.device} ran out of memory: {byte_count(oom['requested_bytes'])} requested with "
            f"{byte_count(oom['allocated_bytes'])} allocated and {byte_count(oom['reserved_bytes'])} reserved "
            f"({byte_count(oom['unused_reserved_bytes'])} reserved but unallocated, the largest free range "
            f"{byte_count(oom['largest_free_bytes'])}); the driver reported {byte_count(oom['device_free_bytes'])} "
            "free on the device"
        )
    return out


_SEGMENT_COLUMNS = column_names(MEMORY_SEGMENTS.columns)[1:]  # the rank is added where the table is kept
_OOM_COLUMNS = column_names(MEMORY_OOM.columns)[1:]


def _segment_table(snap: _Snapshot, replays: list[_Replay]) -> pd.DataFrame:
    """Segments at each device's peak and out-of-memory errors (replayed) and at the dump (as recorded)."""
    rows = [row for rep in replays for row in rep.segments]
    for s in sorted(snap.segments, key=lambda s: (s["device"], s["address"])):
        state = _State()
        state.segments = {s["address"]: s["total_size"]}
        state.blocks = {b["address"]: b["size"] for b in s["blocks"] if b["state"] == "active_allocated"}
        rows += state.segment_rows(int(s["device"]), "dump")
    return pd.DataFrame(rows, columns=_SEGMENT_COLUMNS)


def _oom_table(replays: list[_Replay]) -> pd.DataFrame:
    return pd.DataFrame([oom for rep in replays for oom in rep.ooms], columns=_OOM_COLUMNS)
