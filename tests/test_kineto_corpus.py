"""Every real Kineto trace in ../shared/traces loads (CLI and API); every other file there is refused in one line."""

from __future__ import annotations

import gzip
import json
import re
from decimal import Decimal
from pathlib import Path

import numpy as np
import pytest

import traceanalyzer as ta
from tests.conftest import H200, LEGACY_2021, PUBLIC_TORCH, SHARED, assert_inside_the_trace, facts, load_shared
from traceanalyzer.analyzers import fusion
from traceanalyzer.cli import main
from traceanalyzer.renderers import digest, text
from traceanalyzer.schema import DEVICE_KINDS, NO_ROW, Kind, Platform

NOT_TRACES = {
    r"_et\.json\.gz$": "execution trace",
    r"memory_timeline\.raw\.gz$": "memory timeline",
    r"memory_timeline(\.raw)?\.json\.gz$": "memory timeline",
    r"\.meta\.json$": "JSON object with keys",
    r"summary\.json$": "a JSON array",
    r"\.(md|txt)$": "text that is not JSON",
    r"\.html$": "text that is not JSON",
}
"""Files in the corpus that are not Kineto traces, and what the error must say they look like."""

DEVICE = [k.value for k in DEVICE_KINDS]


def _corpus() -> list[Path]:
    roots = [r for r in (PUBLIC_TORCH, H200) if r.exists()]
    return sorted(p for r in roots for p in r.rglob("*") if p.is_file())


def _not_trace(path: Path) -> str | None:
    return next((said for pattern, said in NOT_TRACES.items() if re.search(pattern, path.name)), None)


def _id(path: Path) -> str:
    return str(path.relative_to(SHARED))


def _traces():
    params = [pytest.param(p, id=_id(p)) for p in _corpus() if not _not_trace(p)]
    return params or [pytest.param(None, marks=pytest.mark.skip(reason="../shared/traces is absent"))]


def _non_traces():
    params = [pytest.param(p, id=_id(p)) for p in _corpus() if _not_trace(p)]
    return params or [pytest.param(None, marks=pytest.mark.skip(reason="../shared/traces is absent"))]


@pytest.mark.parametrize("path", _traces())
def test_every_kineto_trace_loads_via_cli_and_api(path, tmp_path, capsys):
    out = tmp_path / "report.json"
    assert main([str(path), "--format", "json", "-o", str(out)]) == 0
    err = capsys.readouterr().err
    assert "internal error" not in err and "Traceback" not in err
    report = json.loads(out.read_text())
    trace = ta.load(path)
    ev = trace.events
    assert report["trace"]["events"] == len(ev) > 0
    assert (ev["dur"] >= 0).all()
    _assert_launch_links(ev)
    if not trace.meta.rank_known:
        assert trace.meta.ranks == [0] and report["trace"]["rank_known"] is False
    assert digest.tokens(trace.digest()) <= digest.DEFAULT_BUDGET  # the agents' digest fits every real trace
    assert_inside_the_trace(trace)  # no step or finding past the trace's events (issue 23; the digest ran them)
    assert list(trace.fusion().columns) == fusion.OPPORTUNITY_COLUMNS  # the table the findings' fusion analysis made


def _assert_launch_links(ev) -> None:
    """Device work is linked to the runtime call with its correlation id whenever that call was recorded."""
    device = ev[ev["kind"].isin(DEVICE) & (ev["correlation"] != NO_ROW)]
    recorded = device["correlation"].isin(ev.loc[ev["kind"] == Kind.RUNTIME.value, "correlation"])
    assert ((device["launch"] != NO_ROW) == recorded).all()


