"""Invariants every report keeps, on every real trace in ../shared (Kineto files and rank folders, Ascend runs) and
on the samples: the overlap breakdown adds up to the step, no time is negative, every share is in [0, 1], no GEMM
runs above its peak, the hotspot tables add up to the trace's device time, the same input gives the same report
(also through the cache), and the pushed findings' savings fit in the step time of each rank (issue 11).

The traces whose report takes several seconds on the 2-core CI machine (``HEAVY``) run only with
``TRACEANALYZER_HEAVY=1``; the rest runs in about two minutes."""

from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path

import numpy as np
import pytest

import traceanalyzer as ta
from tests.conftest import REPO, SAMPLE_COLLECTIONS, SHARED, load_shared
from tests.test_ascend import ANALYZE, LOADABLE, LOADABLE_ANALYZE, MSINSIGHT
from tests.test_kineto_corpus import _corpus, _not_trace
from traceanalyzer.schema import DEVICE_KINDS, NO_ROW
from traceanalyzer.section import Unit
from traceanalyzer.vocabulary import GRAPH_REPLAYED

SAMPLES = REPO / "sample_traces"
HEAVY = {
    "sample:fsdp",
    *("h200/big/big.json.gz", "h200/gpt_train/gpt_train.json.gz", "h200/ddp_overlap", "h200/ddp_no_overlap"),
    *(f"h200/{run}/{run}_rank{r}.json.gz" for run in ("ddp_overlap", "ddp_no_overlap") for r in (0, 1)),
    "public/ascend/msinsight/pytorch_text/level1",
    *(f"public/ascend/msinsight/pytorch_db/level2/rank{r}_ascend_pt" for r in (0, 1)),
    *(
        f"public/torch/hta/{name}.json.gz"
        for name in (
            "df_index_resolver/df_index_resolver",
            "negative_queue_length_values_check/rank0",
            "trace_diff/control/control",
            "trace_diff/test/test",
        )
    ),
    *(f"public/torch/param/{name}_kineto.json.gz" for name in ("linear", "resnet")),
    "public/torch/kineto_tb_plugin/samples/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz",
    *(
        f"public/torch/tracelens/{name}.json.gz"
        for name in (
            "h100/google_owlv2-large-patch14-ensemble__1016001",
            "mi300/google_owlv2-large-patch14-ensemble__1016001",
            "mi300/resnet_act_checkpoint",
            "perf_model/normalization/normalization_layer_test",
            "inference/xdit_flux.1_aiter_sage/profile_trace_rank_0",
            "inference/xdit_sd_3.5/profile_trace_rank_0",
        )
    ),
}
"""Traces whose load and report took over ~2.5 s on this 2-core machine under load (at 678606a; the xdit ones then
took over 2 minutes each): they run with TRACEANALYZER_HEAVY=1 (all of them together: about 2 minutes more)."""
REPEATED = {
    "sample:sync_stalls.json.gz",
    "sample:data_loader",
    "sample:memory_snapshot/oom.snapshot.pickle",
    "public/torch/hta/trace_filter",
    "public/torch/hta/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz",
    "public/ascend/msinsight/pytorch_text/level1/rank1_ascend_pt",
    "public/ascend/msinsight/pytorch_db/level1/rank0_ascend_pt",
    "public/ascend/msinsight/server_fixtures/full_db/msprof_0.db",
}
"""One of each input type, loaded twice more (through the cache) to show the report does not change."""
SIGNED = {("distributed", "clock_offsets", "offset_ns")}
"""Time columns that are signed by definition (a rank's clock ahead of or behind rank 0's)."""
SLACK_NS = 2
"""Integer rounding allowed per component of a breakdown."""
EPS = 1e-9
DEVICE = [k.value for k in DEVICE_KINDS]


def _kineto() -> list[Path]:
    """Every Kineto trace file, and every folder of per-rank traces (files named alike but for their digits)."""
    files = [p for p in _corpus() if not _not_trace(p)]
    named = {p.parent: {re.sub(r"\d+", "#", q.name) for q in files if q.parent == p.parent} for p in files}
    ranks = sorted(f for f, names in named.items() if len(names) == 1 and sum(q.parent == f for q in files) > 1)
    return files + ranks


def _ascend() -> list[Path]:
    return [SHARED.joinpath(*MSINSIGHT, *parts) for parts in LOADABLE] + [
        SHARED.joinpath(*ANALYZE, *parts) for parts in LOADABLE_ANALYZE
    ]


