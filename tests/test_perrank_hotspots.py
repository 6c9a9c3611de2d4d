"""The hotspot and GEMM sections and the hotspot findings (with their claims) of a job analysed rank by rank equal
those of the joined trace; a rank's hotspots part is a small share of its event table."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from tests.conftest import (
    JOBS,
    job_pair,
    joined_findings,
    joined_section,
    load_shared,
    same_findings,
    same_section,
    shared_path,
)
from traceanalyzer import perrank
from traceanalyzer.analyzers import gemm, hotspots
from traceanalyzer.options import Options
from traceanalyzer.schema import BUSY, DEVICE

NAMES = [*JOBS, "fsdp"]
WITH_GEMMS = ["ddp_overlap", "ddp_no_overlap", "dlrm_8rank", "fsdp"]
"""Jobs whose ranks record GEMM ops with shapes (the Ascend jobs record none: their gemm section, where counters
measured GEMM kernels, has only the measured kernels)."""
PART_BUDGET = 0.01
"""A rank's hotspots part is at most this share of the memory of its event table."""


@pytest.mark.parametrize("name", NAMES)
def test_job_hotspot_and_gemm_sections_equal_joined(name):
    job, joined = job_pair(name)
    assert len(joined_section(hotspots, joined, Options()).table("kernel").frame) > 0
    shown = joined_section(gemm, joined, Options())
    assert (shown is not None and "gemm_throughput" in {t.id for t in shown.tables}) == (name in WITH_GEMMS)
    same_section(hotspots, job, joined, Options())
    same_section(gemm, job, joined, Options())


@pytest.mark.parametrize("name", NAMES)
def test_job_truncated_and_kind_filtered_tables_equal_joined(name):
    """A small ``top`` cuts the merged tables as it cuts the joined ones; ``kind`` ranks only kernels of that kind."""
    job, joined = job_pair(name)
    same_section(hotspots, job, joined, Options(top=3))
    same_section(gemm, job, joined, Options(top=3))
    kind = str(joined.events.loc[joined.events["kind"].isin(DEVICE), "kind"].iloc[-1])
    same_section(hotspots, job, joined, Options(top=4, kind=kind))
    same_section(gemm, job, joined, Options(top=4, kind=kind))


@pytest.mark.parametrize("name", NAMES)
def test_job_hotspot_findings_equal_joined(name):
    job, joined = job_pair(name)
    assert same_findings(hotspots.job_findings(job.merged("hotspots"), job), joined_findings(hotspots, joined)), (
        "the joined trace has hotspot findings"
    )


def test_step_scoped_job_hotspots_equal_joined_step():
    _, joined = job_pair("ddp_overlap")
    step = joined.steps_recorded()[1]
    job = perrank.load_job(shared_path(*JOBS["ddp_overlap"]), step=step)
    view = joined.scoped(step=step)
    same_section(hotspots, job, view, Options())
    same_section(gemm, job, view, Options())
    assert same_findings(hotspots.job_findings(job.merged("hotspots"), job), joined_findings(hotspots, view)), (
        "the joined trace has hotspot findings"
    )


def test_joined_claims_are_the_union_of_each_ranks_hotspot_work():
    """A hotspot claims, per rank, exactly the busy device intervals of its work there (its op's or kernel's)."""
    _, joined = job_pair("ddp_no_overlap")
    finding = joined_findings(hotspots, joined)[0]
    ev = joined.events
    busy = ev[ev["kind"].isin(BUSY) & (ev["step"] >= 0)]
    op_name = np.asarray(ev["name"].astype(str))[busy["op"].to_numpy()]
    mine = busy[(busy["op"].to_numpy() >= 0) & (op_name == finding.where["name"])]
    assert sorted(finding.claims) == sorted(mine["rank"].unique())
    for rank, (starts, ends) in finding.claims.items():
        rows = mine[mine["rank"] == rank]
        assert int((ends - starts).sum()) <= int(rows["dur"].sum())
        assert starts[0] == rows["ts"].min() and ends.max() == (rows["ts"] + rows["dur"]).max()


def test_hotspots_part_is_small_on_the_largest_trace():
    """On h200/big (356k events) the part pickles to under ``PART_BUDGET`` of the event table's memory."""
    trace = load_shared("h200", "big", "big.json.gz")
    part = hotspots.rank_part(trace)
    assert len(pickle.dumps(part)) < PART_BUDGET * trace.events.memory_usage(deep=True).sum()
