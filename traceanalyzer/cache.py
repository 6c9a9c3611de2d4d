"""The trace cache: a rank's parsed and linked tables, kept in the user's cache folder, so a trace opened again is
read in a fraction of its parse time.

An entry is one file ``<key>.tacache`` in the cache folder (``folder``: ``TRACEANALYZER_CACHE_DIR``, else
``$XDG_CACHE_HOME/traceanalyzer`` (an absolute one: a relative one is ignored, as the XDG spec says), else the
platform's user cache folder), never beside the user's files: a header (JSON: what the entry was built from and the
trace's meta) followed by the tables, each with its SHA-1 (``_encode``: the columns' raw numpy values deflated, a
categorical's codes and categories, text as JSON; no pyarrow, which pandas 3 would otherwise import with pandas). The
key is the source's resolved path and what decides its tables (``PARSER_VERSION``, a digest of the code that builds
them, library versions, classification rules); the header holds the source's identity (size, mtime and a SHA-1 of the
whole content of each file), so an entry of a file that changed since, even with its size and mtime kept (``cp -p``,
``rsync -t``), is found stale and rebuilt, and a truncated or corrupt one fails its size or digest check and is removed,
with a warning, and rebuilt. A cache folder that cannot be used (a file, unwritable, inside an input) means no cache,
with one warning. Entries are written to a temporary file and renamed into place, and the least recently used are
evicted beyond ``TRACEANALYZER_CACHE_SIZE`` (default 5 GiB). ``TRACEANALYZER_CACHE=0`` turns the cache off.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import json
import os
import shutil
import stat
import struct
import tempfile
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import numpy as np
import pandas as pd
import platformdirs

from traceanalyzer import humanize
from traceanalyzer.footprint import parse_bytes
from traceanalyzer.schema import Device, Platform, TraceMeta

try:  # ISA-L deflates 3-4x faster than zlib, in the same format; optional
    from isal import isal_zlib as _deflate
except ImportError:
    _deflate = zlib

PARSER_VERSION = 3
"""Bump when the tables or meta that a given trace yields change for a reason the code digest cannot see (the
digest covers the code that builds the tables, so a change there already makes new entries): a change of meaning
in data read from outside that code, or of the entry's own layout."""

DEFAULT_SIZE = 5 << 30
_MAGIC = b"TACACHE1"
_HEAD = struct.Struct("<8sQ20s")  # magic, header length, SHA-1 of the header
_SUFFIX = ".tacache"
_HASH_CHUNK = 1 << 20
_HASHED_FILES = 256
_READ_BESIDE = (".db", ".csv", ".json", ".json.gz", ".db-wal")
"""Files beside an Ascend file given on its own that the parser may read (hashed; the others by size and mtime)."""
_RAW_KINDS = "biufcmM"
"""numpy dtype kinds whose values are kept as their bytes (bool, integers, floats, complex, datetimes, durations)."""
_DEFLATE_LEVEL = 1
_SIDE = "side."
"""The prefix of an entry's table that is one of the meta's side tables (``side.`` and its declared name)."""

Tables = tuple[pd.DataFrame, pd.DataFrame, TraceMeta]


def folder() -> Path:
    """The cache folder: ``TRACEANALYZER_CACHE_DIR``, else ``$XDG_CACHE_HOME/traceanalyzer`` (on every OS; a relative
    one is ignored, as the XDG spec says), else the platform's user cache folder (``~/.cache/traceanalyzer`` on
    Linux, ``~/Library/Caches/traceanalyzer`` on macOS, ``%LOCALAPPDATA%\\traceanalyzer\\Cache`` on Windows)."""
    if os.environ.get("TRACEANALYZER_CACHE_DIR"):
        return Path(os.environ["TRACEANALYZER_CACHE_DIR"])
    if os.path.isabs(os.environ.get("XDG_CACHE_HOME", "")):
        return Path(os.environ["XDG_CACHE_HOME"]) / "traceanalyzer"
    platform = Path(platformdirs.user_cache_dir("traceanalyzer", appauthor=False))
    return platform if platform.is_absolute() else Path.home() / ".cache" / "traceanalyzer"  # (a relative XDG one)


def _unreadable() -> tuple[type[Exception], ...]:
    """What reading a damaged entry raises (evaluated only when an exception is being matched)."""
    return (OSError, ValueError, KeyError, TypeError, IndexError, struct.error, zlib.error, MemoryError)


def unusable() -> str:
    """Why the cache folder cannot hold entries ('' when it can): made here if missing."""
    here = folder()
    try:
        here.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        return f"cannot be made ({e.strerror or e})"
    if not here.is_dir():
        return "is not a folder"
    if not os.access(here, os.W_OK | os.X_OK):
        return "cannot be written to"
    return ""


