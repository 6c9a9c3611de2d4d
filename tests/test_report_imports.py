"""A text report imports the text renderer alone: the JSON, digest, export, Perfetto and Plotly renderers (and the
packages only they need) load when their format is asked for (issue #26: a report of a 1 MB trace in 0.8 s)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

TRACE = Path(__file__).resolve().parents[1] / "sample_traces" / "gpu_bound" / "gpu_bound.json.gz"
UNUSED = {f"traceanalyzer.renderers.{name}" for name in ("json", "digest", "export", "perfetto", "plots")}
UNUSED |= {"orjson", "plotly", "dash", "scipy"}
"""What the text report of a trace does not use."""


def imported_by_report(args: list[str], cwd: Path) -> set[str]:
    """The modules a fresh interpreter holds after ``traceanalyze ARGS`` (the report written with ``-o``)."""
    code = f"import sys; from traceanalyzer.cli import main; rc = main({args!r}); print(*sys.modules); sys.exit(rc)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=cwd)
    assert done.returncode == 0, done.stderr[-2000:]
    return set(done.stdout.split())


def test_text_report_imports_no_other_renderer(tmp_path):
    if not TRACE.is_file():
        pytest.skip(f"sample trace {TRACE} absent")
    out = tmp_path / "report.txt"
    modules = imported_by_report([str(TRACE), "--no-cache", "-o", str(out)], tmp_path)
    assert out.stat().st_size > 0
    assert not modules & UNUSED, sorted(modules & UNUSED)
