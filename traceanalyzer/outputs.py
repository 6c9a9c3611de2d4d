"""The one guard every writer goes through (the report's ``-o``, every export, the HTML report, the cache).

An output is judged by where it really lands (links and ``..`` resolved): never an input, never inside an input's
folder tree (a folder given, or the rank folder an Ascend file is read with), never over an existing file unless
asked (``--force``), and always written to a temporary file beside it and renamed into place, so that a stopped
write leaves nothing half-written and a hard link to an input keeps the input's bytes. Exports mark what they
write (``EXPORT_KEY`` in a Perfetto trace's first bytes, ``EXPORT_MARKER`` in an export folder), so that a folder
read again skips them instead of taking an export for another rank.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from traceanalyzer.errors import TraceError

EXPORT_KEY = "traceanalyzerExport"
"""The first key of a Perfetto trace we write (``{"traceanalyzerExport": ..., "traceEvents": ...}``)."""
EXPORT_MARKER = ".traceanalyzer-export"
"""The file that marks a folder of exported tables."""
_TMP = ".tmp-traceanalyzer-"


@dataclass(frozen=True)
class Protected:
    """What a load reads: a file, or a folder with everything under it (``tree``)."""

    path: Path
    tree: bool


def real(path: str | os.PathLike) -> Path:
    """The path with every link and ``..`` resolved (the parts that do not exist yet kept as given)."""
    return Path(os.path.realpath(os.fspath(path)))


def protected(paths: Sequence[str | os.PathLike]) -> list[Protected]:
    """The inputs as given: a folder protects its tree, a file itself and (for a folder output) its folder."""
    return [Protected(real(p), Path(p).is_dir()) for p in paths]


def refusal(out: str | os.PathLike, inputs: Sequence[Protected], force: bool = False, folder: bool = False) -> str:
    """Why ``out`` may not be written ('' when it may): inside or onto an input, an existing file without
    ``force``, a missing or unwritable folder, a path the system refuses to look at (a name too long, a loop of
    links). ``folder``: the output is a folder of files."""
    try:
        return intrusion(out, inputs, folder) or _place_problem(real(out), force, folder)
    except OSError as e:
        return f"cannot be written: {e.strerror or e}"


def intrusion(out: str | os.PathLike, inputs: Sequence[Protected], folder: bool = False) -> str:
    """Why ``out`` would write onto, into or (``folder``) beside an input ('' when it would not)."""
    given, target = Path(out), real(out)
    for source in inputs:
        if target == source.path or (given.exists() and _same_file(given, source.path)):
            return "is one of the inputs (it would be overwritten)"
        if source.tree and source.path in target.parents:
            return f"is inside the input {source.path} (write it elsewhere: nothing is written into an input)"
        if folder and not source.tree and target == source.path.parent:
            return f"is the folder of the input {source.path} (write it elsewhere: nothing is written beside an input)"
    return ""


def _same_file(a: Path, b: Path) -> bool:
    with contextlib.suppress(OSError):
        return os.path.samefile(a, b)
    return False


def _place_problem(target: Path, force: bool, folder: bool) -> str:
    if not target.parent.is_dir():
        return "is in a folder that does not exist"
    if folder:
        if target.exists() and not target.is_dir():
            return "is a file (a folder of tables is written there)"
        if target.is_dir() and any(target.iterdir()) and not force:
            return "is a folder that is not empty (give --force to write into it)"
        return "" if os.access(target if target.is_dir() else target.parent, os.W_OK) else _UNWRITABLE
    if target.is_dir():
        return "is a folder"
    if target.exists() and not stat.S_ISREG(target.stat().st_mode):
        return "" if stat.S_ISCHR(target.stat().st_mode) else "is not a regular file"
    if target.exists() and not force:
        return "exists (give --force to replace it)"
    return "" if os.access(target.parent, os.W_OK) else _UNWRITABLE


_UNWRITABLE = "is in a folder that cannot be written to"


def check(
    out: str | os.PathLike, inputs: Sequence[Protected], force: bool = False, folder: bool = False, what: str = "-o"
) -> Path:
    """The resolved output, or a TraceError naming it and why it may not be written (exit 2)."""
    problem = refusal(out, inputs, force, folder)
    if problem:
        raise TraceError(out, f"(the {what} output) {problem}")
    return real(out)


@contextlib.contextmanager
def replacing(out: str | os.PathLike, mode: str = "wb") -> Iterator[IO]:
    """A file to write ``out`` through: a temporary file beside it, renamed onto it when the block ends without
    an error (removed otherwise). A character device (``/dev/null``) is written directly."""
    target = real(out)
    if target.exists() and stat.S_ISCHR(target.stat().st_mode):
        with _written(target, lambda: open(target, mode)) as f:  # noqa: SIM115 -- closed by _written
            yield f
        return
    try:
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=_TMP, suffix=target.name[-40:])
    except OSError as e:
        raise TraceError(out, f"cannot be written: {e.strerror or e}") from None
    try:
        os.chmod(tmp, 0o666 & ~_umask())
        with _written(target, lambda: os.fdopen(fd, mode)) as f:
            yield f
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _umask() -> int:
    """The process's umask (what a plain open would give the file), read without changing it for long."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def _written(target: Path, opener) -> Iterator[IO]:
    try:
        with opener() as f:
            yield f
    except OSError as e:
        raise TraceError(target, f"cannot be written: {e.strerror or e}") from None


@contextlib.contextmanager
def folder_replacing(out: str | os.PathLike) -> Iterator[Path]:
    """A folder to write ``out``'s files into: a temporary folder beside it whose files are moved into ``out``
    (made if missing, marked with ``EXPORT_MARKER``) when the block ends without an error."""
    target = real(out)
    try:
        tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=_TMP))
    except OSError as e:
        raise TraceError(out, f"cannot be written: {e.strerror or e}") from None
    try:
        os.chmod(tmp, 0o777 & ~_umask())
        yield tmp
        (tmp / EXPORT_MARKER).write_text("written by traceanalyze export\n", encoding="utf-8")
        if not target.exists():
            os.rename(tmp, target)
            return
        for part in tmp.iterdir():
            os.replace(part, target / part.name)
    except OSError as e:
        raise TraceError(out, f"cannot be written: {e.strerror or e}") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def is_export_folder(path: Path) -> bool:
    """Does the folder hold tables that traceanalyze export wrote?"""
    return (path / EXPORT_MARKER).is_file()


def is_export_head(head: bytes) -> bool:
    """Do a JSON file's first bytes (decompressed) say it is a Perfetto trace we wrote?"""
    return head.lstrip()[:40].startswith(b'{"' + EXPORT_KEY.encode() + b'"')
