"""Every writer goes through one guard: an output that is an input (by a link, a hard link or ``..``), lies inside an
input folder or is beside an input as a folder of tables is refused in one line (exit 2) with the input untouched;
an existing file is replaced only with --force; an export is marked and skipped when its folder is read again."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.conftest import REPO
from traceanalyzer import cli

SAMPLE = REPO / "sample_traces" / "sync_stalls.json.gz"
FSDP = REPO / "sample_traces" / "fsdp"


def _digest(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
        for p in sorted(root.rglob("*"))
    }


@pytest.fixture
def inbox(tmp_path, monkeypatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TRACEANALYZER_CACHE", "0")
    (tmp_path / "in").mkdir()
    (tmp_path / "a").mkdir()
    shutil.copy(SAMPLE, tmp_path / "in" / "trace.json.gz")
    return tmp_path


OUTPUTS = {
    "a symlink to the input": lambda t: os.symlink("in/trace.json.gz", t / "link.json.gz") or "link.json.gz",
    "a hard link to the input": lambda t: os.link(t / "in/trace.json.gz", t / "hard.json.gz") or "hard.json.gz",
    "the input by ..": lambda t: "a/../in/trace.json.gz",
}


@pytest.mark.parametrize("target", ["perfetto", "csv"])
@pytest.mark.parametrize("make", OUTPUTS.values(), ids=OUTPUTS.keys())
def test_an_export_onto_its_input_is_refused_and_the_input_kept(inbox, capsys, make, target):
    out = make(inbox)
    before = _digest(inbox / "in")
    assert cli.main(["export", "in/trace.json.gz", "--to", target, "-o", out, "--force"]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert out in line and "input" in line, line
    assert _digest(inbox / "in") == before


@pytest.mark.parametrize("argv", [["export", "--to", "csv", "-o", "in"], ["-o", "in/../in/x/../../in/r.txt"]])
def test_tables_beside_an_input_or_a_report_inside_an_input_folder_are_refused(inbox, capsys, argv):
    before = _digest(inbox / "in")
    given = "in" if argv[0] == "export" else "in/"
    args = [argv[0], given, *argv[1:]] if argv[0] == "export" else [given, *argv]
    assert cli.main(args) == 2
    assert len(capsys.readouterr().err.splitlines()) == 1
    assert _digest(inbox / "in") == before


UNWRITABLE = {
    "a folder that is a file": ("afile/tables", "folder that does not exist"),
    "a file in place of the folder": ("afile", "is a file"),
    "a name too long for the system": ("x" * 300, "File name too long"),
    "a folder no one may create in": ("/proc/1/tables", "cannot be written"),
}


@pytest.mark.parametrize("target", ["csv", "perfetto"])
@pytest.mark.parametrize(("out", "said"), UNWRITABLE.values(), ids=UNWRITABLE.keys())
def test_an_export_that_cannot_be_written_is_one_line_and_exit_2(inbox, capsys, target, out, said):
    """Where the tables or the trace cannot be written (checked without relying on permissions: the tests run as
    root), the export is refused in one line naming the output, before the trace is loaded; nothing is left."""
    (inbox / "afile").write_text("mine")
    out = out + ".json" if target == "perfetto" and out != "afile" else out
    before = _digest(inbox)
    code = cli.main(["export", "in/trace.json.gz", "--to", target, "-o", out])
    errors = [line for line in capsys.readouterr().err.splitlines() if "error" in line]
    assert code == 2 and len(errors) == 1 and out[:40] in errors[0], errors
    if target == "csv" or out != "afile":
        assert said in errors[0], errors
    assert _digest(inbox) == before


def test_an_existing_file_is_replaced_only_with_force(inbox, capsys):
    (inbox / "r.json").write_text("mine")
    assert cli.main(["in/trace.json.gz", "--format", "json", "-o", "r.json"]) == 2
    assert "--force" in capsys.readouterr().err and (inbox / "r.json").read_text() == "mine"
    assert cli.main(["in/trace.json.gz", "--format", "json", "-o", "r.json", "--force"]) == 0
    assert (inbox / "r.json").read_text().startswith("{")
    assert [p.name for p in inbox.iterdir() if p.name.startswith(".tmp")] == []


def test_a_perfetto_export_beside_the_ranks_is_not_read_back_as_a_rank(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("TRACEANALYZER_CACHE", "0")
    job = Path(shutil.copytree(FSDP, tmp_path / "job"))
    rank0 = sorted(job.glob("*rank0*.json.gz"))[0]
    assert cli.main(["export", str(rank0), "--to", "perfetto", "-o", str(job / "annotated.json.gz")]) == 0
    capsys.readouterr()
    assert cli.main([str(job), "--format", "json", "-o", str(tmp_path / "r.json")]) == 0
    err = capsys.readouterr().err
    assert "annotated.json.gz: written by traceanalyze export" in err, err
    assert json.loads((tmp_path / "r.json").read_text())["trace"]["ranks"] == [0, 1]


def test_a_fifo_given_as_a_trace_is_refused_in_one_line(tmp_path, capsys):
    fifo = tmp_path / "trace.json"
    os.mkfifo(fifo)
    assert cli.main([str(fifo)]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert str(fifo) in line and "FIFO" in line, line


_AS_NOBODY = """
import os, sys
from traceanalyzer.cli import main
warm, *argv = sys.argv[1:]
if os.geteuid() == 0:  # the interpreter and packages may be where nobody can read: loaded first, then dropped
    assert main(["export", argv[1], "--to", "csv", "-o", warm]) == 0
    os.setgroups([])
    os.setgid(65534)
    os.setuid(65534)
sys.stderr.write("\\n--- the run\\n")
try:
    code = main(argv)
except SystemExit as e:
    code = e.code
sys.exit(code)
"""


@pytest.mark.skipif(not hasattr(os, "geteuid"), reason="needs POSIX users to make a folder read-only for the tool")
@pytest.mark.parametrize("out", ["ro", "ro/new"], ids=["the-read-only-folder", "a-folder-inside-it"])
def test_an_export_into_a_read_only_folder_is_one_line_and_exit_2_as_a_user(out):
    """As a user who may not write the folder (root may write anywhere: the tool then runs as nobody, uid 65534,
    after loading its code), ``export --to csv -o DIR`` refuses in one line, exit 2, and writes nothing."""
    box = Path(tempfile.mkdtemp(prefix="ta-readonly-", dir="/tmp"))  # not under pytest's root-only folder
    try:
        box.chmod(0o755)
        shutil.copy(SAMPLE, box / "trace.json.gz")
        (box / "trace.json.gz").chmod(0o644)
        (box / "ro").mkdir(mode=0o555)
        (box / "ro").chmod(0o555)
        argv = [str(box / "warm"), "export", "trace.json.gz", "--to", "csv", "-o", out]
        env = {**os.environ, "TRACEANALYZER_CACHE": "0", "HOME": str(box)}
        run = subprocess.run(
            [sys.executable, "-c", _AS_NOBODY, *argv], cwd=box, env=env, capture_output=True, text=True, timeout=300
        )
        lines = run.stderr.split("\n--- the run\n")[-1].strip().splitlines()
        assert run.returncode == 2, run.stderr[-2000:]
        assert len(lines) == 1 and "cannot be written" in lines[0] and out in lines[0], lines
        assert list((box / "ro").iterdir()) == []
    finally:
        (box / "ro").chmod(0o755)
        shutil.rmtree(box, ignore_errors=True)
