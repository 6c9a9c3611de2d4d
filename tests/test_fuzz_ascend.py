"""Fuzzed Ascend inputs (damaged CSV columns and rows, retyped values, truncated trace_view.json, damaged SQLite
files) made from real samples copied into a temporary folder: the CLI exits 0 (warnings allowed) or 2 with one line
naming the file, never 1 or a traceback, and never changes the input.

A fixed-seed slice runs in CI; ``TRACEANALYZER_FUZZ_CASES=N`` runs N cases per input kind instead.
"""

from __future__ import annotations

import contextlib
import csv
import io
import os
import shutil
import sqlite3
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st
from traceanalyzer.parsers.ascend import integers

import traceanalyzer as ta
from tests.conftest import shared_path
from tests.test_inputs_untouched import snapshot
from traceanalyzer import cli
from traceanalyzer.schema import MODULE_MEMORY

MSINSIGHT = ("public", "ascend", "msinsight")
OUTPUT = "ASCEND_PROFILER_OUTPUT"
TEXT_RUN = (*MSINSIGHT, "pytorch_text", "level0", "rank0_ascend_pt")
CSV_RUN = (*MSINSIGHT, "st_level2_qwen3_4rank", "rank_0_ascend_pt")
DATABASES = {
    "msprof": (*MSINSIGHT, "server_fixtures", "full_db", "msprof_0.db"),
    "torch_npu": (*MSINSIGHT, "pytorch_db", "level0", "rank0_ascend_pt", OUTPUT, "ascend_pytorch_profiler_0.db"),
}
CASES = int(os.environ.get("TRACEANALYZER_FUZZ_CASES", "0")) or None
"""Cases per test in a long run (the CI slice uses each test's own small number)."""
BAD_VALUES = ["abc", "inf", "-inf", "nan", "1e308", "-1e308", "-5", "", "N/A", "9" * 30, '"', "0x10", "1,2", "\x00"]
CSVS = ["kernel_details.csv", "memory_record.csv", "operator_memory.csv", "npu_module_mem.csv"]


def _settings(ci_cases: int):
    return settings(
        max_examples=CASES or ci_cases,
        deadline=None,
        database=None,
        derandomize=CASES is None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )


def _copy_run(parts: tuple[str, ...]) -> tuple[Path, Path]:
    """A private copy of a sample: (temporary root, the copied path)."""
    root = Path(tempfile.mkdtemp(prefix="ta-fuzz-"))
    source = shared_path(*parts)
    if source.is_dir():
        return root, Path(shutil.copytree(source, root / source.name))
    return root, Path(shutil.copy2(source, root / source.name))


def check_promise(path: Path, root: Path) -> int:
    """Run the CLI on path: exit 0, or 2 with one line naming a file under root; nothing under root changes. Returns
    the exit code."""
    before = snapshot(root)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main([str(path)])
    shown = err.getvalue()
    assert "Traceback" not in shown and "internal error" not in shown, shown[-2000:]
    assert code in (0, 2), shown[-2000:]
    if code == 2:
        errors = [line for line in shown.splitlines() if line.startswith("traceanalyze: error:")]
        assert len(errors) == 1 and str(root) in errors[0], shown[-2000:]
    assert snapshot(root) == before
    return code


@pytest.fixture(autouse=True)
def _no_cache(monkeypatch):
    monkeypatch.setenv("TRACEANALYZER_CACHE", "0")


def _rows(path: Path) -> list[list[str]]:
    with open(path, newline="") as f:
        return list(csv.reader(f))


def _write_rows(path: Path, rows: list[list[str]]) -> None:
    with open(path, "w", newline="") as f:  # Python 3.10's csv writes a NUL only with an escape character
        csv.writer(f, **({"escapechar": "\\"} if sys.version_info < (3, 11) else {})).writerows(rows)


