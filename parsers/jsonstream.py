"""Stream the ``traceEvents`` array of a Chrome-trace JSON file in chunks of columns.

A file is decompressed a few MiB at a time, cut at event boundaries, and each chunk is read into
columns of only the fields the parser needs (``parsers.columns``). Peak memory is then one chunk
plus the columns built so far, not the whole document. A cut is only ever a guess until the reader
accepts the chunk; if a chunk does not read, the whole document is read in one go instead.
"""

from __future__ import annotations

import contextlib
import gc
import gzip
import hashlib
import io
import multiprocessing
import os
import re
import threading
import zlib
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, Future, ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, TypeVar

import msgspec
from traceanalyzer.parsers.columns import MAX_DEPTH, Columns, MalformedJSON, TooDeep

from traceanalyzer import allocator
from traceanalyzer.errors import TraceError
from traceanalyzer.humanize import size

try:  # ISA-L inflates gzip 3.5x faster than zlib (0.20 -> 0.06 s CPU on a 172 MB trace); optional
    from isal import igzip as _gzip
    from isal.isal_zlib import error as _InflateError
except ImportError:
    _gzip = gzip
    _InflateError = zlib.error

CHUNK_BYTES = 2 << 20
"""Measured on a 172 MB trace: 2 MiB chunks peak 40 MB lower than 8 MiB ones, at the same speed."""
_HEADER_LIMIT = 64 << 20
_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_BETWEEN_EVENTS = re.compile(rb"\}\s*,\s*\{")
_ARRAY_END = re.compile(rb"\}\s*\]")
_GZIP_MAGIC = b"\x1f\x8b"
_BOM = b"\xef\xbb\xbf"
_PADDING = b" \t\r\n\x00"
PADDING_KEPT = 1 << 20
"""Of a run of padding (whitespace or NUL bytes) only this much is kept: JSON means the same with a long run of
whitespace cut short (but inside a string, where only spaces may appear), so memory stays bounded however much
padding a file holds."""
_OVERLAP = 256
"""Bytes searched again at each block's start, so a boundary or key split between two blocks is found."""
_SEPARATOR = re.compile(rb"[ \t\r\n,]*")
T = TypeVar("T")


@dataclass
class Stream:
    """What was read besides the events: the top-level keys, warnings, and how many events were skipped."""

    header: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    skipped: int = 0
    """Events dropped for wrongly typed fields by the reader (the parser counts its own drops)."""
    repaired: int = 0
    """Byte sequences that are not UTF-8, replaced with U+FFFD."""
    events: int = 0
    """Events read."""
    truncated: bool = False
    """The file ends before the events array does (the events before the break were read)."""

    def reset(self) -> None:
        """Forget what a partial read found."""
        self.warnings.clear()
        self.skipped = self.repaired = self.events = 0
        self.truncated = False

    def count(self, cols: Columns) -> None:
        """Add a chunk's counts."""
        self.skipped += cols.skipped
        self.repaired += cols.repaired
        self.events += cols.rows


class _Body:
    """Bytes read but not yet handed on; a run of padding at their end is held apart and kept only in part.

    Every operation costs the bytes it adds or removes, never the bytes held, so reading is linear in the file
    whatever its shape (a long run of padding, an event longer than a block).
    """

    def __init__(self) -> None:
        self.data = bytearray()
        self.run = bytearray()
        """The padding after ``data``: at most PADDING_KEPT of its bytes."""
        self.run_length = 0
        self.long_runs = 0
        """Bytes in runs of padding longer than PADDING_KEPT inside the document (each kept only in part)."""
        self.searched = 0
        """Offset in ``data`` up to which event boundaries were looked for."""

    def add(self, block: bytes) -> None:
        """Append a block (leading blanks of the document are dropped)."""
        content = block.strip(_PADDING)
        if not content:
            self._pad(block)
            return
        lead = block.index(content[:1])
        self._pad(block[:lead])
        self.long_runs += self.run_length if self.run_length > PADDING_KEPT else 0
        if self.data or self.run.strip(b" \t\r\n"):  # blanks before the document mean nothing
            self.data += self.run
        self.run.clear()
        self.run_length = 0
        self.data += content
        self._pad(block[lead + len(content) :])

    def _pad(self, padding: bytes) -> None:
        self.run += padding[: max(0, PADDING_KEPT - len(self.run))]
        self.run_length += len(padding)

    def cut(self) -> bytes | None:
        """The bytes up to the last likely event boundary, taken out; None while there is none."""
        start, self.searched = max(0, self.searched - _OVERLAP), len(self.data)
        end = _last_boundary(self.data, start)
        if end is None:
            return None
        with memoryview(self.data) as view:
            piece = bytes(view[:end])
        del self.data[: _SEPARATOR.match(self.data, end).end()]
        self.searched = len(self.data)
        return piece

    def trailing(self, path: Path) -> list[str]:
        """Warnings on the padding inside the document and after its end."""
        out = []
        if self.long_runs:
            out.append(
                f"{path}: skipped {self.long_runs:,} bytes of padding (runs of whitespace or NUL bytes longer than "
                f"{size(PADDING_KEPT, 0)}, each read as its first {size(PADDING_KEPT, 0)})"
            )
        if self.run.strip(b" \t\r\n"):
            out.append(f"{path}: ignored {self.run_length:,} bytes of padding (NUL bytes) after the JSON document")
        elif self.run_length > PADDING_KEPT:
            out.append(f"{path}: ignored {self.run_length:,} bytes of whitespace after the JSON document")
        return out


