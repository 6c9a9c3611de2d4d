"""Pipeline parallelism on the real 4-rank Qwen3 Ascend run (PP=2, DP=2, HCCL batchSendRecv between the stages).

Only ranks 0 and 2 hold kernel tables; ranks 1 and 3 hold their communication only. The tests use whatever ranks
load, and the two ranks of one pipeline (0 and 2, the run's "pp" group) on their own.
"""

from __future__ import annotations

import csv
import json

import numpy as np
import pandas as pd
import pytest
from conftest import joined_findings, joined_section, load_shared, shared_path

import traceanalyzer as ta
from traceanalyzer.analyzers import collective_calls, distributed, pipeline
from traceanalyzer.report import Options
from traceanalyzer.schema import NO_ROW

RUN = ("public", "ascend", "msinsight", "st_level2_qwen3_4rank")
MS = 1_000_000


@pytest.fixture(scope="module")
def job() -> ta.Trace:
    return load_shared(*RUN)


@pytest.fixture(scope="module")
def one_pipeline() -> ta.Trace:
    """Ranks 0 and 2: the first and the last stage of one pipeline, both with their kernel tables."""
    root = shared_path(*RUN)
    return ta.load([root / "rank_0_ascend_pt", root / "rank_2_ascend_pt"])


def _pp_pairs(ranks) -> set[tuple[int, int]]:
    """The rank pairs of the run's "pp" groups (profiler_metadata.json), among the given ranks."""
    pairs = set()
    for rank in ranks:
        meta = json.loads((shared_path(*RUN) / f"rank_{rank}_ascend_pt" / "profiler_metadata.json").read_text())
        for group in meta["parallel_group_info"].values():
            members = [r for r in group["global_ranks"] if r in ranks]
            if group["group_name"] == "pp" and len(members) == 2:
                pairs.add(tuple(sorted(members)))
    return pairs


def _send_recv_us(rank: int) -> float:
    """Total duration of the rank's batchSendRecv ops in its kernel_details.csv (µs)."""
    path = shared_path(*RUN) / f"rank_{rank}_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv"
    with path.open(newline="") as f:
        return sum(float(row["Duration(us)"]) for row in csv.DictReader(f) if "batchSendRecv" in row["Name"])


def test_the_stages_are_the_pp_groups_of_the_run(job):
    pairs = pipeline.peer_pairs(job.collectives())
    assert pairs == _pp_pairs(job.meta.ranks)
    assert (0, 2) in pairs


def test_the_bubble_is_reported_per_rank_and_step(one_pipeline):
    table = one_pipeline.pipeline_bubble()
    assert sorted(table["rank"]) == [0, 2]
    for rank in (0, 2):
        row = table[table["rank"] == rank].iloc[0]
        assert row["p2p_ns"] / 1000 == pytest.approx(_send_recv_us(rank), abs=1)
        # the bubble is the send/recv time beyond the transfer, plus waits in collectives across the stages
        assert row["p2p_ns"] - 3 * MS < row["bubble_ns"] <= row["p2p_ns"] + row["cross_stage_wait_ns"]
        assert row["bubble_share"] == pytest.approx(row["bubble_ns"] / row["span_ns"])
    # the first stage waits in send/recv for ~314 ms of its ~810 ms step
    first = table[table["rank"] == 0].iloc[0]
    assert 0.3 < first["bubble_share"] < 0.5


def test_the_pipeline_gets_schedule_advice_and_no_late_rank(one_pipeline):
    findings = joined_findings(distributed, one_pipeline)
    titles = [f.title for f in findings]
    assert not [t for t in titles if "late rank" in t], titles
    assert "late_rank" not in {f.id for f in joined_section(distributed, one_pipeline, Options()).facts}
    bubble = [f for f in findings if f.title.startswith("Pipeline bubble")]
    assert len(bubble) == 1
    assert "ms per step" in bubble[0].title and "% of the step" in bubble[0].title
    for advice in ("micro-batches", "interleaved 1F1B", "zero-bubble"):
        assert advice in bubble[0].advice


def test_no_late_arrival_rests_on_a_pipeline_wait(job):
    calls = job.collectives()
    pairs = pipeline.peer_pairs(calls)
    late = distributed.late_arrivals(job)
    assert not late["match"].isin(calls.loc[pipeline.is_p2p(calls), "match"]).any()
    for match in late["match"]:
        ranks = sorted(calls.loc[calls["match"] == match, "rank"])
        assert not any((a, b) in pairs for a in ranks for b in ranks), ranks
    section = joined_section(distributed, job, Options())
    assert section.fact("pipeline_stage_pairs").value
    assert len(section.table("pipeline_bubble").frame)
    bubble = next(f for f in joined_findings(distributed, job) if f.id == "distributed.pipeline_bubble")
    assert section.fact("pipeline_bubble_ns").value == bubble.evidence["bubble_ns_per_step"]


def _aligned(calls, offsets):
    shift = calls["rank"].map(offsets.set_index("rank")["offset_ns"])
    start = calls["start_ns"] - shift
    return start, start + calls["dur_ns"]


