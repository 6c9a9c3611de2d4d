"""Packaging that cannot surprise: one installed name, and a missing native reader is said, not silently slow."""

from __future__ import annotations

import subprocess
import sys

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


def test_every_package_of_the_source_tree_is_installed():
    """pyproject lists the packages by hand (parsers/ and dashboards/ are mapped into traceanalyzer): a new
    subpackage left out would install a wheel that cannot be imported, while the editable install still worked."""
    listed = set(tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = set()
    for package, folder in (("traceanalyzer", "traceanalyzer"), ("traceanalyzer.parsers", "parsers"),
                            ("traceanalyzer.dashboards", "dashboards")):  # fmt: skip
        for init in (REPO / folder).rglob("__init__.py"):
            parts = init.parent.relative_to(REPO / folder).parts
            if not (package == "traceanalyzer" and parts and parts[0] in ("parsers", "dashboards")):
                found.add(".".join([package, *parts]))
    assert found == listed


def test_importing_the_source_folder_without_the_install_says_what_to_do():
    """Python started in the repository root finds its traceanalyzer/ folder first; without the install's mapping of
    parsers/ and dashboards/ (site disabled here: a plain ``pip install .`` elsewhere behaves the same) the import
    fails with one line saying why and what to run, not a ModuleNotFoundError from deep inside."""
    done = subprocess.run(
        [sys.executable, "-S", "-c", "import traceanalyzer"], cwd=REPO, capture_output=True, text=True
    )
    assert done.returncode != 0
    assert done.stderr.strip().splitlines()[-1].startswith("ImportError: traceanalyzer is being imported from")
    assert "pip install -e ." in done.stderr
