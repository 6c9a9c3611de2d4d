"""Fuzzing the promise on real Kineto traces: whatever the damage, ``traceanalyze`` gives a report (exit 0, warnings
allowed) or one line naming the file (exit 2), never exit 1 or a traceback, and the input is left as it was.

Cases are drawn by hypothesis with a fixed seed (``derandomize``) from small real traces: truncation anywhere (also
inside the gzip stream), byte flips, fields retyped or removed (in events and in the header), huge and deeply nested
values, bytes that are not UTF-8, padding, a BOM and CRLF line ends. The CI slice tries TRACEANALYZER_FUZZ_CASES
cases per test (default 40); the long run is

    TRACEANALYZER_FUZZ_CASES=300 python3 -m pytest -q tests/test_fuzz_kineto.py
"""

from __future__ import annotations

import contextlib
import functools
import gzip
import hashlib
import io
import json
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from tests.conftest import H200, REPO
from traceanalyzer.cli import main

SOURCES = {
    "cuda_graph": REPO / "sample_traces" / "cuda_graph" / "cuda_graph.json.gz",
    "fp32_matmul": H200 / "fp32_matmul" / "fp32_matmul.json.gz",
}
"""Small real traces (a CUDA-graph transformer we recorded, an H200 matmul run from ../shared), 0.7 and 1.1 MB."""
CASES = int(os.environ.get("TRACEANALYZER_FUZZ_CASES", "40"))
FUZZ = settings(
    max_examples=CASES,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example],
)
PROMISED = ("traceanalyze: error: ", "traceanalyze: warning: ", "traceanalyze: internal error")
"""The stderr lines the promise is about; the others are progress notes (loading takes more than a second, the
memory a large file needs)."""


@functools.cache
def _source(name: str) -> tuple[bytes, dict]:
    """A real trace's JSON text and document."""
    raw = gzip.decompress(SOURCES[name].read_bytes())
    return raw, json.loads(raw)


def _available() -> list[str]:
    return [name for name, path in SOURCES.items() if path.exists()]


pytestmark = pytest.mark.skipif(not _available(), reason="no real trace available (sample_traces or ../shared)")


@dataclass
class Damaged:
    """A damaged trace: its bytes (gzip when ``gz``) and what was done, for the failure message."""

    data: bytes
    gz: bool
    steps: list[str]

    def __repr__(self) -> str:
        return f"Damaged({' + '.join(self.steps)}, {len(self.data):,} bytes{', gzip' if self.gz else ''})"


# ---------------------------------------------------------------- JSON values where fields belong

SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),  # NaN and Infinity are not JSON: json.dumps writes them anyway
    st.text(max_size=12),
    st.sampled_from(["abc", "1e400", "-1e400", "inf", "nan", "0x1f", " 12 ", "", "9" * 40, "1e308", "-0"]),
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6,
)
EVENT_KEYS = ("ts", "dur", "ph", "cat", "name", "pid", "tid", "args")
ARG_KEYS = ("External id", "correlation", "stream", "device", "Input Dims", "Bytes", "Total Allocated", "Addr")
HEADER_KEYS = (
    "baseTimeNanoseconds",
    "deviceProperties",
    "distributedInfo",
    "displayTimeUnit",
    "schemaVersion",
    "trace_id",
    "cuda_runtime_version",
    "traceEvents",
)
DEVICE_KEYS = ("id", "name", "totalGlobalMem", "computeMajor", "numSms")
DIST_KEYS = ("rank", "world_size", "pg_config", "backend", "nccl_version")


def _deep(depth: int, closed: bool) -> str:
    return ("[" * depth + "]" * depth) if closed else '{"a":' * depth


# ---------------------------------------------------------------- structural damage (on the document)


def _an_event(draw, doc: dict) -> dict:
    """An event to damage; a throwaway one when an earlier damage left no events array."""
    events = doc.get("traceEvents")
    if not isinstance(events, list) or not events:
        return {}
    event = events[draw(st.integers(0, len(events) - 1))]
    return event if isinstance(event, dict) else {}


def retype_event_field(draw, doc: dict) -> str:
    event = _an_event(draw, doc)
    if draw(st.booleans()) and isinstance(event.get("args"), dict):
        key = draw(st.sampled_from(ARG_KEYS))
        event["args"][key] = draw(VALUES)
        return f"args[{key!r}] retyped"
    key = draw(st.sampled_from(EVENT_KEYS))
    event[key] = draw(VALUES)
    return f"{key!r} retyped"


