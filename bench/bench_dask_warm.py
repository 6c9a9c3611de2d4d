"""A job analysed rank by rank on a warm Dask LocalCluster against local worker processes (issue #14.5).

    python3 bench/bench_dask_warm.py /tmp/ta_large/ddp_256 --ranks 16

The cluster (2 single-threaded worker processes) is started and its workers import traceanalyzer before the clock
starts, so the figure is the analysis, not the workers' cold start; each task's compute time comes from Dask's
task stream. The local run (``ta.load_job`` in forked workers) follows in the same process, cache off for both.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import distributed

import traceanalyzer as ta

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_ranks import rank_files  # noqa: E402


def main() -> None:
    """Print the two wall times and the tasks' compute times."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("job", type=Path, help="a folder written by gen_large.py ranks")
    p.add_argument("--ranks", type=int, default=16)
    args = p.parse_args()
    files = rank_files(args.job)[: args.ranks]
    with (
        distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None, silence_logs=40
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        client.run(lambda: __import__("traceanalyzer.perrank"))
        start = time.perf_counter()
        with distributed.get_task_stream(client) as stream:
            ta.load_job(files, scheduler=client, cache=False)
        on_cluster = time.perf_counter() - start
    tasks = [s["stop"] - s["start"] for t in stream.data for s in t["startstops"] if s["action"] == "compute"]
    start = time.perf_counter()
    ta.load_job(files, cache=False)
    local = time.perf_counter() - start
    print(f"{len(files)} ranks: cluster {on_cluster:.1f} s, local workers {local:.1f} s; ", end="")
    print(f"tasks {min(tasks):.2f}-{max(tasks):.2f} s")


if __name__ == "__main__":
    main()