def _samples() -> list[Path]:
    runs = [p for p in SAMPLES.iterdir() if p.is_dir() and p.name not in SAMPLE_COLLECTIONS]
    snapshots = [p for p in (SAMPLES / "memory_snapshot").iterdir() if p.name.endswith((".pickle", ".json.gz"))]
    separate = sorted(SAMPLES.glob("inference/*.json.gz")) + sorted(SAMPLES.glob("pairs/*/problem.json.gz"))
    return sorted(runs + list(SAMPLES.glob("*.json.gz")) + snapshots + separate)


def _name(path: Path) -> str:
    if path.is_relative_to(SAMPLES):
        return f"sample:{path.relative_to(SAMPLES)}"
    return str(path.relative_to(SHARED))


def _cases(only: set[str] | None = None, test: str = "") -> list:
    paths = _samples() + (_kineto() + [p for p in _ascend() if p.exists()] if SHARED.exists() else [])
    heavy = os.environ.get("TRACEANALYZER_HEAVY") == "1"
    skip = pytest.mark.skip(reason="heavy trace (its report takes several seconds): TRACEANALYZER_HEAVY=1 runs it")
    return [
        pytest.param(p, id=_name(p), marks=_marks(_name(p), test, skip if not heavy else None))
        for p in paths
        if only is None or _name(p) in only
    ]


def _marks(name: str, test: str, skip) -> list:
    marks = [skip] if skip and name in HEAVY else []
    return marks


_REPORTS: dict[Path, dict] = {}
_SAMPLES: dict[Path, ta.Trace] = {}


def _trace(path: Path) -> ta.Trace:
    """The trace, loaded once per session (shared traces through conftest's session cache)."""
    if not path.is_relative_to(SAMPLES):
        return load_shared(*path.relative_to(SHARED).parts)
    if path not in _SAMPLES:
        _SAMPLES[path] = ta.load(path)
    return _SAMPLES[path]


def _report(path: Path) -> dict:
    if path not in _REPORTS:
        _REPORTS[path] = _trace(path).report()
    return _REPORTS[path]


def _tables(report: dict):
    """(section id, table id, column name, unit, values) of every column of every section table."""
    for sid, sec in report["sections"].items():
        for table in sec["tables"]:
            for col in table["columns"]:
                yield sid, table["id"], col["name"], col["unit"], [r.get(col["name"]) for r in table["rows"]]


def _numbers(values: list) -> np.ndarray:
    return np.array([v for v in values if isinstance(v, int | float) and not isinstance(v, bool)], dtype=float)


@pytest.mark.parametrize("path", _cases())
def test_overlap_breakdown_adds_up_to_the_step(path):
    """Per rank and step: compute + exposed communication + exposed copies + idle = the step span = step_ns."""
    trace = _trace(path)
    overlap = trace.overlap()
    if not len(overlap):
        pytest.skip("no steps with device work: no overlap breakdown")
    parts = ["compute_only_ns", "comm_hidden_ns", "comm_exposed_ns", "memory_exposed_ns", "idle_ns"]
    total = overlap[parts].sum(axis=1)
    off = overlap[(total - overlap["span_ns"]).abs() > SLACK_NS * len(parts)]
    assert off.empty, off[["rank", "step", "span_ns", *parts]].to_dict("records")
    steps = trace.steps().set_index(["rank", "step"])["step_ns"]
    span = overlap[overlap["step"] != NO_ROW].set_index(["rank", "step"])["span_ns"]  # NO_ROW: no step markers
    joined = steps.to_frame().join(span, how="inner")
    assert len(joined) == len(span), "overlap rows for steps the step table does not have"
    wrong = joined[joined["step_ns"] != joined["span_ns"]]
    assert wrong.empty, wrong.head(5).to_dict("index")


@pytest.mark.parametrize("path", _cases(test="shares"))
def test_no_negative_time_and_every_share_within_0_and_1(path):
    report = _report(path)
    bad = []
    for sid, tid, name, unit, values in _tables(report):
        numbers = _numbers(values)
        if unit == Unit.NS.value and (sid, tid, name) not in SIGNED and (numbers < 0).any():
            bad.append(f"{sid}.{tid}.{name} min {numbers.min():,.0f} ns")
        if unit == Unit.SHARE.value and ((numbers < -EPS) | (numbers > 1 + EPS)).any():
            bad.append(f"{sid}.{tid}.{name} in [{numbers.min():.6g}, {numbers.max():.6g}]")
    for sid, sec in report["sections"].items():
        for fact in sec["facts"]:
            value = fact["value"]
            if not isinstance(value, int | float) or isinstance(value, bool):
                continue
            if fact["unit"] == Unit.NS.value and value < 0:
                bad.append(f"{sid} fact {fact['id']} = {value:,} ns")
            if fact["unit"] == Unit.SHARE.value and not -EPS <= value <= 1 + EPS:
                bad.append(f"{sid} fact {fact['id']} = {value}")
    for f in report["findings"]:
        if min(f["concerns_ns_per_step"], f["saving_ns_per_step"], f["step_ns"]) < 0:
            bad.append(f"finding {f['id']}: concerns {f['concerns_ns_per_step']}, saving {f['saving_ns_per_step']}")
        if not -EPS <= f["step_share"] <= 1 + EPS:
            bad.append(f"finding {f['id']} step_share {f['step_share']}")
    assert not bad, bad


