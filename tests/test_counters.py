"""Hardware counters: read from each source, counted in the ledger, attributed to kernels and steps, and the hot
kernels' efficiency marked measured or modelled.

References are the files themselves, read here independently of the parsers: kernel_details.csv's PMU columns
(Ascend, msinsight level1/level0), the CUPTI range-profiler args of HTA's cupti_profiler sample (A100). No public
Kineto trace has counter tracks (``"ph": "C"``): those tests use a fixture derived from our own recording
(sample_traces/gpu_bound) with counter events added at the kernels' times, documented as derived.
"""

from __future__ import annotations

import csv
import decimal
import gzip
import json
import math
import sqlite3
import warnings

import msgspec
import pytest
from traceanalyzer.parsers.ascend import sqlite as sqlite_reader

import traceanalyzer as ta
from tests.conftest import REPO, facts, job_pair, load_shared, rows, same_section, shared_path
from traceanalyzer.analyzers import counters
from traceanalyzer.schema import COUNTER_COLUMNS, EVENT_COLUMNS, SIDE_TABLES, Kind

LEVEL1 = ("public", "ascend", "msinsight", "pytorch_text", "level1", "rank0_ascend_pt")
CUPTI = ("public", "torch", "hta", "cupti_profiler", "benchmark_result_924719_1679055439_trace.json.gz")
PMU_HEADERS = ("aic_", "aiv_", "aicore_time", "cube_utilization", "memory_bound")


def _kernel_details(level: str) -> list[dict]:
    folder = shared_path(*LEVEL1[:-2], level, "rank0_ascend_pt", "ASCEND_PROFILER_OUTPUT")
    with open(folder / "kernel_details.csv", newline="") as f:
        return list(csv.DictReader(f))


def _numeric(text: str) -> bool:
    try:
        return math.isfinite(float(text))
    except ValueError:
        return False


def _l2_cache(level: str) -> list[dict]:
    folder = shared_path(*LEVEL1[:-2], level, "rank0_ascend_pt", "ASCEND_PROFILER_OUTPUT")
    with open(folder / "l2_cache.csv", newline="") as f:
        return list(csv.DictReader(f))


def test_ascend_pmu_columns_and_l2_rates_are_counted_in_the_ledger():
    """Every numeric PMU cell of kernel_details.csv and every numeric L2 rate of l2_cache.csv is one sample."""
    report = load_shared(*LEVEL1).report()
    cells = sum(_numeric(v) for row in _kernel_details("level1") for k, v in row.items() if k.startswith(PMU_HEADERS))
    l2 = sum(_numeric(row[k]) for row in _l2_cache("level1") for k in ("Hit Rate", "Victim Rate"))
    assert cells > 4000 and l2 > 100
    assert facts(report, "ledger")["counter_samples"] == facts(report, "counters")["counter_samples"] == cells + l2
    sources = {r["source"]: r["samples"] for r in rows(report, "counters", "sources")}
    assert sources == {"kernel_details PMU": cells, "l2_cache.csv": l2}


def test_l2_victim_rate_of_a_kernel_is_its_l2_cache_rows():
    """l2_cache.csv names each task by stream, task id and op name: its victim rate is a sample of that kernel,
    over the kernel's interval (the level1 sample writes no hit rate: N/A)."""
    trace = load_shared(*LEVEL1)
    samples = trace.select(kind=Kind.COUNTER.value)
    victim = samples[samples["name"] == "l2_victim_rate"]
    want = sorted((r["Op Name"], float(r["Victim Rate"])) for r in _l2_cache("level1") if _numeric(r["Victim Rate"]))
    assert sorted(zip(victim["measured"].astype(str), victim["value"], strict=True)) == want
    kernels = trace.select(kind=Kind.KERNEL.value)
    spans = set(zip(kernels["ts"], kernels["dur"], strict=True))
    assert all(span in spans for span in zip(victim["ts"], victim["dur"], strict=True))
    assert not (samples["name"] == "l2_hit_rate").any()