def _damage_csv(path: Path, how: str, data: st.DataObject) -> None:
    """One kind of damage to a CSV: a bad cell, a renamed or dropped column, an extra field, a stray quote, a cut."""
    rows = _rows(path)
    width = len(rows[0])
    row = data.draw(st.integers(1, max(1, len(rows) - 1)), label="row")
    col = data.draw(st.integers(0, width - 1), label="column")
    if how == "cell" and row < len(rows):
        rows[row][col] = data.draw(st.sampled_from(BAD_VALUES), label="value")
    elif how == "rename":
        rows[0][col] += "x"
    elif how == "drop":
        rows = [r[:col] + r[col + 1 :] for r in rows]
    elif how == "extra" and row < len(rows):
        rows[row].append("extra")
    if how in ("cell", "rename", "drop", "extra"):
        _write_rows(path, rows)
        return
    data_bytes = path.read_bytes()
    cut = data.draw(st.integers(0, len(data_bytes)), label="offset")
    path.write_bytes(
        data_bytes[:cut] + (b'"' if how == "quote" else b"") + (data_bytes[cut:] if how == "quote" else b"")
    )


_CSV_DAMAGE = st.sampled_from(["cell", "cell", "cell", "rename", "drop", "extra", "quote", "cut"])


@pytest.mark.parametrize("run", [TEXT_RUN, CSV_RUN], ids=["with trace", "kernel table only"])
@_settings(ci_cases=5)
@seed(13)
@given(data=st.data())
def test_damaged_csvs_keep_the_promise(run, data):
    root, path = _copy_run(run)
    try:
        present = [n for n in CSVS if (path / OUTPUT / n).is_file()]
        for _ in range(data.draw(st.integers(1, 3), label="damages")):
            name = data.draw(st.sampled_from(present), label="file")
            _damage_csv(path / OUTPUT / name, data.draw(_CSV_DAMAGE, label="damage"), data)
        check_promise(path, root)
    finally:
        shutil.rmtree(root)


@_settings(ci_cases=4)
@seed(13)
@given(data=st.data())
def test_truncated_or_retyped_trace_view_keeps_the_promise(data):
    root, path = _copy_run(TEXT_RUN)
    try:
        trace = path / OUTPUT / "trace_view.json"
        raw = trace.read_bytes()
        if data.draw(st.booleans(), label="truncate"):
            trace.write_bytes(raw[: data.draw(st.integers(0, len(raw)), label="offset")])
        else:
            key = data.draw(st.sampled_from([b'"ts": ', b'"dur": ', b'"pid": ', b'"args": ']), label="key")
            value = data.draw(st.sampled_from([b'"abc"', b"1e308", b"-1", b"null", b"[]", b'{"a": 1}']), label="value")
            at = raw.find(key, data.draw(st.integers(0, len(raw) - 1), label="from"))
            if at >= 0:
                end = at + len(key)
                stop = min(i for i in (raw.find(b",", end), raw.find(b"}", end)) if i >= 0)
                trace.write_bytes(raw[:end] + value + raw[stop:])
        check_promise(path, root)
    finally:
        shutil.rmtree(root)


_RETYPES = [None, "abc", 1.5, b"\x00\x01", 2**63 - 1, -(2**63), -1, 0]


