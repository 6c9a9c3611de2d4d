"""The fusion section and findings of a job analysed rank by rank equal the joined trace's (real multi-rank jobs),
claims included: library patterns summed per rank, chains discovered over all ranks' runs at once."""

from __future__ import annotations

import pickle

import pytest

from tests.conftest import (
    JOBS,
    job_pair,
    joined_findings,
    load_shared,
    same_findings,
    same_section,
    step_pair,
    table_rows,
)
from traceanalyzer.analyzers import fusion
from traceanalyzer.options import Options
from traceanalyzer.tracedata import TraceData

PART_SHARE = 0.01
"""A rank's fusion part is at most this share of its event table's memory."""


@pytest.mark.parametrize("name", [*JOBS, "fsdp"])
def test_job_section_and_findings_equal_the_joined_ones(name):
    job, joined = job_pair(name)
    want = same_section(fusion, job, joined, Options())
    assert table_rows(want, "opportunities")
    found = same_findings(fusion.job_findings(job.merged("fusion"), job), joined_findings(fusion, joined))
    assert any(f.claims for f in found)
    assert all(set(f.claims) <= set(joined.meta.ranks) for f in found)


def test_chains_are_discovered_over_all_ranks():
    """A discovered chain of a two-rank job counts the repeats of both ranks, and its fix claims work on both."""
    job, joined = job_pair("ddp_overlap")
    want = same_section(fusion, job, joined, Options())
    chains = [r for r in table_rows(want, "opportunities") if r["pattern"] == "Repeated memory-bound chain"]
    assert chains
    found = {f.title: f for f in fusion.job_findings(job.merged("fusion"), job)}
    claimed = [f for title, f in found.items() if title.startswith("Repeated memory-bound chain")]
    assert claimed and all(set(f.claims) == {0, 1} for f in claimed)


def test_table_cut_after_merging_the_ranks():
    """A short table keeps the job's largest savings, whichever ranks they come from."""
    job, joined = job_pair("dlrm_8rank")
    rows = table_rows(same_section(fusion, job, joined, Options(top=3)), "opportunities")
    assert len(rows) == 3
    assert [r["saving_ns_per_step"] for r in rows] == sorted((r["saving_ns_per_step"] for r in rows), reverse=True)


def test_step_scoped_job_equals_the_joined_step():
    job, joined = step_pair("ddp_overlap")
    want = same_section(fusion, job, joined, Options(top=5))
    assert len(table_rows(want, "opportunities")) == 5
    found = same_findings(fusion.job_findings(job.merged("fusion"), job), joined_findings(fusion, joined))
    assert found and all(f.steps == len(joined.meta.ranks) for f in found)


def test_a_rank_part_is_small():
    """The part of a 356k-event trace, claimed intervals and discovery runs included, is under 1 % of its events."""
    trace = load_shared("h200", "big", "big.json.gz")
    part = fusion.rank_part(TraceData(trace.events, trace.memory_events, trace.meta))
    assert len(part.groups) and len(part.runs) and all(c.count for c in part.groups["claims"])
    assert len(pickle.dumps(part)) < PART_SHARE * trace.events.memory_usage(deep=True).sum()
