"""Seconds and peak memory per GB of JSON read, for padded inputs (a real trace followed or split by hundreds of MB
of whitespace or NUL bytes, or a small gzip that inflates to 1 GiB of spaces) against a normal large trace.

Every measurement is ``kineto.parse`` in a fresh process (``python -P``: this tree as installed, or the tree given
by ``--before`` on PYTHONPATH); seconds
around the parse only, CPU seconds include forked workers, peak RSS is the process's VmHWM (``ru_maxrss`` would
count the benchmark's own memory, which a child keeps across exec on Linux). The padded files are written
to a temporary folder and deleted afterwards.

    python3 bench/bench_padding.py --mb 512
    python3 bench/bench_padding.py --mb 128 --before /tmp/pad_before/pkg --timeout 120   # against an older tree

``--before`` is a folder holding an older ``traceanalyzer`` package (with its parsers as ``traceanalyzer/parsers``);
a run that passes ``--timeout`` is reported as such.
"""

from __future__ import annotations

import argparse
import gzip
import json
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TRACES = REPO.parent / "shared" / "traces" / "h200"
SMALL = TRACES / "fp32_matmul" / "fp32_matmul.json.gz"
NORMAL = TRACES / "big" / "big.json.gz"
MIB = 1 << 20

_MEASURE = """
import json, resource, sys, time
from pathlib import Path
from traceanalyzer.parsers import kineto
def cpu():
    s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime
wall, used = time.perf_counter(), cpu()
events, memory, meta = kineto.parse(Path(sys.argv[1]))
wall, used = time.perf_counter() - wall, cpu() - used
peak = next(int(line.split()[1]) * 1024 for line in open("/proc/self/status") if line.startswith("VmHWM:"))
print(json.dumps({"wall_s": wall, "cpu_s": used, "peak_rss": peak, "events": len(events),
                  "warnings": meta.warnings}))
"""


def _write_padded(path: Path, raw: bytes, filler: bytes, mb: int, where: str) -> None:
    """raw with ``mb`` MiB of ``filler`` after it (``where='after'``) or between two events (``'between'``)."""
    cut = raw.index(b"},", len(raw) // 2) + 2 if where == "between" else len(raw)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "wb") as f:
        f.write(raw[:cut])
        block = filler * MIB
        for _ in range(mb):
            f.write(block)
        f.write(raw[cut:])


def _inputs(folder: Path, mb: int) -> dict[str, tuple[Path, int]]:
    """Name -> (file, bytes of JSON it holds)."""
    raw = gzip.decompress(SMALL.read_bytes())
    cases: dict[str, Callable[[Path], None]] = {
        f"fp32_matmul + {mb} MiB of spaces": lambda p: _write_padded(p, raw, b" ", mb, "after"),
        f"fp32_matmul + {mb} MiB of NUL bytes": lambda p: _write_padded(p, raw, b"\0", mb, "after"),
        f"fp32_matmul with {mb} MiB of newlines between two events": lambda p: _write_padded(
            p, raw, b"\n", mb, "between"
        ),
        "fp32_matmul + 1 GiB of spaces, gzip": lambda p: _write_padded(p, raw, b" ", 1024, "after"),
    }
    out = {}
    for i, (name, write) in enumerate(cases.items()):
        path = folder / (f"case{i}.json.gz" if name.endswith("gzip") else f"case{i}.json")
        write(path)
        out[name] = (path, len(raw) + (1024 if name.endswith("gzip") else mb) * MIB)
    with gzip.open(NORMAL) as f:
        out["big (normal, h200)"] = (NORMAL, sum(len(block) for block in iter(lambda: f.read(MIB), b"")))
    return out


def _measure(pythonpath: str, path: Path, timeout: float) -> dict | None:
    try:
        done = subprocess.run(
            [sys.executable, "-P", "-c", _MEASURE, str(path)],
            env={"PYTHONPATH": pythonpath, "PATH": "/usr/bin:/bin"},
            capture_output=True,
            text=True,
            timeout=timeout,
            check=True,
        )
    except subprocess.TimeoutExpired:
        return None
    return json.loads(done.stdout.splitlines()[-1])


def _row(tree: str, name: str, size: int, path: Path, result: dict | None, timeout: float) -> str:
    gz = f"{path.stat().st_size / MIB:.1f} MiB gzip" if path.suffix == ".gz" else "plain"
    if result is None:
        return f"| {tree} | {name} | {size / 1e9:.3f} ({gz}) | > {timeout:.0f} (timed out) | | | | | |"
    gb = size / 1e9
    return (
        f"| {tree} | {name} | {gb:.3f} ({gz}) | {result['wall_s']:.2f} | {result['cpu_s']:.2f} | "
        f"{result['wall_s'] / gb:.2f} | {result['cpu_s'] / gb:.2f} | {result['peak_rss'] / MIB:.0f} | "
        f"{result['events']:,} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=512, help="MiB of padding in the plain padded files")
    parser.add_argument("--before", help="a folder holding an older traceanalyzer package, to compare with")
    parser.add_argument("--timeout", type=float, default=300, help="seconds before a parse counts as hung")
    args = parser.parse_args()
    trees = {"now": ""}  # this tree, as installed (pip install -e .)
    if args.before:
        trees["before"] = args.before
    with tempfile.TemporaryDirectory(prefix="bench-padding-") as tmp:
        print("| tree | input | GB of JSON | s | CPU s | s per GB | CPU s per GB | peak RSS MiB | events |")
        print("|---|---|---|---|---|---|---|---|---|")
        for name, (path, size) in _inputs(Path(tmp), args.mb).items():
            for tree, pythonpath in trees.items():
                result = _measure(pythonpath, path, args.timeout)
                print(_row(tree, name, size, path, result, args.timeout), flush=True)


if __name__ == "__main__":
    main()
