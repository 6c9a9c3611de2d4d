"""A job analysed rank by rank (each rank loaded and analysed alone in a worker, only its parts back) gives the
report of the joined job: every section, fact, table row and finding, on real multi-rank jobs of both platforms,
of the whole run and of one step; the parts are a small fraction of the ranks' tables; the CLI's --per-rank
writes the same report."""

from __future__ import annotations

import gzip
import json
import pickle
import shutil
from dataclasses import replace

import pytest

import traceanalyzer as ta
from tests import toy_analyzer
from tests.conftest import JOBS, REPO, assert_same_data, job_pair, load_shared, shared_path
from traceanalyzer import analyzers, perrank
from traceanalyzer.cli import main
from traceanalyzer.schema import MODULE_MEMORY

FSDP = REPO / "sample_traces" / "fsdp"
PARTS_SHARE = 0.03
"""A large rank's parts are at most this share of its tables' memory (h200/big: 1.5 %)."""
SMALL_RANK_SHARE = 0.08
"""A small rank's, whose parts' fixed costs weigh more (ddp_overlap, 52k events: 5.2 %)."""


@pytest.mark.parametrize("name", [*JOBS, "fsdp"])
def test_report_rank_by_rank_equals_the_joined_report(name):
    job, joined = job_pair(name)
    assert_same_data(job.report(), joined.report(), name)


def test_findings_rank_by_rank_are_the_joined_ones_with_their_claims():
    job, joined = job_pair("ddp_overlap")
    got, want = job.findings(), joined.findings()
    assert [f.to_dict() for f in got] == [f.to_dict() for f in want]
    for g, w in zip(got, want, strict=True):
        assert g.claims.keys() == w.claims.keys()
        for rank, (starts, ends) in w.claims.items():
            assert list(g.claims[rank][0]) == list(starts) and list(g.claims[rank][1]) == list(ends)


def test_one_step_rank_by_rank_equals_the_joined_step():
    path = shared_path(*JOBS["ddp_overlap"])
    _, joined = job_pair("ddp_overlap")
    step = joined.steps_recorded()[1]
    job = perrank.load_job(path, step=step)
    assert str(job.scope) == f"step {step}"
    assert_same_data(job.report(), joined.report(step=step))


def test_a_step_no_rank_has_is_one_line_naming_the_valid_steps():
    with pytest.raises(ta.TraceError, match=r"has no step 999; its steps are"):
        perrank.load_job(FSDP, step=999)


def _table_bytes(trace: ta.Trace) -> int:
    return int(trace.events.memory_usage(deep=True).sum() + trace.memory_events.memory_usage(deep=True).sum())


def test_parts_are_a_small_fraction_of_the_tables():
    big = load_shared("h200", "big", "big.json.gz")
    parts = perrank.analyse_rank(big.events, big.memory_events, big.meta, None)
    assert len(pickle.dumps(parts)) < PARTS_SHARE * _table_bytes(big)
    job, _ = job_pair("ddp_overlap")
    for parts in job.ranks:
        assert len(pickle.dumps(parts)) < SMALL_RANK_SHARE * _table_bytes(ta.load(parts.meta.paths[0]))


def test_cli_per_rank_writes_the_joined_report(tmp_path, capsys):
    assert main([str(FSDP), "--per-rank", "--format", "json", "-o", str(tmp_path / "ranks.json")]) == 0
    assert main([str(FSDP), "--format", "json", "-o", str(tmp_path / "joined.json")]) == 0
    ranks, joined = (json.loads((tmp_path / f"{name}.json").read_text()) for name in ("ranks", "joined"))
    assert_same_data(ranks, joined)


def test_cli_per_rank_with_one_rank_is_one_line(capsys):
    assert main([str(FSDP), "--per-rank", "--rank", "0"]) == 2
    assert capsys.readouterr().err.strip() == (
        "traceanalyze: error: --per-rank: analyses every rank; for one rank give --rank without --per-rank"
    )


