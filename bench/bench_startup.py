"""What a user meets first: start-up of the package and the command, a small report end to end, and the load of a large
trace, each in fresh processes, against the last recorded figures (``bench/startup_last.json``).

    python3 bench/bench_startup.py --runs 5                 # prints each figure and its ratio to the last recorded
    python3 bench/bench_startup.py --runs 5 --record        # and records these as the new last figures

Wall seconds are the median of the runs, measured around the whole process (start-ups, the small report) or inside it
around ``ta.load(path, cache=False)`` by ``bench/load_once.py`` (the load's own time: a small trace is loaded first, so
the modules the load imports on first use, pandas among them, are not in it; figures recorded before load_once.py
counted them; its MB/s is 10**6 JSON bytes over that time, ``cpu_mb_per_s`` over its CPU seconds); CPU seconds count the
process and its threads; peak RSS is the process's ``ru_maxrss`` in MiB (largest of the runs), and
``report_peak_x_json`` that peak over the JSON, both in bytes. The budget (issue #26, ``BUDGET_S``, printed beside each
figure): import and ``--help`` 0.3 s, ``--version`` 0.15 s, a 1 MB trace's report 0.8 s (pyarrow installed: the command
keeps it out of its process, which pandas 3 would otherwise import), the load 500 MB/s of JSON, a report's peak RSS 1.3x
the JSON; ``--with-pyarrow`` also loads big as a library caller's process does, with pyarrow. The interpreter alone
(``python -c pass``, its site included) and numpy with pandas are the floor under them. On a shared machine read the CPU
column and the ratios. The children keep compiled modules as an installed package does (see ``child_env``); the load's
process is set up as the command's (``bench/load_once.py``).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BIG = REPO.parent / "shared" / "traces" / "h200" / "big" / "big.json.gz"
SMALL = REPO / "sample_traces" / "gpu_bound" / "gpu_bound.json.gz"
LAST = Path(__file__).with_name("startup_last.json")
LOAD_ONCE = Path(__file__).with_name("load_once.py")
BYTECODE = Path(tempfile.gettempdir()) / "traceanalyzer-bench-bytecode"
COMMAND = [str(Path(sys.executable).with_name("traceanalyze"))]

NO_PYARROW = "import sys; sys.modules['pyarrow'] = None; "
"""Python that keeps pyarrow out of the process (pandas imports it where it is installed), as a user without it."""
SMALL_REPORT = "report of a 1.3 MB trace (gpu_bound)"
STARTS = {
    "python -c pass (the interpreter with its site: the floor)": [sys.executable, "-c", "pass"],
    "import numpy, pandas (without pyarrow)": [sys.executable, "-c", NO_PYARROW + "import numpy, pandas"],
    "import traceanalyzer": [sys.executable, "-c", "import traceanalyzer"],
    "traceanalyze --version": [*COMMAND, "--version"],
    "traceanalyze --help": [*COMMAND, "--help"],
    SMALL_REPORT: [*COMMAND, str(SMALL), "--no-cache"],
}
BUDGET_S = {
    "import traceanalyzer": 0.3,
    "traceanalyze --version": 0.15,
    "traceanalyze --help": 0.3,
    SMALL_REPORT: 0.8,
}
"""Issue #26's budget of wall seconds for each start-up (a 1 MB trace's report end to end)."""


