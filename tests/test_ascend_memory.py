"""Ascend memory on real torch_npu output: operator_memory blocks, PTA peak, the ops holding it, CANN modules."""

from __future__ import annotations

import sqlite3

import pandas as pd
import pytest
from conftest import joined_section, load_shared, shared_path
from traceanalyzer.parsers.ascend import sqlite as sqlite_reader

from traceanalyzer.analyzers import memory
from traceanalyzer.report import Options

MSINSIGHT = ("public", "ascend", "msinsight")
TEXT = (*MSINSIGHT, "pytorch_text", "level1", "rank0_ascend_pt")
DB = (*MSINSIGHT, "pytorch_db", "level1", "rank0_ascend_pt")
QWEN = (*MSINSIGHT, "st_level2_qwen3_4rank")
OUTPUT = "ASCEND_PROFILER_OUTPUT"
MB = 1 << 20


def _csv(*parts: str) -> pd.DataFrame:
    return pd.read_csv(shared_path(*parts), dtype={"Component": str})


def _pta_peak_bytes(folder: tuple[str, ...]) -> int:
    record = _csv(*folder, OUTPUT, "memory_record.csv")
    return round(record.loc[record["Component"] == "PTA", "Total Allocated(MB)"].max() * MB)


def test_peak_is_memory_record_pta_max_and_live_blocks_name_their_ops():
    trace = load_shared(*TEXT)
    m = trace.memory()
    peak = m.device_peaks.iloc[0]
    assert peak["peak_allocated_bytes"] == _pta_peak_bytes(TEXT)
    assert peak["op"].startswith("aten::") and peak["path"].startswith("ProfilerStep#")
    live = m.live_at_peak
    blocks = _csv(*TEXT, OUTPUT, "operator_memory.csv")
    torch_ops = set(blocks.loc[~blocks["Name"].str.startswith("cann::"), "Name"])
    assert len(live) and set(live["op_name"]) <= torch_ops
    assert live["bytes"].sum() + peak["allocated_before_trace_bytes"] == peak["peak_allocated_bytes"]
    assert not m.notes


def test_blocks_pair_with_their_release_and_ge_stays_out_of_the_allocator():
    trace = load_shared(*TEXT)
    blocks = _csv(*TEXT, OUTPUT, "operator_memory.csv")
    torch_rows = blocks[~blocks["Name"].str.startswith("cann::")]
    m = trace.memory()
    assert len(m.blocks) == len(torch_rows)
    assert (m.blocks["free_ts"] != -1).sum() == torch_rows["Release Time(us)"].notna().sum()
    record = _csv(*TEXT, OUTPUT, "memory_record.csv")
    pta = record.loc[record["Component"] == "PTA", "Total Allocated(MB)"] * MB
    assert m.timeline["allocated"].min() >= pta.min()


def test_qwen_ranks_peak_per_device_matches_memory_record():
    trace = load_shared(*QWEN)
    peaks = trace.memory().device_peaks.set_index("rank")["peak_allocated_bytes"]
    for rank in (0, 2):
        assert peaks[rank] == _pta_peak_bytes((*QWEN, f"rank_{rank}_ascend_pt"))


def test_database_gives_what_the_text_gives():
    text, db = load_shared(*TEXT).memory(), load_shared(*DB).memory()
    path = shared_path(*DB, OUTPUT, "ascend_pytorch_profiler_0.db")
    with sqlite3.connect(sqlite_reader.uri(path), uri=True) as con:
        (pta_max,) = con.execute(
            "select max(totalAllocated) from MEMORY_RECORD join STRING_IDS s on s.id = component where s.value = 'PTA'"
        ).fetchone()
    assert db.device_peaks["peak_allocated_bytes"].iloc[0] == pta_max
    for table in ("peaks", "per_op", "modules"):
        columns = [c for c in getattr(text, table).columns if not c.endswith(("_ts", "_pos", "_row"))]
        pd.testing.assert_frame_equal(getattr(text, table)[columns], getattr(db, table)[columns], check_dtype=False)
    assert text.live_at_peak[["bytes", "op_name"]].equals(db.live_at_peak[["bytes", "op_name"]])


def test_report_memory_section_shows_cann_modules():
    trace = load_shared(*TEXT)
    section = joined_section(memory, trace, Options())
    modules = section.table("cann_modules").to_dict()["rows"]
    mem = _csv(*TEXT, OUTPUT, "npu_module_mem.csv")
    expected = (mem.groupby("Component")["Total Reserved(MB)"].max() * MB).round()
    assert {r["component"] for r in modules} == set(expected[expected > 0].index)
    assert all(r["peak_reserved_bytes"] == expected[r["component"]] for r in modules)
    assert "component" not in section.table("peaks").frame


@pytest.mark.parametrize("level", ["level0", "level2"])
def test_every_level_has_the_same_allocator_peak(level):
    folder = (*MSINSIGHT, "pytorch_text", level, "rank1_ascend_pt")
    assert load_shared(*folder).memory().device_peaks["peak_allocated_bytes"].iloc[0] == _pta_peak_bytes(folder)
