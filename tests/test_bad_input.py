"""Broken input, built from a real trace: one line on stderr naming the file and the problem, never a traceback.

Damage the analysis can live with (a truncated tail, a few malformed events) gives a report and a warning
that says what was skipped; damage it cannot gives exit 2. The user's files are never touched.
"""

from __future__ import annotations

import gzip
import hashlib
import json
from pathlib import Path

import pytest

import traceanalyzer as ta
from tests.conftest import shared_path
from traceanalyzer.cli import main

SOURCE = ("h200", "fp32_matmul", "fp32_matmul.json.gz")


@pytest.fixture(scope="module")
def raw() -> bytes:
    """The uncompressed text of a small real trace."""
    return gzip.decompress(shared_path(*SOURCE).read_bytes())


@pytest.fixture(scope="module")
def doc(raw) -> dict:
    return json.loads(raw)


@pytest.fixture
def inbox(tmp_path) -> Path:
    """The folder the user's input lives in (reports go elsewhere, so it must stay exactly as it was)."""
    folder = tmp_path / "in"
    folder.mkdir()
    return folder


def _snapshot(folder: Path) -> dict[str, tuple[str, int]]:
    return {
        str(p.relative_to(folder)): (
            hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "",
            p.stat().st_mtime_ns,
        )
        for p in sorted(folder.rglob("*"))
    }


def run(path: Path, capsys, *extra: str) -> tuple[int, list[str], str]:
    """Run the CLI on path; check nothing in path's folder changed. Returns (exit code, stderr lines, stdout)."""
    folder = path.parent
    before = _snapshot(folder)
    code = main([str(path), *extra])
    captured = capsys.readouterr()
    assert _snapshot(folder) == before, "the CLI modified or created files next to the input"
    assert "Traceback" not in captured.err
    return code, [line for line in captured.err.splitlines() if line.strip()], captured.out


def assert_refused(path: Path, capsys, problem: str) -> None:
    code, lines, out = run(path, capsys)
    assert code == 2
    assert len(lines) == 1, lines
    assert str(path) in lines[0] and problem in lines[0], lines[0]
    assert out == ""


def warnings_of(lines: list[str]) -> list[str]:
    return [line for line in lines if "warning:" in line]


def _write_events(folder: Path, doc: dict, events: list[dict], name: str = "trace.json") -> Path:
    path = folder / name
    path.write_text(json.dumps(doc | {"traceEvents": events}))
    return path


def _x_events(doc: dict) -> list[int]:
    return [i for i, e in enumerate(doc["traceEvents"]) if e.get("ph") == "X"]


def test_truncated_json_analyses_what_is_sound(tmp_path, inbox, raw, capsys):
    path = inbox / "trace.json"
    path.write_bytes(raw[: int(len(raw) * 0.7)])
    code, lines, out = run(path, capsys)
    assert code == 0 and out
    (warning,) = [w for w in warnings_of(lines) if "ends early" in w]
    assert str(path) in warning and "analyzed the first" in warning


def test_truncated_gzip_analyses_what_is_sound(tmp_path, inbox, raw, capsys):
    path = inbox / "trace.json.gz"
    packed = gzip.compress(raw)
    path.write_bytes(packed[: len(packed) // 2])
    code, lines, _ = run(path, capsys)
    assert code == 0
    assert any("gzip stream ends early" in w for w in warnings_of(lines))
    assert any("analyzed the first" in w for w in warnings_of(lines))


def test_truncated_before_the_first_event_is_refused(tmp_path, inbox, raw, capsys):
    path = inbox / "trace.json"
    path.write_bytes(raw[: raw.index(b'"traceEvents"') + 40])
    assert_refused(path, capsys, "ends before the first complete event")


def test_broken_gzip_stream_is_refused(tmp_path, inbox, raw, capsys):
    packed = bytearray(gzip.compress(raw))
    middle = len(packed) // 2
    packed[middle : middle + 64] = bytes(b ^ 0x5A for b in packed[middle : middle + 64])
    path = inbox / "trace.json.gz"
    path.write_bytes(bytes(packed))
    assert_refused(path, capsys, "broken gzip data")


def test_empty_file_is_refused(tmp_path, inbox, capsys):
    path = inbox / "trace.json"
    path.write_bytes(b"")
    assert_refused(path, capsys, "is empty")


def test_empty_trace_events_is_refused(tmp_path, inbox, doc, capsys):
    assert_refused(_write_events(inbox, doc, []), capsys, "empty traceEvents")


def test_folder_without_a_trace_is_refused(tmp_path, capsys):
    folder = tmp_path / "run"
    (folder / "logs").mkdir(parents=True)
    (folder / "logs" / "notes.txt").write_text("no trace here")
    (folder / "config.json").write_text('{"lr": 0.1}')
    before = _snapshot(tmp_path)
    assert main([str(folder)]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert str(folder) in line and "no trace" in line
    assert _snapshot(tmp_path) == before


def test_nonexistent_path_is_refused(tmp_path, capsys):
    assert_refused(tmp_path / "missing.json.gz", capsys, "does not exist")


def test_events_with_missing_or_wrongly_typed_fields_are_skipped_and_counted(tmp_path, inbox, doc, capsys):
    events = [dict(e) for e in doc["traceEvents"]]
    xs = _x_events(doc)
    for i in xs[:3]:
        del events[i]["ts"]
    for i in xs[3:5]:
        events[i]["name"] = 12
    events[xs[5]]["dur"] = "long"
    code, lines, _ = run(_write_events(inbox, doc, events), capsys)
    assert code == 0
    assert any("skipped 6 events with missing or wrongly typed fields" in w for w in warnings_of(lines))


def test_negative_durations_count_as_zero_with_a_warning(tmp_path, inbox, doc, capsys):
    events = [dict(e) for e in doc["traceEvents"]]
    for i in _x_events(doc)[10:14]:
        events[i]["dur"] = -5.5
    path = _write_events(inbox, doc, events)
    code, lines, _ = run(path, capsys)
    assert code == 0
    assert any("4 events have a negative duration" in w for w in warnings_of(lines))
    assert (ta.load(path).events["dur"] >= 0).all()


def test_non_utf8_bytes_in_names_are_replaced_with_a_warning(tmp_path, inbox, raw, doc, capsys):
    name = next(e["name"] for e in doc["traceEvents"] if e.get("cat") == "kernel").encode()
    path = inbox / "trace.json"
    path.write_bytes(raw.replace(b'"name": "' + name, b'"name": "\xff\xfe' + name))
    code, lines, _ = run(path, capsys)
    assert code == 0
    assert any("not UTF-8" in w for w in warnings_of(lines))
    names = ta.load(path).events["name"].astype(str)
    assert names.str.startswith("\ufffd\ufffd" + name.decode()).any()
