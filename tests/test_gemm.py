"""Achieved GEMM throughput from recorded shapes, checked against torch's own FLOP count and the measured rates."""

from __future__ import annotations

import csv
import gzip
import json
import re

import pytest

import traceanalyzer as ta
from tests.conftest import REPO, job_pair, joined_findings, load_shared, same_section, shared_path
from traceanalyzer import devices
from traceanalyzer.analyzers import gemm, hotspots


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
    mm = next(f for f in joined_findings(hotspots, gpt_train) if f.where["name"] == "aten::mm")
    assert mm.advice.startswith("It runs at 755 TFLOP/s (bf16), 76% of the device's dense bf16 peak.")


TF32 = REPO / "sample_traces" / "tf32_matmul"


@pytest.fixture(scope="module")
def tf32() -> tuple[ta.Trace, dict]:
    meta = json.loads((TF32 / "tf32_matmul.meta.json").read_text())
    return ta.load(TF32 / "tf32_matmul.json.gz"), meta


def test_tf32_tensor_core_gemms_are_measured_against_the_tf32_peak(tf32):
    trace, meta = tf32
    row = _row(trace)
    assert "tf32" in meta["kernels"][0]  # cuBLAS ran the fp32 inputs on TF32 tensor cores (allow_tf32)
    assert row["dtype"] == "tf32" and row["calls"] == meta["key_averages_mm"]["count"] == 16
    assert row["tflops"] == pytest.approx(meta["mm_tflops_key_averages"], rel=0.001)  # 405 TFLOP/s
    assert row["peak_tflops"] == devices.lookup("NVIDIA H200").peak_tflops["tf32"] == 494.0
    assert row["peak_share"] == pytest.approx(405.3 / 494, rel=0.01) and row["note"] == ""  # not "605 % of fp32"


def test_a_rate_above_the_peak_is_clipped_with_a_note(tf32, monkeypatch):
    trace, _ = tf32
    low = devices.Device("H200", {"tf32": 200.0}, 4.8e12, 132)
    monkeypatch.setattr(devices, "FAMILIES", ((re.compile("H200"), low),))
    row = _row(trace.scoped(rank=0))  # a fresh view: the whole trace's table is remembered
    assert row["tflops"] > 400 and row["peak_share"] == 1.0 and row["note"] == gemm.ABOVE_PEAK
    mm = next(f for f in joined_findings(hotspots, trace.scoped(rank=0)) if f.where["name"] == "aten::mm")
    assert "100% of the device's dense tf32 peak — above the data-sheet peak" in mm.advice
    assert mm.basis.value == "not estimated" and mm.saving_ns == 0  # no saving modelled from a suspect rate


def test_every_dtype_has_a_peak_on_the_devices_that_document_it():
    for name in ("NVIDIA H200", "NVIDIA H100 80GB HBM3", "NVIDIA B200", "AMD Instinct MI300X"):
        assert {"bf16", "fp16", "tf32", "fp32", "fp8"} <= set(devices.lookup(name).peak_tflops), name
    assert "fp8" not in devices.lookup("NVIDIA A100-SXM4-80GB").peak_tflops  # Ampere has no fp8
    assert devices.lookup("NVIDIA A100-SXM4-80GB").bandwidth > devices.lookup("NVIDIA A100-SXM4-40GB").bandwidth
    assert set(devices.lookup("Tesla V100-SXM2-16GB").peak_tflops) == {"fp16", "fp32", "fp64"}
    assert devices.lookup("NVIDIA H100 PCIe").family == "H100 PCIe" and devices.lookup("Ascend910B3").bandwidth
    for _, device in devices.FAMILIES:
        peaks = device.peak_tflops
        assert all(peaks[d] <= peaks["bf16"] for d in ("tf32", "fp32") if d in peaks and "bf16" in peaks)


UNFUSED = REPO / "sample_traces" / "unfused_ops.json.gz"


def test_attention_bmm_is_judged_against_bandwidth_and_a_large_gemm_against_the_peak():
    shapes = gemm.gemm_roofline(ta.load(UNFUSED))
    h200 = devices.lookup("NVIDIA H200")
    scores = shapes[(shapes["op"] == "aten::bmm") & (shapes["n"] == 1024)].iloc[0]  # Q·Kᵀ, 128 heads of 1024x64
    assert (scores["batch"], scores["m"], scores["k"], scores["bound"]) == (128, 1024, 64, "memory")
    per_call = 2 * 128 * (1024 * 64 + 64 * 1024 + 1024 * 1024)  # bf16 inputs and output, each moved once
    assert scores["bytes"] == per_call * scores["calls"]
    assert scores["intensity"] < scores["ridge"] == pytest.approx(989e12 / 4.8e12)
    assert scores["limit_ns"] == pytest.approx(scores["bytes"] / h200.bandwidth * 1e9)
    assert scores["limit_share"] == pytest.approx(scores["gbps"] * 1e9 / h200.bandwidth)  # ~75 % of HBM peak
    big = gemm.gemm_roofline(load_shared("h200", "bf16_matmul", "bf16_matmul.json.gz")).iloc[0]
    assert big["bound"] == "compute" and big["limit_tflops"] == 989.0
    assert big["limit_share"] == pytest.approx(big["tflops"] / 989.0)


