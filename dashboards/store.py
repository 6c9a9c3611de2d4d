"""The traces the dashboard holds: loaded in the background, with their progress, errors and cached views."""

from __future__ import annotations

import hashlib
import itertools
import shutil
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from traceanalyzer.dashboards.access import REFUSED, Allowed, Refused
from traceanalyzer.dashboards.views import View

from traceanalyzer import comparison
from traceanalyzer.errors import TraceError
from traceanalyzer.trace import load

MESSAGE_CHARS = 400
"""A job's label or message is cut to this many characters (a typed path or an error can be megabytes)."""
FAILED_KEPT = 10
"""Failed opens kept per browser session: an older one goes when a newer one fails."""
KEY_CHARS = 12
"""Hex digits of a trace's key (a SHA-1 of its files' contents): a link names a trace by what it is, not by when it
was opened, so it holds across restarts and other orders of opening."""
_CHUNK = 1 << 20


@dataclass
class Job:
    """One load request: what it is, how far it got, and its result or error."""

    key: str
    label: str
    paths: list[str]
    state: str = "loading"  # loading | ready | error
    message: str = "queued"
    started: float = field(default_factory=time.monotonic)
    finished: float | None = None
    view: View | None = None
    guarded: bool = False  # opened by path from the page: its errors say nothing of the file (REFUSED)
    owner: str | None = None  # the browser session that opened it (None: the command line); its errors are its own
    temporary: Path | None = None  # a folder of ours (an upload's) removed once the trace is read
    content: str | None = None  # the SHA-1 of its files' contents (content_key), None when they could not be read

    def elapsed_s(self) -> float:
        """Seconds spent so far (or in total, once finished)."""
        return (self.finished or time.monotonic()) - self.started