@pytest.mark.parametrize("path", _cases())
def test_no_gemm_runs_above_the_device_peak(path):
    gemm = _trace(path).gemm()
    if not len(gemm):
        pytest.skip("no GEMM with recorded shapes")
    known = gemm[gemm["peak_tflops"].notna() & (gemm["peak_tflops"] > 0)]
    over = known[known["tflops"] > known["peak_tflops"] * (1 + EPS)]
    assert over.empty, over[["op", "dtype", "calls", "device_ns", "tflops", "peak_tflops"]].to_dict("records")
    assert (known["peak_share"] <= 1 + EPS).all()


@pytest.mark.parametrize("path", _cases(test="hotspots"))
def test_hotspot_tables_add_up_to_the_device_time(path):
    trace = _trace(path)
    device = trace.events[trace.events["kind"].isin(DEVICE)]
    kernels = trace.hotspots("kernel")
    assert kernels["total_ns"].sum() == device["dur"].sum()
    assert kernels["count"].sum() == len(device)
    assert trace.hotspots("category")["total_ns"].sum() == device["dur"].sum()
    by_op = trace.hotspots("op_device")
    launched = by_op[by_op["name"] != GRAPH_REPLAYED]
    assert launched["total_ns"].sum() == device.loc[device["op"] != NO_ROW, "dur"].sum()
    assert by_op["total_ns"].sum() <= device["dur"].sum()
    for level in ("kernel", "cpu_op", "op_device", "category"):
        table = trace.hotspots(level)
        assert (table["total_ns"] >= 0).all(), table.loc[table["total_ns"] < 0, ["name", "total_ns"]].to_dict("records")
        if not len(table) or not table["total_ns"].sum():
            continue
        assert np.allclose(table["share"], table["total_ns"] / table["total_ns"].sum()), level
        assert math.isclose(table["cum_share"].iloc[-1], 1.0), level
        assert (table["min_ns"] <= table["mean_ns"] + EPS).all() if "min_ns" in table else True
    shown = next(t for t in _report(path)["sections"]["hotspots"]["tables"] if t["id"] == "kernel")["rows"]
    assert [r["total_ns"] for r in shown] == kernels["total_ns"].head(len(shown)).tolist()


@pytest.mark.parametrize("path", _cases(test="savings"))
def test_pushed_savings_fit_in_the_step_time_of_each_rank(path):
    """Issue 11: what the pushed findings promise to save, added up, is at most the step time, rank by rank (a
    finding of the whole job counts against every rank)."""
    trace = _trace(path)
    pushed = [f for f in _report(path)["findings"] if f["pushed"]]
    steps = trace.steps()
    for rank in trace.meta.ranks:
        mine = [f for f in pushed if f["where"].get("rank") in (rank, None)]
        saving = sum(f["saving_ns_per_step"] for f in mine)
        budget = max([f["step_ns"] for f in mine if f["where"].get("rank") == rank], default=0) or max(
            [f["step_ns"] for f in mine], default=0
        )
        assert saving <= budget, (rank, budget, [(f["id"], f["where"], f["saving_ns_per_step"]) for f in mine])
        if len(steps[steps["rank"] == rank]) and mine:
            per_step = steps.loc[steps["rank"] == rank, "step_ns"]
            assert saving <= per_step.max(), (rank, saving, per_step.tolist())


@pytest.mark.parametrize("path", _cases(REPEATED))
def test_the_same_input_gives_the_same_report_twice_and_from_the_cache(path, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    first = json.dumps(_report(path), sort_keys=True)
    written = json.dumps(ta.load(path, cache=True).report(), sort_keys=True)
    assert any((tmp_path / "cache").rglob("*")), "the cache kept nothing"
    read = json.dumps(ta.load(path, cache=True).report(), sort_keys=True)
    assert written == first
    assert read == first
