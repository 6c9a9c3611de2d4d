"""The memory section and findings of a job analysed rank by rank equal those of the joined trace."""

from __future__ import annotations

import pickle

import pytest

from tests.conftest import JOBS, job_pair, joined_findings, joined_section, same_findings, same_section, shared_path
from traceanalyzer import perrank
from traceanalyzer.analyzers import memory
from traceanalyzer.options import Options

WITH_MEMORY = [name for name in [*JOBS, "fsdp"] if name != "dlrm_8rank"]
"""Jobs of ``JOBS`` (and the bundled fsdp sample) that record memory events (dlrm_8rank records none)."""
PART_BUDGET = 0.02
"""A rank's memory part is at most this share of the memory of its event table."""


@pytest.mark.parametrize("name", WITH_MEMORY)
def test_job_memory_equals_joined(name):
    job, joined = job_pair(name)
    assert same_section(memory, job, joined, Options()), "the job has a memory section"
    same_findings(memory.job_findings(job.merged("memory"), job), joined_findings(memory, joined))


@pytest.mark.parametrize("name", WITH_MEMORY)
def test_job_memory_truncated_tables_equal_joined(name):
    """A small ``top`` cuts the merged tables (live blocks, per op, never freed) as it cuts the joined ones."""
    job, joined = job_pair(name)
    assert same_section(memory, job, joined, Options(top=3)), "the job has a memory section"
    same_findings(memory.job_findings(job.merged("memory"), job), joined_findings(memory, joined))


def test_job_without_memory_has_no_section():
    job, joined = job_pair("dlrm_8rank")
    assert (
        joined_section(memory, joined, Options()) is None
        and memory.job_section(job.merged("memory"), job, Options()) is None
    )
    assert joined_findings(memory, joined) == [] and memory.job_findings(job.merged("memory"), job) == []


def test_step_scoped_job_memory_equals_joined_step():
    _, joined = job_pair("ddp_overlap")
    step = joined.steps_recorded()[1]
    job = perrank.load_job(shared_path(*JOBS["ddp_overlap"]), step=step)
    assert same_section(memory, job, joined.scoped(step=step), Options()), "the job has a memory section"
    same_findings(memory.job_findings(job.merged("memory"), job), joined_findings(memory, joined.scoped(step=step)))


@pytest.mark.parametrize("name", ["fsdp"])
def test_memory_part_is_small(name):
    """A rank's part pickles to a small share of its event table."""
    job, joined = job_pair(name)
    for of_rank in job.ranks:
        events = joined.events[joined.events["rank"] == of_rank.rank].memory_usage(deep=True).sum()
        assert len(pickle.dumps(of_rank.parts["memory"])) < PART_BUDGET * events
