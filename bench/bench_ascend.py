"""Time and peak memory of loading a large Ascend text export (trace_view.json + CSVs), now and with an older tree.

The samples in ../shared are small (≤ 2.4 MB), so a large trace_view.json is derived from one in a temporary
folder: the run folder is copied (CSVs, profiler_info), and the trace's complete (X) and flow events are written
K times, each copy's timestamps shifted by the trace's span and its flow / connection ids made unique; metadata and
counter events are kept once. The event content is real, only replicated. Every measurement runs in a fresh
process (seconds around ``traceanalyzer.load`` only, imports excluded; peak RSS is the process's ``ru_maxrss``,
and the largest forked worker's).

    python3 bench/bench_ascend.py --before /tmp/asc_before --runs 2

``--before`` is a source tree of the parser to compare with, e.g.
``git archive <commit> parsers traceanalyzer | tar -x -C /tmp/asc_before`` (run with it first on PYTHONPATH).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO.parent / "shared" / "traces" / "public" / "ascend" / "msinsight" / "pytorch_text" / "level1"
SAMPLE_RUN = SAMPLE / "rank0_ascend_pt"
OUTPUT = "ASCEND_PROFILER_OUTPUT"
TRACE = "trace_view.json"
REPLICATED = frozenset({"X", "s", "f"})
"""Phases written once per copy; the others (metadata, counters) once."""

_MEASURE = """
import json, resource, sys, time
import traceanalyzer as ta
from traceanalyzer.parsers.ascend import text
assert text.__file__.startswith(sys.argv[2]), text.__file__
wall = time.perf_counter()
rows = len(ta.load(sys.argv[1]).events)
wall = time.perf_counter() - wall
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
worker = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
print(json.dumps({"wall_s": wall, "peak_rss": peak, "worker_peak_rss": worker, "rows": rows}))
"""


def _ns(ts: str) -> int:
    whole, _, frac = ts.strip().partition(".")
    return int(whole) * 1000 + int((frac + "000")[:3])


def _us(ns: int) -> str:
    return f"{ns // 1000}.{ns % 1000:03d}"


def _id_strides(events: list[dict]) -> dict[str, int]:
    """Per flow category, how far ids move per copy so that copies never share one."""
    ids: dict[str, list[int]] = {}
    for e in events:
        if e.get("ph") in ("s", "f") and e.get("id") is not None:
            ids.setdefault(e.get("cat", ""), []).append(int(e["id"]))
    return {cat: max(v) - min(v) + 1 for cat, v in ids.items()}


def _shifted(e: dict, copy: int, span_ns: int, strides: dict[str, int], conn_stride: int) -> dict:
    """Event ``e`` of copy number ``copy``: later by ``copy`` spans, with ids of its own."""
    e = dict(e)
    if "ts" in e:
        e["ts"] = _us(_ns(str(e["ts"])) + copy * span_ns)
    if e.get("ph") in ("s", "f") and e.get("id") is not None:
        moved = int(e["id"]) + copy * strides[e.get("cat", "")]
        e["id"] = str(moved) if isinstance(e["id"], str) else moved
    args = e.get("args")
    if isinstance(args, dict) and isinstance(args.get("connection_id"), int):
        e["args"] = args | {"connection_id": args["connection_id"] + copy * conn_stride}
    return e


def derive(run: Path, folder: Path, target_mb: float) -> Path:
    """A copy of ``run`` in ``folder`` whose trace_view.json is about ``target_mb`` MB (the events K times)."""
    out = folder / run.name
    shutil.copytree(run, out)
    events = json.loads((run / OUTPUT / TRACE).read_text())
    repeated = [e for e in events if e.get("ph") in REPLICATED]
    once = [e for e in events if e.get("ph") not in REPLICATED]
    times = [_ns(str(e["ts"])) for e in repeated]
    ends = [_ns(str(e["ts"])) + round(float(e.get("dur", 0)) * 1000) for e in repeated]
    span_ns = max(ends) - min(times) + 1
    strides = _id_strides(repeated)
    conns = [(e.get("args") or {}).get("connection_id") for e in repeated]
    conns = [c for c in conns if isinstance(c, int)]
    conn_stride = max(conns) - min(conns) + 1 if conns else 0
    copy_bytes = len(json.dumps(repeated))
    copies = max(1, math.ceil(target_mb * 1e6 / copy_bytes))
    with open(out / OUTPUT / TRACE, "w") as f:
        f.write("[\n")
        f.write(",\n".join(json.dumps(e) for e in once))
        for copy in range(copies):
            f.write(",\n")
            f.write(",\n".join(json.dumps(_shifted(e, copy, span_ns, strides, conn_stride)) for e in repeated))
        f.write("\n]\n")
    print(f"derived {out / OUTPUT / TRACE}: {copies} copies of {len(repeated):,} events, "
          f"{(out / OUTPUT / TRACE).stat().st_size / 1e6:.0f} MB", file=sys.stderr)  # fmt: skip
    return out


def measure(path: Path, source: Path, runs: int) -> dict:
    """Median seconds and peak RSS of ``runs`` fresh-process loads of ``path`` with the tree at ``source``."""
    env = os.environ | {"PYTHONPATH": str(source)}
    found = []
    for _ in range(runs):
        command = [sys.executable, "-P", "-c", _MEASURE, str(path), str(source)]  # -P: PYTHONPATH, not the cwd
        done = subprocess.run(command, env=env, capture_output=True, text=True)
        if done.returncode:
            raise SystemExit(done.stderr)
        found.append(json.loads(done.stdout.strip().splitlines()[-1]))
    return {
        "wall_s": statistics.median(r["wall_s"] for r in found),
        "runs_s": [round(r["wall_s"], 2) for r in found],
        "peak_rss_mb": max(r["peak_rss"] for r in found) / 1e6,
        "worker_peak_rss_mb": max(r["worker_peak_rss"] for r in found) / 1e6,
        "rows": found[0]["rows"],
    }


def main() -> None:
    """Derive the large trace, load it with each tree, print a Markdown table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", type=Path, default=SAMPLE_RUN, help="a torch_npu text run folder (*_ascend_pt)")
    parser.add_argument("--mb", type=float, default=200, help="size of the derived trace_view.json")
    parser.add_argument("--before", type=Path, help="source tree of an older parser to compare with")
    parser.add_argument("--runs", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench_ascend_") as tmp:
        path = derive(args.run, Path(tmp), args.mb)
        trees = ([("before", args.before)] if args.before else []) + [("this tree", REPO)]
        print("| parser | load s (median) | runs s | peak RSS MB | largest worker peak RSS MB | rows |")
        print("|---|---|---|---|---|---|")
        for label, source in trees:
            r = measure(path, source, args.runs)
            print(f"| {label} | {r['wall_s']:.2f} | {r['runs_s']} | {r['peak_rss_mb']:.0f} | "
                  f"{r['worker_peak_rss_mb']:.0f} | {r['rows']:,} |", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
