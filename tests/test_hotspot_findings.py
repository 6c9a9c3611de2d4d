"""Hotspot findings on real H200 traces: what dominates step time, pushed only above ~5 % (GROUND_TRUTH.md)."""

from __future__ import annotations

import pytest
from conftest import load_shared

from traceanalyzer.analyzers import hotspots
from traceanalyzer.findings import PUSH_THRESHOLD, Severity


def test_gpt_train_top_ops_match_key_averages(gpt_train):
    found = hotspots.findings(gpt_train)
    by_name = {f.where["name"]: f for f in found}
    assert [f.where["name"] for f in found[:3]] == ["aten::mm", "aten::mul", "aten::copy_"]
    assert by_name["aten::mm"].evidence["total_ns"] == pytest.approx(52.95e6, rel=0.005)
    assert by_name["aten::mm"].evidence["count"] == 513
    assert by_name["aten::mul"].evidence["total_ns"] == pytest.approx(37.76e6, rel=0.005)
    assert by_name["aten::copy_"].evidence["total_ns"] == pytest.approx(35.34e6, rel=0.005)
    assert [by_name[n].where["category"] for n in ("aten::mm", "aten::mul", "aten::copy_")] == [
        "gemm",
        "elementwise",
        "copy",
    ]
    assert "tensor cores" in by_name["aten::mm"].advice
    assert "torch.compile" in by_name["aten::mul"].advice
    assert ".contiguous()" in by_name["aten::copy_"].advice


def test_hotspots_under_five_percent_are_reported_not_pushed(gpt_train):
    found = [f for f in gpt_train.findings() if f.analyzer == "hotspots"]
    assert found
    for f in found:
        pushed = f.severity in (Severity.HIGH, Severity.MEDIUM)
        assert pushed == f.pushed == (f.step_share >= PUSH_THRESHOLD and not f.covered_by), f.title


def test_a_gemm_hotspot_saving_is_modelled_against_the_peak_and_others_are_not_estimated(gpt_train):
    by_name = {f.where["name"]: f for f in hotspots.findings(gpt_train)}
    mm = by_name["aten::mm"]
    assert mm.basis.value == "modelled" and "80% of the device's dense bf16 peak" in mm.model
    assert 0 < mm.saving_ns < mm.concerns_ns
    assert by_name["aten::mul"].basis.value == "not estimated" and by_name["aten::mul"].saving_ns == 0


def test_many_tiny_calls_rank_by_total():
    trace = load_shared("h200", "launch_bound", "launch_bound.json.gz")
    found = hotspots.findings(trace)
    assert {f.where["name"] for f in found} == {"aten::mul", "aten::add", "aten::sin", "aten::clamp"}
    assert all(f.evidence["count"] == 750 and f.evidence["mean_ns"] < 2000 for f in found)
    assert [f.concerns_ns for f in found] == sorted((f.concerns_ns for f in found), reverse=True)


def test_category_hotspots(gpt_train):
    table = {row["name"]: row for row in gpt_train.hotspots("category").to_dict(orient="records")}
    assert {"gemm", "elementwise", "copy", "attention"} <= set(table)
    assert sum(row["share"] for row in table.values()) == pytest.approx(1.0)
