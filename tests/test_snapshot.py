"""PyTorch memory snapshots (torch.cuda.memory._dump_snapshot pickles) recorded on an H200: the peak equals
max_memory_allocated, the OOM says what was asked and what was free, and a pickle that would run code is refused
without running anything."""

from __future__ import annotations

import gzip
import json
import os
import pickle
import re
import subprocess
import sys
from pathlib import Path

import pytest
from traceanalyzer.dashboards import tables
from traceanalyzer.parsers import snapshot

import traceanalyzer as ta
from tests.conftest import REPO, facts, rows
from traceanalyzer.cli import main
from traceanalyzer.errors import TraceError
from traceanalyzer.schema import MEMORY_SEGMENTS

SAMPLES = REPO / "sample_traces" / "memory_snapshot"
TRAIN = SAMPLES / "train.snapshot.pickle"
OOM = SAMPLES / "oom.snapshot.pickle"
MIB, GIB = 1 << 20, 1 << 30


def _meta(name: str) -> dict:
    return json.loads((SAMPLES / f"{name}.meta.json").read_text())


@pytest.fixture(scope="module")
def train() -> ta.Trace:
    return ta.load(TRAIN, cache=False)


@pytest.fixture(scope="module")
def oom() -> ta.Trace:
    return ta.load(OOM, cache=False)


@pytest.fixture(scope="module")
def train_report(train) -> dict:
    return train.report()


@pytest.fixture(scope="module")
def oom_report(oom) -> dict:
    return oom.report()


def _plain(path: Path) -> dict:
    """The snapshot document, read with the parser's own safe unpickler."""
    return snapshot._PlainUnpickler(path.open("rb")).load()


def test_train_peak_equals_max_memory_allocated(train_report):
    meta = _meta("train")
    memory = facts(train_report, "memory")
    assert memory["peak_allocated_bytes"] == meta["max_memory_allocated_B"] == 798_501_888
    assert memory["peak_reserved_bytes"] == meta["memory_reserved_at_dump_B"]
    assert memory["baseline"] == "known"


def test_train_timeline_ends_at_the_dump_state(train):
    meta = _meta("train")
    timeline = train.memory().timeline
    assert timeline["allocated"].iloc[-1] == meta["memory_allocated_at_dump_B"]
    assert timeline["reserved"].iloc[-1] == meta["memory_reserved_at_dump_B"]
    assert timeline["allocated"].max() == meta["max_memory_allocated_B"]
    assert (
        len(timeline)
        == meta["trace_actions"]["alloc"]
        + meta["trace_actions"]["free_completed"]
        + meta["trace_actions"]["segment_alloc"]
    )


def test_blocks_live_at_the_peak_add_up_to_it_with_their_allocation_stacks(train, train_report):
    live = train.memory().live_at_peak
    assert live["bytes"].sum() == _meta("train")["max_memory_allocated_B"]
    shown = rows(train_report, "memory", "live_at_peak")
    assert shown[0]["bytes"] == live["bytes"].max()
    with_frames = live[live["op_name"].str.contains(r"\.py\(\d+\): ")]
    assert len(with_frames) and with_frames["stack"].str.contains("scripts/record/").all()
    assert set(live["path"]) >= {"forward", "backward"}  # frameless allocations named by their annotation
    assert any("scripts/record/" in r["stack"] for r in shown)  # the report shows each block's user frames


def test_steps_come_from_the_profiler_step_annotations(train):
    steps = train.memory().step_memory
    assert list(steps["step"]) == [0, 1, 2, 3, 4, 5]
    assert (steps["end_bytes"] == _meta("train")["memory_allocated_at_dump_B"]).all()


def test_a_snapshot_claims_nothing_about_device_time(train_report):
    """A memory snapshot records allocations, not kernels: the summary says no device work was recorded instead of
    calling every step host-bound with the device idle (device figures unknown, not zero)."""
    summary = facts(train_report, "summary")
    assert summary["steps"] == 6 and summary["bound"] == "– (no device work recorded)"
    assert summary["device_busy_ns"] is None and summary["device_busy_share"] is None and summary["kernels"] is None
    assert {r["bound"] for r in rows(train_report, "summary", "steps")} == {""}


