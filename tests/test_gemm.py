"""Achieved GEMM throughput from recorded shapes, checked against torch's own FLOP count and the measured rates."""

from __future__ import annotations

import json

import pytest

from tests.conftest import load_shared, shared_path
from traceanalyzer.analyzers import gemm


def _row(trace, op="aten::mm"):
    table = gemm.gemm_throughput(trace)
    return table[table["op"] == op].iloc[0]


def test_flops_equal_key_averages(gpt_train):
    meta = json.loads(shared_path("h200", "gpt_train", "gpt_train.meta.json").read_text())
    expected = next(r["flops"] for r in meta["key_averages_top_by_self_device_time"] if r["name"] == "aten::mm")
    row = _row(gpt_train)
    assert (row["dtype"], row["calls"]) == ("bf16", 513)
    assert row["flops"] == expected


def test_fp32_gemms_run_near_the_simt_rate_and_bf16_near_the_tensor_core_peak():
    fp32 = _row(load_shared("h200", "fp32_matmul", "fp32_matmul.json.gz"))
    bf16 = _row(load_shared("h200", "bf16_matmul", "bf16_matmul.json.gz"))
    assert fp32["dtype"] == "fp32" and fp32["tflops"] == pytest.approx(51.5, rel=0.05)  # 176.15 ms for 33 GEMMs
    assert bf16["dtype"] == "bf16" and bf16["peak_share"] > 0.7
    assert bf16["tflops"] > 10 * fp32["tflops"]


def test_report_section_lists_the_gemm_ops(gpt_train):
    report = gpt_train.report()
    rows = report["sections"]["gemm"]["tables"][0]["rows"]
    assert rows[0]["op"] == "aten::mm" and rows[0]["peak_tflops"] == 989.0


def test_gemm_hotspot_finding_quotes_the_achieved_rate(gpt_train):
    from traceanalyzer.analyzers import hotspots

    mm = next(f for f in hotspots.findings(gpt_train) if f.where["name"] == "aten::mm")
    assert mm.advice.startswith("It runs at 755 TFLOP/s (bf16), 76% of the device's dense bf16 peak.")
