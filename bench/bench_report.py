"""The report's analyses against the load (issue #14.1): each trace in fresh processes, load and analyses apart.

    python3 bench/bench_report.py --runs 3 ../shared/traces/h200/big/big.json.gz
    python3 bench/bench_report.py --runs 1 --by-analysis /tmp/ta_large/big_1g.json

Per process: ``ta.load(path, cache=False)`` (parse, link, classify), then ``trace.build_report()`` (every section and
finding the CLI prints: the ledger, each analyzer's section, the ranked findings), each timed in the process (wall
and CPU seconds, the CPU of worker processes a load forks included; imports excluded), then the text render of that
report. Peak RSS is ``ru_maxrss`` after the load and after the analyses. The median of --runs processes (the largest
peak). ``--by-analysis`` adds, per analyzer, the CPU seconds of its section and findings in the report's order,
measured in the same process after the report on a cleared memo (so each analyzer is charged the shared tables it
computes first, as in a report). ``--tree`` measures another source tree of the package instead (e.g. ``git archive
COMMIT traceanalyzer | tar -x -C DIR``; the parsers still come from the installed package).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from bench_load import json_size

REPO = Path(__file__).resolve().parents[1]
DEFAULT = [REPO.parent / "shared" / "traces" / "h200" / "big" / "big.json.gz"]

_CHILD = """
import json, resource, sys, time, warnings
warnings.simplefilter("ignore")
import traceanalyzer as ta
from traceanalyzer import analyzers
from traceanalyzer.jobdata import JobData, RankParts
from traceanalyzer.options import Options
from traceanalyzer.renderers import Display, render

def peak():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

def cpu_now():  # this process's threads and any worker process it forked and waited for
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime

def timed(work):
    wall, cpu = time.perf_counter(), cpu_now()
    value = work()
    return value, time.perf_counter() - wall, cpu_now() - cpu

path, by_analysis = sys.argv[1], sys.argv[2] == "1"
trace, load_wall, load_cpu = timed(lambda: ta.load(path, cache=False))
load_peak = peak()
report, wall, cpu = timed(lambda: trace.build_report())
report_peak = peak()
_, render_wall, render_cpu = timed(lambda: render(report, "text", Display(width=100)))
parts = {}
if by_analysis:
    trace.memo.clear()
    options, made = Options(), {}
    for a in analyzers.ANALYZERS:
        made[a.name], _, parts[a.name + ".rank_part"] = timed(lambda: a.rank_part(trace, options))
    one = RankParts(trace.meta.ranks[0] if trace.meta.ranks else 0, trace.meta, trace.base.steps_recorded(),
                    len(trace.events), len(trace.memory_events), made)
    job = JobData(trace.meta, [one], trace.scope, options, analyzers.ANALYZERS)
    for a in analyzers.ANALYZERS:
        parts[a.name + ".merge"] = timed(lambda: job.merged(a.name))[2]
        parts[a.name + ".section"] = timed(lambda: a.section(job.merged(a.name), job, options))[2]
        parts[a.name + ".findings"] = timed(lambda: a.findings(job.merged(a.name), job))[2]
print(json.dumps({
    "events": len(trace.events), "load_wall": load_wall, "load_cpu": load_cpu, "load_peak": load_peak,
    "wall": wall, "cpu": cpu, "peak": report_peak, "render_wall": render_wall, "render_cpu": render_cpu,
    "parts": parts,
}))
"""


def json_bytes(path: Path) -> int:
    """Uncompressed JSON bytes of a trace file, or of the trace files in a folder."""
    if path.is_file():
        return json_size(path)
    return sum(json_size(f) for f in sorted(path.rglob("*")) if f.name.endswith((".json", ".json.gz")))


def child(path: Path, by_analysis: bool, tree: Path) -> dict:
    """One load and report in a fresh process, with the package from ``tree``."""
    env = os.environ | {"PYTHONPATH": str(tree), "TRACEANALYZER_CACHE": "0"}
    command = [sys.executable, "-P", "-c", _CHILD, str(path), "1" if by_analysis else "0"]  # -P: not the cwd
    out = subprocess.run(command, env=env, capture_output=True, text=True)
    if out.returncode:
        raise SystemExit(f"{path}: {out.stderr.strip()}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def summarize(runs: list[dict]) -> dict:
    """Median times (and per-analysis CPU), the largest peaks."""
    keys = ("load_wall", "load_cpu", "wall", "cpu", "render_wall", "render_cpu")
    out = {k: statistics.median(r[k] for r in runs) for k in keys}
    out |= {k: max(r[k] for r in runs) for k in ("load_peak", "peak")}
    out["events"] = runs[0]["events"]
    out["parts"] = {k: statistics.median(r["parts"][k] for r in runs) for k in runs[0]["parts"]}
    return out


def table(results: dict[Path, dict], sizes: dict[Path, int]) -> str:
    """The medians as a Markdown table."""
    mb = 1e6
    lines = [
        "| trace | JSON MB | events | load s wall (CPU) | analyses s wall (CPU) | analyses ÷ load (CPU) | "
        "text render s (CPU) | peak RSS MB after load / after analyses | peak ÷ JSON |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for path, r in results.items():
        lines.append(
            f"| {path.name} | {sizes[path] / mb:,.0f} | {r['events']:,} | {r['load_wall']:.2f} ({r['load_cpu']:.2f}) | "
            f"{r['wall']:.2f} ({r['cpu']:.2f}) | {r['wall'] / r['load_wall']:.2f} ({r['cpu'] / r['load_cpu']:.2f}) | "
            f"{r['render_wall']:.2f} ({r['render_cpu']:.2f}) | {r['load_peak'] / mb:,.0f} / {r['peak'] / mb:,.0f} | "
            f"{r['peak'] / sizes[path]:.2f} |"
        )
    return "\n".join(lines)


def parts_table(results: dict[Path, dict]) -> str:
    """CPU seconds per analyzer's section and findings, one column per trace."""
    names = list(next(iter(results.values()))["parts"])
    lines = ["| analysis (CPU s) | " + " | ".join(p.name for p in results) + " |", "|---|" + "---:|" * len(results)]
    for name in names:
        lines.append(f"| {name} | " + " | ".join(f"{r['parts'][name]:.3f}" for r in results.values()) + " |")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("traces", nargs="*", type=Path, default=DEFAULT)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--by-analysis", action="store_true", help="also the CPU seconds of each analyzer")
    p.add_argument("--tree", type=Path, default=REPO, help="the source tree to measure (default: this one)")
    args = p.parse_args()
    results, sizes = {}, {}
    for path in args.traces:
        sizes[path] = json_bytes(path)
        results[path] = summarize([child(path, args.by_analysis, args.tree) for _ in range(args.runs)])
        print(f"{path.name}: done", file=sys.stderr)
    print(table(results, sizes))
    if args.by_analysis:
        print()
        print(parts_table(results))


if __name__ == "__main__":
    main()
