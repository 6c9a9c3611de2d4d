"""Start-up: ``import traceanalyzer`` and ``traceanalyze --version``/``--help`` load none of the heavy packages.

Read from ``python -X importtime`` (which modules a fresh interpreter imported, and the cumulative microseconds of
ours), not from a stopwatch: the budget (0.3 s for the import and --help, 0.15 s for --version, bench/RESULTS.md) is
met in the benchmark; here only a bound ten times looser guards against a heavy import creeping back.
"""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

import traceanalyzer as ta

HEAVY = ("numpy", "pandas", "pyarrow", "plotly", "dash", "scipy", "tqdm", "orjson", "msgspec")
"""Packages that only the work itself needs (together 1-2 s to import on a busy 2-core machine)."""
LOOSE_S = 3.0
"""Ten times the budget: a bound that a loaded CI machine keeps, and that pandas and friends would exceed."""

STARTS = {
    "import traceanalyzer": "import traceanalyzer",
    "traceanalyze --version": "import sys; from traceanalyzer.cli import main; sys.exit(main(['--version']))",
    "traceanalyze --help": "import sys; from traceanalyzer.cli import main; sys.exit(main(['--help']))",
}


def importtime(code: str, cwd) -> dict[str, int]:
    """The modules a fresh interpreter imports to run ``code`` (in ``cwd``), each with its cumulative µs."""
    done = subprocess.run([sys.executable, "-X", "importtime", "-c", code], capture_output=True, text=True, cwd=cwd)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = re.findall(r"^import time:\s+\d+ \|\s+(\d+) \|( *)(\S+)$", done.stderr, flags=re.M)
    return {name: int(cumulative) for cumulative, _, name in rows}


@pytest.mark.parametrize("start", sorted(STARTS))
def test_starting_loads_no_heavy_package(start, tmp_path):
    modules = importtime(STARTS[start], tmp_path)
    heavy = sorted({m.split(".")[0] for m in modules} & set(HEAVY))
    assert not heavy, f"{start} imports {heavy}"
    ours = max(us for m, us in modules.items() if m.split(".")[0] == "traceanalyzer")  # the outermost one's
    assert ours / 1e6 < LOOSE_S


def test_every_public_name_is_there_on_first_use():
    """The names of ``__all__`` are imported on first use: each resolves, none is a stand-in."""
    for name in ta.__all__:
        value = getattr(ta, name)
        assert value is not None and type(value).__name__ != "Module", name
    assert set(ta.__all__) <= set(dir(ta))
    with pytest.raises(AttributeError, match="no attribute 'lod'"):
        ta.lod  # noqa: B018 - the attribute access is the test