def enabled(asked: bool | None = None) -> bool:
    """Is the cache used: as asked, else unless ``TRACEANALYZER_CACHE`` is 0/off/no/false."""
    if asked is not None:
        return asked
    return os.environ.get("TRACEANALYZER_CACHE", "1").strip().lower() not in ("0", "off", "no", "false")


def size_limit() -> int:
    """The cap on the cache's size in bytes: ``TRACEANALYZER_CACHE_SIZE`` (e.g. 5G, 500M, 123456), default 5 GiB."""
    size = parse_bytes(os.environ.get("TRACEANALYZER_CACHE_SIZE", ""))
    return DEFAULT_SIZE if size is None else size


@functools.cache
def code_digest(modules: tuple[ModuleType, ...]) -> str:
    """SHA-1 over the source (and built extension) files of the given modules and packages."""
    digest = hashlib.sha1()
    for module in modules:
        for path in _code_files(module):
            digest.update(path.name.encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


def _code_files(module: ModuleType) -> list[Path]:
    file = Path(module.__file__ or "")
    if file.name != "__init__.py":
        return [file]
    return sorted(p for p in file.parent.rglob("*") if p.suffix in (".py", ".so", ".pyd") and p.is_file())


@dataclass(frozen=True)
class Slot:
    """Where one rank's tables are kept: the source they are read from (a file or a rank folder) and how they are
    classified (entries apart), the code that builds them (an entry built by other code is stale), the path as the
    user gave it now (which the meta and warnings then name), and whether the source's subfolders count."""

    source: Path
    variant: tuple[str, ...]
    code: str
    name: str
    deep: bool = True

    def identity(self, known: Mapping[str, str] | None = None) -> list:
        """The source's fingerprint now (a folder's with its subfolders when ``deep``; ``known``: see
        ``fingerprint``)."""
        return fingerprint(self.source, self.deep, known=known)

    @property
    def path(self) -> Path:
        """The entry's file."""
        key = json.dumps([str(self.source.resolve()), *self.variant])
        return folder() / (hashlib.sha256(key.encode()).hexdigest()[:32] + _SUFFIX)

    @property
    def built_with(self) -> list[str]:
        """What the entry must have been built with to be current."""
        return [str(PARSER_VERSION), self.code, pd.__version__, np.__version__]


def fingerprint(source: Path, deep: bool = True, content: bool = True, known: Mapping[str, str] | None = None) -> list:
    """The identity of a file, or of every file in a folder (``deep``: and in its subfolders): name, size, mtime in
    ns and (``content``) a SHA-1 of the whole file (not deep: of the first _HASHED_FILES files that the parser may
    read, the others by size and mtime, for that folder may be any folder). ``known``: SHA-1s already taken, by
    resolved path (``parsers.jsonstream.hashing``, while the parser read the files), which are not taken again."""
    if source.is_file():
        return [_identity(source, source.name, content, known)]
    files = sorted(p for p in (source.rglob("*") if deep else source.iterdir()) if p.is_file())
    hashed = set(files if deep else [p for p in files if p.name.endswith(_READ_BESIDE)][:_HASHED_FILES])
    return [_identity(p, str(p.relative_to(source)), content and p in hashed, known) for p in files]


def unchanged(identity: list, source: Path, deep: bool = True) -> bool:
    """Are the files of ``identity`` (a fingerprint) still there with the same size and mtime?"""
    try:
        now = fingerprint(source, deep, content=False)
    except OSError:
        return False
    return [i[:3] for i in identity] == [n[:3] for n in now]


def _identity(path: Path, name: str, content: bool, known: Mapping[str, str] | None) -> list:
    info = path.stat()
    if not content:
        return [name, info.st_size, info.st_mtime_ns, ""]
    if known and os.path.realpath(path) in known:
        return [name, info.st_size, info.st_mtime_ns, known[os.path.realpath(path)]]
    digest = hashlib.sha1()
    with open(path, "rb") as f:
        while chunk := f.read(_HASH_CHUNK):
            digest.update(chunk)
    return [name, info.st_size, info.st_mtime_ns, digest.hexdigest()]


def read(slot: Slot, damaged: list[str] | None = None) -> Tables | None:
    """The cached tables, or None when there is no entry; a stale entry is removed, and an unreadable one (not a
    regular file, truncated, corrupt) too, saying so in ``damaged``. The source is hashed only when there is an
    entry built by this code from files of the same names, sizes and mtimes (a cold run reads it once, to parse)."""
    try:
        info = os.stat(slot.path)
    except OSError:
        return None
    header, tables = None, None
    try:
        if not stat.S_ISREG(info.st_mode):
            raise ValueError("not a regular file")
        header, body = _split(slot.path.read_bytes())
        current = header["built_with"] == slot.built_with and _current(header["identity"], slot)
        tables = _tables(header, body) if current else None
    except _unreadable() as e:
        if damaged is not None:
            damaged.append(
                f"{slot.path}: the cache entry of {slot.name} could not be read ({_one_line(e)}): removed, and the "
                "trace parsed again"
            )
    if tables is None:
        _remove(slot.path)
        return None
    with contextlib.suppress(OSError):
        os.utime(slot.path)  # last used, for eviction
    rename(tables[2], header["name"], slot.name)
    return tables


def _current(kept: list, slot: Slot) -> bool:
    """Is an entry's identity the source's now: same files, sizes and mtimes, then same content?"""
    if not isinstance(kept, list) or not all(isinstance(i, list) for i in kept):
        raise ValueError("its identity is not a list of files")
    try:
        return unchanged(kept, slot.source, slot.deep) and kept == slot.identity()
    except OSError:
        return False  # the source cannot be read now: the parse says why


def _one_line(e: BaseException) -> str:
    text = " ".join(str(e).split())[:160]
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


def rename(meta: TraceMeta, old: str, new: str) -> None:
    """Name the source in the meta's paths and warnings as the user gave it this time (tables read from the cache,
    or parsed elsewhere under the resolved path)."""
    if old != new:
        meta.paths = [p.replace(old, new) for p in meta.paths]
        meta.warnings = [w.replace(old, new) for w in meta.warnings]


def _split(data: bytes) -> tuple[dict, memoryview]:
    magic, length, sha1 = _HEAD.unpack_from(data)
    if magic != _MAGIC or length > len(data) - _HEAD.size:
        raise ValueError("not a cache entry, or truncated")
    head = data[_HEAD.size : _HEAD.size + length]
    if hashlib.sha1(head).digest() != sha1:
        raise ValueError("its header is corrupt")
    header = json.loads(head)
    if not isinstance(header, dict):
        raise ValueError("its header is not an object")
    return header, memoryview(data)[_HEAD.size + length :]


def _tables(header: dict, body: memoryview) -> Tables:
    frames = {}
    for name, start, size, sha1 in header["tables"]:
        chunk = body[start : start + size]
        if len(chunk) != size or hashlib.sha1(chunk).hexdigest() != sha1:
            raise ValueError(f"table {name} is truncated or corrupt")
        frames[name] = _decode(chunk)
    meta = _meta_from(header["meta"], {k: frames[_SIDE + k] for k in header["side_tables"]})
    return frames["events"], frames["memory"], meta


def write(slot: Slot, identity: list, tables: Tables) -> bool:
    """Store the tables in the slot (atomically: a temporary file renamed into place); False if they cannot be kept
    exactly (meta that JSON would change) or the entry would not fit the cap. Never raises for a full disk."""
    events, memory, meta = tables
    plain = _meta_to(meta)
    if plain is None:
        return False
    frames = {"events": events, "memory": memory} | {_SIDE + k: v for k, v in meta.side_tables.items()}
    try:
        blobs = {k: _encode(v) for k, v in frames.items()}
    except _NotKept:
        return False
    header = {
        "name": slot.name,
        "identity": identity,
        "built_with": slot.built_with,
        "meta": plain,
        "side_tables": list(meta.side_tables),
        "tables": [],
    }
    offset = 0
    for name, blob in blobs.items():
        header["tables"].append([name, offset, len(blob), hashlib.sha1(blob).hexdigest()])
        offset += len(blob)
    head = json.dumps(header).encode()
    if _HEAD.size + len(head) + offset > size_limit():
        return False
    return _store(slot.path, [_HEAD.pack(_MAGIC, len(head), hashlib.sha1(head).digest()), head, *blobs.values()])


class _NotKept(ValueError):
    """A table holds a column the entry cannot keep exactly (the tables are then not cached)."""


def _encode(frame: pd.DataFrame) -> bytes:
    """A table as bytes: the length of a JSON description of its index and columns, the description, then the
    columns' buffers (see _column)."""
    buffers: list[bytes] = []
    index = frame.index
    described = {
        "index": [index.start, index.stop, index.step] if isinstance(index, pd.RangeIndex) else _column(index, buffers),
        "index_name": index.name,
        "names": list(frame.columns),
        "columns": [_column(frame[name], buffers) for name in frame.columns],
    }
    if not _exact([described["index_name"], *described["names"]]):
        raise _NotKept("column names that JSON does not keep")
    text = json.dumps(described).encode()
    return b"".join([struct.pack("<Q", len(text)), text, *buffers])


def _column(values: pd.Series | pd.Index | pd.Categorical | np.ndarray, buffers: list[bytes]) -> dict:
    """How one column is kept, its buffers appended: raw numpy values deflated, a categorical as its codes and
    categories, anything else as JSON values of its dtype (where JSON keeps them exactly)."""
    if isinstance(values.dtype, pd.CategoricalDtype):
        coded = values if isinstance(values, pd.Categorical) else values.array
        return {
            "codes": _column(coded.codes, buffers),
            "categories": _column(coded.categories, buffers),
            "ordered": bool(coded.ordered),
        }
    array = np.asarray(values) if isinstance(values.dtype, np.dtype) else None
    if array is not None and array.dtype.kind in _RAW_KINDS:
        buffers.append(_deflate.compress(np.ascontiguousarray(array).tobytes(), _DEFLATE_LEVEL))
        return {"dtype": array.dtype.str, "rows": len(array), "size": len(buffers[-1])}
    dtype = str(values.dtype)
    listed = [None if v is None or (not isinstance(v, list | dict | tuple) and pd.isna(v)) else v for v in values]
    if dtype == "object" and any(v is None for v in listed) or not _exact(listed):
        raise _NotKept(f"a column of {dtype} values that JSON does not keep")
    buffers.append(_deflate.compress(json.dumps(listed).encode(), _DEFLATE_LEVEL))
    return {"json": dtype, "size": len(buffers[-1])}


def _exact(values: list) -> bool:
    try:
        return json.loads(json.dumps(values, allow_nan=False)) == values
    except (TypeError, ValueError):
        return False


def _decode(blob: memoryview) -> pd.DataFrame:
    """The table that ``_encode`` wrote."""
    (length,) = struct.unpack_from("<Q", blob)
    described = json.loads(bytes(blob[8 : 8 + length]))
    reader = _Buffers(blob[8 + length :])
    index = described["index"]
    index = pd.RangeIndex(*index) if isinstance(index, list) else _index(_values(index, reader))
    index.name = described["index_name"]
    columns = {name: _values(c, reader) for name, c in zip(described["names"], described["columns"], strict=True)}
    if reader.left():
        raise ValueError("bytes left after the last column")
    return pd.DataFrame(columns, index=index, copy=False)


def _index(values: pd.api.extensions.ExtensionArray | np.ndarray) -> pd.Index:
    """An index of these values with their dtype (pandas 3 would read strings of an object array as str)."""
    return pd.Index(values, dtype=values.dtype)


class _Buffers:
    """The buffers after a table's description, taken in order."""

    def __init__(self, data: memoryview) -> None:
        self.data, self.at = data, 0

    def take(self, size: int) -> bytes:
        if size < 0 or self.at + size > len(self.data):
            raise ValueError("a column runs past the table's end")
        chunk = self.data[self.at : self.at + size]
        self.at += size
        return _deflate.decompress(chunk)

    def left(self) -> bool:
        return self.at != len(self.data)


def _values(kept: dict, reader: _Buffers) -> pd.api.extensions.ExtensionArray | np.ndarray:
    """One column's values as ``_column`` kept them (numpy arrays writable, as a parse gives them)."""
    if "codes" in kept:
        codes = _values(kept["codes"], reader)  # in the order _column wrote them
        categories = _index(_values(kept["categories"], reader))
        return pd.Categorical.from_codes(codes, categories=categories, ordered=kept["ordered"])
    data = reader.take(kept["size"])
    if "json" in kept:
        listed = json.loads(data)
        object_column = kept["json"] == "object"
        return pd.Series(listed, dtype=object).to_numpy() if object_column else pd.array(listed, kept["json"])
    array = np.frombuffer(bytearray(data), dtype=np.dtype(kept["dtype"]))
    if len(array) != kept["rows"]:
        raise ValueError("a column's length is not what its entry says")
    return array


def _store(path: Path, parts: Iterable[bytes]) -> bool:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=_SUFFIX)
    except OSError:
        return False
    try:
        with os.fdopen(fd, "wb") as f:
            for part in parts:
                f.write(part)
        os.replace(tmp, path)
        return True
    except OSError:
        _remove(Path(tmp))
        return False