def test_clock_offsets_rest_on_send_recv_pairs_that_end_together(job):
    calls = job.collectives()
    offsets = distributed.clock_offsets(job)
    assert offsets["method"].str.contains("send/recv").all()
    pairs = calls[pipeline.is_p2p(calls) & (calls["match"] != NO_ROW).to_numpy()]
    start, end = _aligned(pairs, offsets)
    # matched send/recv ops end within 0.3 ms of each other, and each side overlaps the other
    assert (end.groupby(pairs["match"]).agg(np.ptp) < 0.3 * MS).all()
    assert (start.groupby(pairs["match"]).max() <= end.groupby(pairs["match"]).min()).all()


def test_an_offset_that_puts_a_send_recv_pair_out_of_order_is_rejected(one_pipeline):
    calls = one_pipeline.collectives().copy()
    honest = collective_calls.clock_offsets_of(calls)
    # rank 2's collectives recorded 10 ms late, as if they did not end together: the median over all calls follows
    # them and would put the short send/recv of rank 0 after rank 2's had ended
    skewed = (calls["rank"] == 2).to_numpy() & ~pipeline.is_p2p(calls)
    calls.loc[skewed, "start_ns"] += 10 * MS
    offsets = collective_calls.clock_offsets_of(calls)
    assert offsets["method"].str.contains("rejected").all()
    assert offsets["method"].str.startswith("send/recv ends").all()
    np.testing.assert_allclose(offsets["offset_ns"], honest["offset_ns"], atol=0.3 * MS)


def test_the_whole_4_rank_job_reports_its_bubble_and_no_late_rank(job):
    """All four ranks of the PP=2 run (ranks 1 and 3 from their communication alone): the bubble is the top finding,
    and no rank is called late (the one data-parallel wait left, 1.6 % of a step, is jitter, not a straggler)."""
    assert job.meta.ranks == [0, 1, 2, 3]
    found = job.findings()
    assert found[0].id == "distributed.pipeline_bubble" and found[0].pushed
    assert not [f for f in found if f.id == "distributed.late_rank"]
    section = job.build_report().section("distributed")
    assert "late_rank" not in {f.id for f in section.facts}


def test_ranks_loaded_from_their_communication_alone_are_not_called_idle(job):
    """Ranks 1 and 3 have only communication.json: no compute recorded, so no idle-device finding for them."""
    idle = [f for f in job.findings() if f.analyzer == "health" and f.evidence.get("cause")]  # idle causes
    assert {f.where["rank"] for f in idle} <= {0, 2}


def test_each_send_recv_wait_is_the_peers_compute_beyond_the_stages_own(one_pipeline):
    """The bubble of a stage's send/recv (its wait beyond the transfer) is the time its peer computed since their
    last exchange (its forward or backward of the micro-batch) less the time the stage itself computed since then,
    read from each stage's own calls (clock-aligned)."""
    calls = one_pipeline.collectives()
    p2p = calls[pipeline.is_p2p(calls)].sort_values("aligned_start_ns")
    start = p2p.set_index(["match", "rank"])["aligned_start_ns"]
    end = start + p2p.set_index(["match", "rank"])["dur_ns"]
    matches = list(dict.fromkeys(p2p["match"]))
    assert len(matches) == 3 and set(p2p["rank"]) == {0, 2}
    for before, now in zip(matches[:-1], matches[1:], strict=True):
        computed = {rank: start[(now, rank)] - end[(before, rank)] for rank in (0, 2)}
        for rank, peer in ((0, 2), (2, 0)):
            row = p2p[(p2p["match"] == now) & (p2p["rank"] == rank)].iloc[0]
            wait = max(row["exposed_ns"] - row["transfer_ns"], 0)
            assert wait == pytest.approx(max(computed[peer] - computed[rank], 0), abs=1 * MS), (now, rank)


def test_calls_before_a_window_that_starts_mid_pipeline_decide_nothing(one_pipeline):
    """A window that starts mid-pipeline holds transfers launched before it (no launch op: no step), matched or
    one-sided, and an unnamed grouped kernel: the stage pairs and the bubble are those of the window's own calls."""
    calls = one_pipeline.collectives()
    before = calls[pipeline.is_p2p(calls)].copy()
    before["step"] = NO_ROW
    before["start_ns"] -= 2_000 * MS
    before["match"] = np.where(before["rank"] == 0, before["match"] + 1_000, NO_ROW)  # rank 2's peers unrecorded
    grouped = calls[~pipeline.is_p2p(calls)].head(1).assign(step=NO_ROW, match=NO_ROW, p2p=False)
    cut = pd.concat([before, grouped, calls], ignore_index=True).astype({"step": calls["step"].dtype})
    assert pipeline.peer_pairs(cut) == pipeline.peer_pairs(calls) == {(0, 2)}
    spans = one_pipeline.overlap()
    pd.testing.assert_frame_equal(pipeline.bubble(cut, spans), pipeline.bubble(calls, spans))
