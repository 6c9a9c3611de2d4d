"""Time and peak memory of loading a Kineto trace: our parser alone, our full load, and HolisticTraceAnalysis.

Every measurement runs in a fresh process, so nothing is cached between runs and peak RSS is that load's
own. Seconds are measured inside the process around the load only (imports excluded); CPU seconds are
reported too, because wall time on a shared machine moves with other load while CPU time barely does.
CPU seconds include all threads and the worker processes a load forks (``RUSAGE_CHILDREN``: only the msgspec
reader forks), and "worker peak RSS" is the largest worker's peak (a forked worker's RSS counts the pages it
shares with the parent too).

    python3 bench/bench_load.py --runs 3 --hta-python /tmp/hta/bin/python

HTA needs its own virtual environment (it pins pandas < 3):
``python3 -m venv /tmp/hta && /tmp/hta/bin/pip install HolisticTraceAnalysis==0.5.0 'pandas<3' 'numpy<2'``.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TRACES = REPO.parent / "shared" / "traces"
DEFAULT_TRACES = (
    TRACES / "h200" / "big" / "big.json.gz",
    TRACES / "public" / "torch" / "tracelens" / "inference" / "xdit_sd_3.5" / "profile_trace_rank_0.json.gz",
)

_MEASURE = """
import json, resource, sys, time
{imports}
path = sys.argv[1]
def children_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
wall, cpu, child = time.perf_counter(), time.process_time(), children_cpu()
events = {load}
wall, cpu, child = time.perf_counter() - wall, time.process_time() - cpu, children_cpu() - child
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
worker_peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
print(json.dumps({{"wall_s": wall, "cpu_s": cpu + child, "worker_cpu_s": child, "base_rss": base, "peak_rss": peak,
                  "worker_peak_rss": worker_peak, "events": events}}))
"""

TOOLS = {
    "ours: parse": ("from traceanalyzer.parsers import kineto", "len(kineto.parse(path)[0])"),
    "ours: full load (parse + link + classify)": ("import traceanalyzer as ta", "len(ta.load(path).events)"),
    "ours: full load, msgspec reader (installed without a C compiler)": (
        "import traceanalyzer as ta; from traceanalyzer.parsers import columns; columns._scan = None",
        "len(ta.load(path).events)",
    ),
    "HTA 0.5.0: Trace.load_traces": (
        "import logging, os; logging.disable(logging.WARNING); from hta.common.trace import Trace",
        "(lambda t: (t.load_traces(use_multiprocessing=False, use_memory_profiling=False), len(t.get_trace(0)))[1])"
        "(Trace(trace_files={0: path}, trace_dir=os.path.dirname(path)))",
    ),
}


def measure(python: str, tool: str, path: Path) -> dict:
    """One load in a fresh process: wall and CPU seconds, RSS after imports and at the peak (bytes), events."""
    imports, load = TOOLS[tool]
    code = _MEASURE.format(imports=imports, load=load)
    done = subprocess.run(
        [python, "-c", code, str(path)], cwd=REPO, capture_output=True, text=True, check=False, env=_env()
    )
    if done.returncode:
        raise RuntimeError(f"{tool} on {path} failed: {done.stderr.strip().splitlines()[-1:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _env() -> dict[str, str]:
    return os.environ | {"PYTHONPATH": str(REPO), "TRACEANALYZER_CACHE": "0"}  # a cold load, never the cache


def json_size(path: Path) -> int:
    """Uncompressed size of the trace in bytes."""
    if path.suffix != ".gz":
        return path.stat().st_size
    with gzip.open(path, "rb") as f:
        return sum(len(block) for block in iter(lambda: f.read(16 << 20), b""))


def summarize(runs: list[dict]) -> dict:
    """Median times, largest peak RSS over the runs."""
    return {
        "wall_s": statistics.median(r["wall_s"] for r in runs),
        "cpu_s": statistics.median(r["cpu_s"] for r in runs),
        "worker_cpu_s": statistics.median(r["worker_cpu_s"] for r in runs),
        "worker_peak_rss": max(r["worker_peak_rss"] for r in runs),
        "base_rss": max(r["base_rss"] for r in runs),
        "peak_rss": max(r["peak_rss"] for r in runs),
        "events": runs[0]["events"],
    }


def table(results: dict[Path, dict[str, dict]], sizes: dict[Path, int]) -> str:
    """The results as a Markdown table, with speed-ups against HTA where it ran."""
    mb = 1e6
    lines = [
        "| trace | JSON MB | tool | events | wall s | CPU s (workers) | peak RSS MB | RSS over imports MB | "
        "peak / JSON | worker peak RSS MB | HTA wall ÷ ours | HTA CPU ÷ ours |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for path, by_tool in results.items():
        hta = next((r for tool, r in by_tool.items() if tool.startswith("HTA")), None)
        for tool, r in by_tool.items():
            ours = hta and not tool.startswith("HTA")
            wall_x = f"{hta['wall_s'] / r['wall_s']:.1f}×" if ours else ""
            cpu_x = f"{hta['cpu_s'] / r['cpu_s']:.1f}×" if ours else ""
            workers = f"{r['worker_peak_rss'] / mb:.0f}" if r["worker_cpu_s"] > 0.01 else "–"
            lines.append(
                f"| {path.name} | {sizes[path] / mb:.0f} | {tool} | {r['events']:,} | {r['wall_s']:.2f} | "
                f"{r['cpu_s']:.2f} ({r['worker_cpu_s']:.2f}) | {r['peak_rss'] / mb:.0f} | "
                f"{(r['peak_rss'] - r['base_rss']) / mb:.0f} | {r['peak_rss'] / sizes[path]:.2f} | {workers} | "
                f"{wall_x} | {cpu_x} |"
            )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print the table."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("traces", nargs="*", type=Path, default=list(DEFAULT_TRACES))
    p.add_argument("--runs", type=int, default=3, help="fresh processes per tool and trace (default 3)")
    p.add_argument("--hta-python", help="python of a venv with HolisticTraceAnalysis 0.5.0 (omit to skip HTA)")
    args = p.parse_args(argv)
    tools = {tool: sys.executable for tool in TOOLS if tool.startswith("ours")}
    if args.hta_python:
        tools["HTA 0.5.0: Trace.load_traces"] = args.hta_python
    sizes = {path: json_size(path) for path in args.traces}
    results: dict[Path, dict[str, dict]] = {}
    for path in args.traces:
        results[path] = {}
        for tool, python in tools.items():
            runs = [measure(python, tool, path) for _ in range(args.runs)]
            results[path][tool] = summarize(runs)
            print(f"{path.name}: {tool}: {results[path][tool]}", file=sys.stderr, flush=True)
    print(table(results, sizes), end="")
    print(f"\nload average during the run: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    return 0


if __name__ == "__main__":
    sys.exit(main())
