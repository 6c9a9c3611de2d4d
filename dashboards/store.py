"""The traces the dashboard holds: loaded in the background, with their progress, errors and cached views."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from traceanalyzer.dashboards.views import View

from traceanalyzer.errors import TraceError
from traceanalyzer.loading import load


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

    def elapsed_s(self) -> float:
        """Seconds spent so far (or in total, once finished)."""
        return (self.finished or time.monotonic()) - self.started


class Store:
    """Thread-safe registry of load jobs; each ready job holds a View of its trace."""

    def __init__(self) -> None:
        self._jobs: dict[str, Job] = {}
        self._lock = threading.Lock()

    def open(self, paths: list[str], label: str | None = None, wait: bool = False) -> str:
        """Start loading paths (one trace, ranks side by side); returns the job key at once unless wait."""
        label = label or " + ".join(Path(p).name or p for p in paths)
        with self._lock:
            key = f"t{len(self._jobs) + 1}"
            self._jobs[key] = Job(key, label, list(paths))
        thread = threading.Thread(target=self._load, args=(self._jobs[key],), daemon=True)
        thread.start()
        if wait:
            thread.join()
        return key

    def _load(self, job: Job) -> None:
        try:
            job.message = "reading"
            trace = load(job.paths, progress=lambda msg: setattr(job, "message", msg))
            job.message = "analyzing"
            view = View(trace, job.label)
            view.warm()
            job.view, job.state, job.message = view, "ready", "ready"
        except TraceError as e:
            job.state, job.message = "error", str(e)
        except Exception as e:  # a parser bug must not take the app down; the user sees one line
            job.state, job.message = "error", f"internal error while loading: {type(e).__name__}: {e}"
        finally:
            job.finished = time.monotonic()

    def jobs(self) -> list[Job]:
        """All jobs, in the order they were opened."""
        with self._lock:
            return list(self._jobs.values())

    def ready(self) -> list[Job]:
        """Jobs whose trace is loaded."""
        return [j for j in self.jobs() if j.state == "ready"]

    def view(self, key: str | None) -> View | None:
        """The view of a loaded trace, or None."""
        job = self._jobs.get(key or "")
        return job.view if job and job.state == "ready" else None

    def busy(self) -> bool:
        """Whether any load is still running."""
        return any(j.state == "loading" for j in self.jobs())
