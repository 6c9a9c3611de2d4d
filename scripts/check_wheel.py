"""The README's quick start against an installed traceanalyzer, for a freshly built wheel (cibuildwheel's test, and
tests/test_wheel.py): load a trace, print where the package was imported from, whether the native reader is there,
and the top kernels. ``--native`` makes a missing native reader an error (a wheel must carry it).

    python scripts/check_wheel.py sample_traces/unfused_ops.json.gz [--native]
"""

from __future__ import annotations

import argparse

from traceanalyzer.parsers import columns

import traceanalyzer as ta


def main() -> int:
    """Exit 0 when the trace loads (and, with --native, the native reader is built)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("trace")
    p.add_argument("--native", action="store_true", help="fail when the native reader is missing")
    args = p.parse_args()
    trace = ta.load(args.trace, cache=False)
    native = columns.Reader(()).native
    print(columns.__file__)
    print("native", native)
    print(trace.hotspots().head(3).to_string())
    return 1 if args.native and not native else 0


if __name__ == "__main__":
    raise SystemExit(main())