def test_the_throughput_table_says_which_limit_binds_each_op():
    table = gemm.gemm_throughput(ta.load(UNFUSED)).set_index("op")
    assert table.loc["aten::bmm", "bound"] == "memory" and table.loc["aten::mm", "bound"] == "compute"
    bmm = table.loc["aten::bmm"]
    assert bmm["limit_share"] > 0.7 > 3 * bmm["peak_share"]  # 76 % of bandwidth, not "21 % of the tensor peak"


LEVEL1 = ("public", "ascend", "msinsight", "pytorch_text", "level1", "rank0_ascend_pt")
CUPTI = ("public", "torch", "hta", "cupti_profiler", "benchmark_result_924719_1679055439_trace.json.gz")
TENSOR_PIPE = "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active"
SM = "sm__throughput.avg.pct_of_peak_sustained_elapsed"
DRAM = "dram__throughput.avg.pct_of_peak_sustained_elapsed"


def _measured(report: dict) -> dict:
    table = next(t for t in report["sections"]["gemm"]["tables"] if t["id"] == "gemm_measured")
    return {r["kernel"]: r for r in table["rows"]}


def _weighted(rows: list[dict], column: str) -> float:
    weights = [float(r["Duration(us)"]) for r in rows]
    return sum(float(r[column]) * w for r, w in zip(rows, weights, strict=True)) / sum(weights)


@pytest.mark.parametrize("level", ["level1", "level2"])
def test_ascend_matmuls_are_measured_by_their_pmu_mac_ratio_in_the_gemm_section(level):
    """msinsight text samples with PMU columns, shapes not recorded on their ops: the GEMM section still lists each
    MatMul kernel, its efficiency the duration-weighted aic_mac_ratio of its kernel_details rows (basis says so),
    and its bound msprof's memory_bound (mte2 / max(mac, vec)) over those rows."""
    parts = (*LEVEL1[:-2], level, LEVEL1[-1])
    folder = shared_path(*parts, "ASCEND_PROFILER_OUTPUT")
    with open(folder / "kernel_details.csv", newline="") as f:
        details = list(csv.DictReader(f))
    measured = _measured(load_shared(*parts).report())
    matmuls = {r["Name"] for r in details if "MatMul" in r["Name"] and r.get("aic_mac_ratio", "N/A") != "N/A"}
    assert matmuls and matmuls <= set(measured)
    for name in matmuls:
        mine = [r for r in details if r["Name"] == name]
        mac, vec = _weighted(mine, "aic_mac_ratio"), _weighted(mine, "aiv_vec_ratio")
        mte2 = max(_weighted(mine, "aic_mte2_ratio"), _weighted(mine, "aiv_mte2_ratio"))
        row = measured[name]
        assert row["efficiency"] == pytest.approx(mac, rel=1e-6), name
        assert row["efficiency_basis"].startswith("measured (aic_mac_ratio, from kernel_details PMU")
        assert row["bound"] == ("memory" if mte2 / max(mac, vec) > 1 else "compute")
        assert row["device_ns"] == pytest.approx(sum(float(r["Duration(us)"]) for r in mine) * 1000, abs=len(mine))
    assert not any("Conv2D" in k for k in measured)  # convolutions are not matrix multiplies here


def test_cupti_range_gemms_count_their_flops_and_say_why_no_efficiency():
    """HTA's A100 cupti_profiler sample: its sgemm ranges' FP instruction counters give the FLOPs they executed
    (2 per FFMA, 1 per FADD/FMUL; fp32 SIMT math); the ranges are the replay pass's, no kernel time is recorded, so
    the efficiency is not claimed and the basis says why."""
    events = json.loads(gzip.decompress(shared_path(*CUPTI).read_bytes()))["traceEvents"]
    name = "ampere_sgemm_32x32_sliced1x4_tn"
    ranges = [e["args"] for e in events if e.get("cat") == "cuda_profiler_range" and e["name"] == name]
    op = "smsp__sass_thread_inst_executed_op_{}_pred_on.sum"
    flops = sum(2 * a[op.format("ffma")] + a[op.format("fadd")] + a[op.format("fmul")] for a in ranges)
    row = _measured(load_shared(*CUPTI).report())[name]
    assert (row["calls"], row["measured_flops"], row["flops_math"]) == (len(ranges), flops, "fp32")
    assert row["peak_tflops"] == 19.5 and row["efficiency"] is None and row["device_ns"] is None
    assert row["efficiency_basis"].startswith("not measured: FLOPs counted, no kernel time recorded")