class Store:
    """Thread-safe registry of load jobs; each ready job holds a View of its trace."""

    def __init__(self, allowed: Allowed | None = None) -> None:
        self.allowed = allowed or Allowed()
        self._jobs: dict[str, Job] = {}
        self._lock = threading.Lock()
        self._keys = itertools.count(1)
        self._comparisons: dict[tuple[str, str], comparison.Comparison] = {}
        self._comparing: dict[tuple[str, str], threading.Lock] = {}  # one per pair: its comparison is made once

    def open(
        self,
        paths: list[str],
        label: str | None = None,
        wait: bool = False,
        guarded: bool = False,
        owner: str | None = None,
        temporary: Path | None = None,
    ) -> str:
        """Start loading paths (one trace, ranks side by side) for a browser session (owner) or for everyone (None);
        temporary, a folder removed once they are read; returns the job key (content_key) at once, or with wait once
        the trace is loaded and its pages precomputed. The
        same contents opened again is the job already there (its key), unless that one failed."""
        key = content_key(paths)
        with self._lock:
            same = self._jobs.get(key or "")
        if same is not None and same.state != "error":
            if temporary is not None:
                shutil.rmtree(temporary, ignore_errors=True)
            return same.key
        job = self._add(label or " + ".join(Path(p).name or p for p in paths), paths, guarded, owner, key)
        job.temporary = temporary
        thread = threading.Thread(target=self._load, args=(job,), daemon=True)
        thread.start()
        if wait:
            thread.join()
        return job.key

    def open_requested(self, text: str | None, owner: str | None = None) -> str:
        """Open a path typed into the page of a browser session, if the allowed set covers it; a refused one becomes
        a failed job of that session at once."""
        try:
            path = self.allowed.check(text)
        except Refused as e:
            job = self._add(text.strip() if text else "(no path)", [], True, owner)
            job.finished = time.monotonic()
            self._fail(job, str(e))
            return job.key
        return self.open([str(path)], label=text.strip(), guarded=True, owner=owner)

    def _add(self, label: str, paths: list[str], guarded: bool, owner: str | None, key: str | None = None) -> Job:
        """A new job under key (a failed open without one: a key no link can name)."""
        with self._lock:
            content, key = key, key or f"failed-{next(self._keys)}"
            self._jobs.pop(key, None)  # a failed job of these contents is replaced by the new attempt
            self._jobs[key] = Job(key, cut(label), list(paths), guarded=guarded, owner=owner, content=content)
            return self._jobs[key]

    def dismiss(self, key: str) -> None:
        """Forget a failed job (its error line goes away)."""
        with self._lock:
            if key in self._jobs and self._jobs[key].state == "error":
                del self._jobs[key]

    def _load(self, job: Job) -> None:
        try:
            job.message = "reading"
            trace = load(job.paths, progress=lambda msg: setattr(job, "message", msg))
            job.message = "analyzing"
            view = View(trace, job.label, job.content)
            view.report()  # what the first page shows: the trace is ready once it is there
            job.view, job.state, job.message = view, "ready", "ready"
        except TraceError as e:
            self._failed(job, str(e))
        except Exception as e:  # a parser bug must not take the app down; the user sees one line
            self._failed(job, f"internal error while loading: {type(e).__name__}: {e}")
        finally:
            job.finished = time.monotonic()
            if job.temporary is not None:
                shutil.rmtree(job.temporary, ignore_errors=True)
        if job.state == "ready":
            self._warm(job.view)

    @staticmethod
    def _warm(view: View) -> None:
        """Keep the report in the trace cache and precompute the other pages' first visits while the user reads the
        first; a failure is noted (the page that needs it computes it again on its visit and shows the error there)."""
        try:
            view.keep()
            view.warm()
        except Exception as e:
            view.notes.append(f"precomputing the pages failed ({type(e).__name__}: {e})")

    def _failed(self, job: Job, message: str) -> None:
        """A load's error: the message, or for a guarded job the generic one (the detail goes to the console)."""
        if job.guarded:
            print(f"traceanalyze dashboard: opening {job.label} failed: {cut(message)}", file=sys.stderr)
        for path in job.paths:  # the line names the job already (an upload's temp path is the server's business)
            message = message.replace(f"{path}: ", "")
        self._fail(job, REFUSED if job.guarded else message)

    def _fail(self, job: Job, shown: str) -> None:
        """Mark a job failed with the message shown (cut); its session keeps only its last FAILED_KEPT failures."""
        job.state, job.message = "error", cut(shown)
        with self._lock:
            failed = [j.key for j in self._jobs.values() if j.state == "error" and j.owner == job.owner]
            for key in failed[:-FAILED_KEPT]:
                del self._jobs[key]

    def jobs(self) -> list[Job]:
        """All jobs, in the order they were opened."""
        with self._lock:
            return list(self._jobs.values())

    def pending(self, owner: str | None) -> list[Job]:
        """The loads and failures a browser session sees: its own and the command line's."""
        return [j for j in self.jobs() if j.state != "ready" and j.owner in (None, owner)]

    def ready(self) -> list[Job]:
        """Jobs whose trace is loaded."""
        return [j for j in self.jobs() if j.state == "ready"]

    def view(self, key: str | None) -> View | None:
        """The view of a loaded trace, or None."""
        job = self._jobs.get(key or "")
        return job.view if job and job.state == "ready" else None

    def comparison(self, left: str, right: str) -> comparison.Comparison | None:
        """The comparison of two loaded traces (baseline left, candidate right), made once per pair (requests for a
        pair that arrive while it is made wait for it); None unless both are loaded."""
        a, b = self.view(left), self.view(right)
        if a is None or b is None:
            return None
        with self._lock:
            pair = self._comparing.setdefault((left, right), threading.Lock())
        with pair:  # a second request for the pair while it is being made waits for it (not a second computation)
            with self._lock:
                made = self._comparisons.get((left, right))
            if made is None:
                made = comparison.compare(a.trace, b.trace)
                with self._lock:
                    self._comparisons[(left, right)] = made
        return made

    def busy(self) -> bool:
        """Whether any load is still running."""
        return any(j.state == "loading" for j in self.jobs())


def content_key(paths: list[str]) -> str | None:
    """A SHA-1 of the paths' contents (a folder's: every file under it, with its name inside the folder), cut to
    KEY_CHARS; None when one cannot be read (the load then fails and says why)."""
    digest = hashlib.sha1()
    try:
        for given in paths:
            path = Path(given)
            files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
            for file in files:
                digest.update(f"\0{file.relative_to(path) if file != path else ''}\0".encode())
                with open(file, "rb") as f:
                    while chunk := f.read(_CHUNK):
                        digest.update(chunk)
    except OSError:
        return None
    return digest.hexdigest()[:KEY_CHARS]


def cut(text: str, limit: int = MESSAGE_CHARS) -> str:
    """text, or its first limit characters and an ellipsis saying how much was cut."""
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text) - limit:,} more characters)"
