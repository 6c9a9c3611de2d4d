"""Packaging that cannot surprise: one installed name, and a missing native reader is said, not silently slow."""

from __future__ import annotations

import ast
import importlib.metadata
import re
import subprocess
import sys
from pathlib import Path

import platformdirs
from traceanalyzer.parsers import columns

from tests.conftest import REPO
from traceanalyzer import cache, cli

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the test extra installs tomli
    import tomli as tomllib

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


def _third_party_imports() -> set[str]:
    """The top-level names of every package the installed code imports (module or function level)."""
    names = set()
    for folder in ("traceanalyzer", "parsers", "dashboards"):
        for path in (REPO / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Import):
                    names |= {a.name.split(".")[0] for a in node.names}
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names.add(node.module.split(".")[0])
    return names - set(sys.stdlib_module_names) - {"traceanalyzer", "__future__"}


def _declared() -> set[str]:
    """Distribution names pyproject declares, the extras' too (``dask[distributed]`` declares distributed)."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    requirements = project["dependencies"] + [r for extra in project["optional-dependencies"].values() for r in extra]
    declared = set()
    for requirement in requirements:
        name, extras = re.match(r"([A-Za-z0-9_.-]+)(?:\[([^\]]+)\])?", requirement).groups()
        declared |= {name, *(extras or "").split(",")} - {""}
    return {re.sub(r"[-_.]+", "-", n).lower() for n in declared}


def test_every_imported_package_is_declared():
    """An import of a package that only arrives as another one's dependency (flask came with dash) breaks the day
    that dependency drops it: each one is declared, by its distribution's name."""
    distributions = importlib.metadata.packages_distributions()
    imported = {name: distributions.get(name, [name]) for name in _third_party_imports()}
    undeclared = {
        name: dists
        for name, dists in imported.items()
        if not {d.lower().replace("_", "-") for d in dists} & _declared()
    }
    assert {"flask", "werkzeug", "pandas"} <= set(imported)
    assert not undeclared, f"imported but not declared in pyproject.toml: {undeclared}"


def test_the_cache_folder_is_the_platforms_unless_one_is_given(monkeypatch, tmp_path):
    monkeypatch.delenv("TRACEANALYZER_CACHE_DIR", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    assert cache.folder() == Path(platformdirs.user_cache_dir("traceanalyzer", appauthor=False))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache.folder() == tmp_path / "xdg" / "traceanalyzer"
    monkeypatch.setenv("TRACEANALYZER_CACHE_DIR", str(tmp_path / "mine"))
    assert cache.folder() == tmp_path / "mine"
    assert cli.main(["cache", "info"]) == 0


_WITHOUT_PYARROW = """
import sys
sys.modules["pyarrow"] = None  # as if not installed: then pandas 3 neither imports it nor backs str with it
from traceanalyzer import cli
for _ in range(2):  # the first run parses and keeps the entry, the second reads it
    assert cli.main([sys.argv[1], "--format", "json", "-o", sys.argv[2] + str(_)]) == 0
print(sorted(m for m in sys.modules if m.split(".")[0] == "pyarrow" and sys.modules[m] is not None))
"""


def test_reports_and_the_cache_need_no_pyarrow(tmp_path):
    """pyarrow is only the parquet extra (pandas 3 imports it with pandas whenever it is installed, +35 MB): the
    report and the cache work without it, and the report read from the cache is the parsed one."""
    env = {"XDG_CACHE_HOME": str(tmp_path / "xdg"), "TRACEANALYZER_CACHE": "1", "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [sys.executable, "-c", _WITHOUT_PYARROW, str(SAMPLE), str(tmp_path / "report")],
        capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]"
    assert list((tmp_path / "xdg" / "traceanalyzer").glob("*.tacache")), "the first run kept an entry"
    assert (tmp_path / "report0").read_bytes() == (tmp_path / "report1").read_bytes()
