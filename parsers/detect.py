"""Decide what a user's path holds and which parser reads each trace in it."""

from __future__ import annotations

import gzip
import os
import re
import stat
import warnings
import zlib
from pathlib import Path

import msgspec
from traceanalyzer.parsers import ascend, kineto, snapshot
from traceanalyzer.parsers.columns import TooDeep
from traceanalyzer.parsers.jsonstream import decode_json, describe_json, events_head, read_all, top_level
from traceanalyzer.parsers.unit import Unit

from traceanalyzer import outputs
from traceanalyzer.errors import TraceError

_KINETO_GLOBS = ("*.json", "*.json.gz", "*.pt.trace.json", "*.pt.trace.json.gz")
ITERATION = re.compile(r"iteration_\d+")
"""A folder of one profiled window, as torchtitan names them under ``profile_traces/``."""


def units(path: Path) -> list[Unit]:
    """The traces a path holds: a file, a run folder, or a folder of per-rank traces."""
    if not path.exists():
        raise TraceError(path, "does not exist")
    refuse_special(path)
    if path.is_dir():
        _refuse_special_inside(path)
    if path.is_file() and snapshot.is_snapshot(path):
        return [Unit(snapshot.parse, path)]
    found = ascend.units(path)
    if found:
        for folder in {source_of(u)[0] for u in found} - {path}:
            _refuse_special_inside(folder)
        if path.is_dir():
            _refuse_kineto_beside(path, found)
        return found
    if path.is_dir():
        return _folder(path)
    _check_file(path)
    return [Unit(kineto.parse, path)]


def _refuse_kineto_beside(path: Path, found: list[Unit]) -> None:
    """A TraceError when a folder of Ascend ranks also holds Kineto traces outside them (two runs in one folder,
    which would be read as one with the Kineto file dropped)."""
    folders = {source_of(u)[0] for u in found}
    for name in _KINETO_GLOBS:
        for f in sorted(path.glob("**/" + name)):
            inside = any(folder == f.parent or folder in f.parents for folder in folders)
            if not inside and f.is_file() and not _exported(f) and is_kineto(f):
                raise TraceError(
                    f,
                    f"is a Kineto trace in {path}, which holds an Ascend run too: they are not one job; give the "
                    "Ascend run and the Kineto trace separately",
                )


def source_of(unit: Unit) -> tuple[Path, bool]:
    """What a unit's tables are read from, and whether its subfolders count: a Kineto file or a memory snapshot
    itself; for Ascend the rank folder around its output folder (the parser reads the files beside the one it was
    given), or the files beside a file given on its own (not its folder's subfolders: that may be any folder)."""
    if unit.parse_with in (kineto.parse, snapshot.parse):
        return unit.path, True
    folder = unit.path if unit.path.is_dir() else unit.path.parent
    if folder.name in ascend.OUTPUT_DIRS:
        return folder.parent, True
    return folder, unit.path.is_dir()


_SPECIAL = {stat.S_IFIFO: "a FIFO", stat.S_IFCHR: "a device", stat.S_IFBLK: "a device", stat.S_IFSOCK: "a socket"}


def refuse_special(path: Path) -> None:
    """A TraceError for a FIFO, device or socket (or a link to one): reading one could block or never end."""
    try:
        mode = os.stat(path).st_mode
    except OSError as e:
        raise TraceError(path, f"cannot be read ({e.strerror or e})") from None
    what = _SPECIAL.get(stat.S_IFMT(mode))
    if what:
        raise TraceError(path, f"is {what}, not a regular file or folder: refused before reading it")


def _refuse_special_inside(folder: Path) -> None:
    """refuse_special for every entry of the folder's tree (a link to a folder is not followed)."""
    for root, dirs, files in os.walk(folder):
        for name in files + [d for d in dirs if os.path.islink(os.path.join(root, d))]:
            entry = Path(root, name)
            if os.path.lexists(entry) and not os.path.exists(entry):
                continue  # a dangling link: nothing to read
            refuse_special(entry)


