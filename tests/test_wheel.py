"""A wheel built here installs and runs where there is no C compiler, and a source install without one says so.

Each test builds from a copy of this checkout (so no earlier ``build/`` is reused) with pip (build isolation:
setuptools from the package index), installs the wheel into a fresh virtual environment that sees this interpreter's
dependencies through a ``.pth`` file (nothing downloaded twice, no editable install of ours leaking in), and runs
the quick start (``scripts/check_wheel.py``, cibuildwheel's test too, run with ``-c`` so that the current folder
comes first on ``sys.path`` as in the README) and the command, from outside the checkout and from its root, with
``PATH`` holding only that environment's ``bin``: no ``cc``, ``gcc`` or ``make``. They run in CI: about 12 s of CPU
each, 30-50 s of wall on a busy 2-core machine, most of it the build (``-m "not wheel"`` leaves them out).
"""

from __future__ import annotations

import os
import shutil
import site
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from tests.conftest import REPO

SAMPLE = REPO / "sample_traces" / "unfused_ops.json.gz"
CHECK = REPO / "scripts" / "check_wheel.py"
"""The quick start that cibuildwheel runs on each wheel too."""


UNSHIPPED = shutil.ignore_patterns(".*", "build", "dist", "*.egg-info", "__pycache__", "*.so", "*.pyd", "sample_traces")
"""What a build of the checkout does not read: git's, caches, earlier builds and the sample traces."""


def build(out: Path, *, compiler: bool) -> Path:
    """The wheel of a copy of this checkout, built into ``out`` (without a compiler: CC and CXX that always fail)."""
    source = out / "source"
    shutil.copytree(REPO, source, ignore=UNSHIPPED)
    env = os.environ | ({} if compiler else {"CC": "false", "CXX": "false", "LDSHARED": "false"})
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(source)],
        capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    (wheel,) = out.glob("*.whl")
    return wheel


def fresh_env(where: Path, wheel: Path) -> Path:
    """A virtual environment holding only ``wheel`` (its dependencies read from this interpreter's site folders)."""
    venv.EnvBuilder(with_pip=False).create(where)
    python = where / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    purelib = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], capture_output=True, text=True
    ).stdout.strip()
    Path(purelib, "deps.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    done = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index", "-q", str(wheel)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return python


def quick_start(python: Path, cwd: Path) -> subprocess.CompletedProcess:
    """The README's Python quick start and the command, run in ``cwd`` with no compiler on PATH."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "CC", "CXX")}
    env |= {"PATH": str(python.parent), "TRACEANALYZER_CACHE": "0"}
    run_check = (
        f"import runpy, sys; sys.argv = ['check', {str(SAMPLE)!r}]; runpy.run_path({str(CHECK)!r}, run_name='__main__')"
    )
    done = subprocess.run([python, "-c", run_check], capture_output=True, text=True, cwd=cwd, env=env, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    command = subprocess.run(
        [python.parent / "traceanalyze", str(SAMPLE), "--format", "json"],
        capture_output=True, text=True, cwd=cwd, env=env, timeout=120,
    )  # fmt: skip
    assert command.returncode == 0, command.stderr[-3000:]
    assert '"schema_version"' in command.stdout
    return done


@pytest.mark.wheel
def test_a_wheel_built_here_runs_where_there_is_no_compiler(tmp_path):
    python = fresh_env(tmp_path / "env", build(tmp_path / "dist", compiler=True))
    for cwd in (tmp_path, REPO):  # anywhere, and the checkout's root, whose traceanalyzer/ comes first on sys.path
        done = quick_start(python, cwd)
        module, native, *_ = done.stdout.splitlines()
        assert Path(module).is_relative_to(tmp_path / "env"), f"the installed copy runs, not the checkout: {module}"
        assert native == "native True" and "native trace reader" not in done.stderr
        assert "nvjet" in done.stdout  # the hotspot table of the sample: its top GEMM kernel


@pytest.mark.wheel
def test_an_install_without_a_compiler_works_and_says_the_fast_reader_is_missing(tmp_path):
    python = fresh_env(tmp_path / "env", build(tmp_path / "dist", compiler=False))
    done = quick_start(python, tmp_path)
    assert "native False" in done.stdout
    assert done.stderr.count("native trace reader") == 1 and "C compiler" in done.stderr
