"""Nothing we do writes beside or changes a user's files: for every input type, the CLI leaves the input tree
byte-identical with no new entries (inputs are copied into tmp_path, so a broken promise cannot hurt the corpus)."""

from __future__ import annotations

import csv
import hashlib
import shutil
import sqlite3
from pathlib import Path

import pytest
from traceanalyzer.parsers.ascend import common

import traceanalyzer as ta
from tests.conftest import REPO, shared_path
from traceanalyzer import cli

MSINSIGHT = ("public", "ascend", "msinsight")
OUTPUT = "ASCEND_PROFILER_OUTPUT"
DB_LEVEL1 = (*MSINSIGHT, "pytorch_db", "level1", "rank0_ascend_pt")
TEXT_LEVEL1 = (*MSINSIGHT, "pytorch_text", "level1", "rank0_ascend_pt")


def snapshot(root: Path) -> dict[str, str]:
    """Every entry under root: a file's SHA-256, 'dir' for a folder."""
    out = {}
    for entry in sorted(root.rglob("*")):
        key = str(entry.relative_to(root))
        out[key] = hashlib.sha256(entry.read_bytes()).hexdigest() if entry.is_file() else "dir"
    return out


def _copy(source: Path, into: Path) -> Path:
    """source (a file or folder) copied into ``into``, with every sibling file that shares its name's stem (a
    database's -wal/-shm)."""
    into.mkdir(parents=True, exist_ok=True)
    if source.is_dir():
        return Path(shutil.copytree(source, into / source.name))
    for sibling in source.parent.glob(source.name + "*"):
        shutil.copy2(sibling, into / sibling.name)
    return into / source.name


def _kineto_file(tmp: Path) -> Path:
    return _copy(REPO / "sample_traces" / "unfused_ops.json.gz", tmp)


def _kineto_folder(tmp: Path) -> Path:
    return _copy(REPO / "sample_traces" / "fsdp", tmp)


def _ascend_text(tmp: Path) -> Path:
    return _copy(shared_path(*TEXT_LEVEL1), tmp)


def _ascend_db(tmp: Path) -> Path:
    """The WAL-mode torch_npu database alone (an open with mode=ro alone would create -wal and -shm)."""
    source = shared_path(*DB_LEVEL1, OUTPUT, "ascend_pytorch_profiler_0.db")
    tmp.mkdir(parents=True)
    return Path(shutil.copy2(source, tmp / source.name))


def _ascend_db_with_shm(tmp: Path) -> Path:
    """The WAL-mode database with an empty -wal and an -shm beside it (mode=ro rewrote the -shm)."""
    return _copy(shared_path(*DB_LEVEL1, OUTPUT, "ascend_pytorch_profiler_0.db"), tmp)


def _ascend_run_of_db(tmp: Path) -> Path:
    return _copy(shared_path(*DB_LEVEL1), tmp)


def _msprof_db(tmp: Path) -> Path:
    source = shared_path(*MSINSIGHT, "server_fixtures", "full_db", "msprof_0.db")
    tmp.mkdir(parents=True)
    return Path(shutil.copy2(source, tmp / source.name))


def _msprof_export(tmp: Path) -> Path:
    """A plain msprof text export derived from the level1 sample as tests/test_ascend.py derives it."""
    source = shared_path(*TEXT_LEVEL1, OUTPUT)
    out = tmp / "PROF_000001_20250109_abc" / "mindstudio_profiler_output"
    out.mkdir(parents=True)
    shutil.copy(source / "trace_view.json", out / "msprof_20250109153000.json")
    back = {v: k for k, v in common.KERNEL_DETAILS_RENAME.items()}
    with open(source / "kernel_details.csv", newline="") as f:
        rows = list(csv.reader(f))
    rows[0] = [back.get(h, h) for h in rows[0]]
    with open(out / "op_summary_20250109153000.csv", "w", newline="") as f:
        csv.writer(f).writerows(rows)
    return tmp


INPUTS = {
    "kineto file": _kineto_file,
    "kineto folder": _kineto_folder,
    "ascend text run": _ascend_text,
    "ascend db": _ascend_db,
    "ascend db with -wal/-shm": _ascend_db_with_shm,
    "ascend db run folder": _ascend_run_of_db,
    "msprof db": _msprof_db,
    "msprof text export": _msprof_export,
}


@pytest.mark.parametrize("make", INPUTS.values(), ids=INPUTS.keys())
def test_the_cli_leaves_every_input_tree_as_it_was(make, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    path = make(tmp_path / "input")
    before = snapshot(tmp_path / "input")
    for argv in ([str(path)], [str(path), "--format", "json"]):  # the second run may be served from the cache
        assert cli.main(argv) == 0, capsys.readouterr().err
    after = snapshot(tmp_path / "input")
    assert sorted(set(after) - set(before)) == []
    assert after == before


def test_a_database_with_unmerged_wal_changes_is_read_with_them_and_left_as_it_was(tmp_path, monkeypatch):
    """An immutable open would not see the -wal's changes: such a database is read from a private copy."""
    monkeypatch.setenv("TRACEANALYZER_CACHE", "0")
    work = _msprof_db(tmp_path / "work")
    con = sqlite3.connect(work)
    con.execute("pragma wal_autocheckpoint=0")
    (kernel,) = con.execute("select k.name from COMPUTE_TASK_INFO k limit 1").fetchone()
    con.execute("update STRING_IDS set value = 'kernel_renamed_in_the_wal' where id = ?", (kernel,))
    con.commit()
    user = tmp_path / "user"
    user.mkdir()
    for name in (work.name, work.name + "-wal"):
        shutil.copy2(work.parent / name, user / name)
    con.close()
    before = snapshot(user)
    assert (user / (work.name + "-wal")).stat().st_size > 0
    events = ta.load(user / work.name).events
    assert "kernel_renamed_in_the_wal" in set(events["name"].astype(str))
    assert snapshot(user) == before