def test_fragmentation_per_segment_at_the_peak_and_at_the_dump(train, train_report):
    meta = _meta("train")
    segments = train.meta.side_table(MEMORY_SEGMENTS)
    dump = segments[segments["at"] == "dump"]
    assert len(dump) == meta["segments"]
    assert dump["bytes"].sum() == meta["segments_total_size_B"]
    assert dump["allocated_bytes"].sum() == meta["active_allocated_blocks_size_B"]
    peak = segments[segments["at"] == "peak"]
    assert peak["allocated_bytes"].sum() == meta["max_memory_allocated_B"]
    assert (segments["unused_bytes"] == segments["bytes"] - segments["allocated_bytes"]).all()
    assert (segments["largest_free_bytes"] <= segments["unused_bytes"]).all()
    shown = rows(train_report, "memory", "segments")
    assert {r["at"] for r in shown} == {"peak", "dump"}
    assert all(r["unused_bytes"] == r["bytes"] - r["allocated_bytes"] for r in shown)


def test_oom_snapshot_reports_what_was_requested_and_what_was_free(oom, oom_report):
    meta = _meta("oom")
    message = meta["oom_message"]
    (error,) = rows(oom_report, "memory", "out_of_memory")
    assert error["requested_bytes"] / MIB == float(re.search(r"Tried to allocate ([\d.]+) MiB", message)[1])
    assert round(error["allocated_bytes"] / GIB, 2) == float(re.search(r"([\d.]+) GiB is allocated", message)[1])
    unused = float(re.search(r"([\d.]+) MiB is reserved by PyTorch but unallocated", message)[1])
    assert round(error["unused_reserved_bytes"] / MIB, 2) == unused
    assert error["unused_reserved_bytes"] == error["reserved_bytes"] - error["allocated_bytes"]
    assert round(error["device_free_bytes"] / GIB, 2) == float(re.search(r"of which ([\d.]+) GiB is free", message)[1])
    assert error["largest_free_bytes"] < error["requested_bytes"]  # why the cached reserve could not serve it
    said = [w for w in oom.meta.warnings if "ran out of memory" in w]
    assert len(said) == 1 and f"{error['requested_bytes']:,} B requested" in said[0]
    assert facts(oom_report, "memory")["peak_allocated_bytes"] == meta["max_memory_allocated_at_dump_B"]
    assert oom.memory().timeline["allocated"].iloc[-1] == meta["memory_allocated_at_dump_B"]


def test_gzipped_snapshot_reads_the_same(tmp_path, train):
    path = tmp_path / "rank3_memory_snapshot.pickle.gz"
    path.write_bytes(gzip.compress(TRAIN.read_bytes()))
    t = ta.load(path, cache=False)
    assert t.meta.ranks == [3]
    assert t.memory().peaks["peak_allocated_bytes"].tolist() == train.memory().peaks["peak_allocated_bytes"].tolist()


