"""The load of one trace timed inside the process, imports excluded: issue #26's load-speed figure.

    python bench/load_once.py ../shared/traces/h200/big/big.json.gz --loads 3
    PYTHONPATH=/tmp/old/pkg python bench/load_once.py /tmp/big.json      # the same from another tree, in turn

A small trace is loaded first, so that what the load imports on first use (pandas, the parsers, linking) is imported
before the clock starts; each load of PATH, ``ta.load(path, cache=False)``, then prints one JSON line: wall and CPU
seconds (the process's, all its threads), MB/s of JSON (10**6 bytes over the wall seconds, ``cpu_mb_per_s`` over
the CPU seconds), minor page faults, the process's peak RSS in MiB, and with ``--report`` its peak after the report.
The process is set up as the command sets up its own (``cli._own_process``): large blocks mapped
(``traceanalyzer.allocator``) and pyarrow kept out; ``--with-pyarrow`` leaves it importable, as in a library caller's
process where pandas 3 imports it and backs text with it. On a shared machine compare CPU
seconds, and old against new in turn, not one run against a figure from another hour.
"""

from __future__ import annotations

import argparse
import gzip
import json
import resource
import time
from pathlib import Path

SMALL = Path(__file__).resolve().parents[1] / "sample_traces" / "gpu_bound" / "gpu_bound.json.gz"


def json_bytes(path: Path) -> int:
    """Bytes of JSON in the trace (a gzip file's decompressed ones), counted a block at a time."""
    with gzip.open(path) if path.suffix == ".gz" else path.open("rb") as f:
        return sum(len(block) for block in iter(lambda: f.read(1 << 20), b""))


def main() -> None:
    """Warm up, then time each load and print its figures."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("path", type=Path)
    p.add_argument("--loads", type=int, default=1, help="loads of PATH in this process (default 1)")
    p.add_argument("--report", action="store_true", help="build the report after the last load (its peak RSS)")
    p.add_argument("--with-pyarrow", action="store_true", help="leave pyarrow importable, as a library caller does")
    args = p.parse_args()
    import traceanalyzer.allocator
    import traceanalyzer.lazy

    traceanalyzer.allocator.map_large_blocks()  # as the command does, before pandas is imported
    if not args.with_pyarrow:
        traceanalyzer.lazy.keep_out("pyarrow")
    import traceanalyzer as ta

    size = json_bytes(args.path)
    ta.load(SMALL, cache=False)  # the imports made on first use, outside the clock
    for i in range(args.loads):
        before = resource.getrusage(resource.RUSAGE_SELF)
        wall = time.perf_counter()
        trace = ta.load(args.path, cache=False)
        wall = time.perf_counter() - wall
        after = resource.getrusage(resource.RUSAGE_SELF)
        cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
        figures = {"wall_s": wall, "cpu_s": cpu, "mb_per_s": size / 1e6 / wall, "cpu_mb_per_s": size / 1e6 / cpu}
        figures |= {"minor_faults": after.ru_minflt - before.ru_minflt, "peak_mb": after.ru_maxrss / 1024}
        if args.report and i == args.loads - 1:
            trace.build_report()
            figures["report_peak_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(json.dumps(figures | {"events": len(trace.events)}), flush=True)
        del trace


if __name__ == "__main__":
    main()