def _damage_db(path: Path, data: st.DataObject) -> None:
    """One kind of damage to a profiler database: a retyped column, a renamed column, a dropped table, a zero page."""
    how = data.draw(st.sampled_from(["retype", "retype", "rename", "drop", "zero"]), label="damage")
    if how == "zero":
        raw = bytearray(path.read_bytes())
        page = int.from_bytes(raw[16:18], "big") or 65536
        k = data.draw(st.integers(0, len(raw) // page - 1), label="page")
        raw[k * page : (k + 1) * page] = bytes(page)
        path.write_bytes(bytes(raw))
        return
    con = sqlite3.connect(path)
    try:
        _damage_tables(con, how, data)
    except sqlite3.DatabaseError:  # already damaged (a zeroed page) past what SQL can change: leave it so
        pass
    finally:
        con.close()


def _damage_tables(con: sqlite3.Connection, how: str, data: st.DataObject) -> None:
    """A retyped column, a renamed column or a dropped table, by SQL."""
    tables = sorted(r[0] for r in con.execute("select name from sqlite_master where type='table'"))
    table = data.draw(st.sampled_from([t for t in tables if not t.startswith("sqlite_")]), label="table")
    columns = [r[1] for r in con.execute(f"pragma table_info({table})")]
    column = data.draw(st.sampled_from(columns), label="column")
    if how == "retype":
        value = data.draw(st.sampled_from(_RETYPES), label="value")
        every = data.draw(st.sampled_from([1, 2, 7]), label="every")
        with contextlib.suppress(sqlite3.IntegrityError):  # an INTEGER PRIMARY KEY takes integers only
            con.execute(f'update "{table}" set "{column}" = ? where rowid % {every} = 0', (value,))
    elif how == "rename":
        con.execute(f'alter table "{table}" rename column "{column}" to "{column}_renamed"')
    else:
        con.execute(f'drop table "{table}"')
    con.commit()


@pytest.mark.parametrize("name", list(DATABASES))
@_settings(ci_cases=5)
@seed(13)
@given(data=st.data())
def test_damaged_databases_keep_the_promise(name, data):
    root, path = _copy_run(DATABASES[name])
    try:
        for _ in range(data.draw(st.integers(1, 2), label="damages")):
            _damage_db(path, data)
        check_promise(path, root)
    finally:
        shutil.rmtree(root)


@pytest.mark.parametrize(
    ("column", "value", "reason"),
    [
        ("Start Time(us)", "abc", "events without a valid start time dropped"),
        ("Start Time(us)", "1e308", "events without a valid start time dropped"),
        ("Start Time(us)", "1.7e9", "events starting more than a day from the rest dropped"),
        ("Duration(us)", "inf", "events with a broken or longer-than-a-day duration dropped"),
        ("Duration(us)", "1e30", "events with a broken or longer-than-a-day duration dropped"),
        ("Duration(us)", "-5", "negative durations clipped to 0"),
    ],
)
def test_bad_kernel_table_values_are_dropped_with_a_count(tmp_path, column, value, reason):
    """The issue's cases: the row is dropped (or clipped), counted by reason in the meta and said in a warning."""
    path = Path(shutil.copytree(shared_path(*CSV_RUN), tmp_path / "run"))
    table = path / OUTPUT / "kernel_details.csv"
    rows = _rows(table)
    rows[5][rows[0].index(column)] = value
    _write_rows(table, rows)
    trace = ta.load(path)
    assert trace.meta.adjustments == {reason: 1}
    assert any(reason in w and "kernel_details.csv" in w for w in trace.meta.warnings)
    assert (trace.events["dur"] >= 0).all() and (trace.events["ts"] >= 0).all()


def _apply(path: Path, sql: str, args: tuple = ()) -> None:
    con = sqlite3.connect(path)
    try:
        con.execute(sql, args)
        con.commit()
    finally:
        con.close()


@pytest.mark.parametrize(
    ("sql", "args", "code"),
    [
        ("update TASK set startNs = ? where rowid % 2 = 0", ("abc",), 0),
        ("update TASK set endNs = ? where rowid % 3 = 0", (None,), 0),
        ("update TASK set startNs = ? where rowid % 5 = 0", (1.5,), 0),
        ("update TASK set streamId = ?, deviceId = ?", (b"\x00\x01", "x"), 0),
        ("update PYTORCH_API set startNs = ? where rowid % 2 = 0", ("not ns",), 0),
        ("update STRING_IDS set value = ? where rowid % 2 = 0", (b"\xff",), 0),
        ("alter table CANN_API rename column startNs to startNs_renamed", (), 0),
        ("alter table COMMUNICATION_OP rename column opName to opName_renamed", (), 0),
        ("alter table OP_MEMORY rename column size to size_renamed", (), 0),
        ("alter table TASK rename column endNs to endNs_renamed", (), 2),
        ("drop table PYTORCH_API", (), 0),
        ("drop table TASK", (), 2),
        ("update CONNECTION_IDS set connectionId = ? where rowid % 3 = 0", ("abc",), 0),
        ("update CONNECTION_IDS set id = ? where rowid % 2 = 0", ("9" * 30,), 0),
        ("update OP_MEMORY set size = ?, deviceId = ? where rowid % 2 = 0", (-(2**63), 1e30), 0),
        ("update STRING_IDS set value = ? where rowid % 3 = 0", ("9" * 30,), 0),
        ("update STRING_IDS set value = ? where rowid % 3 = 0", (-(2**63),), 0),
    ],
)
def test_the_issues_database_damage_is_a_warning_or_one_line(sql, args, code):
    """TEXT/NULL/REAL/BLOB where integers belong, a renamed column, a missing table: exit 0 with the rows that
    cannot be used dropped and counted, or (the TASK table unusable) exit 2 with one line."""
    root, path = _copy_run(DATABASES["torch_npu"])
    try:
        _apply(path, sql, args)
        assert check_promise(path, root) == code
    finally:
        shutil.rmtree(root)


def test_values_that_are_not_integers_are_counted_per_column(tmp_path):
    """Text, a blob, a fraction or a number beyond int64 where the reader expects an integer (a connection id, a
    device, a memory total) reads as unknown, each column with its count in the ledger and a warning; the trace's
    own integer-text times (PYTORCH_API ns) are not counted."""
    path = Path(shutil.copy2(shared_path(*DATABASES["torch_npu"]), tmp_path / "trace.db"))
    _apply(path, "update CONNECTION_IDS set connectionId = 'abc' where rowid % 3 = 0")
    _apply(path, "update MEMORY_RECORD set totalAllocated = ?, deviceId = ? where rowid = 1", ("9" * 30, b"\x01"))
    _apply(path, "update TASK set streamId = 2.5 where rowid <= 4")
    meta = ta.load(path).meta
    with contextlib.closing(sqlite3.connect(path)) as con:
        (connections,) = con.execute("select count(*) from CONNECTION_IDS where rowid % 3 = 0").fetchone()
    assert meta.adjustments == {integers.REASON: connections + 2 + 4}
    expected = {"CONNECTION_IDS.connectionId": connections, "MEMORY_RECORD.deviceId": 1, "TASK.streamId": 4}
    for column, n in expected.items():
        assert any(f"{column}: {n:,} {integers.REASON}" in w for w in meta.warnings), meta.warnings


def test_a_zeroed_page_is_one_line():
    root, path = _copy_run(DATABASES["torch_npu"])
    try:
        raw = bytearray(path.read_bytes())
        page = int.from_bytes(raw[16:18], "big")
        raw[3 * page : 4 * page] = bytes(page)
        path.write_bytes(bytes(raw))
        check_promise(path, root)
    finally:
        shutil.rmtree(root)


def test_links_survive_dropped_rows(tmp_path):
    """An Enqueue with a broken duration is dropped; the caller links of the other rows still point at the same
    rows (each task-queue Dequeue at its Enqueue, each HCCL task at its collective)."""
    run = Path(shutil.copytree(shared_path(*TEXT_RUN), tmp_path / "run"))
    trace = run / OUTPUT / "trace_view.json"
    raw = trace.read_bytes()
    at = raw.find(b'"dur": ', raw.find(b'"name": "Enqueue"'))
    trace.write_bytes(raw[: at + 7] + b"1e30" + raw[raw.find(b",", at) :])
    damaged, clean = ta.load(run), ta.load(shared_path(*TEXT_RUN))
    assert damaged.meta.adjustments == {"events with a broken or longer-than-a-day duration dropped": 1}
    pairs = []
    for t in (clean, damaged):
        linked = t.events[t.events["caller"] != -1]
        callers = t.events.loc[linked["caller"], "name"].astype(str)
        pairs.append(sorted(zip(linked["name"].astype(str), callers, strict=True)))
    assert set(pairs[1]) <= set(pairs[0]) and len(pairs[1]) == len(pairs[0]) - 1


def _set_cell(path: Path, row: int, column: str, value: str) -> None:
    rows = _rows(path)
    rows[row][[h.strip() for h in rows[0]].index(column)] = value
    _write_rows(path, rows)


def _pta_row(out: Path) -> int:
    """The first memory_record row of the PTA allocator (the rows the parser reads)."""
    return next(i for i, r in enumerate(_rows(out / "memory_record.csv")) if r[0] == "PTA")


def _append_field(path: Path, row: int) -> None:
    rows = _rows(path)
    rows[row].append("extra")
    _write_rows(path, rows)


def _open_quote(path: Path, row: int) -> None:
    lines = path.read_bytes().splitlines(keepends=True)
    lines[row] = b'"' + lines[row]
    path.write_bytes(b"".join(lines))


@pytest.mark.parametrize(
    ("damage", "adjustment", "said"),
    [
        (lambda out: _set_cell(out / "npu_module_mem.csv", 1, "Timestamp(us)", "abc"), 1, "not a µs timestamp"),
        (lambda out: _set_cell(out / "memory_record.csv", _pta_row(out), "Timestamp(us)", "1e308"), 1, "µs timestamp"),
        (lambda out: _set_cell(out / "operator_memory.csv", 1, "Release Time(us)", "inf"), 1, "never released"),
        (lambda out: _append_field(out / "kernel_details.csv", 3), 1, "more fields than the header"),
        (lambda out: _open_quote(out / "memory_record.csv", 5), 0, "a quote is never closed"),
        (lambda out: (out.parent / "profiler_info_0.json").write_text("[1, 2]"), 0, "not a JSON object"),
    ],
    ids=["module mem timestamp", "memory record timestamp", "release time", "extra column", "open quote", "info array"],
)
def test_the_issues_csv_and_json_damage_is_a_warning(tmp_path, damage, adjustment, said):
    """A bad value or row of a side file is dropped (counted in the meta's adjustments) or the file is left out,
    with a warning saying which and why; the analysis goes on."""
    run = Path(shutil.copytree(shared_path(*TEXT_RUN), tmp_path / "run"))
    damage(run / OUTPUT)
    meta = ta.load(run).meta
    assert sum(meta.adjustments.values()) == adjustment
    assert any(said in w for w in meta.warnings), meta.warnings


def _cut_timestamp(table: Path, row: int) -> None:
    """The row's µs epoch cut to its first digits (``17364`` for ``1736405443927045``), its totals made huge."""
    rows = _rows(table)
    header = [h.strip() for h in rows[0]]
    rows[row][header.index("Timestamp(us)")] = "17364"
    for column in ("Total Allocated(MB)", "Total Reserved(MB)"):
        if column in header:
            rows[row][header.index(column)] = "99999"
    _write_rows(table, rows)


def test_a_cut_memory_timestamp_is_dropped_not_the_peak(tmp_path):
    """A truncated µs epoch on the row of a huge total reads as 1970 (55 years before the trace): the rows of
    memory_record.csv and npu_module_mem.csv are dropped with a ledger line each, and the peak stays the recorded
    one, inside the trace's window."""
    run = Path(shutil.copytree(shared_path(*TEXT_RUN), tmp_path / "run"))
    _cut_timestamp(run / OUTPUT / "memory_record.csv", _pta_row(run / OUTPUT))
    _cut_timestamp(run / OUTPUT / "npu_module_mem.csv", 1)
    trace = ta.load(run)
    for reason in ("memory rows", "module memory rows"):
        assert trace.meta.adjustments[f"{reason} more than a day outside the trace's window dropped"] == 1
    peak = trace.memory().device_peaks.iloc[0]
    assert peak["peak_allocated_bytes"] == _pta_peak_bytes_of(run)
    assert trace.meta.start_ns <= peak["peak_ts"] <= trace.meta.end_ns
    assert trace.meta.side_table(MODULE_MEMORY)["reserved_bytes"].max() < 99999 << 20


def _pta_peak_bytes_of(run: Path) -> int:
    """memory_record.csv's largest PTA total of a recorded µs time, in bytes."""
    rows = _rows(run / OUTPUT / "memory_record.csv")
    header = [h.strip() for h in rows[0]]
    at, total = header.index("Timestamp(us)"), header.index("Total Allocated(MB)")
    return round(max(float(r[total]) for r in rows[1:] if r[0] == "PTA" and float(r[at]) > 1e15) * (1 << 20))
