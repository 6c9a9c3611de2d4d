"""CPU of the health and memory analyses in a whole report of small traces (issue #26.1), per trace:

    python3 bench/bench_health_memory.py --runs 10 sample_traces/gpu_bound/gpu_bound.json.gz

In one process: each run loads the trace again (from the cache: fresh memos) and makes every analyzer's part,
section and findings, the health and memory ones timed with ``time.process_time`` (all four stages: part, merge,
section, findings); prints the best and the median of --runs, and the whole analysis's.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import traceanalyzer as ta
from traceanalyzer.analyzer import Analyzer
from traceanalyzer.analyzers import ANALYZERS, as_job, job_findings, job_sections
from traceanalyzer.options import Options

REPO = Path(__file__).resolve().parents[1]
DEFAULT = [REPO / "sample_traces" / "gpu_bound" / "gpu_bound.json.gz"]
TIMED = ("health", "memory")
STAGES = ("rank_part", "merge", "section", "findings")


def timed_registry(spent: dict[str, float]) -> tuple[Analyzer, ...]:
    """Every analyzer, the TIMED ones adding their CPU seconds to ``spent``."""

    def timed(name: str, stage: Callable) -> Callable:
        def run(*args):
            start = time.process_time()
            try:
                return stage(*args)
            finally:
                spent[name] += time.process_time() - start

        return run

    return tuple(
        dataclasses.replace(a, **{s: timed(a.name, getattr(a, s)) for s in STAGES}) if a.name in TIMED else a
        for a in ANALYZERS
    )


def one_run(path: Path, spent: dict[str, float], registry: tuple[Analyzer, ...]) -> float:
    """CPU seconds of one report's analyses of a freshly loaded trace (``spent``: the TIMED ones')."""
    trace, options = ta.load(path), Options()
    for name in TIMED:
        spent[name] = 0.0
    start = time.process_time()
    job = as_job(trace, options, registry)
    job_sections(job, options, registry)
    job_findings(job, registry)
    return time.process_time() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="*", type=Path, default=DEFAULT)
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    spent = dict.fromkeys(TIMED, 0.0)
    registry = timed_registry(spent)
    for path in args.paths:
        one_run(path, spent, registry)  # warm: imports, the cache entry
        runs: dict[str, list[float]] = {k: [] for k in (*TIMED, "health+memory", "all analyses")}
        for _ in range(args.runs):
            runs["all analyses"].append(one_run(path, spent, registry))
            for name in TIMED:
                runs[name].append(spent[name])
            runs["health+memory"].append(sum(spent[name] for name in TIMED))
        print(path.name)
        for name, seconds in runs.items():
            print(f"  {name:14} best {min(seconds) * 1e3:7.1f} ms  median {statistics.median(seconds) * 1e3:7.1f} ms")


if __name__ == "__main__":
    main()