class _Resplit(Exception):
    """A guessed chunk boundary did not decode; read the document whole instead."""


def open_binary(path: Path) -> IO[bytes]:
    """Open a file for reading bytes, transparently un-gzipping it (with ISA-L when installed: 3.5x faster); inside
    ``hashing()``, its bytes as stored are hashed as they are read."""
    with open(path, "rb") as probe:
        magic = probe.read(2)
    into = getattr(_hashing, "into", None)
    raw = _Hashed(path, into) if into is not None else open(path, "rb", buffering=0)  # noqa: SIM115 -- returned
    if magic == _GZIP_MAGIC:
        return _Closing(_gzip.open(raw, "rb"), raw)
    return io.BufferedReader(raw)


_hashing = threading.local()


@contextlib.contextmanager
def hashing() -> Iterator[dict[str, str]]:
    """While the block runs, each file this thread reads through ``open_binary`` is hashed as it is read (so a file
    is read once for its content and its digest): the dict holds, by resolved path, the SHA-1 of the stored bytes
    (a gzip file's compressed ones) of each file read whole, from its first byte to its last, in order."""
    outer = getattr(_hashing, "into", None)
    _hashing.into = digests = {}
    try:
        yield digests
    finally:
        _hashing.into = outer


class _Hashed(io.RawIOBase):
    """A file read through, whose bytes are hashed while they are read in order from its start; on close, its
    digest is kept in ``into`` when every byte was (a file read in part, or with a jump, is left out)."""

    def __init__(self, path: Path, into: dict[str, str]) -> None:
        super().__init__()
        self._file = open(path, "rb", buffering=0)  # noqa: SIM115 -- closed by close()
        self._key, self._into = os.path.realpath(path), into
        self._sha1 = hashlib.sha1()
        self._hashed = self._at = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        n = self._file.readinto(buffer) or 0
        if self._at == self._hashed:
            self._sha1.update(memoryview(buffer)[:n])
            self._hashed += n
        self._at += n
        return n

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        self._at = self._file.seek(offset, whence)
        return self._at

    def tell(self) -> int:
        return self._at

    def close(self) -> None:
        if not self.closed:
            with contextlib.suppress(OSError):
                if self._hashed == os.fstat(self._file.fileno()).st_size:
                    self._into[self._key] = self._sha1.hexdigest()
            self._file.close()
        super().close()


class _Closing(io.BufferedIOBase):
    """A gzip reader that closes the file under it when it is closed."""

    def __init__(self, reader: IO[bytes], raw: io.RawIOBase) -> None:
        super().__init__()
        self._reader, self._raw = reader, raw

    def readable(self) -> bool:
        return True

    def read(self, size: int | None = -1) -> bytes:
        return self._reader.read(-1 if size is None else size)

    def close(self) -> None:
        try:
            self._reader.close()
        finally:
            self._raw.close()
            super().close()


def read_all(path: Path) -> bytes:
    """The file's whole (decompressed) content without a BOM and with long runs of padding cut short (see
    PADDING_KEPT); read errors raise TraceError."""
    body = _Body()
    for block in _blocks(path, None):
        body.add(block)
    return bytes(body.data + body.run)


_READ_ERRORS = (OSError, EOFError, zlib.error, _InflateError)


