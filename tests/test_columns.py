"""The native reader (parsers/_scan.c) and the msgspec reader give the same tables, on real traces and damaged ones."""

from __future__ import annotations

import gzip
import json
import random
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from traceanalyzer.parsers import columns, kineto

from tests.conftest import LEGACY_2021, REPO, shared_path

pytestmark = pytest.mark.skipif(columns._scan is None, reason="the native reader was not built (no C compiler)")

REAL = {
    "ours, 2026": (REPO / "sample_traces" / "unfused_ops.json.gz",),
    "CUDA graph": (REPO / "sample_traces" / "cuda_graph" / "cuda_graph.json.gz",),
    "2021 legacy categories": LEGACY_2021,
    "ROCm, numbers as strings": ("public", "torch", "tracelens", "mi300", "resnet_act_checkpoint.json.gz"),
    "epoch µs with ns digits": (
        "public",
        "torch",
        "hta",
        "ns_resolution_trace",
        "rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz",
    ),
    "MTIA": ("public", "torch", "hta", "mtia_inference_trace", "mtia_inference_rank_0.json.gz"),
    "NCCL collectives": ("public", "torch", "hta", "nccl_parser_config", "nccl_data.json.gz"),
}


def _path(parts: tuple) -> Path:
    return parts[0] if isinstance(parts[0], Path) else shared_path(*parts)


def _parse(path: Path, native: bool, monkeypatch) -> tuple[pd.DataFrame, pd.DataFrame, list[str]]:
    with monkeypatch.context() as m:
        if not native:
            m.setattr(columns, "_scan", None)
        events, memory, meta = kineto.parse(path)
    return events, memory, meta.warnings


def _assert_same(path: Path, monkeypatch) -> tuple[pd.DataFrame, list[str]]:
    fast, slow = _parse(path, True, monkeypatch), _parse(path, False, monkeypatch)
    pd.testing.assert_frame_equal(fast[0], slow[0])
    pd.testing.assert_frame_equal(fast[1], slow[1])
    assert fast[2] == slow[2]
    return fast[0], fast[2]


@pytest.mark.parametrize("parts", REAL.values(), ids=REAL.keys())
def test_both_readers_give_the_same_tables_on_real_traces(parts, monkeypatch):
    events, warnings = _assert_same(_path(parts), monkeypatch)
    assert len(events) > 1000 and not warnings


@pytest.fixture(scope="module")
def doc() -> dict:
    with gzip.open(REPO / "sample_traces" / "unfused_ops.json.gz", "rt") as f:
        return json.load(f)


def _write(tmp_path: Path, doc: dict, text: str | None = None) -> Path:
    path = tmp_path / "trace.json"
    path.write_text(text if text is not None else json.dumps(doc))
    return path