def _with_gemm_ranges(tmp_path):
    """Derived fixture: our gpu_bound recording (H200, bf16 aten::mm) with a CUPTI range over each of its nvjet
    GEMM kernels, tensor pipe 62.5 %, SM 70 %, DRAM 20 % of peak."""
    source = REPO / "sample_traces" / "gpu_bound" / "gpu_bound.json.gz"
    data = json.loads(gzip.decompress(source.read_bytes()))
    gemms = [e for e in data["traceEvents"] if e.get("cat") == "kernel" and e["name"].startswith("nvjet")]
    data["traceEvents"] += [
        {"ph": "X", "cat": "cuda_profiler_range", "name": k["name"], "pid": k["pid"], "tid": k["tid"], "ts": k["ts"],
         "dur": k["dur"], "args": {TENSOR_PIPE: 62.5, SM: 70.0, DRAM: 20.0}}
        for k in gemms
    ]  # fmt: skip
    path = tmp_path / "gpu_bound_gemm_ranges.json.gz"
    path.write_bytes(gzip.compress(json.dumps(data).encode()))
    return path


def test_gemm_tables_take_measured_efficiency_and_bound_where_counters_measured_the_kernels(tmp_path):
    """The throughput and roofline rows of the GEMMs whose kernels have counters say measured (tensor pipe share,
    compute-bound as SM > DRAM throughput); the same recording without counters says modelled (FLOPs / peak, the
    roofline's limit share and intensity vs ridge)."""
    measured = ta.load(_with_gemm_ranges(tmp_path)).report()
    modelled = ta.load(REPO / "sample_traces" / "gpu_bound").report()
    for table in ("gemm_throughput", "gemm_roofline"):
        got = next(t for t in measured["sections"]["gemm"]["tables"] if t["id"] == table)["rows"]
        was = next(t for t in modelled["sections"]["gemm"]["tables"] if t["id"] == table)["rows"]
        assert len(got) == len(was) > 0
        for new, old in zip(got, was, strict=True):
            assert new["efficiency"] == pytest.approx(0.625)
            assert new["efficiency_basis"] == "measured (tensor pipe % of peak, from CUPTI range profiler)"
            assert (new["bound"], new["bound_basis"]) == ("compute", "measured (CUPTI range profiler)")
            share = "limit_share" if table == "gemm_roofline" else "peak_share"
            assert old["efficiency"] == old[share] and new[share] == old[share]
            assert old["efficiency_basis"] == (
                gemm.MODELLED_ROOFLINE if table == "gemm_roofline" else gemm.MODELLED_PEAK
            )
            assert old["bound_basis"] == gemm.MODELLED_BOUND
    assert "gemm_measured" not in {t["id"] for t in modelled["sections"]["gemm"]["tables"]}


@pytest.mark.parametrize("name", ["ascend_pp2_4rank", "ascend_level1_2rank"])
def test_a_job_analysed_rank_by_rank_has_the_joined_measured_gemm_section(name):
    job, joined = job_pair(name)
    section = same_section(gemm, job, joined)
    assert section is not None and any(t["id"] == "gemm_measured" for t in section["tables"])


def test_our_h200_gpm_recording_judges_its_gemm_by_the_measured_tensor_pipe():
    """sample_traces/counters/gemm_bound (NVML GPM counter track on the H200): the aten::mm rows of both tables are
    measured, their efficiency the tensor-pipe share the counters attribute to its kernel, within 5 points of Nsight
    Compute's tensor-pipe figure for that kernel (``ncu_truth``), compute-bound; the model's peak share stays beside
    it."""
    folder = REPO / "sample_traces" / "counters"
    truth = json.loads((folder / "gemm_bound.meta.json").read_text())["ncu_truth"]
    report = ta.load(folder / "gemm_bound.json.gz").report()
    kernel = _measured(report)[truth["kernel"]]
    assert kernel["efficiency"] == pytest.approx(truth["tensor_hmma_active_pct"] / 100, abs=0.05)
    for table in ("gemm_throughput", "gemm_roofline"):
        row = next(t for t in report["sections"]["gemm"]["tables"] if t["id"] == table)["rows"][0]
        assert row["op"] == "aten::mm" and row["efficiency"] == pytest.approx(kernel["efficiency"])
        assert row["efficiency_basis"] == "measured (tensor pipe % of peak, from Kineto counter track)"
        assert (row["bound"], row["bound_basis"]) == ("compute", "measured (Kineto counter track)")
        assert row["limit_share"] < row["efficiency"]  # the model's share of the peak, from FLOPs over device time
