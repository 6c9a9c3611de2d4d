"""Progress of long loads: bytes read of one file, ranks done of a job. On a terminal a tqdm bar on stderr, else
plain lines (at most one per tenth of the work); for the dashboard, a message per update."""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from traceanalyzer import humanize, lazy

if TYPE_CHECKING:
    from tqdm import tqdm as Bar

tqdm = lazy.Module("tqdm")  # imported with the first bar: a report that draws none does not pay its 30-70 ms

SHOWN_FROM_BYTES = 256 << 20
"""A single file shows its bytes read from this size on (smaller ones load in about a second)."""
SHOWN_FROM_RANKS = 8
"""A job shows its ranks done from this many ranks on."""
POLL_S = 0.25


class Progress:
    """Where loading reports: what it is doing, a note worth keeping, or an amount done of a total (``unit`` "B"
    for bytes, "ranks"). This base reports nowhere."""

    def status(self, text: str) -> None:
        """What it is doing now (a status line shows it; stderr does not)."""

    def note(self, text: str) -> None:
        """A one-off message (e.g. the memory estimate)."""

    def count(self, what: str, done: int, total: int, unit: str) -> None:
        """``done`` of ``total`` of ``what``; called again as it grows, last with done == total."""


class Messages(Progress):
    """Progress as text for a callback (the dashboard's status line)."""

    def __init__(self, say: Callable[[str], None]) -> None:
        self.say = say

    def status(self, text: str) -> None:
        """Say it."""
        self.say(text)

    def note(self, text: str) -> None:
        """Say it."""
        self.say(text)

    def count(self, what: str, done: int, total: int, unit: str) -> None:
        """Say e.g. 'reading big.json: 512 of 1,137 MB'."""
        self.say(f"{what}: {humanize.amount_of(done, total, unit)}")


class Stderr(Progress):
    """Progress on stderr: a tqdm bar on a terminal, plain lines (each tenth of the work) otherwise."""

    def __init__(self, stream=None) -> None:
        self.stream = stream or sys.stderr
        self.terminal = self.stream.isatty()
        self._bars: dict[str, Bar] = {}
        self._tenths: dict[str, int] = {}

    def note(self, text: str) -> None:
        """A line of its own."""
        print(f"traceanalyze: {text}", file=self.stream, flush=True)

    def count(self, what: str, done: int, total: int, unit: str) -> None:
        """Move the bar, or print a line when another tenth is done."""
        if self.terminal:
            self._bar(what, total, unit).update(done - self._bars[what].n)
            if done >= total:
                self._bars.pop(what).close()
            return
        tenth = done * 10 // max(total, 1)
        if tenth > self._tenths.get(what, 0):
            self._tenths[what] = tenth
            self.note(f"{what}: {humanize.amount_of(done, total, unit)}")

    def _bar(self, what: str, total: int, unit: str) -> Bar:
        if what not in self._bars:
            scaled = unit == "B"
            self._bars[what] = tqdm.tqdm(
                total=total, desc=what, unit=unit, unit_scale=scaled, unit_divisor=1024, file=self.stream, leave=False
            )
        return self._bars[what]


@contextlib.contextmanager
def bytes_read(path: Path, total: int, progress: Progress) -> Iterator[None]:
    """While the body runs, report how far this process has read ``path`` (its file offset; Linux only: elsewhere
    nothing is reported)."""
    done = threading.Event()
    fdinfo = Path("/proc/self/fdinfo")
    if not fdinfo.is_dir():
        yield
        return
    watcher = threading.Thread(target=_watch, args=(path.resolve(), total, progress, done), daemon=True)
    watcher.start()
    try:
        yield
    finally:
        done.set()
        watcher.join()
    progress.count(f"reading {path.name}", total, total, "B")


def _watch(path: Path, total: int, progress: Progress, done: threading.Event) -> None:
    shown = 0
    while not done.wait(POLL_S):
        position = min(_offset(path), total)
        if position > shown:
            shown = position
            progress.count(f"reading {path.name}", position, total, "B")


def _offset(path: Path) -> int:
    """The largest offset at which this process has ``path`` open (0 if it is not open)."""
    best = 0
    target = str(path)
    with contextlib.suppress(OSError):
        for fd in os.listdir("/proc/self/fd"):
            with contextlib.suppress(OSError, ValueError):
                if os.readlink(f"/proc/self/fd/{fd}") == target:
                    with open(f"/proc/self/fdinfo/{fd}") as f:
                        best = max(best, int(f.readline().split()[1]))
    return best
