"""A real input-loading straggler (sample_traces/data_loader): rank 1 loads its batches with num_workers=0 and rank 0
waits in the DDP all-reduce. What the user sees, against the ground truth each rank measured (its .meta.json)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import REPO, facts, joined_findings, load_shared, shared_path

import traceanalyzer as ta
from traceanalyzer import cli
from traceanalyzer.analyzers import distributed, health
from traceanalyzer.schema import NO_ROW

SAMPLE = REPO / "sample_traces" / "data_loader"
MS = 1_000_000
SINGLE_PROCESS_LOADER = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"


@pytest.fixture(scope="module")
def job() -> ta.Trace:
    return ta.load(SAMPLE)


@pytest.fixture(scope="module")
def metas() -> list[dict]:
    return [json.loads((SAMPLE / f"data_loader_rank{r}.meta.json").read_text()) for r in (0, 1)]


def _first_launch_ns(meta: dict) -> np.ndarray:
    """Per traced step: when the rank's DDP comm hook launched its first all-reduce (host monotonic clock, ns)."""
    return np.array([stamps[0] for stamps in meta["allreduce_launch_monotonic_ns_traced_steps"]])


def test_the_planted_difference_is_the_data_loader_on_rank_1(metas):
    assert [m["num_workers"] for m in metas] == [4, 0]
    assert min(metas[1]["next_batch_ms_traced_steps"]) > 30 * max(metas[0]["next_batch_ms_traced_steps"])


def test_report_names_rank_1_late_because_it_loads_data(tmp_path):
    out = tmp_path / "report.json"
    assert cli.main([str(SAMPLE), "--format", "json", "-o", str(out)]) == 0
    report = json.loads(out.read_text())
    assert facts(report, "distributed")["late_rank"] == 1
    late = [f for f in report["findings"] if f["analyzer"] == "distributed" and "late rank" in f["title"]]
    assert len(late) == 1 and late[0]["where"] == {"rank": 1}
    assert late[0]["evidence"]["cause"] == "data_loading"
    assert late[0]["evidence"]["detail"] == SINGLE_PROCESS_LOADER
    assert late[0]["evidence"]["most_waiting_rank"] == 0
    assert "num_workers" in late[0]["advice"]


def test_every_late_arrival_on_rank_1_is_data_loading(job):
    late = distributed.late_arrivals(job)
    allreduces = late[late["collective"] == "allreduce"]
    assert len(allreduces) == 4  # one DDP bucket per traced step
    assert (late["late_rank"] == 1).all() and (late["cause"] == "data_loading").all()


def test_clocks_of_one_host_agree(job):
    # both ranks share one host clock; a buffer broadcast's root finishing early must not read as an offset
    assert distributed.clock_offsets(job)["offset_ns"].abs().max() < 10_000


def test_rank0_wait_per_step_matches_the_measured_lateness(job, metas):
    calls = job.collectives()
    waited = calls[(calls["rank"] == 0) & (calls["match"] != NO_ROW)].groupby("step")["wait_ns"].sum() / MS
    late_launch = (_first_launch_ns(metas[1]) - _first_launch_ns(metas[0])) / MS
    more_loading = np.subtract(*[m["next_batch_ms_traced_steps"] for m in metas[::-1]])
    np.testing.assert_allclose(waited.to_numpy(), late_launch, rtol=0.02)
    np.testing.assert_allclose(waited.to_numpy(), more_loading, rtol=0.02)
    assert calls.loc[calls["rank"] == 1, "wait_ns"].sum() < 0.01 * MS * waited.sum()  # the late rank hardly waits


def test_idle_gap_finding_on_rank1_names_the_data_loader(metas):
    trace = ta.load(SAMPLE / "data_loader_rank1.json.gz")
    gaps = health.idle_gaps(trace, top=3)
    assert gaps["host_during"].str.startswith(SINGLE_PROCESS_LOADER).all(), gaps["host_during"].tolist()
    # the first traced step's load comes before its first kernel, so the window holds the gaps of the other three
    loads = np.sort(metas[1]["next_batch_ms_traced_steps"][1:])
    idle = np.sort(gaps["dur_ns"].to_numpy() / MS)
    assert ((idle > loads) & (idle < 1.02 * loads)).all(), (idle, loads)
    found = trace.findings()
    assert found[0].id == "health.input_pipeline" and found[0].severity.value == "high"  # the cause, at the top
    assert SINGLE_PROCESS_LOADER in found[0].title and "DataLoader workers with pin_memory=True" in found[0].title


def test_a_sleeping_straggler_is_not_called_data_loading():
    folder = shared_path("h200", "ddp_no_overlap")
    meta = json.loads((folder / "ddp_no_overlap_rank1.meta.json").read_text())
    assert meta["straggler"] == {"rank": 1, "sleep_ms_per_step": 50}  # GROUND_TRUTH §11: it sleeps, inputs are fixed
    trace = load_shared("h200", "ddp_no_overlap")
    assert "data_loading" not in set(distributed.late_arrivals(trace)["cause"])
    straggler = [f for f in joined_findings(distributed, trace) if "late rank" in f.title]
    assert straggler and straggler[0].evidence["cause"] != "data_loading"
    causes = {f.id for f in joined_findings(health, trace) if f.evidence.get("cause")}
    assert causes and "health.input_pipeline" not in causes


def test_the_late_rank_and_its_own_idle_are_one_finding(metas):
    """Rank 1's loading makes it late and idles its GPU: one cause, pushed once. Its idle is per step of its own
    steps (not every rank's): within 5 % of the meta's next(loader) time; the late-rank finding counts under it."""
    findings = ta.load(SAMPLE).findings()
    pushed = [f for f in findings if f.pushed]
    assert [f.id for f in pushed] == ["health.input_pipeline"] and pushed[0].where["rank"] == 1
    loading = np.mean(metas[1]["next_batch_ms_traced_steps"])
    assert pushed[0].saving_ns / 1e6 == pytest.approx(loading, rel=0.05)
    late = next(f for f in findings if f.id == "distributed.late_rank")
    assert not late.pushed and late.covered_by == pushed[0].title and late.cut == "counted under #1"


def test_under_rank_0_the_late_rank_finding_says_its_waiting_peer_is_out_of_scope():
    fsdp = ta.load(REPO / "sample_traces" / "fsdp")
    late = next(f for f in fsdp.scoped(rank=0).findings() if f.id == "distributed.late_rank")
    assert "Rank 1, which waits for it, is outside this report's --rank scope" in late.advice
    whole = next(f for f in fsdp.findings() if f.id == "distributed.late_rank")
    assert (late.saving_ns, late.step_ns) == (whole.saving_ns, whole.step_ns)
