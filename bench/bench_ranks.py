"""Many ranks on one machine (issue #14.4): a job's load time and memory for 8, 64 and 256 ranks.

    python3 bench/gen_large.py ranks ../shared/traces/h200/ddp_overlap --ranks 256 /tmp/ta_large/ddp_256
    python3 bench/bench_ranks.py /tmp/ta_large/ddp_256 --ranks 8 64 256
    python3 bench/bench_ranks.py /tmp/ta_large/ddp_256 --ranks 8 64 --dask-workers 2   # on a Dask LocalCluster

Each row is one fresh process loading the first N rank files of the generated job (``ta.load(files,
cache=False)``: parsed in forked workers, joined in the parent). Wall time is taken around the load call; the
parent's peak RSS is its ``ru_maxrss``, a worker's the largest child's (``RUSAGE_CHILDREN``, which includes the
pages a forked worker shares with the parent); JSON bytes are the ranks' inflated sizes. With --dask-workers N the
ranks go to a LocalCluster of N single-threaded worker processes (TRACEANALYZER_SCHEDULER) and a worker's peak is
the largest Dask worker's ``ru_maxrss`` (each row gets fresh workers).

    python3 bench/bench_ranks.py /tmp/ta_large/ddp_256 --ranks 8 64 256 --per-rank
    python3 bench/bench_ranks.py /tmp/ta_large/ddp_256 --ranks 8 64 --per-rank --dask-workers 2

With --per-rank each N gets two fresh processes, both with the cache off: the joined report
(``ta.load(files).report()``: all ranks in one event table) and the rank-by-rank one
(``traceanalyzer.perrank.load_job(files).report()``: each rank loaded and summarized in a forked worker, only the
summaries come back). Load and report wall times are taken around each call; peak RSS as above; summary bytes are
the pickled size of the ranks' summaries (all ranks, and the largest rank's); the last column names the parts of
the rank-by-rank report that differ from the joined one (floats to 1e-9), e.g. the sections of analyzers that have
no job half yet. With --dask-workers both run on a fresh LocalCluster each (joined: the ranks' tables come back;
rank by rank: only their summaries), the worker peak the largest Dask worker's.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

from traceanalyzer.footprint import json_size

_CHILD = """
import json, resource, sys, time
import traceanalyzer as ta
files = sys.argv[1:]
t0 = time.perf_counter()
trace = ta.load(files, cache=False)
wall = time.perf_counter() - t0
me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
events = len(trace.events)
print(json.dumps({"wall": wall, "parent": me.ru_maxrss, "worker": kids.ru_maxrss, "events": events,
                  "tables": int(trace.events.memory_usage(deep=True).sum()), "ranks": len(trace.meta.ranks)}))
"""

_REPORT_CHILD = """
import json, pickle, resource, sys, time
import traceanalyzer as ta
from traceanalyzer import perrank
mode, out, files = sys.argv[1], sys.argv[2], sys.argv[3:]
t0 = time.perf_counter()
loaded = perrank.load_job(files, cache=False) if mode == "per-rank" else ta.load(files, cache=False)
load = time.perf_counter() - t0
sizes = [len(pickle.dumps(s)) for s in loaded.ranks] if mode == "per-rank" else [0]
events = loaded.events if mode == "per-rank" else len(loaded.events)
t1 = time.perf_counter()
report = loaded.report()
done = time.perf_counter() - t1
me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
with open(out, "w") as f:
    json.dump(report, f, default=str)
print(json.dumps({"load": load, "report": done, "parent": me.ru_maxrss, "worker": kids.ru_maxrss,
                  "events": events, "summary": sum(sizes), "summary_max": max(sizes), "ranks": len(loaded.meta.ranks)}))
"""


def rank_files(job: Path) -> list[Path]:
    """The job's rank files in rank order (rank{r}.json[.gz])."""
    files = [p for p in job.iterdir() if p.name.startswith("rank")]
    return sorted(files, key=lambda p: int(p.name[4:].split(".")[0]))


def measure(files: list[Path], scheduler: str | None = None) -> dict:
    """One load of these files in a fresh process (its ranks parsed on the scheduler's cluster if given)."""
    env = os.environ | {"TRACEANALYZER_CACHE": "0"} | ({"TRACEANALYZER_SCHEDULER": scheduler} if scheduler else {})
    out = subprocess.run([sys.executable, "-c", _CHILD, *map(str, files)], capture_output=True, text=True, env=env)
    if out.returncode:
        raise SystemExit(out.stderr)
    return json.loads(out.stdout.strip().splitlines()[-1])


