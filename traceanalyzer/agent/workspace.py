"""The traces a server has open, by handle, and the paths it may open: those under its ``--allow`` folders.

A path is checked as the dashboard checks one (``traceanalyzer.dashboards.access``): resolved, so links and '..'
cannot leave the allowed folders, and refused with one message whatever the reason. Traces are read without the
parse cache, so the server writes nothing; at most ``MAX_OPEN`` stay open (the oldest is closed first, and the
answer that closes it says so).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from traceanalyzer.dashboards.access import Allowed, Refused
from traceanalyzer.errors import TraceError
from traceanalyzer.report import Report
from traceanalyzer.trace import Trace, load

MAX_OPEN = 4
"""Traces a server keeps open at once."""
REFUSED = "not a readable trace inside the folders this server may open (traceanalyze mcp --allow DIR adds one)"
"""The one answer for a path outside the allowed folders, unreadable, or not there."""


class NotOpen(KeyError):
    """A handle the server does not have open."""


@dataclass
class OpenTrace:
    """A trace opened by an agent: its handle, where it came from, and its reports by (step, rank)."""

    handle: str
    path: Path
    trace: Trace
    warnings: list[str]
    reports: dict[tuple[int | None, int | None], Report] = field(default_factory=dict)

    def report(self, step: int | None = None, rank: int | None = None) -> Report:
        """The report of one scope (built once)."""
        key = (step, rank)
        if key not in self.reports:
            self.reports[key] = self.trace.build_report(step=step, rank=rank)
        return self.reports[key]


class Workspace:
    """Open traces by handle (``t1``, ``t2``, ...), opened only from under the allowed folders."""

    def __init__(self, allow: Iterable[str | os.PathLike]) -> None:
        self.allowed = Allowed(allow, refused=REFUSED)
        self.open: dict[str, OpenTrace] = {}
        self.count = 0

    def open_path(self, path: str) -> tuple[OpenTrace, list[str]]:
        """The trace at ``path`` opened (or the one already open there), and the handles closed to make room."""
        try:
            real = self.allowed.check(path)
        except Refused as e:
            raise TraceError(path, str(e)) from None
        for opened in self.open.values():
            if opened.path == real:
                return opened, []
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            trace = load(real, cache=False)
        closed = []
        while len(self.open) >= MAX_OPEN:
            closed.append(next(iter(self.open)))
            del self.open[closed[-1]]
        self.count += 1
        handle = f"t{self.count}"
        said = [str(w.message) for w in caught] + list(trace.meta.warnings)
        self.open[handle] = OpenTrace(handle, real, trace, said)
        return self.open[handle], closed

    def get(self, handle: str) -> OpenTrace:
        """The open trace of a handle; NotOpen names the open ones."""
        if handle not in self.open:
            known = ", ".join(self.open) or "none"
            raise NotOpen(f"no open trace has handle {handle!r} (open: {known}); open_trace(path) opens one")
        return self.open[handle]