def _remove(path: Path) -> None:
    """Remove an entry (a folder in its place too, which only a user's hand puts there)."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    with contextlib.suppress(OSError):
        path.unlink()


def _meta_to(meta: TraceMeta) -> dict | None:
    """The meta but its side tables (stored as tables of their own) as JSON-ready data; None if JSON would not keep
    it exactly."""
    plain = dataclasses.asdict(dataclasses.replace(meta, side_tables={}))
    plain["platform"] = meta.platform.value
    del plain["side_tables"]
    try:
        exact = json.loads(json.dumps(plain)) == plain
    except (TypeError, ValueError):
        exact = False
    return plain if exact else None


def _meta_from(plain: dict, side_tables: dict[str, pd.DataFrame]) -> TraceMeta:
    """The meta ``_meta_to`` stored, with its side tables (checked against their declarations)."""
    fields = dict(plain)
    fields["platform"] = Platform(plain["platform"])
    fields["devices"] = [Device(**d) for d in plain["devices"]]
    return TraceMeta(**fields, side_tables=side_tables)


@dataclass(frozen=True)
class Entry:
    """One cache entry: its file, size in bytes, when last used (ns since the epoch) and the trace it holds."""

    path: Path
    size: int
    used_ns: int
    source: str


def entries() -> list[Entry]:
    """Every entry, least recently used first."""
    found = []
    for path in folder().glob("*" + _SUFFIX):
        with contextlib.suppress(OSError):
            stat = path.stat()
            found.append(Entry(path, stat.st_size, stat.st_mtime_ns, _source_of(path)))
    return sorted(found, key=lambda e: e.used_ns)


def _source_of(path: Path) -> str:
    """The trace an entry was built from, as its header says ('?' if unreadable)."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return "?"
        with open(path, "rb") as f:
            magic, length, _ = _HEAD.unpack(f.read(_HEAD.size))
            if magic != _MAGIC or length > os.fstat(f.fileno()).st_size:
                return "?"
            return str(json.loads(f.read(length))["name"])
    except _unreadable():
        return "?"


