"""HCCL transfer time and link bandwidth from the task lanes agree with msprof-analyze's communication analysis.

The reference is each rank's ``ASCEND_PROFILER_OUTPUT/communication.json`` in the sample: msprof's per-op analysis of
the same HCCL task lanes, which msprof-analyze's cluster analysis gathers unchanged. Checked on 2026-12-01 with
msprof-analyze 26.2.0 (``pip install msprof-analyze`` in a scratch venv), run on a copy of each sample folder:
``msprof-analyze cluster -d /tmp/copy/level1 -m all`` writes ``cluster_analysis_output/cluster_communication.json``
whose per-rank "Transit Time(ms)" and "Bandwidth(GB/s)" equal those of communication.json (e.g. rank 0,
hcom_allReduce__586_0_1: 0.239185 ms, SDMA 15.7676 GB/s).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import load_shared, shared_path

MS = 1_000_000
LEVELS = ("level1", "level2")


def _reference(level: str) -> dict:
    """(rank, op name) → msprof's Communication Time and SDMA Bandwidth Info of the op, from communication.json."""
    out = {}
    for rank in (0, 1):
        folder = shared_path("public", "ascend", "msinsight", "pytorch_text", level, f"rank{rank}_ascend_pt")
        steps = json.loads((folder / "ASCEND_PROFILER_OUTPUT" / "communication.json").read_text())
        for step in steps.values():
            for key, info in step["collective"].items():
                if not key.startswith("Total Op Info"):
                    out[(rank, key.split("@")[0])] = info
    return out


@pytest.fixture(scope="module", params=LEVELS)
def level(request) -> tuple:
    trace = load_shared("public", "ascend", "msinsight", "pytorch_text", request.param)
    return trace.collectives(), _reference(request.param)


def _paired(level: tuple):
    calls, reference = level
    for row in calls.itertuples():
        yield row, reference[(int(row.rank), row.name)]


def test_every_hccl_op_has_its_msprof_reference(level):
    calls, reference = level
    assert len(calls) == len(reference) == 8  # 4 all-reduces on each of the 2 loaded ranks
    assert set(zip(calls["rank"], calls["name"], strict=True)) == set(reference)


def test_transfer_time_agrees_with_msprof_transit_time(level):
    for row, info in _paired(level):
        transit_ms = info["Communication Time Info"]["Transit Time(ms)"]
        assert row.transfer_basis == "tasks: main plane"
        assert row.transfer_ns / MS == pytest.approx(transit_ms, rel=0.05), row.name


def test_link_bandwidth_and_size_agree_with_msprof(level):
    for row, info in _paired(level):
        sdma = info["Communication Bandwidth Info"]["SDMA"]
        assert row.link_bytes / 1e6 == pytest.approx(sdma["Transit Size(MB)"], rel=0.05), row.name
        assert row.link_bw_gbps == pytest.approx(sdma["Bandwidth(GB/s)"], rel=0.05), row.name


def test_an_all_reduce_that_mostly_waits_is_costed_by_its_transfer(level):
    calls, _ = level
    first = calls[calls["seq"] == 0]
    # the first all-reduce lasts 73-86 ms and moves data for ~0.24 ms of it (the rest is waiting for peers)
    assert (first["dur_ns"] > 70 * MS).all()
    assert (first["transfer_ns"] < 0.01 * first["dur_ns"]).all()
    np.testing.assert_allclose(first["algbw_gbps"], first["bytes"] / first["transfer_ns"])
    assert (first["algbw_gbps"] > 10).all()  # GB/s; from the whole duration it was 0.22 GB/s