def measure_on_cluster(files: list[Path], workers: int, run=measure) -> dict:
    """``run(files, scheduler)`` with the ranks sent to a fresh LocalCluster of ``workers`` single-threaded worker
    processes; the worker peak is the largest Dask worker's."""
    import distributed  # optional: only for --dask-workers

    with (
        distributed.LocalCluster(
            n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None, silence_logs=40
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        row = run(files, cluster.scheduler_address)
        peaks = client.run(lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
    return row | {"worker": max(peaks.values())}


def measure_report(files: list[Path], mode: str, out: Path, scheduler: str | None = None) -> dict:
    """One load and report of these files in a fresh process, joined or rank by rank (``mode``; on the
    scheduler's cluster if given), the report written to ``out``."""
    env = os.environ | {"TRACEANALYZER_CACHE": "0"} | ({"TRACEANALYZER_SCHEDULER": scheduler} if scheduler else {})
    argv = [sys.executable, "-c", _REPORT_CHILD, mode, str(out), *map(str, files)]
    run = subprocess.run(argv, capture_output=True, text=True, env=env)
    if run.returncode:
        raise SystemExit(run.stderr)
    return json.loads(run.stdout.strip().splitlines()[-1])


def same(got: object, want: object) -> bool:
    """Plain data equal, floats to 1e-9 relative, NaN equal to NaN."""
    if isinstance(want, dict):
        return isinstance(got, dict) and list(got) == list(want) and all(same(got[k], want[k]) for k in want)
    if isinstance(want, list):
        return isinstance(got, list) and len(got) == len(want) and all(map(same, got, want))
    if isinstance(want, float) and isinstance(got, int | float):
        return math.isclose(got, want, rel_tol=1e-9, abs_tol=1e-12) or (math.isnan(got) and math.isnan(want))
    return got == want


def differing(got: dict, want: dict) -> list[str]:
    """The parts of a report that differ from another's: its sections by id, then its other top-level keys."""
    sections = [
        s for s in {**want["sections"], **got["sections"]} if not same(got["sections"].get(s), want["sections"].get(s))
    ]
    return sections + [k for k in want if k != "sections" and not same(got.get(k), want[k])]


def per_rank_rows(files: list[Path], counts: list[int], workers: int | None = None) -> None:
    """Print the joined against the rank-by-rank report for the first N files, per N (see module); with
    ``workers``, each on a fresh LocalCluster of that many Dask workers."""
    print("| ranks | path | events | load s | report s | wall s | parent peak RSS MB | worker peak RSS MB |", end="")
    print(" summaries MB | largest summary KB | differs from joined |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for n in counts:
            joined, per_rank = Path(tmp) / f"joined_{n}.json", Path(tmp) / f"per_rank_{n}.json"
            outs = {"joined": joined, "per-rank": per_rank}
            rows = {mode: _report_row(files[:n], mode, out, workers) for mode, out in outs.items()}
            diff = ", ".join(differing(_read(per_rank), _read(joined))) or "–"
            for mode, r in rows.items():
                summary = f"{r['summary'] / 1e6:.2f} | {r['summary_max'] / 1e3:.0f}" if mode == "per-rank" else "– | –"
                print(
                    f"| {r['ranks']} | {mode} | {r['events']:,} | {r['load']:.1f} | {r['report']:.1f} | "
                    f"{r['load'] + r['report']:.1f} | {r['parent'] / 1024:,.0f} | {r['worker'] / 1024:,.0f} | "
                    f"{summary} | {diff if mode == 'per-rank' else ''} |",
                    flush=True,
                )


def _report_row(files: list[Path], mode: str, out: Path, workers: int | None) -> dict:
    if not workers:
        return measure_report(files, mode, out)
    return measure_on_cluster(files, workers, lambda chosen, scheduler: measure_report(chosen, mode, out, scheduler))


def _read(path: Path) -> dict:
    with open(path) as f:
        return json.load(f)


def main() -> int:
    """Print a Markdown table."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("job", type=Path, help="a folder written by gen_large.py ranks")
    p.add_argument("--ranks", type=int, nargs="+", default=[8, 64, 256])
    p.add_argument("--dask-workers", type=int, help="parse the ranks on a LocalCluster of this many workers")
    p.add_argument("--per-rank", action="store_true", help="the joined against the rank-by-rank report")
    args = p.parse_args()
    files = rank_files(args.job)
    print(f"job {args.job}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
    if args.per_rank:
        per_rank_rows(files, args.ranks, args.dask_workers)
        return 0
    print("| ranks | JSON GB | events | wall s | s per GB | parent peak RSS MB | worker peak RSS MB | tables MB |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for n in args.ranks:
        chosen = files[:n]
        gb = sum(json_size(f) for f in chosen) / 1e9
        r = measure_on_cluster(chosen, args.dask_workers) if args.dask_workers else measure(chosen)
        print(
            f"| {r['ranks']} | {gb:.2f} | {r['events']:,} | {r['wall']:.1f} | {r['wall'] / gb:.1f} | "
            f"{r['parent'] / 1024:,.0f} | {r['worker'] / 1024:,.0f} | {r['tables'] / 1e6:,.0f} |",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