def evict(limit: int | None = None) -> list[Entry]:
    """Remove the least recently used entries until the cache fits the cap (``TRACEANALYZER_CACHE_SIZE``)."""
    limit = size_limit() if limit is None else limit
    found = entries()
    total = sum(e.size for e in found)
    removed = []
    for entry in found:
        if total <= limit:
            break
        _remove(entry.path)
        total -= entry.size
        removed.append(entry)
    return removed


def clear() -> list[Entry]:
    """Remove every entry and any temporary file a stopped write left."""
    for tmp in folder().glob(".tmp-*" + _SUFFIX):
        _remove(tmp)
    return evict(0)


def describe() -> str:
    """What ``traceanalyze cache info`` prints: the folder, the cap, and every entry, most recently used first."""
    found = entries()
    total = sum(e.size for e in found)
    lines = [
        f"cache folder: {folder()}",
        f"entries: {len(found)}, {humanize.size(total, 1)} of {humanize.size(size_limit())} "
        "(TRACEANALYZER_CACHE_SIZE; least recently used entries are removed beyond it)",
    ]
    for entry in reversed(found):
        used = pd.Timestamp(entry.used_ns, unit="ns", tz="UTC").strftime("%Y-%m-%d %H:%M UTC")
        lines.append(f"  {humanize.size(entry.size, 1):>10}  last used {used}  {entry.source}")
    return "\n".join(lines) + "\n"