def test_a_history_that_lost_its_oldest_entries_ends_at_the_dump_with_a_warning(tmp_path):
    doc = _plain(TRAIN)
    entries = doc["device_traces"][0]
    doc["device_traces"][0] = entries[len(entries) // 2 :]
    path = tmp_path / "wrapped.pickle"
    path.write_bytes(pickle.dumps(doc))
    t = ta.load(path, cache=False)
    assert t.memory().timeline["allocated"].iloc[-1] == _meta("train")["memory_allocated_at_dump_B"]
    assert any("does not reach back to the first allocation" in w for w in t.meta.warnings)


def test_cli_reports_a_snapshot(capsys):
    assert main([str(OOM), "--format", "markdown"]) == 0
    out = capsys.readouterr().out
    assert "Out of memory (memory snapshot)" in out and "Segments (memory snapshot)" in out


class _Payload:
    """Pickles as a call of ``fn(*args)``: what a malicious pickle runs when it is loaded."""

    def __init__(self, fn, args) -> None:
        self.fn, self.args = fn, args

    def __reduce__(self):
        return self.fn, self.args


def _payloads(marker: Path) -> dict[str, object]:
    touch = f"open({str(marker)!r}, 'w').close()"
    return {
        "os_system": _Payload(os.system, (f"touch {marker}",)),
        "eval": _Payload(eval, (touch,)),
        "subprocess": _Payload(subprocess.call, (["touch", str(marker)],)),
        "inside_a_snapshot": {"segments": [], "device_traces": [[_Payload(exec, (touch,))]]},
    }


@pytest.mark.parametrize("protocol", [0, 2, pickle.HIGHEST_PROTOCOL])
@pytest.mark.parametrize("kind", ["os_system", "eval", "subprocess", "inside_a_snapshot"])
def test_a_pickle_that_would_run_code_is_refused_without_running_it(tmp_path, capsys, kind, protocol):
    marker = tmp_path / "ran"
    path = tmp_path / "rank0_memory_snapshot.pickle"
    path.write_bytes(pickle.dumps(_payloads(marker)[kind], protocol=protocol))
    code = main([str(path)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "is refused" in err[0] and str(path) in err[0], err
    assert not marker.exists()
    loader = "import pickle, sys; pickle.load(open(sys.argv[1], 'rb'))"
    subprocess.run([sys.executable, "-c", loader, str(path)], check=False, capture_output=True)
    assert marker.exists(), "the payload runs under a plain pickle.load: the refusal above is what stopped it"


@pytest.fixture(scope="module")
def train_bytes() -> bytes:
    return TRAIN.read_bytes()


@pytest.mark.parametrize("keep", [1, 2, 64, 0.5, -1])
def test_a_truncated_snapshot_is_refused_in_one_line(tmp_path, capsys, train_bytes, keep):
    cut = int(len(train_bytes) * keep) if isinstance(keep, float) else keep % len(train_bytes)
    path = tmp_path / "cut.pickle"
    path.write_bytes(train_bytes[:cut])
    assert main([str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is not a readable pickle" in err[0] and "Traceback" not in err[0], err


@pytest.mark.parametrize(
    ("name", "content", "problem"),
    [
        ("garbage.pickle", bytes(range(256)) * 8, "is not a readable pickle"),
        ("text.pickle", b"segments: none\n", "is not a readable pickle"),
        ("empty.pickle", b"", "is empty"),
        ("list.pickle", pickle.dumps([1, 2, 3]), "not a PyTorch memory snapshot"),
        ("cut.pickle.gz", gzip.compress(pickle.dumps({"segments": []}), mtime=0)[:20], "damaged gzip"),
        ("nothing.pickle", pickle.dumps({"segments": [], "device_traces": [[]]}), "no allocation history"),
    ],
    ids=["garbage", "text", "empty", "list", "cut-gzip", "no-history"],
)
def test_bad_snapshots_are_refused_in_one_line(tmp_path, capsys, name, content, problem):
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(TraceError, match=re.escape(problem)):
        snapshot.parse(path)
    assert main([str(path)]) == 2
    err = capsys.readouterr().err
    said = [line for line in err.splitlines() if str(path) in line]
    assert len(said) == 1 and problem in said[0] and "Traceback" not in err, err


def test_wrongly_typed_entries_are_skipped_and_counted(tmp_path):
    doc = _plain(TRAIN)
    entries = doc["device_traces"][0]
    frees = [i for i, e in enumerate(entries) if e["action"] == "segment_alloc"][-1:]
    for i in frees:
        entries[i]["size"] = "16 MiB"
    entries.append(["not", "an", "entry"])
    path = tmp_path / "typed.pickle"
    path.write_bytes(pickle.dumps(doc))
    t = ta.load(path, cache=False)
    assert t.meta.adjustments == {"snapshot entries with missing or wrongly typed fields dropped": 2}
    assert t.memory().peaks["peak_allocated_bytes"].iloc[0] == _meta("train")["max_memory_allocated_B"]


def test_negative_block_and_segment_sizes_are_dropped_and_counted(tmp_path):
    """A block or a segment of a negative size is not read (the segment with its blocks), each counted; the dump's
    blocks the parser reads all have a size."""
    doc = _plain(TRAIN)
    live = [b for s in doc["segments"] for b in s["blocks"] if b["state"] == "active_allocated"]
    live[0]["size"] = -live[0]["size"]
    doc["segments"][-1]["total_size"] = -1
    path = tmp_path / "negative.pickle"
    path.write_bytes(pickle.dumps(doc))
    events, memory, meta = snapshot.parse(path)
    assert meta.adjustments == {"snapshot entries with missing or wrongly typed fields dropped": 2}
    assert (memory["total_allocated"] >= 0).all() and (memory["total_reserved"] >= 0).all()


def test_implausibly_large_numbers_are_skipped_or_refused(tmp_path):
    entry = {"action": "alloc", "addr": 1 << 40, "size": 1 << 60, "stream": 0, "time_us": 1, "frames": []}
    path = tmp_path / "huge.pickle"
    path.write_bytes(pickle.dumps({"segments": [], "device_traces": [[entry]]}))
    with pytest.raises(TraceError, match="no allocation history"):  # the one entry is skipped as wrongly typed
        snapshot.parse(path)
    many = [entry | {"addr": (1 << 40) + i * (1 << 20), "size": (1 << 51) + 1, "time_us": i} for i in range(4096)]
    path.write_bytes(pickle.dumps({"segments": [], "device_traces": [many]}))
    with pytest.raises(TraceError, match="more than 2"):
        snapshot.parse(path)


def test_a_folder_of_per_rank_snapshots_loads_as_ranks(tmp_path):
    job = tmp_path / "memory_snapshot" / "iteration_10"
    job.mkdir(parents=True)
    (job / "rank0_memory_snapshot.pickle").write_bytes(TRAIN.read_bytes())
    (job / "rank1_memory_snapshot.pickle").write_bytes(OOM.read_bytes())
    t = ta.load(tmp_path / "memory_snapshot", cache=False)
    peaks = t.memory().peaks.set_index("rank")["peak_allocated_bytes"]
    assert peaks.to_dict() == {
        0: _meta("train")["max_memory_allocated_B"],
        1: _meta("oom")["max_memory_allocated_at_dump_B"],
    }
    tables = {table.id: table for table in t.build_report().section("memory").tables}
    assert set(tables["out_of_memory"].frame["rank"]) == {1}
    assert set(tables["segments"].frame["rank"]) == {0, 1}


BOMBS = {
    "a tuple a million deep as a dict key": b"\x80\x04}" + b")" + b"\x85" * 1_000_000 + b"K\x01s.",
    "a tuple a million deep in a frozenset": b"\x80\x04(" + b")" + b"\x85" * 1_000_000 + b"\x91.",
    "a huge memo index": b"\x80\x04K\x01r\xff\xff\xff\x7f.",
    "shared references": pickle.dumps(
        {"segments": [], "device_traces": [[{"action": "alloc", "addr": 1, "size": 512, "time_us": 1}] * 2000] * 2000},
        protocol=4,
    ),
}


@pytest.mark.parametrize("data", BOMBS.values(), ids=BOMBS.keys())
def test_a_pickle_that_would_crash_or_swell_is_refused_before_it_is_built(tmp_path, capsys, data):
    """In a child process: a crash (the C recursion of hashing a deep tuple) must show as a failed exit code."""
    path = tmp_path / "bomb.pickle"
    path.write_bytes(data)
    run = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from traceanalyzer.cli import main; sys.exit(main())",
            str(path),
            "--no-cache",
        ],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 2, run.stderr[-500:]
    (line,) = [line for line in run.stderr.splitlines() if "error" in line]
    assert str(path) in line and "is refused" in line and "Traceback" not in run.stderr, run.stderr


def test_a_peak_outside_every_step_shows_no_step_in_every_presenter(tmp_path, oom, oom_report):
    """The out-of-memory snapshot records no step: its peak and the blocks live at it are in none, which every
    presenter shows as none (JSON null; '–' in text, Markdown and HTML; the dashboard's 'outside every step'),
    never as the tables' NO_ROW (-1)."""
    for table in ("peaks", "live_at_peak"):
        assert [r["step"] for r in rows(oom_report, "memory", table)] == [None] * len(rows(oom_report, "memory", table))
    for fmt in ("text", "markdown", "html"):
        out = tmp_path / f"report.{fmt}"
        assert main([str(OOM), "--format", fmt, "-o", str(out)]) == 0
        text = out.read_text()
        assert "<NA>" not in text and "&lt;NA&gt;" not in text, fmt
        peak_rows = [line for line in text.splitlines() if "train_step" in line and "GiB" in line]
        assert peak_rows and not any(re.search(r"(?<![\w.])-1(?![\w.])", line) for line in peak_rows), fmt
    memory = oom.build_report().section("memory")
    for table in memory.tables[:2]:
        shown = tables.content(table.frame, list(table.frame.columns), {c: table.unit(c) for c in table.frame})
        assert {row["step"] for row in shown["data"]} == {"outside every step"}, table.id


def test_a_snapshots_large_temporaries_are_said_to_be_outside_every_step():
    """A snapshot records no steps: the finding about the blocks that set its peak never calls them 'of this step'."""
    trace = ta.load(REPO / "sample_traces" / "memory_snapshot" / "oom.snapshot.pickle", cache=False)
    (finding,) = [f for f in trace.findings() if f.analyzer == "memory" and "temporar" in f.title]
    assert "allocated outside every step" in finding.advice and "of this step" not in finding.advice
