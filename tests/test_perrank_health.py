"""The health section and findings of a job analysed rank by rank equal the joined trace's (real multi-rank jobs)."""

from __future__ import annotations

import pickle

import pytest

import traceanalyzer as ta
from tests.conftest import (
    JOBS,
    REPO,
    assert_same_data,
    job_pair,
    joined_findings,
    joined_section,
    load_shared,
    same_findings,
    same_section,
    shared_path,
    step_pair,
    table_rows,
)
from traceanalyzer import perrank
from traceanalyzer.analyzers import health
from traceanalyzer.options import Options
from traceanalyzer.tracedata import TraceData


@pytest.mark.parametrize("name", [*JOBS, "fsdp"])
def test_job_section_and_findings_equal_the_joined_ones(name):
    job, joined = job_pair(name)
    want = same_section(health, job, joined, Options())
    assert {r["rank"] for r in table_rows(want, "device_busy")} <= set(joined.meta.ranks)
    assert table_rows(want, "largest_gaps")
    found = same_findings(health.job_findings(job.merged("health"), job), joined_findings(health, joined))
    assert any(f.analyzer == "health" and f.evidence.get("cause") and f.claims for f in found)  # an idle cause


@pytest.mark.parametrize("name", ["ddp_overlap", "dlrm_8rank"])
def test_tables_cut_after_merging_the_ranks(name):
    """A short table keeps the job's largest rows, whichever ranks they come from (not each rank's first rows)."""
    job, joined = job_pair(name)
    want = same_section(health, job, joined, Options(top=2))
    gaps = table_rows(want, "largest_gaps")
    assert len(gaps) == 2 and gaps[0]["dur_ns"] >= gaps[1]["dur_ns"]


def test_step_scoped_job_equals_the_joined_step():
    job, joined = step_pair("ddp_overlap")
    want = same_section(health, job, joined, Options(top=5))
    assert {r["rank"] for r in table_rows(want, "device_busy")} == set(joined.meta.ranks)
    assert next(t for t in want["tables"] if t["id"] == "dynamic_shapes")["note"].startswith("no verdict")
    found = same_findings(health.job_findings(job.merged("health"), job), joined_findings(health, joined))
    # a finding about one rank averages over that rank's steps alone (here its one step), as the joined path does
    assert found and all(f.steps == (1 if "rank" in f.where else len(joined.meta.ranks)) for f in found)


def test_a_step_that_one_rank_lacks():
    """Two runs as one job (sync stalls, 3 steps; dynamic shapes, 8 steps): the whole job, a step both have, and a
    step only the second has, where the first rank's part is empty."""
    paths = [shared_path("h200", "sync_stalls"), REPO / "sample_traces" / "dynamic_shapes"]
    whole = ta.load(paths)
    job = perrank.load_job(paths)
    same_section(health, job, whole, Options())
    found = same_findings(health.job_findings(job.merged("health"), job), joined_findings(health, whole))
    assert {f.id for f in found} >= {"health.sync", "health.dynamic_shapes"}
    for step in (2, 9):
        job, joined = perrank.load_job(paths, step=step), whole.scoped(step=step)
        want = same_section(health, job, joined, Options())
        assert {r["rank"] for r in table_rows(want, "device_busy")} == ({0, 1} if step == 2 else {1})
        same_findings(health.job_findings(job.merged("health"), job), joined_findings(health, joined))


def test_a_rank_without_step_markers():
    """Steps on one rank only (sync stalls; PARAM's linear benchmark has no step markers): the second rank's syncs
    and GEMMs are outside every step of the job, as on the joined trace; its device busy counts."""
    paths = [shared_path("h200", "sync_stalls"), shared_path("public", "torch", "param", "linear_kineto.json.gz")]
    job, joined = perrank.load_job(paths), ta.load(paths)
    want = same_section(health, job, joined, Options())
    assert {r["rank"] for r in table_rows(want, "device_busy")} == {0, 1}
    assert {r["rank"] for r in table_rows(want, "sync_places")} == {0}
    same_findings(health.job_findings(job.merged("health"), job), joined_findings(health, joined))


def test_a_rank_part_is_small():
    """The part of a 356k-event trace is under 1 % of its event table, though it keeps the idle claims (35k)."""
    trace = load_shared("h200", "big", "big.json.gz")
    part = health.rank_part(TraceData(trace.events, trace.memory_events, trace.meta))
    assert len(part.gaps) <= health.GAPS_KEPT and part.idle
    assert len(pickle.dumps(part)) < 0.01 * trace.events.memory_usage(deep=True).sum()


def test_copies_of_every_rank_count_in_the_sync_finding():
    """dlrm's 8 ranks each copy to pageable memory: the finding's evidence counts them all, as its advice does."""
    job, joined = job_pair("dlrm_8rank")
    copies = table_rows(same_section(health, job, joined, Options()), "dtoh_copies")
    assert len({r["rank"] for r in copies}) == 8
    assert [r["total_ns"] for r in copies] == sorted((r["total_ns"] for r in copies), reverse=True)
    (sync,) = [
        f
        for f in same_findings(health.job_findings(job.merged("health"), job), joined_findings(health, joined))
        if f.id == "health.sync"
    ]
    pageable = sum(r["count"] for r in copies if r["pageable"])
    assert sum(sync.evidence["dtoh_copies"].values()) == sum(r["count"] for r in copies)
    assert f"{pageable} device-to-host copies go to pageable memory" in sync.advice


def test_a_gap_table_longer_than_a_part_keeps_says_so():
    job, joined = job_pair("dlrm_8rank")
    options = Options(top=health.GAPS_KEPT + 1)
    want = joined_section(health, joined, options).table("largest_gaps")
    got = health.job_section(job.merged("health"), job, options).table("largest_gaps")
    assert len(want.frame) == len(got.frame) == options.top
    assert not want.note and str(health.GAPS_KEPT) in got.note


def test_a_job_analysed_for_a_longer_table_gives_the_joined_one():
    _, joined = job_pair("dlrm_8rank")
    options = Options(top=health.GAPS_KEPT + 5)
    job = perrank.load_job(shared_path(*JOBS["dlrm_8rank"]), top=options.top)
    want = joined_section(health, joined, options).to_dict()
    assert_same_data(health.job_section(job.merged("health"), job, options).to_dict(), want)
    assert len(want["tables"][1]["rows"]) == options.top