def child_env() -> dict[str, str]:
    """The children's environment: no cache, and compiled modules kept (under a folder of /tmp) as an installed
    package has them, even where the environment says ``PYTHONDONTWRITEBYTECODE``: without them every run compiles
    our modules again, 0.2-0.45 s of CPU that a user's installed wheel never pays."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    return env | {"TRACEANALYZER_CACHE": "0", "PYTHONPYCACHEPREFIX": str(BYTECODE)}


def whole(argv: list[str]) -> dict:
    """One run of a command as a whole process: wall and CPU seconds, peak RSS (of that process alone: ``wait4``'s,
    not the largest of every child so far)."""
    with tempfile.TemporaryFile() as err:
        wall = time.perf_counter()
        child = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=err, cwd=REPO, env=child_env())
        _, status, usage = os.wait4(child.pid, 0)
        wall = time.perf_counter() - wall
        child.returncode = os.waitstatus_to_exitcode(status)
        if child.returncode:
            err.seek(0)
            raise SystemExit(f"{argv} failed: {err.read().decode(errors='replace')[-2000:]}")
    return {"wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime, "peak_mb": usage.ru_maxrss / 1024}


def load(path: Path, variant: str) -> dict:
    """One load and report of ``path`` in a fresh process (figures from inside it, ``load_once.py``: the load's own,
    its first-use imports made before it), as the command's process or with pyarrow as a library caller's."""
    argv = [sys.executable, str(LOAD_ONCE), str(path), "--report"] + (["--with-pyarrow"] if variant else [])
    done = subprocess.run(argv, check=True, capture_output=True, text=True, env=child_env())
    figures = json.loads(done.stdout.splitlines()[-1])
    return {k: figures[k] for k in ("wall_s", "cpu_s", "peak_mb", "report_peak_mb")}


def json_size(path: Path) -> int:
    """Bytes of JSON in a gzip file, counted a block at a time (a child's ru_maxrss starts from this process's)."""
    with gzip.open(path) if path.suffix == ".gz" else path.open("rb") as f:
        return sum(len(block) for block in iter(lambda: f.read(1 << 20), b""))


def summary(runs: list[dict]) -> dict:
    """Median times, largest peaks."""
    return {k: (max if "peak" in k else statistics.median)(r[k] for r in runs) for k in runs[0]}


def _against_budget(name: str, row: dict) -> str:
    """The wall time against the budget of issue #26, where it has one."""
    if name not in BUDGET_S:
        return ""
    budget = BUDGET_S[name]
    return f"; budget {budget} s: {'met' if row['wall_s'] <= budget else 'over'} ({row['wall_s'] / budget:.2f}x)"


def main() -> None:
    """Measure, print against the last recorded figures, and record if asked."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--record", action="store_true", help=f"write the figures to {LAST.name}")
    p.add_argument("--no-starts", action="store_true", help="leave out the start-ups and the small report")
    p.add_argument("--no-big", action="store_true", help="leave out the load of big (172 MB)")
    p.add_argument("--big", type=Path, default=BIG, help="the large trace to load (default: h200/big)")
    p.add_argument("--with-pyarrow", action="store_true", help="also load big with pyarrow, as a library caller")
    args = p.parse_args()
    figures = {}
    for name, argv in {} if args.no_starts else STARTS.items():
        whole(argv)  # warm-up: the page cache and .pyc files
        figures[name] = summary([whole(argv) for _ in range(args.runs)])
    variants = ("", "with pyarrow") if args.with_pyarrow else ("",)
    json_bytes = json_size(args.big) if args.big.exists() and not args.no_big else 0
    for variant in variants if json_bytes else ():
        big = summary([load(args.big, variant) for _ in range(args.runs)])
        big |= {
            "mb_per_s": json_bytes / 1e6 / big["wall_s"],  # MB = 10**6 bytes of JSON
            "cpu_mb_per_s": json_bytes / 1e6 / big["cpu_s"],
            "report_peak_x_json": big["report_peak_mb"] * 2**20 / json_bytes,  # both in bytes (peaks are MiB)
        }
        figures[f"load of {args.big.name} (cache=False, imports warmed), then its report {variant}".strip()] = big
    last = json.loads(LAST.read_text())["figures"] if LAST.exists() else {}
    for name, row in figures.items():
        was = last.get(name, {})
        cells = [f"{k} {v:.3f}" + (f" ({v / was[k]:.2f}x last)" if was.get(k) else "") for k, v in row.items()]
        print(f"{name}: " + ", ".join(cells) + _against_budget(name, row))
    if args.record:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=REPO)
        load_avg = os.getloadavg()[0]
        LAST.write_text(
            json.dumps({"commit": commit.stdout.strip(), "load_average": load_avg, "figures": figures}, indent=1) + "\n"
        )


if __name__ == "__main__":
    main()
