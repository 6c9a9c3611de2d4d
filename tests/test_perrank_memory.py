"""The memory section and findings of a job analysed rank by rank equal those of the joined trace."""

from __future__ import annotations

import pickle

import pytest

from tests.conftest import JOBS, assert_same_data, job_pair, shared_path
from traceanalyzer import perrank
from traceanalyzer.analyzers import memory
from traceanalyzer.options import Options

WITH_MEMORY = [name for name in [*JOBS, "fsdp"] if name != "dlrm_8rank"]
"""Jobs of ``JOBS`` (and the bundled fsdp sample) that record memory events (dlrm_8rank records none)."""
PART_BUDGET = 0.02
"""A rank's memory part is at most this share of the memory of its event table."""


def _assert_same(job, joined, options: Options) -> None:
    """Section and findings (plain data and claims) of the job equal the joined trace's."""
    want = memory.section(joined, options)
    assert want is not None
    assert_same_data(memory.job_section(job, options).to_dict(), want.to_dict(), "memory")
    found, expected = memory.job_findings(job), memory.findings(joined)
    assert_same_data([f.to_dict() for f in found], [f.to_dict() for f in expected], "findings")
    assert [f.claims for f in found] == [f.claims for f in expected]


@pytest.mark.parametrize("name", WITH_MEMORY)
def test_job_memory_equals_joined(name):
    job, joined = job_pair(name)
    _assert_same(job, joined, Options())


@pytest.mark.parametrize("name", WITH_MEMORY)
def test_job_memory_truncated_tables_equal_joined(name):
    """A small ``top`` cuts the merged tables (live blocks, per op, never freed) as it cuts the joined ones."""
    job, joined = job_pair(name)
    _assert_same(job, joined, Options(top=3))


def test_job_without_memory_has_no_section():
    job, joined = job_pair("dlrm_8rank")
    assert memory.section(joined, Options()) is None and memory.job_section(job, Options()) is None
    assert memory.findings(joined) == [] and memory.job_findings(job) == []


def test_step_scoped_job_memory_equals_joined_step():
    _, joined = job_pair("ddp_overlap")
    step = joined.steps_recorded()[1]
    job = perrank.load_job(shared_path(*JOBS["ddp_overlap"]), step=step)
    _assert_same(job, joined.scoped(step=step), Options())


@pytest.mark.parametrize("name", ["fsdp"])
def test_memory_part_is_small(name):
    """A rank's part pickles to a small share of its event table."""
    job, joined = job_pair(name)
    for summary in job.ranks:
        events = joined.events[joined.events["rank"] == summary.rank].memory_usage(deep=True).sum()
        assert len(pickle.dumps(summary.parts["memory"])) < PART_BUDGET * events
