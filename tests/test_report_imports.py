"""A text report imports what its trace needs and no more (issue #26: a report of a 1 MB trace in 0.8 s): the text
renderer alone (the JSON, digest, export, Perfetto and Plotly renderers load when their format is asked for), and for
a Kineto trace neither the Ascend parsers nor the analyzers of Ascend data or of communication; the report is the one
every analyzer makes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import traceanalyzer as ta
from tests.conftest import REPO, shared_path
from traceanalyzer import analyzers
from traceanalyzer.cli import main
from traceanalyzer.renderers import json as json_renderer

TRACE = REPO / "sample_traces" / "gpu_bound" / "gpu_bound.json.gz"
ONE_RANK_WITH_COMMUNICATION = REPO / "sample_traces" / "fsdp" / "fsdp_rank0.json.gz"
RENDERERS = {f"traceanalyzer.renderers.{name}" for name in ("json", "digest", "export", "perfetto", "plots")}
ASCEND_READERS = {f"traceanalyzer.parsers.ascend.{name}" for name in ("db", "text", "summaries", "common", "sqlite")}
"""The Ascend parsers (detection, ``parsers.ascend`` and its ``outputs``, reads names only)."""
ANALYZERS_NOT_APPLYING = {"traceanalyzer.analyzers.ascend", "traceanalyzer.analyzers.distributed"}
"""The analyzers of Ascend data and of communication: they say nothing of a one-rank Kineto trace without any."""
PACKAGES = {"orjson", "plotly", "dash", "scipy", "pyarrow", "sqlite3"}
UNUSED = RENDERERS | ASCEND_READERS | ANALYZERS_NOT_APPLYING | PACKAGES
"""What the text report of a one-rank Kineto trace without communication does not use."""


def imported(code: str, cwd: Path) -> set[str]:
    """The modules a fresh interpreter holds after running ``code``."""
    done = subprocess.run(
        [sys.executable, "-c", f"{code}; import sys; print(*sys.modules)"], capture_output=True, text=True, cwd=cwd
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return set(done.stdout.split())


def imported_by_report(args: list[str], cwd: Path) -> set[str]:
    """The modules a fresh interpreter holds after ``traceanalyze ARGS`` (the report written with ``-o``) that
    pandas and numpy do not import themselves (pandas imports pyarrow where it is installed)."""
    report = imported(f"from traceanalyzer.cli import main; assert main({args!r}) == 0", cwd)
    return report - imported("import numpy, pandas", cwd)


def test_text_report_of_kineto_imports_only_what_it_uses(tmp_path):
    if not TRACE.is_file():
        pytest.skip(f"sample trace {TRACE} absent")
    out = tmp_path / "report.txt"
    modules = imported_by_report([str(TRACE), "--no-cache", "-o", str(out)], tmp_path)
    assert out.stat().st_size > 0
    assert not modules & UNUSED, sorted(modules & UNUSED)


def test_ascend_report_imports_its_parser_and_analyzer(tmp_path):
    run = shared_path("public", "ascend", "msinsight", "pytorch_db", "level1", "rank0_ascend_pt")
    modules = imported_by_report([str(run), "--no-cache", "-o", str(tmp_path / "report.txt")], tmp_path)
    assert {"traceanalyzer.parsers.ascend.db", "traceanalyzer.analyzers.ascend", "sqlite3"} <= modules


@pytest.mark.parametrize("name", ["gpu_bound", "fsdp_rank0", "ascend_db"])
def test_report_is_the_one_of_every_analyzer(name, monkeypatch):
    """The analyzers left out of a trace's report (``analyzers.APPLIES``) would have said nothing of it."""
    path = {
        "gpu_bound": TRACE,
        "fsdp_rank0": ONE_RANK_WITH_COMMUNICATION,
        "ascend_db": shared_path("public", "ascend", "msinsight", "pytorch_db", "level1", "rank0_ascend_pt"),
    }[name]
    if not path.exists():
        pytest.skip(f"sample trace {path} absent")
    trace = ta.load(path, cache=False)
    shown = json_renderer.data(trace.build_report())
    monkeypatch.setattr(analyzers, "APPLIES", {})
    assert json_renderer.data(ta.load(path, cache=False).build_report()) == shown


@pytest.mark.parametrize("name", ["gpu_bound", "fsdp"])
def test_command_keeps_pyarrow_out_and_reports_the_same(name, tmp_path):
    """pandas 3 imports pyarrow wherever it is installed; the command's report neither imports it nor differs from
    the report of a process that has it (this one: a library caller's process is left as it is)."""
    pytest.importorskip("pyarrow", reason="pyarrow is not installed: nothing to keep out")
    paths = {"gpu_bound": [TRACE], "fsdp": sorted(ONE_RANK_WITH_COMMUNICATION.parent.glob("fsdp_rank*.json.gz"))}[name]
    if not paths or not paths[0].is_file():
        pytest.skip(f"sample trace {name} absent")
    args = [*map(str, paths), "--no-cache", "--format", "json", "-o"]
    check = "import sys; assert sys.modules['pyarrow'] is None, 'pyarrow imported'"
    lean = tmp_path / "lean.json"
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            f"from traceanalyzer.cli import main; assert main({args + [str(lean)]!r}) == 0; {check}",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "pyarrow" in sys.modules and sys.modules["pyarrow"] is not None
    full = tmp_path / "full.json"
    assert main(args + [str(full)]) == 0
    assert lean.read_bytes() == full.read_bytes()


def test_library_caller_keeps_pyarrow(tmp_path):
    """``ta.load`` in a caller's process leaves its imports alone: pandas there still has pyarrow."""
    pytest.importorskip("pyarrow", reason="pyarrow is not installed")
    if not TRACE.is_file():
        pytest.skip(f"sample trace {TRACE} absent")
    assert "pyarrow.lib" in imported(
        f"import traceanalyzer as ta; ta.load({str(TRACE)!r}, cache=False).build_report()", tmp_path
    )


def test_dashboard_keeps_pyarrow_out(tmp_path):
    """``traceanalyze dashboard`` imports pandas (its store) without pyarrow: a long-lived server 50 MB lighter."""
    pytest.importorskip("pyarrow", reason="pyarrow is not installed: nothing to keep out")
    absent = str(tmp_path / "absent")
    code = (
        f"from traceanalyzer.cli import main; assert main(['dashboard', '--allow', {absent!r}]) == 2; "
        "import sys; assert 'pandas' in sys.modules and sys.modules['pyarrow'] is None, 'pyarrow imported'"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "--allow" in done.stderr
