"""Overlap, collectives across ranks, late rank and distributed findings, on real multi-rank traces."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import REPO, facts, joined_findings, joined_section, load_shared, shared_path

import traceanalyzer as ta
from traceanalyzer import cli
from traceanalyzer.analyzers import distributed
from traceanalyzer.report import Options
from traceanalyzer.schema import NO_ROW, Kind

PARTS = [f"{p}_ns" for p in distributed.PARTS]
MS = 1_000_000


def _ddp_no_overlap():
    return load_shared("h200", "ddp_no_overlap")


def _ddp_overlap():
    return load_shared("h200", "ddp_overlap")


@pytest.mark.parametrize("parts", [("h200", "ddp_no_overlap"), ("h200", "ddp_overlap")])
def test_breakdown_sums_to_the_step_span(parts):
    table = load_shared(*parts).overlap()
    assert len(table) == 6  # 2 ranks x 3 steps
    assert (table[PARTS].sum(axis=1) == table["span_ns"]).all()
    assert (table[PARTS] >= 0).all().all()


def test_no_overlap_hides_no_communication():
    ranks = joined_section(distributed, _ddp_no_overlap()).table("by_rank").frame
    assert (ranks["comm_ns"] > 0).all()
    assert (ranks["hidden_comm_share"] < 0.01).all()


def test_overlap_hides_a_third_of_nccl_time_on_both_ranks():
    ranks = joined_section(distributed, _ddp_overlap()).table("by_rank").frame
    # GROUND_TRUTH §10: about 33 % of NCCL kernel time overlaps compute kernels on both ranks
    assert ranks["hidden_comm_share"].between(0.28, 0.38).all()


def test_rank0_waits_for_rank1_every_step_as_measured():
    calls = _ddp_no_overlap().collectives()
    rank0 = calls[(calls["rank"] == 0) & (calls["match"] != NO_ROW)].groupby("step")
    # GROUND_TRUTH §11: NCCL time per step and longest all-reduce per step on rank 0
    np.testing.assert_allclose(rank0["wait_ns"].sum().to_numpy() / MS, [89.9, 99.3, 103.5], rtol=0.10)
    np.testing.assert_allclose(rank0["wait_ns"].max().to_numpy() / MS, [81.9, 90.8, 98.9], rtol=0.10)
    assert (calls.loc[calls["match"] != NO_ROW, "ranks_matched"] == 2).all()


def test_allreduces_after_backward_are_exposed():
    trace = _ddp_no_overlap()
    calls = trace.collectives()
    launched = calls[calls["phase"] != ""]
    assert (launched["phase"] == "after_backward").all()
    assert (launched["exposed_ns"] == launched["dur_ns"]).all()
    titles = [f.title for f in joined_findings(distributed, trace)]
    assert any("after backward" in t for t in titles), titles


def test_rank1_is_the_late_rank_because_it_sleeps():
    trace = _ddp_no_overlap()
    facts = {f.id: f.value for f in joined_section(distributed, trace, Options()).facts}
    assert facts["late_rank"] == 1
    straggler = [f for f in joined_findings(distributed, trace) if f.where.get("rank") == 1 and "late" in f.title]
    assert straggler and straggler[0].evidence["detail"] == "STRAGGLER_rank1_sleep_50ms"
    assert straggler[0].evidence["most_waiting_rank"] == 0


def test_overlap_rank1_waits_for_the_slower_cpu_of_rank0():
    calls = _ddp_overlap().collectives()
    rank1 = calls[(calls["rank"] == 1) & (calls["collective"] == "allreduce")]
    # GROUND_TRUTH §10: rank 1's all-reduce kernels take 181.6 ms in total, nearly all of it waiting
    assert rank1["wait_ns"].sum() / MS == pytest.approx(181.6, rel=0.10)
    assert calls.loc[calls["rank"] == 0, "wait_ns"].sum() < 0.05 * rank1["wait_ns"].sum()
    assert (calls.loc[calls["collective"] == "allreduce", "phase"] == "backward").all()


def test_clock_offsets_of_one_host_are_small():
    offsets = distributed.clock_offsets(_ddp_overlap())
    assert list(offsets["rank"]) == [0, 1]
    assert offsets["offset_ns"].abs().max() < 100_000
    assert (offsets["calls"] > 0).all()


def test_dlrm_eight_ranks_match_every_collective():
    trace = load_shared("public", "torch", "param", "dlrm_kineto_8rank")
    calls = trace.collectives()
    assert sorted(calls["rank"].unique()) == list(range(8))
    assert (calls["ranks_matched"] == 8).all()
    assert calls.groupby("match")["collective"].nunique().eq(1).all()
    assert set(calls["collective"]) == {"alltoall", "allreduce"}
    assert len(distributed.clock_offsets(trace)) == 8
    assert joined_section(distributed, trace, Options()).fact("late_rank").value in range(8)


@pytest.mark.parametrize(
    "parts",
    [
        ("public", "torch", "hta", "nccl_parser_config"),
        ("public", "torch", "hta", "negative_queue_length_values_check"),
    ],
)
def test_single_rank_of_a_bigger_job_has_no_cross_rank_part(parts):
    trace = load_shared(*parts)
    calls = trace.collectives()
    assert len(calls) > 0
    assert (calls["match"] == NO_ROW).all() and calls["wait_ns"].isna().all()
    section = joined_section(distributed, trace, Options())
    assert "late_rank" not in {f.id for f in section.facts}
    assert len(section.table("most_exposed").frame)
    table = trace.overlap()
    assert (table[PARTS].sum(axis=1) == table["span_ns"]).all()


def test_cli_prints_the_distributed_section(tmp_path, capsys):
    out = tmp_path / "report.json"
    assert cli.main([str(shared_path("h200", "ddp_no_overlap")), "--format", "json", "-o", str(out)]) == 0
    report = json.loads(out.read_text())
    assert facts(report, "distributed")["late_rank"] == 1
    assert cli.main([str(shared_path("h200", "ddp_no_overlap"))]) == 0
    assert "Distributed: communication and overlap" in capsys.readouterr().out


@pytest.mark.parametrize("level", ["level0", "level1", "level2"])
def test_ascend_breakdown_reproduces_the_overlap_lanes(level):
    trace = load_shared("public", "ascend", "msinsight", "pytorch_text", level)
    if not (trace.events["kind"] == Kind.OVERLAP_LANE.value).any():
        pytest.skip("the Ascend parser does not emit the Overlap Analysis lanes yet")
    table = trace.overlap()
    assert sorted(table["rank"]) == [0, 1]
    pairs = [
        ("compute_ns", "lane_computing_ns"),
        ("comm_ns", "lane_communication_ns"),
        ("comm_exposed_ns", "lane_comm_not_overlapped_ns"),
        ("device_free_ns", "lane_free_ns"),
    ]
    for ours, theirs in pairs:
        np.testing.assert_allclose(table[ours], table[theirs], rtol=0.001)


def test_ascend_waits_for_ranks_not_loaded_are_not_called_exposed_transfer():
    trace = load_shared("public", "ascend", "msinsight", "pytorch_text", "level1")
    calls = trace.collectives()
    first = calls[calls["seq"] == 0]
    # both loaded ranks wait in Notify_Wait for the six ranks of the 8-card job that are not loaded
    assert (first["task_wait_ns"] > 0.9 * first["dur_ns"]).all()
    exposed = [f for f in joined_findings(distributed, trace) if "all-reduce" in f.title]
    assert all(f.saving_ns * f.steps < 0.1 * first["dur_ns"].min() for f in exposed)


def test_fsdp_collectives_are_named_and_rank1_waits_in_all_gathers():
    path = REPO / "sample_traces" / "fsdp"
    if not path.exists():
        pytest.skip(f"bundled trace not available: {path}")
    trace = ta.load(path)
    calls = trace.collectives()
    matched = calls[calls["match"] != NO_ROW]
    assert set(matched["collective"]) == {"allgather", "reduce_scatter"}
    assert set(matched.loc[matched["collective"] == "allgather", "phase"]) == {"forward", "backward"}
    gathers = calls[(calls["rank"] == 1) & (calls["collective"] == "allgather")]
    # sample_traces/README.md: rank 1's all-gather kernels total 95.4 ms over 3 steps (it waits for rank 0)
    assert gathers["dur_ns"].sum() / MS == pytest.approx(95.4, rel=0.01)
    assert gathers["wait_ns"].sum() > 0.9 * gathers["dur_ns"].sum()
    assert joined_section(distributed, trace, Options()).fact("late_rank").value == 0


def test_exposed_collectives_beyond_gradient_all_reduce_and_all_gather_are_a_finding():
    """FSDP's reduce-scatters are neither a gradient all-reduce nor a prefetch all-gather: their exposed transfer on
    rank 1 (waits for rank 0 left out) is still a measured finding, named by collective."""
    trace = ta.load(REPO / "sample_traces" / "fsdp")
    found = next(f for f in trace.findings() if f.id == "distributed.exposed_communication")
    calls = trace.collectives()
    ours = calls[(calls["rank"] == 1) & (calls["collective"] == "reduce_scatter")]
    wait = np.fmax(ours["wait_ns"].fillna(0), ours["task_wait_ns"].fillna(0))
    exposed = (ours["exposed_ns"] - wait).clip(lower=0).sum() / len(trace.steps().query("rank == 1"))
    assert found.where == {"rank": 1} and "reduce_scatter" in found.title
    assert found.basis.value == "measured" and found.saving_ns == pytest.approx(exposed, rel=0.01)
