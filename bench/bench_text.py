"""The text report drawn by ``renderers.text`` against rich drawing it (``tests/rich_reference.py``, as before).

    python3 bench/bench_text.py --pairs 5             # the render alone, in this process: rich and plain in turn
    python3 bench/bench_text.py --report PATH         # the whole command, the report drawn plain (to stdout)
    python3 bench/bench_text.py --report PATH --rich  # the whole command, the report drawn by rich as before

The render alone times ``render_blocks`` on the laid-out blocks of the gpu_bound report (compact, 100 columns, as
piped), each renderer in turn, and checks both give the same text. ``--report`` is for ``farm-bench`` pairs
(``--vs``): the same command with rich imported and drawing, as the text report did before it was drawn plain.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import traceanalyzer as ta
from traceanalyzer import cli, lazy
from traceanalyzer.renderers import text
from traceanalyzer.renderers.document import Display, layout

REPO = Path(__file__).resolve().parents[1]
SMALL = REPO / "sample_traces" / "gpu_bound" / "gpu_bound.json.gz"
sys.path.insert(0, str(REPO))  # tests.rich_reference
terminal = lazy.Module("tests.rich_reference")
"""rich's drawing, imported only where it is measured (as the text report imported rich before)."""


def render_alone(pairs: int) -> None:
    """Seconds of each renderer on the gpu_bound report's blocks, in turn, and their ratio pair by pair."""
    blocks = layout(ta.load(SMALL, cache=False).build_report(), Display())
    display = Display()
    assert text.render_blocks(blocks, display) == terminal.render_blocks(blocks, display)
    ratios, old, new = [], [], []
    for _ in range(pairs):
        old.append(_seconds(lambda: terminal.render_blocks(blocks, display)))
        new.append(_seconds(lambda: text.render_blocks(blocks, display)))
        ratios.append(new[-1] / old[-1])
    print(f"rich  median {statistics.median(old) * 1e3:7.1f} ms  (min {min(old) * 1e3:.1f}, max {max(old) * 1e3:.1f})")
    print(f"plain median {statistics.median(new) * 1e3:7.1f} ms  (min {min(new) * 1e3:.1f}, max {max(new) * 1e3:.1f})")
    print(f"plain/rich median of {pairs} pairs: {statistics.median(ratios):.3f}; outputs identical")


def _seconds(run) -> float:
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pairs", type=int, default=5)
    p.add_argument("--report", help="run the command on this trace instead (--no-cache, to stdout)")
    p.add_argument("--rich", action="store_true", help="with --report: the report drawn by rich, as before")
    args = p.parse_args()
    if not args.report:
        render_alone(args.pairs)
        return 0
    if args.rich:
        text.render_blocks = terminal.render_blocks
    return cli.main([args.report, "--no-cache"])


if __name__ == "__main__":
    sys.exit(main())
