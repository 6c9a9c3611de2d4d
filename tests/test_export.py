"""traceanalyze export: Parquet/CSV tables that read back exactly, and a Perfetto trace carrying every finding."""

from __future__ import annotations

import gzip
import json
import sys

import numpy as np
import pandas as pd
import pytest

import traceanalyzer as ta
from tests.conftest import REPO
from traceanalyzer import cli
from traceanalyzer.renderers import perfetto
from traceanalyzer.schema import DEVICE, EVENT_COLUMNS

SAMPLES = REPO / "sample_traces"
FSDP = SAMPLES / "fsdp"


@pytest.fixture(scope="module")
def fsdp() -> ta.Trace:
    return ta.load(FSDP)


@pytest.fixture(scope="module")
def parquet_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("export") / "fsdp_tables"
    assert cli.main(["export", str(FSDP), "--to", "parquet", "-o", str(out)]) == 0
    return out


def test_parquet_event_table_reads_back_exactly(fsdp, parquet_dir):
    events = pd.read_parquet(parquet_dir / "events.parquet")
    _same(events, fsdp.events)
    assert events["ts"].dtype == np.int64 and isinstance(events["name"].dtype, pd.CategoricalDtype)
    _same(pd.read_parquet(parquet_dir / "memory_events.parquet"), fsdp.memory_events)


def _same(back: pd.DataFrame, loaded: pd.DataFrame) -> None:
    """Equal column by column: dtypes, values, categories and codes (pandas reads Parquet categories as its
    string dtype where the loaded table has object categories: the same strings)."""
    assert list(back.columns) == list(loaded.columns) and back.index.equals(loaded.index)
    for name in loaded.columns:
        a, b = back[name], loaded[name]
        if isinstance(b.dtype, pd.CategoricalDtype):
            assert isinstance(a.dtype, pd.CategoricalDtype), name
            assert list(a.cat.categories) == list(b.cat.categories), name
            assert np.array_equal(a.cat.codes.to_numpy(), b.cat.codes.to_numpy()), name
        else:
            pd.testing.assert_series_equal(a, b, check_exact=True)


def test_every_section_table_is_exported_and_documented(fsdp, parquet_dir):
    report = fsdp.build_report()
    readme = (parquet_dir / "README.md").read_text()
    for section in report.sections:
        for table in section.tables:
            name = f"{section.id}.{table.id}.parquet"
            back = pd.read_parquet(parquet_dir / name)
            assert list(back.columns) == [str(c) for c in table.frame.columns], name
            assert len(back) == len(table.frame), name
            assert f"## {name}" in readme
    for column in EVENT_COLUMNS:
        assert f"| {column.name} | {column.dtype} | {column.doc} |" in readme
    kernels = pd.read_parquet(parquet_dir / "hotspots.kernel.parquet")
    assert kernels["total_ns"].tolist() == report.section("hotspots").table("kernel").frame["total_ns"].tolist()


def test_csv_export_has_the_same_rows(fsdp, tmp_path):
    out = tmp_path / "csv"
    assert cli.main(["export", str(FSDP), "--to", "csv", "-o", str(out)]) == 0
    events = pd.read_csv(out / "events.csv", index_col="row", keep_default_na=False)
    assert events["ts"].tolist() == fsdp.events["ts"].tolist()
    assert events["name"].astype(str).tolist() == fsdp.events["name"].astype(str).tolist()
    assert (out / "README.md").exists()


def test_export_into_an_input_is_refused(tmp_path, capsys):
    assert cli.main(["export", str(FSDP), "--to", "csv", "-o", str(FSDP / "tables")]) == 2
    assert "is inside the input" in capsys.readouterr().err
    assert not (FSDP / "tables").exists()
    assert cli.main(["export", str(FSDP), "--to", "perfetto", "-o", str(tmp_path / "out.txt")]) == 2
    assert "must end in .json or .json.gz" in capsys.readouterr().err


