"""The Ascend section and findings of a job analysed rank by rank equal the joined trace's (real msprof jobs)."""

from __future__ import annotations

import pickle

import pytest

import traceanalyzer as ta
from tests.conftest import (
    JOBS,
    assert_same_data,
    job_pair,
    joined_findings,
    joined_section,
    load_shared,
    same_findings,
    shared_path,
    table_rows,
)
from traceanalyzer import perrank
from traceanalyzer.analyzers import ascend
from traceanalyzer.options import Options

ASCEND_JOBS = {"ascend_pp2_4rank": 13, "ascend_level1_2rank": 50}
"""The Ascend jobs of ``JOBS`` and a step each records."""
FIXTURES = ("public", "ascend", "msinsight", "server_fixtures")
AI_CPU_RANKS = [FIXTURES + ("test_rank_0",), FIXTURES + ("test_rank_1",)]
"""Two ranks of msinsight's server fixtures: rank 0 has AI_CPU tasks over 20 µs, rank 1 none."""


@pytest.mark.parametrize("name", list(ASCEND_JOBS))
def test_job_section_and_findings_equal_the_joined_ones(name):
    job, joined = job_pair(name)
    want = joined_section(ascend, joined, Options()).to_dict()
    assert_same_data(ascend.job_section(job.merged("ascend"), job, Options()).to_dict(), want)
    assert {r["rank"] for r in table_rows(want, "overlap")} == set(joined.meta.ranks)
    assert table_rows(want, "top_kernels") and table_rows(want, "core_breakdown")
    same_findings(ascend.job_findings(job.merged("ascend"), job), joined_findings(ascend, joined))


@pytest.mark.parametrize("name", list(ASCEND_JOBS))
def test_step_scoped_job_section_equals_the_joined_step(name):
    step = ASCEND_JOBS[name]
    _, whole = job_pair(name)
    job = perrank.load_job(shared_path(*JOBS[name]), step=step)
    joined = whole.scoped(step=step)
    want = joined_section(ascend, joined, Options(top=5)).to_dict()
    assert_same_data(ascend.job_section(job.merged("ascend"), job, Options(top=5)).to_dict(), want)
    assert {r["step"] for r in table_rows(want, "overlap")} == {step}
    assert len(table_rows(want, "top_kernels")) == 5
    same_findings(ascend.job_findings(job.merged("ascend"), job), joined_findings(ascend, joined))


def test_ai_cpu_finding_of_a_two_rank_job_equals_the_joined_one():
    paths = [shared_path(*parts) for parts in AI_CPU_RANKS]
    job, joined = perrank.load_job(paths), ta.load(paths)
    assert job.meta.ranks == joined.meta.ranks == [0, 1]
    (finding,) = same_findings(ascend.job_findings(job.merged("ascend"), job), joined_findings(ascend, joined))
    assert finding.id == "ascend.ai_cpu" and list(finding.claims) == [0]
    assert_same_data(
        ascend.job_section(job.merged("ascend"), job, Options()).to_dict(),
        joined_section(ascend, joined, Options()).to_dict(),
    )
    assert table_rows(joined_section(ascend, joined, Options()).to_dict(), "ai_cpu_ops")


def test_a_rank_part_is_small():
    rank = load_shared(*FIXTURES[:-1], "st_level2_qwen3_4rank", "rank_0_ascend_pt")
    part = ascend.rank_part(rank)
    assert len(part.kernels) < len(rank.events) / 10
    assert len(pickle.dumps(part)) < 0.05 * rank.events.memory_usage(deep=True).sum()


def test_no_section_and_no_parts_off_ascend():
    job, joined = job_pair("fsdp")
    assert job.parts("ascend") == [None] * len(job.ranks)
    assert ascend.job_section(job.merged("ascend"), job, Options()) is joined_section(ascend, joined, Options()) is None
    assert ascend.job_findings(job.merged("ascend"), job) == joined_findings(ascend, joined) == []