def remove_event_field(draw, doc: dict) -> str:
    event = _an_event(draw, doc)
    key = draw(st.sampled_from(EVENT_KEYS))
    event.pop(key, None)
    return f"{key!r} removed"


def retype_header_field(draw, doc: dict) -> str:
    where = draw(st.sampled_from(["top", "device", "dist"]))
    if where == "device" and doc.get("deviceProperties"):
        key = draw(st.sampled_from(DEVICE_KEYS))
        doc["deviceProperties"][0][key] = draw(VALUES)
        return f"deviceProperties[0].{key} retyped"
    if where == "dist":
        dist = doc.setdefault("distributedInfo", {"rank": 0, "world_size": 1})
        key = draw(st.sampled_from(DIST_KEYS))
        if isinstance(dist, dict):
            dist[key] = draw(VALUES)
        return f"distributedInfo.{key} retyped"
    key = draw(st.sampled_from(HEADER_KEYS))
    doc[key] = draw(VALUES)
    return f"header {key!r} retyped"


def remove_header_field(draw, doc: dict) -> str:
    key = draw(st.sampled_from(HEADER_KEYS))
    doc.pop(key, None)
    return f"header {key!r} removed"


def huge_value(draw, doc: dict) -> str:
    event = _an_event(draw, doc)
    kind = draw(st.sampled_from(["name", "number", "array", "args"]))
    size = draw(st.sampled_from([10_000, 1_000_000, 3_000_000]))
    if kind == "name":
        event["name"] = "x" * size
    elif kind == "number":
        event[draw(st.sampled_from(["ts", "dur"]))] = int("9" * min(size, 4000))
    elif kind == "array":
        event.setdefault("args", {})["Input Dims"] = [[1, 2]] * (size // 10)
    else:
        event["args"] = {f"k{i}": i for i in range(size // 100)}
    return f"huge {kind} ({size:,})"


STRUCTURAL: tuple[Callable, ...] = (
    retype_event_field,
    remove_event_field,
    retype_header_field,
    remove_header_field,
    huge_value,
)


# ---------------------------------------------------------------- byte damage (on the text)


def truncate(draw, data: bytes) -> tuple[bytes, str]:
    cut = draw(st.integers(0, len(data)))
    return data[:cut], f"truncated at {cut:,}"


def flip_bytes(draw, data: bytes) -> tuple[bytes, str]:
    if not data:
        return data, "nothing to flip"
    out = bytearray(data)
    flips = draw(st.lists(st.tuples(st.integers(0, len(data) - 1), st.integers(0, 255)), min_size=1, max_size=8))
    for at, value in flips:
        out[at] = value
    return bytes(out), f"{len(flips)} bytes flipped"


def not_utf8(draw, data: bytes) -> tuple[bytes, str]:
    at = draw(
        st.sampled_from([i for i in range(0, len(data), max(1, len(data) // 64)) if data[i : i + 1] == b'"'] or [0])
    )
    junk = draw(st.sampled_from([b"\xff", b"\xc3", b"\xed\xa0\x80", b"\xf8\x88\x80\x80\x80", b"\x80\x80"]))
    return data[: at + 1] + junk + data[at + 1 :], "bytes that are not UTF-8"


def deep_value(draw, data: bytes) -> tuple[bytes, str]:
    depth = draw(st.sampled_from([40, 513, 2000, 100_000]))
    closed = draw(st.booleans())
    anchor = draw(st.sampled_from([b'"args": {', b'"deviceProperties": [', b'"traceEvents": [']))
    at = data.find(anchor)
    if at < 0:
        return data, "no place for nesting"
    at += len(anchor)
    filler = _deep(depth, closed).encode() + (b", " if anchor.endswith(b"[") else b"")
    if anchor.endswith(b"{"):
        filler = b'"deep": ' + filler + b", "
    return data[:at] + filler + data[at:], f"nested {depth:,} deep ({'closed' if closed else 'open'})"


def pad(draw, data: bytes) -> tuple[bytes, str]:
    at = draw(st.sampled_from([0, len(data), len(data) // 2]))
    filler = draw(st.sampled_from([b" ", b"\n", b"\0", b"\r\n"])) * draw(st.sampled_from([1000, 3 << 20]))
    return data[:at] + filler + data[at:], f"{len(filler):,} bytes of padding at {at:,}"


def bom_or_crlf(draw, data: bytes) -> tuple[bytes, str]:
    kind = draw(st.sampled_from(["BOM", "CRLF", "BOM + CRLF"]))
    if "CRLF" in kind:
        data = data.replace(b"\n", b"\r\n")
    return (b"\xef\xbb\xbf" + data if "BOM" in kind else data), kind


BYTES: tuple[Callable, ...] = (truncate, flip_bytes, not_utf8, deep_value, pad, bom_or_crlf)


def gzip_damage(draw, packed: bytes) -> tuple[bytes, str]:
    if draw(st.booleans()):
        cut = draw(st.integers(0, len(packed)))
        return packed[:cut], f"gzip truncated at {cut:,} of {len(packed):,}"
    out = bytearray(packed)
    at = draw(st.integers(0, len(packed) - 1))
    out[at] ^= draw(st.integers(1, 255))
    return bytes(out), f"gzip byte {at:,} flipped"


@st.composite
def damaged(draw) -> Damaged:
    """A real trace with one or two kinds of damage, plain or gzip (itself perhaps damaged)."""
    name = draw(st.sampled_from(_available()))
    raw, doc = _source(name)
    steps = [name]
    structural = draw(st.lists(st.sampled_from(STRUCTURAL), max_size=2))
    if structural:
        doc = json.loads(raw)
        steps += [damage(draw, doc) for damage in structural]
        raw = json.dumps(doc, indent=draw(st.sampled_from([None, 1]))).encode()
    for damage in draw(st.lists(st.sampled_from(BYTES), min_size=0 if structural else 1, max_size=2)):
        raw, step = damage(draw, raw)
        steps.append(step)
    gz = draw(st.booleans())
    if gz:
        raw = gzip.compress(raw, compresslevel=1)
        if draw(st.integers(0, 3)) == 0:
            raw, step = gzip_damage(draw, raw)
            steps.append(step)
    return Damaged(raw, gz, steps)


# ---------------------------------------------------------------- the promise


def _snapshot(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
        for p in sorted(folder.rglob("*"))
    }


def assert_promise(target: Path, named: list[Path], case: object) -> None:
    """Run the CLI on ``target``: a JSON report (exit 0) or one line naming one of ``named`` (exit 2), never exit 1
    or a traceback; the input folder is byte-identical afterwards, with no new entries."""
    folder = target if target.is_dir() else target.parent
    before = _snapshot(folder)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([str(target), "--no-cache", "--format", "json", "--top", "5"])
    lines = [line for line in err.getvalue().splitlines() if line.startswith(PROMISED)]
    assert "Traceback" not in err.getvalue(), (case, err.getvalue()[-2000:])
    assert code in (0, 2), (case, code, lines)
    event(f"exit {code}" + (" with warnings" if code == 0 and lines else ""))
    if code == 0:
        assert json.loads(out.getvalue())["schema_version"], case
        assert all(line.startswith("traceanalyze: warning: ") for line in lines), (case, lines)
    else:
        assert len(lines) == 1 and out.getvalue() == "", (case, lines)
        assert lines[0].startswith("traceanalyze: error: ") and any(str(p) in lines[0] for p in named), (case, lines)
    assert _snapshot(folder) == before, (case, "the input folder changed")


@FUZZ
@given(case=damaged())
def test_a_damaged_trace_file_keeps_the_promise(case):
    with tempfile.TemporaryDirectory(prefix="fuzz-kineto-") as tmp:
        path = Path(tmp) / ("trace.json.gz" if case.gz else "trace.json")
        path.write_bytes(case.data)
        assert_promise(path, [path], case)


@settings(FUZZ, max_examples=max(1, CASES // 4))
@given(case=damaged())
def test_a_folder_with_one_damaged_rank_keeps_the_promise(case):
    """A folder of two rank files, rank 0 intact and rank 1 damaged."""
    name = _available()[0]
    with tempfile.TemporaryDirectory(prefix="fuzz-kineto-ranks-") as tmp:
        folder = Path(tmp) / "run"
        folder.mkdir()
        (folder / "trace_rank0.json.gz").write_bytes(SOURCES[name].read_bytes())
        damaged_rank = folder / ("trace_rank1.json.gz" if case.gz else "trace_rank1.json")
        damaged_rank.write_bytes(case.data)
        assert_promise(folder, [folder, damaged_rank, folder / "trace_rank0.json.gz"], case)
