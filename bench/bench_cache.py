"""Cached reopen against a cold load (issue #14.3), each in a fresh process with its own cache folder under /tmp.

    python3 bench/bench_cache.py --runs 5 [TRACE ...]

Per trace: ``ta.load(path, cache=False)`` (cold: parse, link, classify), the first ``ta.load(path)`` (cold plus
writing the entry), and ``ta.load(path)`` again (the cached reopen); times are taken in the process around the load
call only (imports excluded), the median of --runs processes, with the largest peak RSS. Then the whole command,
``traceanalyze TRACE --no-cache`` against ``traceanalyze TRACE`` with the entry in place (wall time of the process).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT = [REPO.parent / "shared" / "traces" / "h200" / "big" / "big.json.gz"]

_CHILD = """
import json, resource, sys, time
import traceanalyzer as ta
path, cache = sys.argv[1], {"off": False, "on": None}[sys.argv[2]]
t0 = time.perf_counter()
trace = ta.load(path, cache=cache)
wall = time.perf_counter() - t0
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"wall": wall, "rss": rss, "events": len(trace.events)}))
"""


def child(path: Path, mode: str, env: dict) -> dict:
    """One load in a fresh process."""
    out = subprocess.run([sys.executable, "-c", _CHILD, str(path), mode], env=env, capture_output=True, text=True)
    if out.returncode:
        raise SystemExit(out.stderr)
    return json.loads(out.stdout)


def command(args: list[str], env: dict) -> float:
    """Wall time of one ``traceanalyze`` run (imports, load, report)."""
    t0 = time.perf_counter()
    run = "import sys; from traceanalyzer.cli import main; sys.exit(main())"
    subprocess.run([sys.executable, "-c", run, *args], env=env, capture_output=True, check=True)
    return time.perf_counter() - t0


def measure(path: Path, runs: int, cli: bool) -> dict:
    """The medians for one trace."""
    rows: dict[str, list] = {"cold": [], "first": [], "reopen": [], "cli cold": [], "cli reopen": []}
    for _ in range(runs):
        with tempfile.TemporaryDirectory(prefix="ta-bench-cache-", dir="/tmp") as tmp:
            env = os.environ | {"XDG_CACHE_HOME": tmp, "TRACEANALYZER_CACHE": "1"}
            rows["cold"].append(child(path, "off", env))
            rows["first"].append(child(path, "on", env))
            rows["reopen"].append(child(path, "on", env))
            if cli:
                rows["cli cold"].append({"wall": command([str(path), "--no-cache"], env)})
                rows["cli reopen"].append({"wall": command([str(path)], env)})
            size = sum(p.stat().st_size for p in Path(tmp, "traceanalyzer").glob("*.tacache"))
    result = {k: statistics.median(r["wall"] for r in v) if v else float("nan") for k, v in rows.items()}
    result["rss_mb"] = {k: max(r["rss"] for r in v) / 1024 for k, v in rows.items() if v and "rss" in v[0]}
    result["entry_mb"] = size / 1e6
    result["events"] = rows["cold"][0]["events"]
    return result


def main() -> int:
    """Print a Markdown table."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("traces", nargs="*", type=Path, default=DEFAULT)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--no-cli", action="store_true", help="skip the two traceanalyze runs (the whole report)")
    args = p.parse_args()
    print(
        "| trace | events | cold load s | first load + write s | cached reopen s | cold ÷ reopen | entry MB |"
        " peak RSS cold / reopen MB | `traceanalyze` --no-cache s | `traceanalyze` cached s |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for path in args.traces:
        r = measure(path, args.runs, not args.no_cli)
        rss = r["rss_mb"]
        print(
            f"| {path.name} | {r['events']:,} | {r['cold']:.3f} | {r['first']:.3f} | {r['reopen']:.3f} | "
            f"{r['cold'] / r['reopen']:.1f}× | {r['entry_mb']:.1f} | {rss['cold']:.0f} / {rss['reopen']:.0f} | "
            f"{r['cli cold']:.2f} | {r['cli reopen']:.2f} |",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
