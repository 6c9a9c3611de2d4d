"""Broken input, built from a real trace: one line on stderr naming the file and the problem, never a traceback.

Damage the analysis can live with (a truncated tail, a few malformed events) gives a report and a warning
that says what was skipped; damage it cannot gives exit 2. The user's files are never touched.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import re
from pathlib import Path

import pandas as pd
import pytest
from traceanalyzer.parsers import columns, jsonstream, sizes

import traceanalyzer as ta
from tests.conftest import REPO, shared_path
from traceanalyzer import loading
from traceanalyzer.analyzers import gemm
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


# ---------------------------------------------------------------- padding: linear time, bounded memory


@pytest.fixture(scope="module")
def clean_events(raw, tmp_path_factory) -> pd.DataFrame:
    """The event table of the undamaged trace, to compare damaged-but-readable copies with."""
    path = tmp_path_factory.mktemp("clean") / "trace.json"
    path.write_bytes(raw)
    return ta.load(path).events


PADDED = 24 << 20


@pytest.mark.parametrize(("filler", "said"), [(b" ", "of whitespace"), (b"\0", "of padding (NUL bytes)")])
def test_a_trace_followed_by_padding_is_read_with_a_warning(inbox, raw, filler, said, clean_events, capsys):
    path = inbox / "trace.json"
    with path.open("wb") as f:
        f.write(raw)
        f.write(filler * PADDED)
    code, lines, out = run(path, capsys)
    assert code == 0 and out
    assert any(f"ignored {PADDED:,} bytes {said} after the JSON document" in w for w in warnings_of(lines)), lines
    pd.testing.assert_frame_equal(ta.load(path).events, clean_events)


def test_a_small_gzip_that_inflates_to_mostly_spaces_is_read_in_bounded_memory(inbox, raw, clean_events, capsys):
    path = inbox / "trace.json.gz"
    with gzip.open(path, "wb", compresslevel=9) as f:
        f.write(raw)
        for _ in range(64):
            f.write(b" " * (1 << 20))
    assert path.stat().st_size < len(raw)
    code, lines, _ = run(path, capsys)
    assert code == 0
    assert any(f"ignored {64 << 20:,} bytes of whitespace" in w for w in warnings_of(lines))
    assert len(jsonstream.read_all(path)) <= len(raw) + jsonstream.PADDING_KEPT  # the padding is not held whole
    pd.testing.assert_frame_equal(ta.load(path).events, clean_events)


def test_padding_between_events_is_read_cut_short_with_a_warning(inbox, raw, clean_events, capsys):
    cut = raw.index(b"},", len(raw) // 2) + 2
    path = inbox / "trace.json"
    path.write_bytes(raw[:cut] + b"\n" * PADDED + raw[cut:])
    code, lines, _ = run(path, capsys)
    assert code == 0
    (said,) = [re.search(r"skipped ([\d,]+) bytes of padding", w) for w in warnings_of(lines) if "padding" in w]
    assert PADDED <= int(said.group(1).replace(",", "")) < PADDED + 16  # the run, with the blanks around it
    pd.testing.assert_frame_equal(ta.load(path).events, clean_events)


def test_a_truncated_gzip_of_a_padded_trace_is_salvaged_block_by_block(inbox, raw, capsys):
    path = inbox / "trace.json.gz"
    packed = gzip.compress(raw + b" " * (8 << 20) + raw[:1000], compresslevel=9)
    path.write_bytes(packed[: len(packed) - 64])
    code, lines, _ = run(path, capsys)
    assert code == 0
    assert any("gzip stream ends early" in w for w in warnings_of(lines))


# ---------------------------------------------------------------- nesting too deep for any reader

DEEP = 100_000


def _deep_variants(raw: bytes) -> dict[str, bytes]:
    key = raw.index(b'"traceEvents"')
    args = raw.index(b'"args": {', key) + len(b'"args": {')
    arrays, objects = b"[" * DEEP + b"]" * DEEP, b'{"a":' * DEEP + b"1" + b"}" * DEEP
    return {
        "in an event's args": raw[:args] + b'"x": ' + arrays + b", " + raw[args:],
        "unclosed, in an event": raw[:args] + b'"x": ' + b'{"a":' * DEEP + raw[args:],
        "in the header": raw[:key] + b'"distributedInfo": ' + objects + b", " + raw[key:],
        "after the events": raw.rstrip()[:-1] + b', "junk": ' + arrays + b"}",
        "the whole document": arrays,
    }


@pytest.mark.parametrize("native", [True, False], ids=["native reader", "msgspec reader"])
@pytest.mark.parametrize(
    "where", ["in an event's args", "unclosed, in an event", "in the header", "after the events", "the whole document"]
)
def test_deep_nesting_is_refused_in_one_line(inbox, raw, where, native, monkeypatch, capsys):
    if not native:
        monkeypatch.setattr(columns, "_scan", None)
    elif columns._scan is None:
        pytest.skip("the native reader was not built")
    path = inbox / "trace.json"
    path.write_bytes(_deep_variants(raw)[where])
    assert_refused(path, capsys, "too deeply")


# ---------------------------------------------------------------- header fields of the wrong type


HEADER_DAMAGE = {
    "baseTimeNanoseconds as text": (("baseTimeNanoseconds",), "abc", "baseTimeNanoseconds"),
    "baseTimeNanoseconds beyond double": (("baseTimeNanoseconds",), "1e400", "baseTimeNanoseconds"),
    "baseTimeNanoseconds as an object": (("baseTimeNanoseconds",), {"a": 1}, "baseTimeNanoseconds"),
    "device id as text": (("deviceProperties", 0, "id"), "abc", "deviceProperties[0].id"),
    "device id as an array": (("deviceProperties", 0, "id"), [0], "deviceProperties[0].id"),
    "compute capability as text": (("deviceProperties", 0, "computeMajor"), "nine", "deviceProperties[0].computeMajor"),
    "device memory as an object": (("deviceProperties", 0, "totalGlobalMem"), {}, "deviceProperties[0].totalGlobalMem"),
    "device name as an array": (("deviceProperties", 0, "name"), ["H200"], "deviceProperties[0].name"),
    "deviceProperties as text": (("deviceProperties",), "H200", "deviceProperties"),
    "a device as a number": (("deviceProperties", 0), 7, "deviceProperties[0]"),
    "displayTimeUnit as a number": (("displayTimeUnit",), 5, "displayTimeUnit"),
    "displayTimeUnit as an object": (("displayTimeUnit",), {"unit": "ms"}, "displayTimeUnit"),
    "schemaVersion as an object": (("schemaVersion",), {"v": 1}, "schemaVersion"),
    "trace_id as an array": (("trace_id",), [1, 2], "trace_id"),
    "distributedInfo as text": (("distributedInfo",), "nccl", "distributedInfo"),
    "rank as text": (("distributedInfo",), {"rank": "first", "world_size": 2}, "distributedInfo.rank"),
    "world_size as an array": (("distributedInfo",), {"rank": 0, "world_size": [2]}, "distributedInfo.world_size"),
    "pg_config as an object": (("distributedInfo",), {"rank": 0, "pg_config": {"a": 1}}, "distributedInfo.pg_config"),
    "pg_size as text": (
        ("distributedInfo",),
        {"rank": 0, "pg_config": [{"pg_name": "0", "pg_size": "all"}]},
        "distributedInfo.pg_config[0].pg_size",
    ),
}


@pytest.mark.parametrize("damage", HEADER_DAMAGE.values(), ids=HEADER_DAMAGE.keys())
def test_header_fields_of_the_wrong_type_are_a_warning_and_the_default(inbox, doc, damage, capsys):
    keys, value, named = damage
    damaged = json.loads(json.dumps(doc))
    owner = damaged
    for key in keys[:-1]:
        owner = owner[key]
    owner[keys[-1]] = value
    path = _write_events(inbox, damaged, doc["traceEvents"])
    code, lines, out = run(path, capsys, "--format", "json")
    assert code == 0
    assert any(f"header field {named} is" in w for w in warnings_of(lines)), lines
    report = json.loads(out)
    assert report["trace"]["world_size"] >= 1


# ---------------------------------------------------------------- impossible values sanitised at the parser


def test_stray_timestamps_negative_and_overlong_durations_are_dropped_or_clipped_and_counted(inbox, doc, capsys):
    events = [dict(e) for e in doc["traceEvents"]]
    xs = _x_events(doc)
    clean = ta.load(_write_events(inbox, doc, events, "clean.json")).meta
    for i in xs[5:8]:
        events[i]["ts"] = 0  # the epoch: a clock that was never set
    for i in xs[8:10]:
        events[i]["ts"] = 1e15  # 31 years after the trace
    for i in xs[20:22]:
        events[i]["dur"] = 9.1e15  # ends 288 years later, beyond int64 ns once added to ts
    for i in xs[30:32]:
        events[i]["dur"] = -3
    path = _write_events(inbox, doc, events)
    code, lines, _ = run(path, capsys)
    assert code == 0
    meta = ta.load(path).meta
    assert meta.adjustments == {
        "events far outside the trace's time window dropped": 5,
        "durations reaching far past the trace's time window clipped to its end": 2,
        "negative durations clipped to 0 ns": 2,
    }
    assert (meta.start_ns, meta.end_ns) == (clean.start_ns, clean.end_ns)
    said = " ".join(warnings_of(lines))
    assert "dropped 5 events that start far outside" in said and "clipped 2 durations" in said


def test_a_long_first_step_is_not_mistaken_for_a_stray(inbox, doc):
    events = [dict(e) for e in doc["traceEvents"]]
    step = next(i for i, e in enumerate(events) if str(e.get("name", "")).startswith("ProfilerStep#"))
    events[step]["dur"] = events[step]["dur"] + 13e6  # waits 13 s (Triton compiling), as in HTA's triton_example
    meta = ta.load(_write_events(inbox, doc, events)).meta
    assert meta.adjustments == {} and not meta.warnings


# ---------------------------------------------------------------- detection reads what it needs


def _with_process_groups(raw: bytes, count: int) -> bytes:
    groups = [
        {
            "pg_name": str(k),
            "pg_desc": f"group_{k}",
            "backend_config": "cuda:nccl",
            "pg_size": 8,
            "ranks": list(range(8)),
        }
        for k in range(count)
    ]
    dist = {"backend": "nccl", "rank": 0, "world_size": 8, "pg_count": count, "pg_config": groups}
    key = raw.index(b'"traceEvents"')
    return raw[:key] + b'"distributedInfo": ' + json.dumps(dist).encode() + b",\n" + raw[key:]


DETECTED = {
    "1,500 process groups before the events": lambda raw: _with_process_groups(raw, 1500),
    "70 kB of leading whitespace": lambda raw: b" " * 70_000 + raw,
    "a UTF-8 BOM": lambda raw: b"\xef\xbb\xbf" + raw,
    "CRLF line ends": lambda raw: raw.replace(b"\n", b"\r\n"),
    "a BOM and CRLF": lambda raw: b"\xef\xbb\xbf" + raw.replace(b"\n", b"\r\n"),
}


@pytest.mark.parametrize("gz", [False, True], ids=["json", "json.gz"])
@pytest.mark.parametrize("make", DETECTED.values(), ids=DETECTED.keys())
def test_valid_traces_with_a_big_header_bom_or_crlf_are_read(inbox, raw, make, gz, clean_events, capsys):
    data = make(raw)
    path = inbox / ("trace.json.gz" if gz else "trace.json")
    path.write_bytes(gzip.compress(data) if gz else data)
    code, lines, out = run(path, capsys)
    assert code == 0 and out and not warnings_of(lines)
    pd.testing.assert_frame_equal(ta.load(path).events, clean_events)


def test_a_big_header_keeps_its_process_groups(inbox, raw):
    path = inbox / "trace.json"
    path.write_bytes(_with_process_groups(raw, 1500))
    meta = ta.load(path).meta
    assert (meta.rank_known, meta.world_size, len(meta.process_groups)) == (True, 8, 1500)


# ---------------------------------------------------------------- bad options, found before the analysis starts


BAD_OPTIONS = {
    "a --comm-pattern that is not a regex": (
        ["--comm-pattern", "nccl(["],
        "--comm-pattern",
        "not a regular expression",
    ),
    "-o into a folder that does not exist": (["-o", "{tmp}/missing/report.txt"], "missing", "does not exist"),
    "-o onto a folder": (["-o", "{tmp}"], "{tmp}", "is a folder"),
    "-o onto the input": (["-o", "{input}"], "{input}", "is one of the inputs"),
}


@pytest.mark.parametrize("bad", BAD_OPTIONS.values(), ids=BAD_OPTIONS.keys())
def test_bad_options_are_refused_before_the_trace_is_loaded(tmp_path, inbox, raw, bad, monkeypatch, capsys):
    path = inbox / "trace.json"
    path.write_bytes(raw)
    options, named, problem = bad
    options = [o.format(tmp=tmp_path, input=path) for o in options]
    named = named.format(tmp=tmp_path, input=path)

    def load_must_not_run(*args, **kwargs):
        raise AssertionError("the trace was loaded before the options were checked")

    monkeypatch.setattr(loading, "load", load_must_not_run)
    code, lines, out = run(path, capsys, *options)
    assert code == 2 and out == ""
    (line,) = lines
    assert named in line and problem in line, line


def _impossible_sizes(doc: dict) -> dict:
    """Every other aten::mm with a negative pair of dims (or a dim of 10**30), every other collective with a
    negative element count: sizes no real run records."""
    mms = [e for e in doc["traceEvents"] if e.get("name") == "aten::mm" and e.get("args", {}).get("Input Dims")]
    for i, e in enumerate(mms[::2]):
        a, b = e["args"]["Input Dims"][:2]
        e["args"]["Input Dims"][:2] = [[-a[0], a[1]], [b[0], -b[1]]] if i % 2 else [[10**30, a[1]], b]
    for e in [e for e in doc["traceEvents"] if "In msg nelems" in e.get("args", {})][::2]:
        e["args"]["In msg nelems"] = -e["args"]["In msg nelems"]
    return doc


def test_negative_or_huge_gemm_dims_and_message_sizes_are_dropped_with_a_count(inbox):
    """A GEMM shape with negative or overflowing dims, and a collective of a negative size, are not read (the op has
    no shape, the message no size), each counted in the ledger: no negative FLOPs, bytes or dims reach the report."""
    doc = json.loads(gzip.decompress((REPO / "sample_traces" / "fsdp" / "fsdp_rank0.json.gz").read_bytes()))
    clean = len([e for e in doc["traceEvents"] if e.get("name") == "aten::mm" and e.get("args", {}).get("Input Dims")])
    trace = ta.load(_write_events(inbox, doc, _impossible_sizes(doc)["traceEvents"]))
    adjustments = trace.meta.adjustments
    assert adjustments[sizes.BAD_SHAPES] == (clean + 1) // 2
    assert adjustments[sizes.BAD_BYTES] > 0
    assert any(sizes.BAD_SHAPES in w for w in trace.meta.warnings)
    assert len(trace.gemm()) and (trace.gemm()[["calls", "flops", "bytes"]] >= 0).all().all()
    shapes = gemm.gemm_roofline(trace)
    assert len(shapes) and (shapes[["batch", "m", "n", "k", "flops", "bytes"]] >= 0).all().all()
    assert (trace.events["bytes"] >= -1).all()
