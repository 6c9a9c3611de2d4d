"""A cold load with the cache on (parse, link, classify, write the entry), with the content hash of its key taken in
a separate pass over the file (the code at ``--before``) against taken while the parser reads it (this checkout),
side by side: each run loads the trace once with each, alternately, in fresh processes with empty cache folders.

    python3 bench/bench_hash_read.py --before REV --runs 5 [TRACE ...]

``--before`` is unpacked (``git archive``) into a temporary folder under /tmp (the built C reader copied into it,
so both read with it). Per trace and code: the median wall and CPU time (all threads) of ``ta.load(path)`` in the
process (imports and the digest of the code excluded) and the bytes the process read meanwhile (``/proc/self/io``
rchar, Linux). Without TRACE: ``big.json.gz`` and its decompressed copy (written under /tmp).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BIG = REPO.parent / "shared" / "traces" / "h200" / "big" / "big.json.gz"

_CHILD = """
import json, sys, time
import traceanalyzer as ta
from traceanalyzer import loading

def rchar():
    with open("/proc/self/io") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("rchar:"))

loading._code()
read0, t0, cpu0 = rchar(), time.perf_counter(), time.process_time()
trace = ta.load(sys.argv[1])
wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
print(json.dumps({"wall": wall, "cpu": cpu, "read": rchar() - read0, "events": len(trace.events), "code": ta.__file__}))
"""


def checkout(rev: str, where: Path) -> Path:
    """The files of ``rev``, importable as ``traceanalyzer`` from their root (its subpackages linked into place, the
    C reader copied from here)."""
    where.mkdir()
    archive = subprocess.run(["git", "-C", str(REPO), "archive", rev], capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(where)], input=archive, check=True)
    for sub in ("parsers", "dashboards"):
        (where / "traceanalyzer" / sub).symlink_to(where / sub)
    for built in (REPO / "parsers").glob("_scan*.so"):
        shutil.copy(built, where / "parsers" / built.name)
    return where


def load(path: Path, code: Path | None) -> dict:
    """One cold load with the cache on, in a fresh process with an empty cache folder (``code``: an unpacked
    revision's root, put first on the path; None: this checkout)."""
    with tempfile.TemporaryDirectory(prefix="ta-bench-hash-", dir="/tmp") as tmp:
        env = os.environ | {"XDG_CACHE_HOME": tmp, "TRACEANALYZER_CACHE": "1", "TRACEANALYZER_CACHE_DIR": ""}
        if code is not None:
            env["PYTHONPATH"] = str(code)
        run = [sys.executable, "-c", _CHILD, str(path.resolve())]
        out = subprocess.run(run, env=env, cwd=tmp, capture_output=True, text=True)  # not this checkout by its cwd
        if out.returncode:
            raise SystemExit(out.stderr)
        found = json.loads(out.stdout)
        wanted = (code or REPO) / "traceanalyzer" / "__init__.py"
        if Path(found["code"]).resolve() != wanted.resolve():
            raise SystemExit(f"loaded {found['code']}, not {wanted}")
        if not list(Path(tmp, "traceanalyzer").glob("*.tacache")):
            raise SystemExit(f"{path}: no cache entry written")
        return found


def main() -> int:
    """Print a Markdown table."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("traces", nargs="*", type=Path)
    p.add_argument("--before", required=True, help="the revision whose cache hashes in a separate pass")
    p.add_argument("--runs", type=int, default=5)
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="ta-bench-hash-", dir="/tmp") as tmp:
        traces = args.traces
        if not traces:
            plain = Path(tmp, "big.json")
            plain.write_bytes(gzip.decompress(BIG.read_bytes()))
            traces = [BIG, plain]
        before = checkout(args.before, Path(tmp, "before"))
        print(
            "| trace | MB stored | events | separate pass: cold s | hash while read: cold s | ratio |"
            " CPU s: separate / while read | MB read: separate / while read |"
        )
        print("|---|---:|---:|---:|---:|---:|---:|---:|")
        for path in traces:
            rows: dict[str, list[dict]] = {"before": [], "now": []}
            for _ in range(args.runs):
                rows["before"].append(load(path, before))
                rows["now"].append(load(path, None))
            wall = {k: statistics.median(r["wall"] for r in v) for k, v in rows.items()}
            read = {k: statistics.median(r["read"] for r in v) / 1e6 for k, v in rows.items()}
            cpu = {k: statistics.median(r["cpu"] for r in v) for k, v in rows.items()}
            print(
                f"| {path.name} | {path.stat().st_size / 1e6:.1f} | {rows['now'][0]['events']:,} | "
                f"{wall['before']:.3f} | {wall['now']:.3f} | {wall['before'] / wall['now']:.2f}× | "
                f"{cpu['before']:.2f} / {cpu['now']:.2f} | "
                f"{read['before']:.0f} / {read['now']:.0f} |",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