def _folder(path: Path) -> list[Unit]:
    for depth in ("", "**/"):
        files = sorted({f for g in _KINETO_GLOBS for f in path.glob(depth + g) if f.is_file()})
        exported = [f for f in files if _exported(f)]
        traces = [f for f in files if f not in exported and is_kineto(f)]
        for f in exported:
            warnings.warn(f"{f}: written by traceanalyze export, so not read as a trace of the run", stacklevel=2)
        if traces:
            _one_iteration(path, traces)
            return [Unit(kineto.parse, f) for f in traces]
        snapshots = sorted(f for f in path.glob(depth + "*") if f.name.lower().endswith(snapshot.SUFFIXES))
        if any(f.is_file() for f in snapshots):
            return [Unit(snapshot.parse, f) for f in snapshots if f.is_file()]
    raise TraceError(path, "is a folder with no trace in it (looked for Kineto *.json[.gz] and Ascend *_ascend_pt)")


def _one_iteration(path: Path, traces: list[Path]) -> None:
    """A TraceError for a folder of several profiled iterations (torchtitan's ``profile_traces/iteration_N/``):
    their traces are the same ranks at different times, not one job; each iteration folder is one."""
    found = {p for f in traces for p in f.relative_to(path).parents if ITERATION.fullmatch(p.name)}
    iterations = sorted(found, key=lambda p: (int(p.name.removeprefix("iteration_")), str(p)))
    if len(iterations) > 1:
        named = ", ".join(str(p) for p in iterations[:3]) + (", ..." if len(iterations) > 3 else "")
        raise TraceError(
            path,
            f"holds {len(iterations)} profiled iterations ({named}): give one of them, e.g. {path / iterations[-1]}",
        )


def _exported(path: Path) -> bool:
    """Did traceanalyze export write the file (a marked Perfetto trace, or a file in a marked folder)?"""
    if outputs.is_export_folder(path.parent):
        return True
    try:
        with path.open("rb") as f:
            head = f.read(64)
            if head[:2] == b"\x1f\x8b":
                f.seek(0)
                with gzip.GzipFile(fileobj=f) as z:
                    head = z.read(64)
    except (OSError, EOFError, zlib.error):
        return False
    return outputs.is_export_head(head)


def is_kineto(path: Path) -> bool:
    """Does the file hold a traceEvents key (after a header of any size)?"""
    return events_head(path, 0) is not None


def _check_file(path: Path) -> None:
    """Raise a TraceError saying what the file is, unless it looks like a Kineto trace."""
    if path.stat().st_size == 0:
        raise TraceError(path, "is empty")
    if is_kineto(path):
        return
    data = read_all(path)
    if not data.strip():
        raise TraceError(path, "is empty")
    raise TraceError(path, f"is not a profiler trace: it looks like {describe_document(data, path)}")


def describe_document(data: bytes, path: Path) -> str:
    """A few words naming what a non-trace file looks like."""
    head = data.lstrip()[:1]
    if head not in (b"{", b"["):
        return "binary data" if b"\x00" in data[:1024] else "text that is not JSON"
    try:
        return _describe_array(data) if head == b"[" else _describe_object(data, path)
    except TooDeep:
        return "JSON nested too deeply to read"


def _describe_object(data: bytes, path: Path) -> str:
    keys = set(top_level(data, path))
    if {"nodes", "schema"} <= keys:
        return "a PyTorch execution trace (ExecutionTraceObserver), which has no timings; pass the Kineto trace"
    shown = ", ".join(sorted(keys)[:6]) or "no keys"
    return f"a JSON object with keys {shown} and no traceEvents"


def _describe_array(data: bytes) -> str:
    try:
        doc = decode_json(data)
    except msgspec.DecodeError as e:
        return f"broken JSON ({e})"
    if doc and isinstance(doc[0], list) and doc[0] and all(isinstance(v, int) for v in doc[0][:8]):
        return "a memory timeline export (profiler.export_memory_timeline), not a trace"
    if doc and isinstance(doc[0], dict) and "ph" in doc[0]:
        return "a Chrome trace in array form without Ascend lanes"
    return describe_json(data)
