"""HCCL transfer time and link bandwidth from the task lanes agree with msprof-analyze's communication analysis.

The reference is msprof's per-op analysis of the same HCCL task lanes, stored beside each rank's trace:
``ASCEND_PROFILER_OUTPUT/communication.json`` (text export) or ``analysis.db`` tables CommAnalyzerTime /
CommAnalyzerBandwidth (database export); msprof-analyze's cluster analysis gathers them unchanged. Checked on
2026-12-01 with msprof-analyze 26.2.0 (``pip install msprof-analyze`` in a scratch venv), run on a copy of each
sample folder: ``msprof-analyze cluster -d /tmp/copy/level1 -m all`` writes
``cluster_analysis_output/cluster_communication.json`` (text) or ``cluster_analysis.db`` table
ClusterCommunicationTime (db) whose per-rank transit times and bandwidths equal those files (e.g. text level1 rank 0,
hcom_allReduce__586_0_1: 0.239185 ms, SDMA 15.7676 GB/s).
"""

from __future__ import annotations

import json
import sqlite3

import numpy as np
import pytest
from conftest import load_shared, shared_path
from traceanalyzer.parsers.ascend import sqlite as sqlite_reader

MS = 1_000_000
SAMPLES = [("pytorch_text", "level1"), ("pytorch_text", "level2"), ("pytorch_db", "level1"), ("pytorch_db", "level2")]


def _output(export: str, level: str, rank: int):
    return shared_path(
        "public", "ascend", "msinsight", export, level, f"rank{rank}_ascend_pt", "ASCEND_PROFILER_OUTPUT"
    )


def _from_json(folder) -> dict:
    """op name → (transit ms, SDMA transit size MB, SDMA bandwidth GB/s), from communication.json."""
    out = {}
    for step in json.loads((folder / "communication.json").read_text()).values():
        for key, info in step["collective"].items():
            if key.startswith("Total Op Info"):
                continue
            sdma = info["Communication Bandwidth Info"]["SDMA"]
            transit = info["Communication Time Info"]["Transit Time(ms)"]
            out[key.split("@")[0]] = (transit, sdma["Transit Size(MB)"], sdma["Bandwidth(GB/s)"])
    return out


def _from_db(folder) -> dict:
    """op name → (transit ms, SDMA transit size MB, SDMA bandwidth GB/s), from analysis.db."""
    with sqlite3.connect(sqlite_reader.uri(folder / "analysis.db"), uri=True) as con:  # never write beside the corpus
        times = dict(con.execute("select hccl_op_name, transit_time from CommAnalyzerTime"))
        sdma = "select hccl_op_name, transit_size, bandwidth from CommAnalyzerBandwidth where transport_type = 'SDMA'"
        return {name: (times[name], size, bw) for name, size, bw in con.execute(sdma) if name in times}


def _reference(export: str, level: str) -> dict:
    """(rank, op name) → msprof's transit time (ms), SDMA transit size (MB) and SDMA bandwidth (GB/s) of the op."""
    read = _from_json if export == "pytorch_text" else _from_db
    out = {}
    for rank in (0, 1):
        out |= {(rank, name): v for name, v in read(_output(export, level, rank)).items() if "Total" not in name}
    return out


@pytest.fixture(scope="module", params=SAMPLES, ids=["/".join(s) for s in SAMPLES])
def level(request) -> tuple:
    trace = load_shared("public", "ascend", "msinsight", *request.param)
    return trace.collectives(), _reference(*request.param)


def _paired(level: tuple):
    calls, reference = level
    if (calls["transfer_basis"] != "tasks: main plane").any():
        pytest.skip("the parser does not record the HCCL plane of each task (COMMUNICATION_TASK_INFO.planeId)")
    for row in calls.itertuples():
        yield row, reference[(int(row.rank), row.name)]


def test_every_hccl_op_has_its_msprof_reference(level):
    calls, reference = level
    assert len(calls) == len(reference) == 8  # 4 all-reduces on each of the 2 loaded ranks
    assert set(zip(calls["rank"], calls["name"], strict=True)) == set(reference)


def test_transfer_time_agrees_with_msprof_transit_time(level):
    for row, (transit_ms, _, _) in _paired(level):
        assert row.transfer_ns / MS == pytest.approx(transit_ms, rel=0.05), row.name


def test_link_bandwidth_and_size_agree_with_msprof(level):
    for row, (_, size_mb, bandwidth_gbps) in _paired(level):
        assert row.link_bytes / 1e6 == pytest.approx(size_mb, rel=0.05), row.name
        assert row.link_bytes / row.link_transfer_ns == pytest.approx(row.link_bw_gbps)
        assert row.link_bw_gbps == pytest.approx(bandwidth_gbps, rel=0.05), row.name


def test_an_all_reduce_that_mostly_waits_is_costed_by_its_transfer(level):
    calls, _ = level
    first = calls[calls["seq"] == 0]
    # the first all-reduce lasts 73-86 ms and moves data for ~0.24 ms of it (the rest is waiting for peers)
    assert (first["dur_ns"] > 70 * MS).all()
    assert (first["transfer_ns"] < 0.01 * first["dur_ns"]).all()
    if (first["bytes"] <= 0).any():
        pytest.skip("the parser does not record the size of this export's HCCL ops")
    np.testing.assert_allclose(first["algbw_gbps"], first["bytes"] / first["transfer_ns"])
    assert (first["algbw_gbps"] > 10).all()  # GB/s; from the whole duration it was 0.22 GB/s


@pytest.mark.parametrize("export", ["pytorch_text", "pytorch_db"])
def test_level0_tasks_without_planes_give_the_union_of_data_movement(export):
    calls = load_shared("public", "ascend", "msinsight", export, "level0").collectives()
    # level 0 records the tasks on the device stream only, all planes on one lane: no main plane to pick
    assert (calls["transfer_basis"] == "tasks: union (planes not recorded)").all()
    first = calls[calls["seq"] == 0]
    assert (first["dur_ns"] > 50 * MS).all()
    assert (first["transfer_ns"] < 0.01 * first["dur_ns"]).all()
    assert (calls["transfer_ns"] <= calls["dur_ns"]).all()