def test_cli_per_rank_html_says_it_has_no_figures(tmp_path, capsys):
    assert main([str(FSDP), "--per-rank", "--format", "html", "-o", str(tmp_path / "r.html")]) == 0
    assert "has no figures" in capsys.readouterr().err
    assert "<table" in (tmp_path / "r.html").read_text()


def test_the_order_the_rank_files_are_given_in_changes_nothing():
    files = sorted(FSDP.glob("*.json.gz"))
    want = ta.load(files).report()
    assert_same_data(ta.load(files[::-1]).report(), want)
    assert_same_data(perrank.load_job(files[::-1]).report(), want)


def test_ranks_by_position_count_a_rank_left_out(tmp_path):
    """Traces that do not say their rank, named without one: numbered by their place among the files given, so the
    one that cannot be read is the missing rank, both ways."""
    for name, source in (("a", "fused_ops.json.gz"), ("c", "unfused_ops.json.gz")):
        shutil.copy(REPO / "sample_traces" / source, tmp_path / f"{name}.json.gz")
    (tmp_path / "b.json.gz").write_bytes(gzip.compress(b'{"traceEvents": []}'))  # a trace with no events
    joined, job = ta.load(tmp_path), perrank.load_job(tmp_path)
    assert joined.meta.ranks == job.meta.ranks == [0, 2]
    assert_same_data(job.report(), joined.report())
    ledger = {f["id"]: f["value"] for f in joined.report()["sections"]["ledger"]["facts"]}
    assert ledger["missing_ranks"] == "1"


def test_an_analyzer_failing_on_a_rank_is_a_warning_and_the_rest_is_reported(monkeypatch):
    registry = tuple(
        replace(a, rank_part=toy_analyzer.failing_part) if a.name == "gemm" else a for a in analyzers.ANALYZERS
    )
    monkeypatch.setattr(analyzers, "ANALYZERS", registry)
    with pytest.warns(UserWarning, match=r"analyzer gemm failed on rank 0: ValueError: a bug"):
        report = perrank.load_job(FSDP).report()
    assert "gemm" not in report["sections"] and "hotspots" not in report["sections"] and "fusion" in report["sections"]
    ledger = {f["id"]: f["value"] for f in report["sections"]["ledger"]["facts"]}
    assert ledger["missing_sections"] == "hotspots, gemm", "hotspots needs gemm's parts"


def test_ranks_on_different_devices_say_whose_device_facts_are_used():
    dlrm = sorted(shared_path(*JOBS["dlrm_8rank"]).glob("worker3_*"))
    files = [FSDP / "fsdp_rank0.json.gz", *dlrm]
    for meta in (ta.load(files).meta, perrank.load_job(files).meta):
        (warning,) = [w for w in meta.warnings if "different devices" in w]
        assert "rank 0: NVIDIA H200; rank 3: Tesla V100-SXM2-32GB" in warning and "rank 0's device's" in warning


def test_a_ranks_side_tables_come_back_reduced_to_what_is_read():
    """Ascend npu_module_mem samples ride in a rank's meta: only each module's peak and last sample come back."""
    job, joined = job_pair("ascend_pp2_4rank")
    sent = job.ranks[0].meta.side_table(MODULE_MEMORY)
    raw = ta.load(job.ranks[0].meta.paths[0]).meta.side_table(MODULE_MEMORY)
    assert len(sent) <= 2 * raw.groupby(["device", "component"]).ngroups < len(raw) / 10
    assert_same_data(job.report()["sections"]["memory"], joined.report()["sections"]["memory"])


def test_a_job_in_a_notebook_shows_one_line_not_its_parts():
    job, _ = job_pair("fsdp")
    shown = repr(job)
    assert shown.startswith("<Job cuda kineto: ") and "ranks [0, 1]" in shown and "\n" not in shown
    assert "parts" not in repr(job.ranks[0])