def keep(path: Path, header: dict, body: bytes) -> bool:
    """Store an entry of another kind than a rank's tables (a dashboard's report) at path, framed as those (so
    ``entries``, eviction and ``clear`` count it; ``header["name"]`` says what it holds), the body's SHA-1 in its
    header, atomically; False if it would not fit the cap or cannot be written."""
    head = json.dumps({**header, "body_sha1": hashlib.sha1(body).hexdigest()}).encode()
    if _HEAD.size + len(head) + len(body) > size_limit():
        return False
    return _store(path, [_HEAD.pack(_MAGIC, len(head), hashlib.sha1(head).digest()), head, body])


def kept(path: Path) -> tuple[dict, memoryview] | None:
    """The header and body of an entry written by ``keep`` (marked last used), or None when there is none;
    ValueError (the entry removed) when it is not a regular file, truncated or corrupt."""
    try:
        info = os.stat(path)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(info.st_mode):
            raise ValueError("not a regular file")
        header, body = _split(path.read_bytes())
        if hashlib.sha1(body).hexdigest() != header.get("body_sha1"):
            raise ValueError("its body is truncated or corrupt")
    except _unreadable() as e:
        _remove(path)
        raise ValueError(_one_line(e)) from e
    with contextlib.suppress(OSError):
        os.utime(path)
    return header, body