def test_ascend_hot_matmul_efficiency_is_measured_from_its_pmu_columns():
    """A MatMul's cube (MAC) busy share is the duration-weighted mean of its aic_mac_ratio cells."""
    table = {r["kernel"]: r for r in rows(load_shared(*LEVEL1).report(), "counters", "efficiency")}
    name = next(k for k in table if "MatMul" in k)
    mine = [r for r in _kernel_details("level1") if r["Name"] == name]
    weights = [float(r["Duration(us)"]) for r in mine]
    mac = sum(float(r["aic_mac_ratio"]) * w for r, w in zip(mine, weights, strict=True)) / sum(weights)
    cube = sum(float(r["cube_utilization(%)"]) * w for r, w in zip(mine, weights, strict=True)) / sum(weights)
    assert table[name]["basis"] == "measured (kernel_details PMU, l2_cache.csv)"
    assert table[name]["mac_busy_share"] == pytest.approx(mac, rel=1e-6)
    assert table[name]["cube_utilization_share"] == pytest.approx(cube / 100, rel=1e-6)
    assert 0 < mac < 1 and table[name]["memory_bound"] > 0


def test_without_counters_the_ledger_says_0_and_there_is_no_counter_section():
    """Level 0 records no PMU columns: no counters, ledger says 0, the section is left out (and no analyzer fails)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        report = load_shared(*LEVEL1[:-2], "level0", "rank0_ascend_pt").report()
    assert facts(report, "ledger")["counter_samples"] == 0
    assert "counters" not in report["sections"]


def test_cupti_range_profiler_metrics_are_read_and_attributed_to_their_kernels():
    path = shared_path(*CUPTI)
    events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    ranges = [e for e in events if e.get("cat") == "cuda_profiler_range"]
    metrics = [(e["name"], k, v) for e in ranges for k, v in e["args"].items() if isinstance(v, int | float)]
    assert len(ranges) == 77 and len(metrics) == 693
    report = load_shared(*CUPTI).report()
    assert facts(report, "ledger")["counter_samples"] == 693
    per_kernel = counters.counter_rows(load_shared(*CUPTI))
    ffma = "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum"
    name, _, _ = next(m for m in metrics if m[1] == ffma and m[2] > 0)
    expected = [v for n, k, v in metrics if n == name and k == ffma]
    got = per_kernel[(per_kernel["kernel"] == name) & (per_kernel["name"] == ffma)]["value"]
    assert sorted(got) == sorted(expected)


def _with_counter_track(tmp_path) -> tuple:
    """Derived fixture: our gpu_bound recording with a counter track added, one sample in the middle of each of
    its first 20 kernels (value = the kernel's position) and one sample outside every kernel."""
    source = REPO / "sample_traces" / "gpu_bound" / "gpu_bound.json.gz"
    data = json.loads(gzip.decompress(source.read_bytes()))
    kernels = sorted((e for e in data["traceEvents"] if e.get("cat") == "kernel" and e.get("ph") == "X"),
                     key=lambda e: e["ts"])[:20]  # fmt: skip
    samples = [{"ph": "C", "name": "sm_active", "pid": kernels[0]["pid"], "ts": k["ts"] + k["dur"] / 2,
                "args": {"pct": float(i)}} for i, k in enumerate(kernels)]  # fmt: skip
    first = min(e["ts"] for e in data["traceEvents"] if isinstance(e.get("ts"), int | float))
    samples.append({"ph": "C", "name": "sm_active", "pid": 0, "ts": first - 1, "args": {"pct": 99.0}})
    data["traceEvents"] += samples
    path = tmp_path / "gpu_bound_with_counters.json.gz"
    path.write_bytes(gzip.compress(json.dumps(data).encode()))
    return path, kernels


def test_kineto_counter_track_is_read_counted_and_attributed_to_the_running_kernel(tmp_path):
    path, kernels = _with_counter_track(tmp_path)
    trace = ta.load(path)
    assert facts(trace.report(), "ledger")["counter_samples"] == 21
    attributed = counters.counter_rows(trace).sort_values("ts")
    assert list(attributed["name"].astype(str).unique()) == ["sm_active.pct"]
    inside = attributed[attributed["value"] < 99]
    assert list(inside["kernel"]) == [k["name"] for k in kernels]
    assert attributed[attributed["value"] == 99]["kernel"].tolist() == [""]  # before every kernel: none
    efficiency = {r["kernel"]: r["basis"] for r in rows(trace.report(), "counters", "efficiency")}
    sampled = {k["name"] for k in kernels}
    assert {b for k, b in efficiency.items() if k in sampled} == {"measured (Kineto counter track)"}
    assert {b for k, b in efficiency.items() if k not in sampled} == {counters.MODELLED}


EPOCH_US = decimal.Decimal(1_700_000_000_000_000)


def _epoch_with_counters_at_kernel_starts(tmp_path):
    """Derived fixture: our gpu_bound recording moved onto the epoch (µs with ns digits, beyond 2**43 µs: a float64
    keeps only a quarter µs there), with a counter sample at the exact start of each of its first 20 kernels, as
    written (the kernel's own decimal text)."""
    source = REPO / "sample_traces" / "gpu_bound" / "gpu_bound.json.gz"
    data = msgspec.json.Decoder(float_hook=decimal.Decimal).decode(gzip.decompress(source.read_bytes()))
    for event in data["traceEvents"]:
        if isinstance(event.get("ts"), int | decimal.Decimal):
            event["ts"] += EPOCH_US
    kernels = sorted((e for e in data["traceEvents"] if e.get("cat") == "kernel" and e.get("ph") == "X"),
                     key=lambda e: e["ts"])[:20]  # fmt: skip
    data["traceEvents"] += [{"ph": "C", "name": "sm_active", "pid": k["pid"], "ts": k["ts"], "args": {"pct": i}}
                            for i, k in enumerate(kernels)]  # fmt: skip
    path = tmp_path / "gpu_bound_epoch_counters.json.gz"
    path.write_bytes(gzip.compress(msgspec.json.Encoder(decimal_format="number").encode(data)))
    return path, kernels


def test_counter_samples_keep_the_ns_digits_of_epoch_timestamps(tmp_path):
    """A sample written with its kernel's start time (epoch µs, ns digits) starts at that kernel's ns exactly and
    is attributed to it; through a float64 it would move by up to 125 ns."""
    path, kernels = _epoch_with_counters_at_kernel_starts(tmp_path)
    starts = [int(k["ts"] * 1000) for k in kernels]
    assert any(round(float(k["ts"]) * 1000) != ns for k, ns in zip(kernels, starts, strict=True))
    trace = ta.load(path)
    samples = counters.counter_rows(trace).sort_values("value")
    assert samples["ts"].tolist() == starts
    device = trace.select(kind=Kind.KERNEL.value)
    assert set(starts) <= set(device["ts"].tolist())
    assert samples["kernel"].tolist() == [k["name"] for k in kernels]


def test_ascend_database_pmu_table_is_read_like_the_csv_columns():
    """The database export keeps the PMU values in TASK_PMU_INFO (metric names in STRING_IDS, times in ns): every
    row is a counter sample, and a MatMul's MAC busy share is their duration-weighted mean."""
    folder = shared_path("public", "ascend", "msinsight", "pytorch_db", "level1", "rank0_ascend_pt")
    db = folder / "ASCEND_PROFILER_OUTPUT" / "ascend_pytorch_profiler_0.db"
    query = (
        "select s.value, p.value, t.endNs - t.startNs, n.value from TASK_PMU_INFO p "
        "join STRING_IDS s on s.id = p.name join TASK t on t.globalTaskId = p.globalTaskId "
        "join COMPUTE_TASK_INFO k on k.globalTaskId = p.globalTaskId join STRING_IDS n on n.id = k.name"
    )
    with sqlite3.connect(sqlite_reader.uri(db), uri=True) as con:
        pmu = con.execute(query).fetchall()
    report = load_shared("public", "ascend", "msinsight", "pytorch_db", "level1", "rank0_ascend_pt").report()
    assert facts(report, "ledger")["counter_samples"] == len(pmu) > 5000
    table = {r["kernel"]: r for r in rows(report, "counters", "efficiency")}
    name = next(k for k in table if "MatMul" in k)
    mac = [(value, dur) for metric, value, dur, kernel in pmu if kernel == name and metric == "aic_mac_ratio"]
    assert table[name]["basis"] == "measured (TASK_PMU_INFO PMU)"
    assert table[name]["mac_busy_share"] == pytest.approx(sum(v * d for v, d in mac) / sum(d for _, d in mac))


@pytest.mark.parametrize("name", ["ascend_pp2_4rank", "ascend_level1_2rank"])
def test_a_job_analysed_rank_by_rank_has_the_joined_counters_section(name):
    job, joined = job_pair(name)
    section = same_section(counters, job, joined)
    assert section is not None and section["facts"][0]["value"] > 0


def test_counter_samples_are_event_rows_of_their_own_kind():
    """Each PMU cell is one ``Kind.COUNTER`` row of the event table (time, device, counter name, value, unit, its
    source in ``cat``, the kernel it measured), not a side table; a step's view holds that step's samples."""
    trace = load_shared(*LEVEL1)
    samples = trace.select(kind=Kind.COUNTER.value)
    samples = samples[samples["cat"] == "kernel_details PMU"]
    cells = [(row["Name"], k) for row in _kernel_details("level1") for k, v in row.items()
             if k.startswith(PMU_HEADERS) and _numeric(v)]  # fmt: skip
    assert len(samples) == len(cells) and set(trace.meta.side_tables) <= set(SIDE_TABLES)
    assert {c.name for c in COUNTER_COLUMNS} <= {c.name for c in EVENT_COLUMNS}
    assert samples["value"].notna().all() and trace.events.loc[trace.events["kind"] != "counter", "value"].isna().all()
    assert set(samples["unit"].astype(str)) <= {"ratio", "percent", "ns", "cycles"}
    assert sorted(zip(samples["measured"].astype(str), samples["name"].astype(str), strict=True)) == sorted(
        (kernel, header.removesuffix("(us)").removesuffix("(%)")) for kernel, header in cells
    )
    step = trace.steps_recorded()[0]
    assert len(trace.scoped(step=step).select(kind=Kind.COUNTER.value)) == (trace.events["kind"] == "counter").sum()


QWEN_RANK0 = ("public", "ascend", "msinsight", "st_level2_qwen3_4rank", "rank_0_ascend_pt")


def _weighted(rows: list[dict], column: str) -> float:
    weights = [float(r["Duration(us)"]) for r in rows]
    return sum(float(r[column]) * w for r, w in zip(rows, weights, strict=True)) / sum(weights)


def test_gemm_hotspot_is_judged_by_its_measured_pmu_efficiency_not_the_model():
    """Qwen3 rank 0 (Level2, PipeUtilization): the MatMulV3 hotspot's efficiency is measured: msprof's memory_bound
    (mte2 / max(mac, vec), the kernel_details means weighted by duration) over 1 makes it memory-bound, so its MTE2
    share is what it achieves, and its saving is the time above running that unit at 80 %; the basis says so. A
    GEMM of a trace without counters (our gpu_bound recording) stays modelled by the roofline."""
    folder = shared_path(*QWEN_RANK0, "ASCEND_PROFILER_OUTPUT")
    with open(folder / "kernel_details.csv", newline="") as f:
        name = "aclnnMatmul_MatMulV3Common_MatMulV3"
        mine = [r for r in csv.DictReader(f) if r["Name"] == name]
    mac, vec = _weighted(mine, "aic_mac_ratio"), _weighted(mine, "aiv_vec_ratio")
    mte2 = max(_weighted(mine, "aic_mte2_ratio"), _weighted(mine, "aiv_mte2_ratio"))
    bound = "memory" if mte2 / max(mac, vec) > 1 else "compute"
    achieved = mte2 if bound == "memory" else max(mac, vec)
    trace = load_shared(*QWEN_RANK0)
    finding = next(f for f in trace.findings() if f.analyzer == "hotspots" and f.where["name"] == name)
    assert finding.evidence["efficiency_basis"] == "measured (kernel_details PMU)"
    assert finding.evidence["bound"] == bound
    assert finding.evidence["achieved_share"] == pytest.approx(achieved, rel=1e-6)
    total = sum(float(r["Duration(us)"]) for r in mine) * 1000
    assert finding.saving_ns == pytest.approx(total * max(0.0, 1 - achieved / 0.8), abs=1000)
    assert "its efficiency measured (kernel_details PMU)" in finding.model
    table = {r["kernel"]: r for r in rows(trace.report(), "counters", "efficiency")}
    assert table[name]["bound"] == bound and table[name]["basis"] == "measured (kernel_details PMU)"
    cuda = ta.load(REPO / "sample_traces" / "gpu_bound")
    modelled = next(f for f in cuda.findings() if f.analyzer == "hotspots" and f.where["category"] == "gemm")
    assert modelled.evidence["efficiency_basis"] == "modelled (roofline)" and modelled.basis.value == "modelled"