def _read_error(path: Path, e: Exception) -> TraceError:
    return TraceError(path, f"cannot be read: {_describe_read_error(e)}")


def _describe_read_error(e: Exception) -> str:
    if isinstance(e, EOFError):
        return "the gzip stream ends early (truncated file)"
    if isinstance(e, gzip.BadGzipFile | zlib.error | _InflateError):
        return f"broken gzip data ({e})"
    return str(e)


Read = Callable[[bytes], Columns]
"""Reads a piece of the events array into columns (``parsers.columns.Reader``); raises MalformedJSON."""


def map_chunks(
    path: Path, read: Read, stream: Stream, fn: Callable[[Columns], T], workers: int = 1, threads: bool = False
) -> list[T]:
    """``fn`` of each chunk's columns, in file order; with ``workers`` > 1 chunks are read in parallel.

    ``threads``: in threads (for a reader that releases the GIL), else in forked processes, which need ``read``
    and ``fn`` picklable (module-level functions, partials, or a Reader). Fills ``stream`` with the top-level
    keys, warnings and counts.
    """
    with _gc_paused(), allocator.reusing():
        try:
            try:
                return _map_chunked(path, read, stream, fn, workers, threads)
            except _Resplit:
                stream.reset()
                return [fn(cols) for cols in _read_whole(path, read, stream)]
        except TooDeep:
            raise TraceError(path, _TOO_DEEP) from None


_TOO_DEEP = f"is not a trace: its JSON nests arrays or objects too deeply to read (more than {MAX_DEPTH} levels)"


def _map_chunked(
    path: Path, read: Read, stream: Stream, fn: Callable[[Columns], T], workers: int, threads: bool
) -> list[T]:
    blocks = _blocks(path, stream)
    header, body = _split_header(blocks)
    results: list[T] = []
    with _runner(workers, threads) as runner:
        pending: deque[Future] = deque()
        for block in blocks:
            body.add(block)
            piece = body.cut()
            if piece is None:
                continue
            pending.append(runner.submit(_read_and_map, read, fn, piece))
            while len(pending) > _IN_FLIGHT * workers:
                results.append(_collect(pending.popleft(), stream))
        while pending:
            results.append(_collect(pending.popleft(), stream))
    last, tail = _finish(read, bytes(body.data), path, stream)
    if last is not None:
        stream.count(last)
        results.append(fn(last))
    stream.header = _decode_header(header, tail, path, stream)
    stream.warnings.extend(body.trailing(path))
    _warn_repaired(path, stream)
    return results


_IN_FLIGHT = 2
"""Chunks queued per worker: enough to keep workers busy, few enough that memory stays at a few chunks."""


def _split_header(blocks: Iterator[bytes]) -> tuple[bytes, _Body]:
    """The bytes before the traceEvents array (none for a document that is the array), and the body after its ``[``."""
    body = _Body()
    for block in blocks:
        body.add(block)
        data = body.data
        if data[:1] == b"[":  # the Chrome trace "JSON array format" (torch_npu's trace_view.json)
            del data[:1]
            return b"", body
        match = _EVENTS_KEY.search(data, max(0, body.searched - _OVERLAP))
        body.searched = len(data)
        if match is not None:
            header = bytes(data[: match.end() - 1])
            del data[: match.end()]
            body.searched = 0
            return header, body
        if len(data) > _HEADER_LIMIT:
            break
    raise _Resplit


def _read_and_map(read: Read, fn: Callable[[Columns], T], piece: bytes) -> tuple[T, Columns]:
    """Read one chunk and apply ``fn``: (result, the columns emptied of values, kept for their counts)."""
    with _gc_paused():
        try:
            cols = read(piece)
        except MalformedJSON:
            raise _Resplit from None
        result = fn(cols)
        cols.values = {}
        return result, cols


def _collect(future: Future, stream: Stream) -> T:
    """A finished chunk's result, its counts added to ``stream``."""
    result, cols = future.result()
    stream.count(cols)
    return result


def fork_is_safe() -> bool:
    """Can this process fork workers? Only where fork exists and no other thread runs (a fork copies held locks)."""
    return "fork" in multiprocessing.get_all_start_methods() and threading.active_count() == 1


