"""Side tables: every table a parser keeps beside the events is declared in schema.SIDE_TABLES (name, columns with
units, merge rule); a joined trace stacks its ranks' tables in rank order, a rank's view keeps that rank's rows."""

from __future__ import annotations

import pandas as pd
import pandas.testing as pdt
import pytest

import traceanalyzer as ta
from tests.conftest import REPO, load_shared, shared_path
from traceanalyzer.schema import (
    HCCL_MATRIX,
    MODULE_MEMORY,
    SIDE_TABLES,
    SideTable,
    TraceMeta,
    column_names,
)

QWEN = ("public", "ascend", "msinsight", "st_level2_qwen3_4rank")
TRACES = {
    "ascend-text": ("public", "ascend", "msinsight", "pytorch_text", "level1", "rank0_ascend_pt"),
    "ascend-db": ("public", "ascend", "msinsight", "pytorch_db", "level2", "rank0_ascend_pt"),
    "ascend-4rank": QWEN,
}
SNAPSHOT = REPO / "sample_traces" / "memory_snapshot" / "oom.snapshot.pickle"


def _meta(**side_tables: pd.DataFrame) -> TraceMeta:
    return TraceMeta(ta.Platform.CPU, "test", "", [], [0], 1, True, side_tables=side_tables)


def _declared(meta: TraceMeta) -> None:
    """Every side table of ``meta`` is declared, has only declared columns in their order, and names its ranks."""
    assert set(meta.side_tables) <= set(SIDE_TABLES)
    for name, table in meta.side_tables.items():
        names = column_names(SIDE_TABLES[name].columns)
        assert list(table.columns) == [c for c in names if c in table.columns] and table.columns[0] == "rank", name
        assert set(table["rank"]) <= set(meta.ranks), name


@pytest.mark.parametrize("name", list(TRACES))
def test_real_traces_keep_only_declared_side_tables(name):
    trace = load_shared(*TRACES[name])
    assert trace.meta.side_tables, "the trace keeps msprof's summaries and module memory"
    _declared(trace.meta)


def test_a_snapshot_keeps_its_segments_and_errors_as_declared():
    meta = ta.load(SNAPSHOT, cache=False).meta
    assert {"memory_segments", "memory_oom"} <= set(meta.side_tables)
    _declared(meta)


def test_an_undeclared_side_table_is_refused():
    with pytest.raises(ValueError, match="'counters' is not declared"):
        _meta(counters=pd.DataFrame({"rank": [0]}))
    meta = _meta()
    with pytest.raises(ValueError, match="'counters' is not declared"):
        meta.keep(SideTable("counters", MODULE_MEMORY.columns, MODULE_MEMORY.merge, ""), pd.DataFrame({"ts": [1]}))
    with pytest.raises(ValueError, match="has columns"):
        _meta(module_memory=pd.DataFrame({"rank": [0], "watts": [1.0]}))
    with pytest.raises(ValueError, match="has columns"):
        meta.keep(MODULE_MEMORY, pd.DataFrame({"device": [3], "ts": [5], "watts": [1.0]}))
    assert "module_memory" not in meta.side_tables
    meta.keep(MODULE_MEMORY, pd.DataFrame({"device": [3], "ts": [5]}))  # put in the declared order, rank first
    assert meta.side_table(MODULE_MEMORY).to_dict("list") == {"rank": [0], "ts": [5], "device": [3]}


def test_a_joined_trace_stacks_its_ranks_tables_and_a_rank_view_keeps_its_own():
    joined = load_shared(*QWEN)
    ranks = sorted(shared_path(*QWEN).glob("rank_*_ascend_pt"))
    alone = [ta.load(r).meta.side_table(HCCL_MATRIX) for r in ranks]
    stacked = joined.meta.side_table(HCCL_MATRIX)
    assert sorted(set(stacked["rank"])) == sorted(joined.meta.ranks) and len(stacked) == sum(map(len, alone))
    pdt.assert_frame_equal(stacked, pd.concat(alone, ignore_index=True), check_exact=True)
    rank = joined.meta.ranks[1]
    mine = joined.scoped(rank=rank).meta.side_table(HCCL_MATRIX)
    pdt.assert_frame_equal(mine.reset_index(drop=True), alone[1], check_exact=True)
    assert set(mine["rank"]) == {rank}
