"""Read-only SQLite access to a profiler database: nothing is created or changed beside the user's file."""

from __future__ import annotations

import shutil
import sqlite3
import tempfile
from pathlib import Path

from traceanalyzer.errors import TraceError


def uri(path: Path) -> str:
    """The SQLite URI that opens ``path`` read-only and immutable: SQLite then creates no ``-wal`` / ``-shm`` file
    beside a WAL-mode database and rewrites no existing one (``mode=ro`` alone does both)."""
    return f"{path.resolve().as_uri()}?mode=ro&immutable=1"


class connect:
    """A read-only SQLite connection that is always closed, with bad files reported as TraceError. A database whose
    ``-wal`` file holds changes not yet in the database (which an immutable open would not see) is read from a
    private copy of both."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.private: tempfile.TemporaryDirectory | None = None

    def __enter__(self) -> sqlite3.Connection:
        try:
            self.con = self._open()
            self.con.execute("select count(*) from sqlite_master").fetchone()
        except (sqlite3.DatabaseError, OSError) as e:
            self._close()
            raise TraceError(self.path, f"is not a readable SQLite database ({e})") from None
        return self.con

    def _open(self) -> sqlite3.Connection:
        wal = self.path.with_name(self.path.name + "-wal")
        if not (wal.is_file() and wal.stat().st_size):
            return sqlite3.connect(uri(self.path), uri=True)
        self.private = tempfile.TemporaryDirectory(prefix="traceanalyzer-db-")
        copy = Path(self.private.name) / self.path.name
        shutil.copyfile(self.path, copy)
        shutil.copyfile(wal, copy.with_name(copy.name + "-wal"))
        return sqlite3.connect(copy)

    def _close(self) -> None:
        if getattr(self, "con", None) is not None:
            self.con.close()
        if self.private is not None:
            self.private.cleanup()

    def __exit__(self, *exc) -> None:
        self._close()
        if exc[0] is not None and issubclass(exc[0], sqlite3.DatabaseError):
            raise TraceError(self.path, f"is a corrupt or unexpected profiler database ({exc[1]})") from None