@contextlib.contextmanager
def _runner(workers: int, threads: bool) -> Iterator[Executor]:
    """With ``workers`` > 1: threads, or forked processes where forking is safe; else the calling thread."""
    if workers < 2 or not (threads or fork_is_safe()):
        yield _Inline()
        return
    if threads:
        pool: Executor = ThreadPoolExecutor(workers)
    else:
        pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork"))
    try:
        yield pool
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


class _Inline(Executor):
    """Runs each submitted call at once, in the calling thread."""

    def submit(self, fn, /, *args, **kwargs) -> Future:
        future: Future = Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as e:  # handed to the caller through the future, like a pool would
            future.set_exception(e)
        return future


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while millions of short-lived objects are built (about 10 % faster)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def worker_count(path: Path) -> int:
    """Processes worth decoding ``path`` with: 1 for small files or inside a worker, else the usable cores."""
    if multiprocessing.parent_process() is not None or _json_size_hint(path) < PARALLEL_FROM_BYTES:
        return 1
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return min(cores, _MAX_WORKERS)


PARALLEL_FROM_BYTES = 16 << 20
"""Below this much JSON, starting worker processes costs more than it saves."""
_MAX_WORKERS = 4


def _json_size_hint(path: Path) -> int:
    """The JSON size: a gzip file's recorded length (mod 4 GiB, so at least its compressed size), else the file size."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        if f.read(2) != _GZIP_MAGIC or size < 4:
            return size
        f.seek(-4, os.SEEK_END)
        return max(size, int.from_bytes(f.read(4), "little"))


def events_head(path: Path, size: int = 1 << 16) -> bytes | None:
    """Up to ``size`` bytes from the first ``"traceEvents"`` key on, None if the file has none (or cannot be read).

    Reads a block at a time up to the key, so a header of any size is found in bounded memory."""
    key = b'"traceEvents"'
    carry = b""
    try:
        blocks = _blocks(path, Stream())
        for block in blocks:
            text = carry + block
            at = text.find(key)
            if at >= 0:
                head = text[at : at + size]
                for more in blocks:
                    if len(head) >= size:
                        break
                    head += more[: size - len(head)]
                return head
            carry = text[-len(key) :]
    except (TraceError, OSError):
        return None
    return None


def _blocks(path: Path, stream: Stream | None) -> Iterator[bytes]:
    """The file's decompressed bytes without a UTF-8 BOM, CHUNK_BYTES at a time."""
    blocks = _raw_blocks(path, stream)
    first = next(blocks, b"")
    yield first[len(_BOM) :] if first.startswith(_BOM) else first
    yield from blocks


def _raw_blocks(path: Path, stream: Stream | None) -> Iterator[bytes]:
    """The file's decompressed bytes; a gzip stream cut short yields what it holds, with a warning in ``stream``
    (without a stream: a TraceError)."""
    with open_binary(path) as f:
        read = 0
        while True:
            try:
                block = f.read(CHUNK_BYTES)
            except EOFError as e:
                if stream is None:
                    raise _read_error(path, e) from None
                stream.warnings.append(f"{path}: the gzip stream ends early (truncated file?)")
                stream.truncated = True
                yield from _gunzip_prefix(path, read)
                return
            except _READ_ERRORS as e:
                raise _read_error(path, e) from None
            if not block:
                return
            read += len(block)
            yield block


def _gunzip_prefix(path: Path, skip: int) -> Iterator[bytes]:
    """What a truncated gzip file's complete compressed blocks decompress to, after its first ``skip`` bytes."""
    inflate = zlib.decompressobj(wbits=31)
    with open(path, "rb") as f:
        while not inflate.eof:
            packed = inflate.unconsumed_tail or f.read(CHUNK_BYTES)
            if not packed:
                return
            try:
                block = inflate.decompress(packed, CHUNK_BYTES)
            except zlib.error as e:
                raise _read_error(path, e) from None
            block, skip = block[skip:], max(0, skip - len(block))
            if block:
                yield block


def _warn_repaired(path: Path, stream: Stream) -> None:
    if stream.repaired:
        stream.warnings.append(
            f"{path}: replaced {stream.repaired:,} byte sequences that are not UTF-8 (in names or args) with U+FFFD"
        )


def _last_boundary(body: bytes | bytearray, start: int = 0) -> int | None:
    """Offset just after the last ``}`` at or after ``start`` that is followed by ``, {`` (a likely event boundary)."""
    for lo in (max(start, len(body) - _BOUNDARY_WINDOW), start):
        last = deque(_BETWEEN_EVENTS.finditer(body, lo), maxlen=1)
        if last:
            return last[0].start() + 1
    return None


