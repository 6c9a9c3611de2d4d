"""The distributed analyzer rank by rank: the section and findings of a job analysed from the ranks' parts equal
those of the joined trace (overlap per rank and step, calls matched across ranks, clock offsets, late arrivals and
what the late rank did, the pipeline bubble, bandwidth), and a rank's part stays small."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

import traceanalyzer as ta
from tests.conftest import (
    JOBS,
    REPO,
    assert_same_data,
    job_pair,
    joined_findings,
    joined_section,
    same_findings,
    same_section,
    step_pair,
)
from traceanalyzer import intervals, perrank
from traceanalyzer.analyzers import collective_calls, distributed
from traceanalyzer.options import Options
from traceanalyzer.schema import Kind

CASES = [*JOBS, "fsdp"]


@pytest.mark.parametrize("name", CASES)
def test_the_section_from_the_parts_is_the_joined_one(name):
    job, joined = job_pair(name)
    want = joined_section(distributed, joined, Options())
    got = distributed.job_section(job.merged("distributed"), job, Options())
    assert want is not None, "every job here has collectives"
    assert_same_data(got.to_dict(), want.to_dict())


@pytest.mark.parametrize("name", CASES)
def test_the_findings_from_the_parts_are_the_joined_ones(name):
    job, joined = job_pair(name)
    same_findings(distributed.job_findings(job.merged("distributed"), job), joined_findings(distributed, joined))


def test_a_rank_late_from_data_loading_is_named_from_the_parts():
    """The data_loader sample: rank 1 loads data while rank 0 waits; the late-rank finding, its cause and host range
    come from rank 1's part as from the joined trace."""
    path = REPO / "sample_traces" / "data_loader"
    job, joined = perrank.load_job(path), ta.load(path)
    want = joined_findings(distributed, joined)
    assert "distributed.late_rank" in {f.id for f in want}
    same_findings(distributed.job_findings(job.merged("distributed"), job), want)
    assert_same_data(
        distributed.job_section(job.merged("distributed"), job, Options()).to_dict(),
        joined_section(distributed, joined, Options()).to_dict(),
    )


def test_a_short_top_truncates_the_merged_tables_as_the_joined_one():
    job, joined = job_pair("dlrm_8rank")
    options = Options(top=3)
    assert_same_data(
        distributed.job_section(job.merged("distributed"), job, options).to_dict(),
        joined_section(distributed, joined, options).to_dict(),
    )


def test_the_jobs_cover_what_the_cross_rank_stage_does():
    """The jobs compared above reach every cross-rank analysis: late arrivals explained from a rank's part, a
    pipeline bubble, and task lanes (HCCL)."""
    ids = {}
    for name in CASES:
        job, _ = job_pair(name)
        section = distributed.job_section(job.merged("distributed"), job, Options())
        ids[name] = {t.id for t in section.tables}
    assert "late_arrivals" in ids["ddp_no_overlap"] | ids["dlrm_8rank"]
    assert "pipeline_bubble" in ids["ascend_pp2_4rank"]
    job, _ = job_pair("ascend_level1_2rank")
    assert all(part.tasks for part in job.parts("distributed"))


def test_a_step_of_the_job_from_the_parts_is_the_joined_step():
    job, view = step_pair("ddp_no_overlap", 1)
    same_section(distributed, job, view)
    same_findings(distributed.job_findings(job.merged("distributed"), job), joined_findings(distributed, view))


def test_a_step_of_the_pipeline_from_the_parts_is_the_joined_step():
    job, view = step_pair("ascend_pp2_4rank", 0)
    same_section(distributed, job, view)
    same_findings(distributed.job_findings(job.merged("distributed"), job), joined_findings(distributed, view))