@pytest.mark.parametrize("path", _non_traces())
def test_non_kineto_files_are_refused_in_one_line(path, capsys):
    assert main([str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert str(path) in err
    assert _not_trace(path) in err


# Schema generations -------------------------------------------------------------------------------------------

FLOW_GENERATIONS = {
    "async (2021, legacy categories)": LEGACY_2021,
    "async_cpu_to_gpu (2022)": ("public", "torch", "hta", "trace_diff", "test", "test.json.gz"),
    "ac2g (2023+)": ("public", "torch", "param", "resnet_kineto.json.gz"),
}


@pytest.mark.parametrize("parts", FLOW_GENERATIONS.values(), ids=FLOW_GENERATIONS.keys())
def test_each_flow_generation_links_kernels_to_their_launch(parts):
    ev = load_shared(*parts).events
    kernels = ev[ev["kind"].isin(DEVICE)]
    linked = kernels["launch"] != NO_ROW
    assert linked.mean() > 0.9
    launches = ev.loc[kernels.loc[linked, "launch"]]
    assert (launches["kind"] == Kind.RUNTIME.value).all()
    assert (kernels.loc[linked, "op"] != NO_ROW).mean() > 0.9


def test_legacy_categories_map_to_kinds():
    t = load_shared(*FLOW_GENERATIONS["async (2021, legacy categories)"])
    by_cat = t.events.groupby("cat", observed=True)["kind"].agg(lambda k: set(k.astype(str)))
    assert by_cat["Operator"] <= {Kind.CPU_OP.value, Kind.STEP.value}
    assert by_cat["Runtime"] == {Kind.RUNTIME.value}
    assert by_cat["Kernel"] <= {Kind.KERNEL.value, Kind.COMMUNICATION.value}
    assert by_cat["Memcpy"] == {Kind.MEMCPY.value}
    assert (t.events["kind"] == Kind.STEP.value).sum() == 6


def _raw_events(path: Path) -> list[dict]:
    """The trace's events as written, numbers kept as exact Decimals."""
    with gzip.open(path, "rt") if path.suffix == ".gz" else open(path) as f:
        return json.load(f, parse_float=Decimal)["traceEvents"]


def _ns(value) -> int:
    return int(Decimal(value) * 1000)


def test_sub_microsecond_epoch_timestamps_are_exact():
    parts = ("public", "torch", "hta", "ns_resolution_trace", "rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz")
    t = load_shared(*parts)
    raw = [e for e in _raw_events(SHARED.joinpath(*parts)) if e.get("ph") == "X" and e.get("cat") == "kernel"]
    ev = t.events.set_index(["correlation", "ts"])
    for e in raw[:: max(1, len(raw) // 25)]:
        ts = _ns(e["ts"])
        assert ts > 1_700_000_000 * 10**9 and ts % 1000  # epoch µs with ns digits
        row = ev.loc[(e["args"]["correlation"], ts)]
        assert int(row["dur"]) == _ns(e["dur"])


def test_base_time_nanoseconds_is_kept():
    parts = ("public", "torch", "hta", "nccl_parser_config", "nccl_data.json.gz")
    t = load_shared(*parts)
    with gzip.open(SHARED.joinpath(*parts), "rb") as f:
        header = re.search(rb'"baseTimeNanoseconds"\s*:\s*(\d+)', f.read())
    assert t.meta.base_time_ns == int(header.group(1)) > 0


def test_trace_without_distributed_info_is_rank_zero_and_says_so():
    t = load_shared("public", "torch", "hta", "distributed_info_unavailable", "distributed_info_not_found.json.gz")
    assert (t.meta.ranks, t.meta.rank_known) == ([0], False)
    assert set(t.events["rank"]) == {0}
    assert "1 (rank 0) of 1 (not recorded; assumed)" in text.render(t.build_report())


@pytest.mark.parametrize(
    ("parts", "platform"),
    [
        (("public", "torch", "hta", "amd_trace", "mi250_minitoy_train_ROCm6_2_kineto.json.gz"), Platform.ROCM),
        (("public", "torch", "tracelens", "mi300", "gaunernst_bert-small-uncased__1016001.json.gz"), Platform.ROCM),
        (("public", "torch", "hta", "mtia_inference_trace", "mtia_inference_rank_0.json.gz"), Platform.MTIA),
        (("public", "torch", "hta", "cpu_only", "rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz"), Platform.CPU),
        (("public", "torch", "hta", "rank_non_gpu", "rank_non_gpu.json.gz"), Platform.CPU),
        (("h200", "fp32_matmul", "fp32_matmul.json.gz"), Platform.CUDA),
    ],
    ids=lambda v: v.value if isinstance(v, Platform) else v[-1],
)
def test_platform_is_recognised(parts, platform):
    t = load_shared(*parts)
    assert t.meta.platform == platform
    has_device_work = t.events["kind"].isin(DEVICE).any()
    assert has_device_work == (platform != Platform.CPU)


def test_cpu_only_trace_reports_without_device_work():
    t = load_shared("public", "torch", "hta", "cpu_only", "rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz")
    report = t.report()
    assert facts(report, "ledger")["device_ns"] == 0
    assert (t.meta.ranks, t.meta.world_size) == ([34], 300)


GRAPH_TRACES = [
    ("public", "torch", "tracelens", "inference", "vllm_decode_full", "graph_execution.json.gz"),
    ("public", "torch", "tracelens", "inference", "vllm_prefilldecode_piecewise", "graph_execution.json.gz"),
    ("public", "torch", "tracelens", "inference", "sglang_decode", "sglang_Qwen3-8B_decode.json.gz"),
]


@pytest.mark.parametrize("parts", GRAPH_TRACES, ids=lambda p: p[-2])
def test_graph_launch_owns_the_kernels_it_ran(parts):
    """A hipGraphLaunch's kernels carry the launch's correlation id; each must be attributed to that launch."""
    t = load_shared(*parts)
    ev = t.events
    raw = _raw_events(SHARED.joinpath(*parts))
    graph_corr = {e["args"]["correlation"] for e in raw if e.get("name", "").endswith("GraphLaunch")}
    ran = [e for e in raw if e.get("cat") == "kernel" and e["args"].get("correlation") in graph_corr]
    assert len(ran) > len(graph_corr)  # a graph launch runs many kernels
    launches = ev[ev["name"].astype(str).str.endswith("GraphLaunch")]
    attributed = ev[ev["launch"].isin(launches.index)]
    assert len(attributed) == len(ran)
    assert (attributed["step"].to_numpy() == ev.loc[attributed["launch"], "step"].to_numpy()).all()


def test_numbers_written_as_strings_keep_the_runtime_call():
    """ROCm writes ``"bytes": "9216"`` on hipMemcpyAsync; the call must stay, so its copy stays linked."""
    t = load_shared(*GRAPH_TRACES[0])
    ev = t.events
    memcpy = ev[ev["kind"] == Kind.MEMCPY.value]
    assert len(memcpy) > 0
    assert (memcpy["launch"] != NO_ROW).all()
    assert not any("skipped" in w for w in t.meta.warnings)


@pytest.mark.parametrize(
    ("parts", "has_total"),
    [
        (("public", "torch", "tracelens", "h100", "Falconsai_nsfw_image_detection__1016002.json.gz"), True),
        (FLOW_GENERATIONS["async (2021, legacy categories)"], False),
    ],
    ids=["with Total Allocated", "Bytes only (2021)"],
)
def test_memory_events_are_read_with_or_without_totals(parts, has_total):
    t = load_shared(*parts)
    raw = [e for e in _raw_events(SHARED.joinpath(*parts)) if e.get("name") == "[memory]"]
    mem = t.memory_events
    assert len(mem) == len(raw) > 0
    assert int(mem["bytes"].abs().sum()) == sum(abs(e["args"]["Bytes"]) for e in raw)
    assert (mem["total_allocated"] != NO_ROW).all() if has_total else (mem["total_allocated"] == NO_ROW).all()
    assert (mem["op"] != NO_ROW).mean() > 0.5


def test_step_kernels_and_time_match_ground_truth(gpt_train):
    steps = gpt_train.steps()
    assert steps["kernels"].median() == 1332
    kernel_ms = (steps[f"{Kind.KERNEL.value}_ns"] + steps[f"{Kind.COMMUNICATION.value}_ns"]).median() / 1e6
    assert kernel_ms == pytest.approx(66.5, abs=0.1)
    assert np.isin(gpt_train.events["step"].unique(), [NO_ROW, 2, 3, 4]).all()
