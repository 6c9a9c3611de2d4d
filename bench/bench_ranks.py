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
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
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


def measure_on_cluster(files: list[Path], workers: int) -> dict:
    """One load with the ranks parsed on a fresh LocalCluster; the worker peak is the largest Dask worker's."""
    import distributed  # optional: only for --dask-workers

    with (
        distributed.LocalCluster(
            n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None, silence_logs=40
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        row = measure(files, cluster.scheduler_address)
        peaks = client.run(lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
    return row | {"worker": max(peaks.values())}


def main() -> int:
    """Print a Markdown table."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("job", type=Path, help="a folder written by gen_large.py ranks")
    p.add_argument("--ranks", type=int, nargs="+", default=[8, 64, 256])
    p.add_argument("--dask-workers", type=int, help="parse the ranks on a LocalCluster of this many workers")
    args = p.parse_args()
    files = rank_files(args.job)
    print(f"job {args.job}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
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
