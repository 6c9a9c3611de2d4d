"""Packaging that cannot surprise: one installed name, and a missing native reader is said, not silently slow."""

from __future__ import annotations

import tomllib
from traceanalyzer.parsers import columns

from tests.conftest import REPO
from traceanalyzer import cli

SAMPLE = REPO / "sample_traces" / "unfused_ops.json.gz"


def test_the_wheel_installs_one_top_level_name():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert all(p == "traceanalyzer" or p.startswith("traceanalyzer.") for p in project["packages"])
    assert set(project["package-dir"].values()) == {"traceanalyzer", "parsers", "dashboards"}
    assert columns.Reader(()).native, "the test environment has the native reader built (pip install -e .)"


def test_a_missing_native_reader_is_said_once_on_stderr(capsys, monkeypatch):
    monkeypatch.setattr(columns, "_scan", None)
    monkeypatch.setattr(columns, "_missing_said", False)
    assert cli.main([str(SAMPLE), "--format", "json", "--no-cache"]) == 0
    assert cli.main([str(SAMPLE), "--format", "json", "--no-cache"]) == 0
    err = capsys.readouterr().err
    assert err.count("native trace reader") == 1 and "2x slower" in err
