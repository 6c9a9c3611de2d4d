"""In-training use: a ``torch.profiler.profile(on_trace_ready=...)`` handler that writes each profiled window's trace
in torchtitan's layout and its digest beside it, and can fail the run on the regression gate.

``on_trace_ready("profile_traces")`` writes ``profile_traces/iteration_<step>/rank<R>_trace.json`` (the names
torchtitan's trace handler uses, so either tool reads the other's folders) and ``rank<R>_digest.md``, the digest of
that rank's trace. With ``fail_on_regression`` (a percentage) and/or ``fail_on_regression_ms``, each window is
compared with ``baseline`` (a trace file or folder; by default the first window this handler wrote) and a regression
past the thresholds at the gate's confidence (``traceanalyzer.comparison.gate``: profile at least 5 steps a window)
raises ``Regression``, which ends the training loop. torch is
not imported here: the handler is given the profiler, and asks ``torch.distributed`` for the rank only where the
training script has started it.
"""

from __future__ import annotations

import os
import sys
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from traceanalyzer.comparison import Threshold, compare
from traceanalyzer.errors import TraceError
from traceanalyzer.renderers import digest
from traceanalyzer.tokens import DIGEST_BUDGET
from traceanalyzer.trace import Trace, load


class Regression(RuntimeError):
    """The regression gate failed: this window's step time is worse than the baseline's past the thresholds."""


@dataclass
class TraceReady:
    """The handler ``on_trace_ready`` returns: call it with the profiler; ``written`` lists the traces it wrote."""

    folder: Path
    rank: int | None = None
    budget_tokens: int = DIGEST_BUDGET
    threshold: Threshold | None = None
    baseline: Path | None = None
    written: list[Path] = field(default_factory=list)

    def __call__(self, prof) -> None:
        """Export the profiler's trace, write its digest and, with a threshold, apply the gate."""
        rank = self.rank if self.rank is not None else _rank()
        folder = self.folder / f"iteration_{prof.step_num}"
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"rank{rank}_trace.json"
        prof.export_chrome_trace(str(path))
        self.written.append(path)
        trace = load(path, cache=False)
        lines = [digest.render(trace.build_report(), self.budget_tokens)]
        gate = self._gate(trace)
        if gate is not None:
            verdict, against = gate
            lines.append(f"Gate against {against}: {verdict.outcome}: {verdict.reason}")
        (folder / f"rank{rank}_digest.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
        if gate is not None and verdict.failed:
            raise Regression(f"{path}: {verdict.reason} (against {against}; digest in {folder})")

    def _gate(self, trace: Trace):
        """The gate's verdict on this window and what it was compared with; None without a threshold or for the
        window that is its own baseline."""
        if self.threshold is None:
            return None
        baseline = self.baseline or self.written[0]
        if baseline == self.written[-1]:
            return None
        return compare(load(baseline, cache=False), trace).gate(self.threshold), baseline


def on_trace_ready(
    folder: str | os.PathLike,
    *,
    rank: int | None = None,
    budget_tokens: int = DIGEST_BUDGET,
    fail_on_regression: float | None = None,
    fail_on_regression_ms: float | None = None,
    baseline: str | os.PathLike | None = None,
) -> TraceReady:
    """A handler for ``torch.profiler.profile(on_trace_ready=...)``: each window's trace and digest under
    ``folder/iteration_<step>/``; with a threshold (percent of the baseline's step time and/or ms per step), raises
    ``Regression`` when a window regresses against ``baseline`` (default: the first window written)."""
    for value, name in ((fail_on_regression, "fail_on_regression"), (fail_on_regression_ms, "fail_on_regression_ms")):
        if value is not None and not value >= 0:
            raise TraceError(name, f"the threshold must be a number >= 0, not {value}")
    threshold = None
    if fail_on_regression is not None or fail_on_regression_ms is not None:
        share = None if fail_on_regression is None else fail_on_regression / 100
        ns = None if fail_on_regression_ms is None else fail_on_regression_ms * 1e6
        threshold = Threshold(share=share, ns=ns)
    if baseline is not None and not Path(baseline).exists():
        raise TraceError(baseline, "(the baseline) does not exist")
    if budget_tokens < digest.LEAST_BUDGET:
        raise TraceError("budget_tokens", f"a digest needs at least {digest.LEAST_BUDGET} tokens, not {budget_tokens}")
    return TraceReady(Path(folder), rank, budget_tokens, threshold, Path(baseline) if baseline else None)


def _rank() -> int:
    """This process's rank: torch.distributed's where the script started it, else $RANK, else 0."""
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        return dist.get_rank()
    try:
        return int(os.environ.get("RANK", "0"))
    except ValueError:
        warnings.warn(f"RANK={os.environ['RANK']!r} is not a number: the trace is written as rank 0", stacklevel=3)
        return 0