def test_parquet_without_pyarrow_is_one_line_saying_what_to_install(tmp_path, capsys, monkeypatch):
    """pyarrow is the parquet extra, not a dependency: without it the export stops before loading, exit 2."""
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # as if not installed (importlib finds no spec)
    assert cli.main(["export", str(FSDP), "--to", "parquet", "-o", str(tmp_path / "tables")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "without pyarrow" in err[0] and "[parquet]" in err[0]
    assert not (tmp_path / "tables").exists()


@pytest.fixture(scope="module")
def annotated(fsdp, tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("perfetto") / "fsdp.json.gz"
    assert cli.main(["export", str(FSDP), "--to", "perfetto", "-o", str(out)]) == 0
    return json.loads(gzip.decompress(out.read_bytes()))


def test_perfetto_export_is_chrome_trace_json_with_the_events(fsdp, annotated):
    events = annotated["traceEvents"]
    assert all(e["ph"] in ("X", "M", "s", "f") for e in events)
    assert all(isinstance(e["pid"], int) and isinstance(e["tid"], int) for e in events)
    slices = [e for e in events if e["ph"] == "X" and e["pid"] != perfetto.FINDINGS_PID]
    assert len(slices) == len(fsdp.events) and annotated["otherData"]["subset"] == ""
    t0 = annotated["otherData"]["start_ns"]
    assert t0 == int(fsdp.events["ts"].min())
    source = sorted(zip((fsdp.events["ts"] - t0).tolist(), fsdp.events["dur"].tolist(), strict=True))
    written = sorted((round(e["ts"] * 1000), round(e["dur"] * 1000)) for e in slices)
    assert written == source  # every ns survives
    names = {e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    assert perfetto.FINDINGS_PROCESS in names


def test_perfetto_export_joins_each_launch_to_its_kernel_and_keeps_the_args(fsdp, annotated):
    events = annotated["traceEvents"]
    slices = {(e["pid"], e["tid"], e["ts"]): e for e in events if e["ph"] == "X"}
    starts = {e["id"]: e for e in events if e["ph"] == "s"}
    ends = {e["id"]: e for e in events if e["ph"] == "f"}
    table = fsdp.events
    launched = table[(table["launch"] >= 0) & table["kind"].isin(DEVICE)]
    assert set(starts) == set(ends) and len(ends) == len(launched) == annotated["otherData"]["launch_flows"] > 0
    for flow_id, end in ends.items():
        launch = slices[(starts[flow_id]["pid"], starts[flow_id]["tid"], starts[flow_id]["ts"])]
        work = slices[(end["pid"], end["tid"], end["ts"])]
        assert end["bp"] == "e" and launch["cat"] == "runtime" and work["cat"] in DEVICE
        assert launch["args"]["correlation"] == work["args"]["correlation"] == end["args"]["correlation"]
    kernels = [e for e in slices.values() if e["cat"] == "kernel"]
    assert all("stream" in k["args"] and "device" in k["args"] for k in kernels)
    shaped = table[(table["kind"] == "cpu_op") & (table["input_dims"].astype(str) != "")]
    written = {e["args"].get("input_dims") for e in slices.values() if e["cat"] == "cpu_op"}
    assert len(shaped) and set(shaped["input_dims"].astype(str)) <= written


def test_perfetto_export_keeps_each_kernels_launch_args_as_the_source_wrote_them(annotated):
    """Every kernel of the source files is written with its grid, block, correlation id and stream as the source
    has them, and joined by a flow to the runtime call of the same correlation id on its rank."""
    written = annotated["traceEvents"]
    named = [e for e in written if e["name"] == "process_name" and e["pid"] != perfetto.FINDINGS_PID]
    rank_of = {e["pid"]: int(e["args"]["name"].split(" ")[1]) for e in named}
    slices = [e for e in written if e["ph"] == "X" and e["pid"] != perfetto.FINDINGS_PID]
    kernels = {(rank_of[e["pid"]], e["args"]["correlation"]): e for e in slices if e["args"].get("cat") == "kernel"}
    at: dict[tuple, list[dict]] = {}
    for e in slices:
        at.setdefault((e["pid"], e["tid"], e["ts"]), []).append(e)
    flow_ends = {(e["pid"], e["tid"], e["ts"]): e["id"] for e in written if e["ph"] == "f"}
    flow_starts = {e["id"]: (e["pid"], e["tid"], e["ts"]) for e in written if e["ph"] == "s"}
    source = flows = 0
    for rank in (0, 1):
        doc = json.loads(gzip.decompress((FSDP / f"fsdp_rank{rank}.json.gz").read_bytes()))
        launching = ("cuda_runtime", "cuda_driver")
        calls = {e["args"]["correlation"] for e in doc["traceEvents"] if e.get("cat") in launching}
        for e in (e for e in doc["traceEvents"] if e.get("cat") == "kernel"):
            source += 1
            got = kernels[(rank, e["args"]["correlation"])]
            for key in ("grid", "block", "correlation", "stream", "device"):
                assert got["args"][key] == e["args"][key], (key, e["name"])
            place = (got["pid"], got["tid"], got["ts"])
            assert (place in flow_ends) == (e["args"]["correlation"] in calls), e["name"]
            if place not in flow_ends:  # launched before the recording began
                continue
            flows += 1
            launch = at[flow_starts[flow_ends[place]]]
            assert any(
                x["args"].get("cat") in launching and x["args"]["correlation"] == e["args"]["correlation"]
                for x in launch
            )
    assert source == len(kernels) > 1000 and flows > 1000


def test_every_finding_is_on_the_findings_track_at_its_times(fsdp, annotated):
    t0 = annotated["otherData"]["start_ns"]
    track = [e for e in annotated["traceEvents"] if e["ph"] == "X" and e["pid"] == perfetto.FINDINGS_PID]
    findings = fsdp.findings()
    for number, finding in enumerate(findings, 1):
        mine = [e for e in track if e["name"] == f"{number}. {finding.title}"]
        assert mine, finding.title
        assert all(e["args"]["advice"] == finding.advice for e in mine)
        assert all(e["args"]["saving_ns_per_step"] == finding.saving_ns for e in mine)
        for rank, (starts, ends) in finding.claims.items():
            on_rank = [e for e in mine if e["tid"] % 1000 == rank + 1]
            got = sorted((round(e["ts"] * 1000) + t0, round((e["ts"] + e["dur"]) * 1000) + t0) for e in on_rank)
            assert [s for s, _ in got] == sorted(int(s) for s in starts)
            assert max(abs(g - int(e)) for (_, g), e in zip(got, sorted(ends), strict=True)) <= 1
    first, last = int(fsdp.events["ts"].min()), int((fsdp.events["ts"] + fsdp.events["dur"]).max())
    for claimed in (f for f in findings if f.claims):
        for rank, (starts, ends) in claimed.claims.items():
            assert first <= int(min(starts)) and int(max(ends)) <= last, claimed.title  # inside the trace
            if claimed.analyzer == "distributed":  # a late rank's idle while a peer waited: cut at the peer's wait
                continue
            device = fsdp.events[(fsdp.events["rank"] == rank) & (fsdp.events["dur"] > 0)]
            edges = set(device["ts"].tolist()) | set((device["ts"] + device["dur"]).tolist())
            assert int(starts[0]) in edges, claimed.title  # claims begin and end at source events' edges


def test_big_traces_are_written_as_a_subset_that_says_so(fsdp):
    events, note = perfetto.subset(fsdp.events, limit=len(fsdp.events) // 2)
    device = fsdp.events["kind"].isin(DEVICE)
    assert len(events) <= len(fsdp.events) // 2 and device[events.index].sum() == device.sum()
    assert "call depth" in note and f"{len(fsdp.events):,}" in note