def test_a_late_rank_is_explained_from_its_part_as_from_its_events():
    """What the late rank did in each waited-for window, from the busy union and the host ranges its part kept,
    equals what its whole event table says."""
    job, joined = job_pair("ddp_no_overlap")
    late = distributed.late_arrivals(joined)
    assert len(late) > Options().top, "more late arrivals than the section shows by default"
    every = Options(top=len(late))
    want = joined_section(distributed, joined, every).table("late_arrivals")
    assert len(want.frame) == len(late)
    assert_same_data(
        distributed.job_section(job.merged("distributed"), job, every).table("late_arrivals").to_dict(), want.to_dict()
    )


@pytest.mark.parametrize(("name", "rank"), [("ddp_no_overlap", 0), ("ddp_overlap", 1), ("dlrm_8rank", 3)])
def test_what_a_part_keeps_explains_any_window_as_the_whole_rank_does(name, rank):
    """For windows of many lengths ending at the rank's call starts, what the rank did (device busy time, cause,
    host range) from its part's pruned host ranges and packed busy union equals the answer from all its host ranges
    and its busy union rebuilt from the event table."""
    _, joined = job_pair(name)
    events = joined.events[joined.events["rank"] == rank]
    calls = distributed.collectives(joined)
    calls = calls[calls["rank"] == rank]
    kept = collective_calls.rank_activity(events, calls)
    device = events[events["kind"].isin([Kind.KERNEL.value, Kind.MEMCPY.value, Kind.MEMSET.value])]
    host = events[
        events["kind"].isin([Kind.ANNOTATION.value, Kind.CPU_OP.value, Kind.PYTHON.value, Kind.RUNTIME.value])
    ]
    busy = intervals.union(device["ts"].to_numpy(), (device["ts"] + device["dur"]).to_numpy())
    whole = collective_calls.RankActivity(busy, collective_calls.host_ranges(host), True)
    assert len(kept.host) < len(whole.host) / 4
    rng = np.random.default_rng(14)
    starts = np.unique(calls.loc[~calls["p2p"].astype(bool), "start_ns"].to_numpy())
    answers = []
    for end in rng.choice(starts, size=min(len(starts), 60), replace=False):
        for width in np.concatenate(([0, 1], np.round(10 ** rng.uniform(3, 9, 14)))):
            start = int(end) - int(width)
            answer = kept.cause(start, int(end))
            assert answer == whole.cause(start, int(end)), (start, int(end))
            answers.append(answer)
    assert len({a[1] for a in answers}) >= 2 and len({a[2] for a in answers}) >= 3, "the windows reach several causes"


def test_a_rank_activity_pickles_packed_after_being_asked():
    """A rank's activity that has answered for a window (its busy union unpacked) pickles as small as before, and the
    copy answers the same."""
    job, _ = job_pair("ddp_overlap")
    activity = job.part("distributed", 1).activity[1]
    before = len(pickle.dumps(activity, protocol=pickle.HIGHEST_PROTOCOL))
    starts, ends = activity.busy
    window = (int(starts[len(starts) // 2]), int(ends[-1]))
    answer = activity.cause(*window)
    sent = pickle.dumps(activity, protocol=pickle.HIGHEST_PROTOCOL)
    assert len(sent) == before
    assert answer[0] > 0 and pickle.loads(sent).cause(*window) == answer


def _part_bytes(part: object) -> int:
    return len(pickle.dumps(part, protocol=pickle.HIGHEST_PROTOCOL))


def test_a_ranks_part_is_small_against_its_event_table():
    """The part of the largest rank of the jobs (h200 ddp_overlap rank 0) is at most 2 % of its event table, and
    what it keeps to explain a late arrival is a small share of the rank's host ranges."""
    job, joined = job_pair("ddp_overlap")
    events = joined.events[joined.events["rank"] == 0]
    table_bytes = int(events.memory_usage(deep=True).sum())
    part = job.part("distributed", 0)
    assert _part_bytes(part) <= 0.02 * table_bytes
    host = events["kind"].isin(["annotation", "cpu_op", "python", "runtime"]).sum()
    assert len(part.activity[0].host) <= 0.05 * host