def test_wrongly_typed_fields_are_skipped_alike(tmp_path, doc, monkeypatch):
    events = [dict(e) for e in doc["traceEvents"]]
    xs = [i for i, e in enumerate(events) if e.get("ph") == "X"]
    damage = [("pid", 1.5), ("ts", "soon"), ("dur", True), ("name", ["a"]), ("args", 3), ("cat", {"a": 1})]
    for i, (key, value) in zip(xs, damage, strict=False):
        events[i][key] = value
    events[xs[10]]["args"] = dict(events[xs[10]].get("args", {}), stream=False)
    events.insert(len(events) // 2, 7)
    _, warnings = _assert_same(_write(tmp_path, doc | {"traceEvents": events}), monkeypatch)
    assert any("skipped 8 events with missing or wrongly typed fields" in w for w in warnings)


def test_escaped_and_non_ascii_names_read_alike(tmp_path, doc, monkeypatch):
    events = [dict(e) for e in doc["traceEvents"]]
    kernels = [i for i, e in enumerate(events) if e.get("cat") == "kernel"]
    names = ['quote " backslash \\ tab \t', "é ü 中文", "emoji 🚀 outside the BMP", "slash / and \u0001"]
    for i, name in zip(kernels, names, strict=False):
        events[i]["name"] = name
    path = _write(tmp_path, doc, json.dumps(doc | {"traceEvents": events}, ensure_ascii=True))
    table, _ = _assert_same(path, monkeypatch)
    assert set(names) <= set(table["name"].astype(str))


def test_bytes_that_are_not_utf8_are_repaired_alike(tmp_path, doc, monkeypatch):
    raw = json.dumps(doc).encode()
    field = b'"name": "' + next(e["name"] for e in doc["traceEvents"] if e.get("cat") == "kernel").encode()
    path = tmp_path / "trace.json"
    path.write_bytes(raw.replace(field, field[:9] + b"\xff\xfe" + field[9:]))
    _, warnings = _assert_same(path, monkeypatch)
    (warning,) = [w for w in warnings if "not UTF-8" in w]
    assert f"replaced {2 * raw.count(field):,} byte sequences" in warning


@pytest.mark.parametrize("native", [True, False], ids=["native", "msgspec"])
@pytest.mark.parametrize("piece", [b'{"ph": "X"', b'{"ph": "X"} {"ph": "X"}', b'{"ph": tru}', b'{"ph": "X",}'])
def test_malformed_json_is_refused_by_both(piece, native):
    read = columns.Reader(kineto._fields(False), native=native)
    with pytest.raises(columns.MalformedJSON):
        read(piece)


def test_timestamps_written_as_strings_read_as_numbers_alike(tmp_path, doc, monkeypatch):
    events = [dict(e) for e in doc["traceEvents"]]
    xs = [i for i, e in enumerate(events) if e.get("ph") == "X"]
    for i in xs[::3]:
        events[i]["ts"] = f" {events[i]['ts']} "
    events[xs[1]]["ts"] = "later"
    table, warnings = _assert_same(_write(tmp_path, doc | {"traceEvents": events}), monkeypatch)
    original, _ = _assert_same(_write(tmp_path, doc), monkeypatch)
    assert len(table) == len(original) - 1
    assert any("skipped 1 events" in w for w in warnings)


def _mutations(body: bytes, seed: int, count: int):
    """Damaged copies of ``body``: bytes replaced, inserted or deleted, some also cut short."""
    rnd = random.Random(seed)
    alphabet = b'{}[]",:\\u0123456789.eE-+ ntrufals\xff\xc3\x00\n'
    for _ in range(count):
        piece = bytearray(body[: rnd.randrange(1, len(body))] if rnd.random() < 0.3 else body)
        for _ in range(rnd.randrange(1, 6)):
            i = rnd.randrange(len(piece))
            op = rnd.random()
            if op < 0.4:
                piece[i] = rnd.choice(alphabet)
            elif op < 0.7:
                piece.insert(i, rnd.choice(alphabet))
            else:
                del piece[i]
        yield bytes(piece)


def _read_or_none(read: columns.Reader, piece: bytes) -> columns.Columns | None:
    try:
        return read(piece)
    except columns.MalformedJSON:
        return None


def _texts(column) -> list:
    codes, uniques = column
    return [uniques[c] if c >= 0 else None for c in codes]


def test_damaged_chunks_read_alike_and_never_crash(doc):
    events = json.dumps(doc["traceEvents"][:400]).encode()[1:-1]
    fields = kineto._fields(False)
    fast, slow = columns.Reader(fields, native=True), columns.Reader(fields, native=False)
    read = 0
    for piece in _mutations(events, seed=7, count=1500):
        a, b = _read_or_none(fast, piece), _read_or_none(slow, piece)
        assert (a is None) == (b is None)
        if a is None:
            continue
        read += 1
        assert (a.rows, a.skipped, a.repaired) == (b.rows, b.skipped, b.repaired)
        for name, value in a.values.items():
            if isinstance(value, tuple):
                assert _texts(value) == _texts(b.values[name]), name
            else:
                assert np.array_equal(value, b.values[name]), name
    assert read > 100


_ARGS = (
    columns.Field("ph", ("ph",), columns.Read.TEXT, default=""),
    columns.Field("pid", ("pid",), columns.Read.ID, default="0"),
    columns.Field("ts", ("ts",), columns.Read.NS, nullable=True),
    columns.Field("args", ("args",), columns.Read.OBJECT, nullable=True),
    columns.Field("c", ("args", "c"), columns.Read.INT, nullable=True),
)
EDGE_CASES = {
    "escaped key": rb'{"\u0070h": "X"}',
    "args given twice": rb'{"args": {"c": 1}, "args": {"d": 2}}, {"args": {"c": 1}, "args": null}',
    "default before an explicit value": rb'{"ph": "X"}, {"ph": "X", "pid": 0}, {"pid": 5}',
    "600-digit numbers": b'{"ts": 0.' + b"0" * 600 + b'1, "args": {"c": 1' + b"0" * 600 + b"}}",
    "integer at the int64 edge": rb'{"args": {"c": 9.21e18}}, {"args": {"c": 9.3e18}}',
    "a bad and an out-of-range time": rb'{"ts": "x"}, {"ts": 1e300}, {"ts": 5}',
}
"""Inputs where the readers once disagreed (found in review); each must now read the same."""


@pytest.mark.parametrize("piece", EDGE_CASES.values(), ids=EDGE_CASES.keys())
def test_edge_cases_read_alike(piece):
    fast, slow = columns.Reader(_ARGS, native=True)(piece), columns.Reader(_ARGS, native=False)(piece)
    assert (fast.rows, fast.skipped) == (slow.rows, slow.skipped)
    for name, value in fast.values.items():
        other = slow.values[name]
        assert _texts(value) == _texts(other) if isinstance(value, tuple) else np.array_equal(value, other), name


def test_the_native_depth_limit_is_the_one_documented():
    assert columns._scan.MAX_DEPTH == columns.MAX_DEPTH


@pytest.mark.parametrize("native", [True, False], ids=["native", "msgspec"])
@pytest.mark.parametrize("depth", [columns.MAX_DEPTH + 10, 100_000])
def test_nesting_too_deep_is_too_deep_for_both(depth, native):
    read = columns.Reader(kineto._fields(False), native=native)
    piece = b'{"ph": "X", "args": {"x": ' + b"[" * depth + b"]" * depth + b"}}"
    if not native and depth < 900:
        assert read(piece).rows == 1  # within Python's recursion limit msgspec reads it (documented difference)
        return
    with pytest.raises(columns.TooDeep):
        read(piece)


def _damaged_alike(raw: bytes) -> dict[str, bytes]:
    key = raw.index(b'"traceEvents"')
    middle = raw.index(b"},", len(raw) // 2) + 2
    groups = json.dumps([{"pg_name": str(k), "pg_size": 8, "ranks": list(range(8))} for k in range(1500)]).encode()
    return {
        "BOM and CRLF": b"\xef\xbb\xbf" + raw.replace(b"\n", b"\r\n"),
        "3 MiB of NUL bytes after the document": raw + b"\0" * (3 << 20),
        "3 MiB of newlines between events": raw[:middle] + b"\n" * (3 << 20) + raw[middle:],
        "a 1,500-group header": raw[:key]
        + b'"distributedInfo": {"rank": 0, "pg_config": '
        + groups
        + b"}, "
        + raw[key:],
    }


@pytest.mark.parametrize(
    "damage",
    [
        "BOM and CRLF",
        "3 MiB of NUL bytes after the document",
        "3 MiB of newlines between events",
        "a 1,500-group header",
    ],
)
def test_padding_bom_and_big_headers_read_alike(tmp_path, doc, damage, monkeypatch):
    header = json.dumps({k: v for k, v in doc.items() if k != "traceEvents"})[:-1]
    events = ",\n".join(json.dumps(e) for e in doc["traceEvents"])
    raw = f'{header}, "traceEvents": [\n{events}\n]}}\n'.encode()  # one event a line, as Kineto writes them
    path = tmp_path / "trace.json"
    path.write_bytes(_damaged_alike(raw)[damage])
    table, _ = _assert_same(path, monkeypatch)
    original, _ = _assert_same(_write(tmp_path, doc, raw.decode()), monkeypatch)
    pd.testing.assert_frame_equal(table, original)


def test_stray_and_overlong_events_are_dropped_and_clipped_alike(tmp_path, doc, monkeypatch):
    events = [dict(e) for e in doc["traceEvents"]]
    xs = [i for i, e in enumerate(events) if e.get("ph") == "X"]
    for i in xs[:4]:
        events[i]["ts"] = 0
    for i in xs[10:13]:
        events[i]["dur"] = 9e15
    table, warnings = _assert_same(_write(tmp_path, doc | {"traceEvents": events}), monkeypatch)
    assert any("dropped 4 events" in w for w in warnings) and any("clipped 3 durations" in w for w in warnings)
