"""Reports kept in the trace cache: a trace the dashboard opened before shows its first page without running the
analyzers again.

An entry is one file in the cache folder beside the tables' entries, framed as they are (``cache.keep``: a JSON
header with its SHA-1, then the body, whose SHA-1 the header holds), so ``traceanalyze cache info`` lists it and the
size cap and ``cache clear`` count it. Its file is named by what the report is of (the sources as given, a SHA-1 of
their contents, the report's options); its header says what built it (a digest of the package's code, parsers and
analyzers included, and the pandas and numpy versions): an entry built otherwise is stale and replaced. The body is
the report, its notes and what the dashboard derived from it, pickled: it is read only from an entry the user owns
that no one else can write, and only once its digest matches, as the tables' entries are.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import pickle
import stat
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd

import traceanalyzer
from traceanalyzer import cache, parsers
from traceanalyzer.report import Report

LAYOUT = 1
"""Bump when what an entry's body holds changes in a way the code digest cannot see."""


class Kept(NamedTuple):
    """A report, the notes its build left (the analyzers' warnings the pages show) and what its presenter derived
    from it to show it (by name; pickled with it)."""

    report: Report
    notes: list[str]
    derived: dict[str, object]


class Key(NamedTuple):
    """What a report is of: the sources as given, a SHA-1 of their contents, and its options (as text)."""

    paths: tuple[str, ...]
    content: str
    options: str

    @property
    def path(self) -> Path:
        """The entry's file in the cache folder."""
        named = json.dumps(["report", *self.paths, self.content, self.options])
        return cache.folder() / f"{hashlib.sha256(named.encode()).hexdigest()[:32]}.tacache"


def key(paths: Sequence[str], content: str, options: str) -> Key:
    """The key of the report of paths (whose contents' SHA-1 is content) built with options."""
    return Key(tuple(str(p) for p in paths), content, options)


def built_with() -> list[str]:
    """What an entry must have been built with to be current: this layout, the package's code, pandas and numpy."""
    code = cache.code_digest((traceanalyzer, parsers))
    return [str(LAYOUT), code, pd.__version__, np.__version__]


def read(where: Key) -> Kept | None:
    """The kept report, or None when the cache is off, unusable or has no current entry (a damaged one is removed,
    with a warning)."""
    if not cache.enabled() or cache.unusable() or not _own(where.path):
        return None
    try:
        found = cache.kept(where.path)
        if found is None or found[0].get("built_with") != built_with():
            return None
        report, notes, derived = pickle.loads(found[1])
    except (ValueError, pickle.UnpicklingError, EOFError, AttributeError, ImportError, TypeError) as e:
        warnings.warn(f"{where.path}: the kept report could not be read ({e}): removed, and built again", stacklevel=2)
        with contextlib.suppress(OSError):
            where.path.unlink()
        return None
    return Kept(report, list(notes), dict(derived))


def _own(path: Path) -> bool:
    """Is the entry (if any) this user's alone: owned by them and writable by no one else? A pickle is read only
    then, since whoever can write it can make it run code."""
    try:
        st = path.stat()
    except OSError:
        return True  # no entry: nothing is read
    return st.st_uid == os.getuid() and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def write(where: Key, kept: Kept, label: str) -> bool:
    """Keep a report (label: what the cache's listing names it by); False when the cache is off or unusable, or
    the entry would not fit; the cache is then held to its cap."""
    if not cache.enabled() or cache.unusable():
        return False
    body = pickle.dumps(tuple(kept), protocol=pickle.HIGHEST_PROTOCOL)
    header = {"name": f"{label} (the dashboard's report)", "built_with": built_with()}
    done = cache.keep(where.path, header, body)
    cache.evict()
    return done
