"""CPU seconds of the call-path walk and the health checks on one loaded trace (issue #14.1), per trace:

    python3 bench/bench_health.py --runs 3 ../shared/traces/h200/big/big.json.gz /tmp/ta_large/big_1g.json

In one process per run of all traces: the trace is loaded once, then each measure runs on a cleared memo with the
step tables the health section shares with earlier sections already made (a report makes them first), timed with
``time.process_time`` (the best of --runs). ``walk + place of launches``: ``callpath.walk`` and the innermost
annotation and Python frame of every kernel's launch (what launch-bound and sync places ask); ``context of all host
rows``: every column of ``callpath`` for every host event; ``health``: the health section and findings.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

import traceanalyzer as ta
from traceanalyzer.analyzers import ANALYZERS, as_job, callpath, health
from traceanalyzer.analyzers.summary import step_spans, step_table, step_time
from traceanalyzer.options import Options
from traceanalyzer.schema import HOST_KINDS, NO_ROW, Kind

REPO = Path(__file__).resolve().parents[1]
DEFAULT = [REPO.parent / "shared" / "traces" / "h200" / "big" / "big.json.gz"]


def measures(trace) -> dict:
    """The measured work, each a function of nothing."""
    events = trace.events
    launches = events.loc[(events["kind"] == Kind.KERNEL.value) & (events["launch"] != NO_ROW), "launch"].to_numpy()
    host = np.flatnonzero(events["kind"].isin([k.value for k in HOST_KINDS]).to_numpy())
    options = Options()
    return {
        "walk + place of launches": lambda: callpath.walk(trace).innermost_names(launches),
        "context of all host rows": lambda: callpath.walk(trace).where_many(host),
        "health section + findings": lambda: _health(trace, options),
    }


HEALTH = tuple(a for a in ANALYZERS if a.name in ("summary", "health"))
"""The health analyzer and the one it needs: a report's health work, without the other analyzers'."""


def _health(trace, options: Options) -> tuple:
    """The health section and findings of the trace, as a report makes them (the job of its one part)."""
    job = as_job(trace, options, HEALTH)
    part = job.merged("health")
    return health.job_section(part, job, options), health.job_findings(part, job)


def best_cpu(trace, work, runs: int) -> float:
    """The least CPU seconds of ``runs`` calls, each on a cleared memo with the step tables made."""
    best = float("inf")
    for _ in range(runs):
        trace.memo.clear()
        step_time(trace), step_table(trace), step_spans(trace)
        start = time.process_time()
        work()
        best = min(best, time.process_time() - start)
    return best


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("traces", nargs="*", type=Path, default=DEFAULT)
    p.add_argument("--runs", type=int, default=3)
    args = p.parse_args()
    rows = {}
    for path in args.traces:
        trace = ta.load(path)
        rows[path] = (len(trace.events), {k: best_cpu(trace, w, args.runs) for k, w in measures(trace).items()})
    names = list(next(iter(rows.values()))[1])
    print("| trace | events | " + " | ".join(f"{n} (CPU s)" for n in names) + " |")
    print("|---|---:|" + "---:|" * len(names))
    for path, (events, times) in rows.items():
        print(f"| {path.name} | {events:,} | " + " | ".join(f"{times[n]:.3f}" for n in names) + " |")


if __name__ == "__main__":
    main()