_BOUNDARY_WINDOW = 1 << 16
"""Where to look for the last boundary first: events are far shorter, so it is almost always there."""


def _finish(read: Read, body: bytes, path: Path, stream: Stream) -> tuple[Columns | None, bytes]:
    """Read the last events and return them with the bytes after the array."""
    stripped = body.lstrip()
    if stripped.startswith(b"]"):
        return None, stripped[1:]
    for end in _ARRAY_END.finditer(body):
        try:
            return read(body[: end.start() + 1]), body[end.end() :]
        except MalformedJSON:
            continue
    return _salvage(read, body, path, stream), b""


def _salvage(read: Read, body: bytes, path: Path, stream: Stream) -> Columns | None:
    """The array does not close readably: keep the complete events before the break, with a warning."""
    cols = None
    for cut in _complete_prefixes(body):
        with contextlib.suppress(MalformedJSON):
            cols = read(body[:cut])
            break
    found = stream.events + (cols.rows if cols else 0)
    if not found:
        raise TraceError(path, "is not valid JSON: the file ends before the first complete event (truncated?)")
    damage = "is malformed near its end" if _ARRAY_END.search(body) else "ends early (truncated file?)"
    stream.warnings.append(f"{path}: the JSON {damage}; analyzed the first {found:,} events")
    stream.truncated = True
    return cols


def _complete_prefixes(body: bytes) -> list[int]:
    """Where the events before a break may end: after a last event cut right after its ``}``, or before a ``, {``."""
    whole = body.rstrip(b" \t\r\n,")
    cuts = [len(whole)] if whole.endswith(b"}") else []
    boundary = _last_boundary(body)
    return cuts + ([boundary] if boundary is not None else [])


def _decode_header(header: bytes, tail: bytes, path: Path, stream: Stream) -> dict[str, Any]:
    """The document's keys besides the events (none for a bare array); a warning for what after them is unreadable."""
    unread = f"{path}: ignored {len(tail.strip()):,} bytes after the events array that are not valid JSON"
    if not header:
        if tail.strip():
            stream.warnings.append(unread)
        return {}
    for closing in (tail, b"}"):
        try:
            doc = decode_json(header + b"[]" + closing)
        except msgspec.DecodeError:
            continue
        if isinstance(doc, dict):
            if closing is not tail and tail.strip():
                stream.warnings.append(unread)
            return doc
    raise TraceError(path, "is not valid JSON around the traceEvents array")


def top_level(data: bytes, path: Path) -> dict[str, msgspec.Raw]:
    """The top-level keys of a JSON object document, values left undecoded."""
    try:
        doc = decode_json(data, dict[str, msgspec.Raw])
    except msgspec.ValidationError:
        raise TraceError(path, f"is JSON but not an object: it looks like {describe_json(data)}") from None
    except msgspec.DecodeError as e:
        raise TraceError(path, f"is not valid JSON ({e})") from None
    return doc


def decode_json(data: bytes, kind: Any = Any) -> Any:
    """``msgspec.json.decode``; nesting deeper than Python's recursion limit raises TooDeep."""
    try:
        return msgspec.json.decode(data, type=kind)
    except RecursionError:
        raise TooDeep("nested too deeply") from None


def describe_json(data: bytes) -> str:
    """A few words on what a non-trace JSON document looks like."""
    head = data.lstrip()[:1]
    return {b"[": "a JSON array", b'"': "a JSON string"}.get(head, "a JSON scalar")


def _read_whole(path: Path, read: Read, stream: Stream) -> Iterator[Columns]:
    data = read_all(path)
    is_array = data.lstrip().startswith(b"[")
    doc = {} if is_array else top_level(data, path)
    raw_events = data if is_array else doc.pop("traceEvents", None)
    if raw_events is None:
        raise TraceError(path, "has no traceEvents array")
    events = bytes(raw_events).strip()
    if not events.startswith(b"["):
        raise TraceError(path, "has a traceEvents value that is not an array")
    try:
        cols = read(events[1:-1])
    except MalformedJSON as e:
        raise TraceError(path, f"is not valid JSON ({e})") from None
    stream.header = {k: decode_json(v) for k, v in doc.items()}
    stream.count(cols)
    _warn_repaired(path, stream)
    yield cols
