"""Ascend (torch_npu / msprof) traces: loading every real sample, totals against the profiler's own CSVs."""

from __future__ import annotations

import csv
import gzip
import json
import re
import shutil
import sqlite3
from pathlib import Path

import pandas as pd
import pytest
from traceanalyzer.parsers import ascend, columns
from traceanalyzer.parsers.ascend import common, text
from traceanalyzer.parsers.ascend import sqlite as sqlite_reader

import traceanalyzer as ta
from tests.conftest import facts, joined_section, load_shared, rows, shared_path
from traceanalyzer import cli
from traceanalyzer.analyzers import ascend as ascend_analyzer
from traceanalyzer.analyzers import health, summary
from traceanalyzer.options import Options
from traceanalyzer.schema import Kind, Platform

MSINSIGHT = ("public", "ascend", "msinsight")
LEVELS = ("level0", "level1", "level2")
RANKS = ("rank0", "rank1")
LOADABLE = [
    *[("pytorch_text", lv, f"{r}_ascend_pt") for lv in LEVELS for r in RANKS],
    *[("pytorch_db", lv, f"{r}_ascend_pt") for lv in LEVELS for r in RANKS],
    ("pytorch_text", "level1"),
    ("st_level2_qwen3_4rank",),
    ("server_fixtures", "test_rank_0"),
    ("server_fixtures", "test_rank_1"),
    ("server_fixtures", "test_kernel_parse", "op_summary_1.csv"),
    ("server_fixtures", "full_db", "msprof_0.db"),
]
ANALYZE = ("public", "ascend", "msprof-analyze", "test", "ut", "advisor")
LOADABLE_ANALYZE = [
    ("timeline_advice", "trace_view.json"),
    ("compute_advice", "data", "kernel_details.csv"),
    ("advisor_backend", "compute_advice", "kernel_details.csv"),
]


def _text(level: str, rank: str) -> ta.Trace:
    return load_shared(*MSINSIGHT, "pytorch_text", level, f"{rank}_ascend_pt")


def _output(kind: str, level: str, rank: str) -> Path:
    return shared_path(*MSINSIGHT, kind, level, f"{rank}_ascend_pt", "ASCEND_PROFILER_OUTPUT")


@pytest.mark.parametrize("parts", [MSINSIGHT + p for p in LOADABLE] + [ANALYZE + p for p in LOADABLE_ANALYZE])
def test_every_real_sample_loads(parts):
    trace = ta.load(shared_path(*parts))
    assert trace.meta.platform == Platform.ASCEND
    assert (trace.events["kind"].isin([Kind.KERNEL.value, Kind.COMMUNICATION.value])).sum() > 0


@pytest.mark.parametrize(
    "parts",
    [
        MSINSIGHT + ("pytorch_db", "level1", "rank0_ascend_pt", "ASCEND_PROFILER_OUTPUT", "analysis.db"),
        MSINSIGHT + ("server_fixtures", "cluster_analysis_output", "cluster_communication.json"),
    ],
)
def test_files_that_are_not_traces_are_clear_errors(parts):
    with pytest.raises(ta.TraceError):
        ta.load(shared_path(*parts))


def test_broken_json_and_corrupt_db_are_trace_errors(tmp_path):
    source = _output("pytorch_text", "level1", "rank0") / "trace_view.json"
    broken = tmp_path / "trace_view.json"
    broken.write_bytes(source.read_bytes()[:-5000] + b'}{"ph": "X"')
    with pytest.raises(ta.TraceError, match="not valid JSON"):
        ta.load(broken)
    corrupt = tmp_path / "ascend_pytorch_profiler_0.db"
    corrupt.write_bytes(b"SQLite format 3\x00" + b"\xff" * 4096)
    with pytest.raises(ta.TraceError):
        ta.load(corrupt)


def test_non_ascend_paths_are_left_to_kineto():
    kineto = shared_path("h200", "gpt_train", "gpt_train.json.gz")
    assert ascend.units(kineto) == []
    assert ascend.units(kineto.parent) == []


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("rank", RANKS)
def test_kernel_totals_equal_kernel_details(level, rank):
    table = common.kernel_details(_output("pytorch_text", level, rank) / "kernel_details.csv")
    comm = table["core"].isin(common.COMM_CORES)
    ev = _text(level, rank).events
    kernels = ev[ev["kind"] == Kind.KERNEL.value]
    collectives = ev[ev["kind"] == Kind.COMMUNICATION.value]
    assert len(kernels) == (~comm).sum() and int(kernels["dur"].sum()) == int(table.loc[~comm, "dur"].sum())
    assert len(collectives) == comm.sum()
    assert abs(int(collectives["dur"].sum()) - int(table.loc[comm, "dur"].sum())) <= comm.sum()


STEP_TRACE = {
    "Computing": "computing_ns",
    "Communication(Not Overlapped)": "communication_not_overlapped_ns",
    "Free": "free_ns",
    "Preparing": "preparing_ns",
}
"""msprof's step_trace_time.csv figures (µs) and our overlap table's columns (ns)."""


def _step_trace_csv(folder: Path) -> dict:
    with open(folder / "step_trace_time.csv", newline="") as f:
        row = next(csv.DictReader(f))
    return {k: float(row[k]) * 1000 for k in STEP_TRACE} | {"e2e": (float(row["Stage"]) + float(row["Bubble"])) * 1e3}


def _step_trace_db(level: str, rank: str) -> dict:
    db = _output("pytorch_db", level, rank) / "analysis.db"
    with sqlite3.connect(sqlite_reader.uri(db), uri=True) as con:
        row = con.execute(
            "select computing, communication_not_overlapped, free, preparing from StepTraceTime"
        ).fetchone()
    return dict(zip(STEP_TRACE, (v * 1000 for v in row), strict=True))


def _ours(row) -> dict:
    return {key: row[column] for key, column in STEP_TRACE.items()} | {"e2e": row["e2e_ns"]}


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("rank", RANKS)
def test_overlap_reproduces_step_trace_time(level, rank):
    """Computing, Communication(Not Overlapped), Free and Preparing of each sample equal msprof's own
    step_trace_time.csv (text) / StepTraceTime (db) within 0.1 %, computed from the events."""
    for ours, theirs in (
        (ascend_analyzer.overlap(_text(level, rank)).iloc[0], _step_trace_csv(_output("pytorch_text", level, rank))),
        (
            ascend_analyzer.overlap(load_shared(*MSINSIGHT, "pytorch_db", level, f"{rank}_ascend_pt")).iloc[0],
            _step_trace_db(level, rank),
        ),
    ):
        assert ours["basis"] == ascend_analyzer.BASIS_EVENTS
        for key, value in theirs.items():
            assert _ours(ours)[key] == pytest.approx(value, rel=1e-3), key


@pytest.mark.parametrize("rank", [0, 1, 2, 3])
def test_qwen_every_rank_has_msprof_step_figures(rank):
    """Ranks 0 and 2 (kernel_details) from their events, ranks 1 and 3 (no kernels written) from their own
    step_trace_time.csv: every rank's computing, not-overlapped communication, free time and step span equal
    msprof's (e.g. rank 1 computes 230.9 ms, free 136.8 ms, not 0 and 281 ms). Preparing needs the framework step
    start, which a rank without host events lacks (its steps start at its first device work): msprof's, said so."""
    row = ascend_analyzer.overlap(load_shared(*QWEN)).set_index("rank").loc[rank]
    theirs = _step_trace_csv(shared_path(*QWEN, f"rank_{rank}_ascend_pt", "ASCEND_PROFILER_OUTPUT"))
    from_events = rank in (0, 2)
    assert row["basis"] == (ascend_analyzer.BASIS_PREPARING if from_events else ascend_analyzer.BASIS_STEP_TRACE)
    for key, value in theirs.items():
        assert _ours(row)[key] == pytest.approx(value, rel=1e-3), key


@pytest.mark.parametrize("level", LEVELS)
def test_db_and_text_exports_agree(level):
    """The db and text samples are two runs of the same job: same events, totals close (not identical runs)."""
    text = _text(level, "rank0").events
    db = load_shared(*MSINSIGHT, "pytorch_db", level, "rank0_ascend_pt").events
    same = [Kind.KERNEL, Kind.COMMUNICATION, Kind.COMM_TASK, Kind.CPU_OP, Kind.PYTHON, Kind.STEP]
    for kind in same:
        assert (text["kind"] == kind.value).sum() == (db["kind"] == kind.value).sum(), kind
    kernel_text = text.loc[text["kind"] == Kind.KERNEL.value, "dur"].sum()
    kernel_db = db.loc[db["kind"] == Kind.KERNEL.value, "dur"].sum()
    assert kernel_db == pytest.approx(kernel_text, rel=0.02)


def test_level1_report_names_kernels_communication_and_ai_cpu(capsys):
    trace = _text("level1", "rank0")
    report = trace.report()
    top = trace.hotspots("kernel", top=15)["name"].tolist()
    assert any(name.startswith("hcom_allReduce") for name in top)
    assert any(name.startswith("aclnn") for name in top)
    assert facts(report, "summary")["communication_share"] > 0.5
    ascend = facts(report, "ascend")
    assert ascend["communication_share"] > 0.5
    assert ascend["ai_cpu_ns"] == 0 and rows(report, "ascend", "ai_cpu_ops") == []
    path = shared_path(*MSINSIGHT, "pytorch_text", "level1", "rank0_ascend_pt")
    assert cli.main([str(path)]) == 0
    shown = capsys.readouterr().out
    assert "hcom_allReduce" in shown and "ai cpu" in shown and "communication share" in shown


def test_ai_cpu_fallbacks_are_findings():
    trace = ta.load(shared_path(*ANALYZE, "advisor_backend", "compute_advice", "kernel_details.csv"))
    titles = [f.title for f in trace.findings() if f.analyzer == "ascend"]
    assert any("AI_CPU" in t for t in titles)
    assert len(joined_section(ascend_analyzer, trace).table("ai_cpu_ops").frame) > 0


def test_layers_of_different_shapes_in_one_step_are_not_dynamic_shapes():
    """The level-1 AlexNet run profiles one step: its five MatMulV2 layers have five shapes, but no op meets a new
    shape in a later step, so nothing is dynamic (the shapes analysis is the one both platforms share)."""
    trace = _text("level1", "rank0")
    assert trace.events.loc[trace.events["name"] == "aclnnMm_MatMulCommon_MatMulV2", "input_dims"].nunique() == 5
    assert len(ascend_analyzer.dynamic_shape_ops(trace.events)) == 0
    assert not [f for f in trace.findings() if "dynamic" in f.id]


def test_run_folder_without_trace_warns_and_uses_csv(tmp_path):
    out = tmp_path / "run_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
    out.mkdir(parents=True)
    shutil.copy(_output("pytorch_text", "level1", "rank0") / "kernel_details.csv", out)
    trace = ta.load(tmp_path / "run_ascend_pt")
    assert any("trace_view.json" in w for w in trace.meta.warnings)
    assert len(trace.steps()) == 1


def test_msprof_text_export_derived_from_sample(tmp_path):
    """A plain msprof export: op_summary has msprof's headers (torch_npu renames them) and no Step Id."""
    source = _output("pytorch_text", "level1", "rank0")
    out = tmp_path / "PROF_000001_20250109_abc" / "mindstudio_profiler_output"
    out.mkdir(parents=True)
    shutil.copy(source / "trace_view.json", out / "msprof_20250109153000.json")
    back = {v: k for k, v in common.KERNEL_DETAILS_RENAME.items()}
    with open(source / "kernel_details.csv", newline="") as f:
        rows = list(csv.reader(f))
    keep = [i for i, h in enumerate(rows[0]) if h != "Step Id"]
    rows = [[back.get(r[i], r[i]) if n == 0 else r[i] for i in keep] for n, r in enumerate(rows)]
    with open(out / "op_summary_20250109153000.csv", "w", newline="") as f:
        csv.writer(f).writerows(rows)
    derived = ta.load(tmp_path)
    assert derived.meta.source_format == "msprof-text"
    text = _text("level1", "rank0").events
    for kind in (Kind.KERNEL.value, Kind.COMMUNICATION.value):
        assert (
            derived.events.loc[derived.events["kind"] == kind, "dur"].sum()
            == text.loc[text["kind"] == kind, "dur"].sum()
        )


def _parse_text(path: Path) -> tuple:
    events, memory, meta = text.parse(path)
    return events, memory, meta.warnings


def _assert_same_tables(one: tuple, other: tuple) -> None:
    pd.testing.assert_frame_equal(one[0], other[0])
    pd.testing.assert_frame_equal(one[1], other[1])


@pytest.mark.parametrize("level", LEVELS)
def test_text_sample_reads_the_same_without_the_native_reader(level, monkeypatch):
    """A user whose install built no C reader gets the same tables (the msgspec reader reads the same fields)."""
    output = _output("pytorch_text", level, "rank1")
    native = _parse_text(output)
    monkeypatch.setattr(columns, "_scan", None)
    slow = _parse_text(output)
    _assert_same_tables(native, slow)
    assert native[2] == slow[2]


def _rewritten_run(tmp_path: Path, write) -> Path:
    """A copy of the level1 rank0 output folder whose trace_view.json is ``write(events, path)``."""
    source = _output("pytorch_text", "level1", "rank0")
    out = tmp_path / "run_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
    shutil.copytree(source, out)
    write(json.loads((source / "trace_view.json").read_bytes()), out / "trace_view.json")
    return out


def test_gzipped_trace_view_reads_like_the_plain_one(tmp_path):
    source = _output("pytorch_text", "level1", "rank0")
    out = _rewritten_run(tmp_path, lambda events, path: path.write_bytes(gzip.compress(json.dumps(events).encode())))
    plain, zipped = _parse_text(source), _parse_text(out)
    _assert_same_tables(plain, zipped)


def test_numeric_ts_reads_like_the_same_ts_written_as_a_string(tmp_path):
    """torch_npu writes "ts": "1736…674.400"; a number with the same digits gives the same ns (not float-rounded)."""
    source = _output("pytorch_text", "level1", "rank0")

    def numbers(events: list, path: Path) -> None:
        path.write_text(re.sub(r'"ts": "([0-9.]+)"', r'"ts": \1', json.dumps(events)))

    out = _rewritten_run(tmp_path, numbers)
    assert b'"ts": 17' in (out / "trace_view.json").read_bytes()
    _assert_same_tables(_parse_text(source), _parse_text(out))


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (b"", "is empty$"),
        (b" \n", "is empty$"),
        (b"[]", r"has an empty event array \(no events to analyze\)$"),
        (b'{"traceEvents": []}', r"is JSON but not an Ascend trace event array \(Expected `array`, got `object`\)$"),
        (b'[{"ph": "M", "name": 5}]', r"is JSON but not an Ascend trace event array \(Expected `str`, got `int`"),
        (b'[{"ph": "X", "name": "a", "dur": "1"}]', r"not an Ascend trace event array \(Expected `float`, got `str`"),
        (b'[{"ph": "X", "name": "a", "pid": 1, "ts": "1.5", "dur": 2}]', "without Python or Ascend Hardware lanes"),
        (b'[{"ph": "X"}, {"ph": "X"', r"is not valid JSON \(.*\); old torch_npu versions .* upgrade torch_npu"),
        (b'[{"ph": "X"}]xx', r"is not valid JSON \(JSON is malformed: trailing characters .*; old torch_npu"),
    ],
)
def test_bad_trace_view_is_a_one_line_trace_error(tmp_path, content, problem):
    path = tmp_path / "trace_view.json"
    path.write_bytes(content)
    with pytest.raises(ta.TraceError) as error:
        text.parse(path)
    assert "\n" not in str(error.value)
    assert re.search(problem, error.value.problem), error.value.problem


QWEN = (*MSINSIGHT, "st_level2_qwen3_4rank")


def _communication_ops(rank: int) -> dict[str, float]:
    """Elapsed ms of each op in a Qwen rank's communication.json, by op name (the key before '@')."""
    path = shared_path(*QWEN, f"rank_{rank}_ascend_pt", "ASCEND_PROFILER_OUTPUT", "communication.json")
    data = json.loads(path.read_bytes())
    return {
        key.partition("@")[0]: op["Communication Time Info"]["Elapse Time(ms)"]
        for kinds in data.values()
        for ops in kinds.values()
        for key, op in ops.items()
        if key != "Total Op Info"
    }


def test_qwen_4rank_job_reports_4_ranks_and_says_what_ranks_1_and_3_lack():
    """Ranks 1 and 3 of the PP=2 job have only the profiler's summaries: their events are communication.json's
    ops, with a warning saying what they lack and that their step figures are msprof's."""
    trace = load_shared(*QWEN)
    assert trace.meta.ranks == [0, 1, 2, 3] and trace.meta.world_size == 4
    for rank in (1, 3):
        partial = [
            w for w in trace.meta.warnings if f"rank_{rank}_ascend_pt" in w and "no kernels, host or memory" in w
        ]
        assert len(partial) == 1
        ev = trace.events[(trace.events["rank"] == rank) & (trace.events["kind"] == Kind.COMMUNICATION.value)]
        expected = _communication_ops(rank)
        assert sorted(ev["name"].astype(str)) == sorted(expected)
        for name, ms in expected.items():
            assert int(ev.loc[ev["name"] == name, "dur"].iloc[0]) == round(ms * 1e6)
    assert not any("rank_0_ascend_pt" in w and "no kernels, host" in w for w in trace.meta.warnings)


def test_qwen_kernel_table_collectives_take_their_group_from_communication_json():
    """kernel_details names no group; communication.json's ``name@group`` keys give it, the same on every rank."""
    ev = load_shared(*QWEN).events
    comm = ev[ev["kind"] == Kind.COMMUNICATION.value]
    groups = comm.groupby("name", observed=True)["group"].agg(lambda g: set(g.astype(str)))
    rank0 = comm.loc[comm["rank"] == 0, "name"].astype(str)
    assert len(rank0) and all(groups[n] != {""} for n in rank0)
    shared = comm.groupby("name", observed=True)["rank"].nunique()
    assert (shared >= 2).any() and all(len(groups[n]) == 1 for n in shared[shared >= 2].index)


def _qwen_copy(tmp_path: Path) -> Path:
    job = tmp_path / "qwen"
    shutil.copytree(shared_path(*QWEN), job)
    return job


def test_a_rank_with_nothing_readable_is_named_with_why(tmp_path, monkeypatch):
    monkeypatch.setenv("TRACEANALYZER_CACHE", "0")
    job = _qwen_copy(tmp_path)
    (job / "rank_3_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "communication.json").unlink()
    trace = ta.load(job)
    assert trace.meta.ranks == [0, 1, 2] and trace.meta.world_size == 4
    named = [w for w in trace.meta.warnings if "rank 3 has no readable output" in w]
    assert len(named) == 1 and "rank_3_ascend_pt" in named[0] and "kernel_details.csv" in named[0]


def test_a_job_whose_rank_folders_are_missing_says_which(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("TRACEANALYZER_CACHE", "0")
    job = _qwen_copy(tmp_path)
    shutil.rmtree(job / "rank_1_ascend_pt")
    shutil.rmtree(job / "rank_3_ascend_pt")
    assert cli.main([str(job)]) == 0
    out = capsys.readouterr()
    assert re.search(r"ranks analysed \(of the world size\) +2 \(ranks 0, 2\) of 4\n", out.out)
    assert "the job has 4 ranks, but ranks 1, 3 have no rank folder here" in out.err


@pytest.mark.parametrize("kind", ["pytorch_text", "pytorch_db"])
@pytest.mark.parametrize("level", LEVELS)
def test_every_hccl_task_is_linked_to_the_collective_it_belongs_to(kind, level):
    """The ``caller`` of a comm_task row (Notify_Wait, Memcpy, Reduce_Inline …) is its communication op: by opId in
    the database, by containment on the device in the trace; every collective has its tasks."""
    ev = load_shared(*MSINSIGHT, kind, level, "rank0_ascend_pt").events
    tasks = ev[ev["kind"] == Kind.COMM_TASK.value]
    assert len(tasks) and (tasks["caller"] >= 0).all()
    ops = ev.loc[tasks["caller"].to_numpy()]
    assert (ops["kind"] == Kind.COMMUNICATION.value).all()
    start, end = ops["ts"].to_numpy(), (ops["ts"] + ops["dur"]).to_numpy()
    assert ((start <= tasks["ts"].to_numpy()) & (tasks["ts"].to_numpy() <= end)).all()
    assert tasks["caller"].nunique() == (ev["kind"] == Kind.COMMUNICATION.value).sum()


LEVEL1_RANK0 = (*MSINSIGHT, "pytorch_text", "level1", "rank0_ascend_pt")


def test_exposed_communication_on_ascend_is_a_pushed_finding():
    """torch_npu's step_trace_time.csv counts 101.96 ms of communication not overlapped on rank 0 in its one step;
    the communication findings of rank 0 account for it (its wait inside the collectives, pushed, and the exposed
    transfer of the gradient all-reduce), within 2 %."""
    rank0 = load_shared(*LEVEL1_RANK0)
    step = pd.read_csv(shared_path(*LEVEL1_RANK0, "ASCEND_PROFILER_OUTPUT", "step_trace_time.csv"))
    not_overlapped_ns = step["Communication(Not Overlapped)"].iloc[0] * 1000
    found = {f.id: f for f in rank0.findings()}
    wait = found["distributed.absent_wait"]
    assert wait.pushed and wait.severity.value == "high"
    total = wait.saving_ns + found["distributed.exposed_allreduce"].saving_ns
    assert total == pytest.approx(not_overlapped_ns, rel=0.02)


def test_ascend_host_syncs_count_like_cuda_ones():
    """``.item()`` on torch_npu blocks in AscendCL@aclrtSynchronizeStreamWithTimeout: health counts those calls."""
    rank0 = load_shared(*LEVEL1_RANK0)
    ev = rank0.events
    calls = ev[(ev["kind"] == Kind.RUNTIME.value) & ev["name"].astype(str).str.contains("aclrtSynchronize")]
    in_steps = int((calls["step"] >= 0).sum())
    report = rank0.report()
    assert in_steps > 0 and facts(report, "health")["host_syncs"] == in_steps
    # costed as on CUDA: the NPU idle the drained queue leaves, measured, at most the time the syncs block
    finding = next(f for f in rank0.findings() if f.id == "health.sync")
    places = finding.evidence["places"]
    assert {p["calls"] for p in places} == {"AscendCL@aclrtSynchronizeStreamWithTimeout"}
    assert sum(p["syncs"] for p in places) == in_steps and finding.basis.value == "measured"
    assert 0 < finding.saving_ns <= sum(p["idle_after_ns"] for p in places) <= finding.evidence["sync_ns"]


def test_single_step_ledger_names_the_step_and_labels_counts_and_identifiers():
    """A one-step trace's ledger says '1 (step 50)', not '50' (which reads as 50 steps); step and rank columns are
    identifiers, the adjustment counts are counts."""
    report = _text("level1", "rank0").report()
    assert facts(report, "ledger")["steps"] == "1 (step 50)"
    ledger = report["sections"]["ledger"]
    assert next(f for f in ledger["facts"] if f["id"] == "warnings")["unit"] == "count"
    adjustments = next(t for t in ledger["tables"] if t["id"] == "adjustments")
    assert {c["name"]: c["unit"] for c in adjustments["columns"]}["events"] == "count"
    overlap = next(t for t in report["sections"]["ascend"]["tables"] if t["id"] == "overlap")
    units = {c["name"]: c["unit"] for c in overlap["columns"]}
    assert units["step"] == units["rank"] == "id" and units["computing_ns"] == "ns"


def test_communication_json_start_times_are_exact_to_the_ns():
    """communication.json writes starts as µs decimals (1764246877150725.0, ...877227008.8): read from their digits,
    not through a float64 (whose step at 1.8e18 ns is 256 ns)."""
    trace = load_shared(*QWEN)
    folder = shared_path(*QWEN, "rank_1_ascend_pt", "ASCEND_PROFILER_OUTPUT")
    text = (folder / "communication.json").read_text()
    written = dict(
        re.findall(r'"(hcom_\w+)@\d+": \{"Communication Time Info": \{"Start Timestamp\(us\)": ([\d.]+)', text)
    )
    assert len(written) == 15
    ev = trace.events[(trace.events["rank"] == 1) & (trace.events["kind"] == Kind.COMMUNICATION.value)]
    got = dict(zip(ev["name"].astype(str), ev["ts"], strict=True))
    for name, us in written.items():
        whole, _, frac = us.partition(".")
        assert got[name] == int(whole) * 1000 + int((frac + "000")[:3]), name
    assert any(int(float(us) * 1000) != got[n] for n, us in written.items())  # a float64 would have lost some


def test_ai_cpu_tasks_are_costed_by_the_ai_core_idle_they_cause():
    """Each AI_CPU op's time on the AI_CPU lane, and the part of it with no other task of kernel_details running
    (the AI Core waits): computed here from the CSV's own rows; the finding's saving is that idle."""
    path = shared_path(*ANALYZE, "advisor_backend", "compute_advice", "kernel_details.csv")
    with open(path, newline="") as f:
        table = list(csv.DictReader(f))
    spans = [(float(r["Start Time(us)"]), float(r["Start Time(us)"]) + float(r["Duration(us)"]), r) for r in table]
    expected: dict[str, list[float]] = {}
    for start, end, row in spans:
        if row["Accelerator Core"] == "AI_CPU":
            others = sorted((s, e) for s, e, r in spans if r["Accelerator Core"] != "AI_CPU" and s < end and e > start)
            covered, reach = 0.0, start
            for s, e in others:
                s, e = max(s, reach), min(e, end)
                covered += max(e - s, 0)
                reach = max(reach, e)
            total, idle = expected.setdefault(row["Name"], [0.0, 0.0])
            expected[row["Name"]] = [total + end - start, idle + end - start - covered]
    trace = ta.load(path)
    every = Options(top=len(trace.events))  # every AI_CPU op, not the report's top rows
    ops = joined_section(ascend_analyzer, trace, every).table("ai_cpu_ops").frame.set_index("name")
    assert set(ops.index) == set(expected) and len(expected) >= 2
    for name, (total_us, idle_us) in expected.items():
        assert ops.loc[name, "total_ns"] == pytest.approx(total_us * 1e3, abs=len(table))
        assert ops.loc[name, "exposed_ns"] == pytest.approx(idle_us * 1e3, abs=len(table))
    assert 0 < ops["exposed_ns"].sum() < ops["total_ns"].sum()
    finding = next(f for f in trace.findings() if f.id == "ascend.ai_cpu")
    assert finding.basis.value == "measured"
    assert finding.saving_ns == int(ops.loc[ops["slow"] > 0, "exposed_ns"].sum()) // finding.steps


def _stage_figures(rank: int) -> dict[str, float]:
    """msprof's step figures (ns) of a Qwen3 rank, read from its step_trace_time.csv here (not by our parser)."""
    with open(shared_path(*QWEN, f"rank_{rank}_ascend_pt", "ASCEND_PROFILER_OUTPUT", "step_trace_time.csv")) as f:
        row = next(csv.DictReader(f))
    return {key: float(row[key]) * 1000 for key in ("Computing", "Communication(Not Overlapped)", "Free", "Stage")}


def test_qwen_every_section_measures_every_rank_by_its_step_figures():
    """Ranks 1 and 3 of the PP=2 job hold no kernels, only msprof's summaries: the step table, the overlap
    breakdown and device busy take their compute, exposed communication and free time from their
    step_trace_time.csv (ranks 0 and 2 compute the same from their kernels), each within 0.1 % of msprof, and say
    which basis; the job's median step is the median of the four Stages (809.9 ms, not 802.9 with the
    communication spans of ranks 1 and 3); their gaps are not known, so no gap of theirs is listed or blamed."""
    trace = load_shared(*QWEN)
    steps, overlap = trace.steps().set_index("rank"), trace.overlap().set_index("rank")
    busy = trace.device_busy().set_index("rank")
    for rank in range(4):
        theirs, step, parts = _stage_figures(rank), steps.loc[rank], overlap.loc[rank]
        ours = {
            "Computing": [step["kernel_ns"], parts["compute_only_ns"] + parts["comm_hidden_ns"]],
            "Communication(Not Overlapped)": [parts["comm_exposed_ns"]],
            "Free": [step["device_idle_ns"], parts["idle_ns"], busy.loc[rank, "idle_ns"]],
            "Stage": [step["step_ns"], parts["span_ns"], busy.loc[rank, "span_ns"]],
        }
        for key, values in ours.items():
            assert values == pytest.approx([theirs[key]] * len(values), rel=1e-3), (rank, key)
        profiled = summary.BASIS_PROFILER if rank in (1, 3) else summary.BASIS_EVENTS
        assert step["basis"] == parts["basis"] == busy.loc[rank, "basis"] == profiled
    median = pd.Series([_stage_figures(r)["Stage"] for r in range(4)]).median()
    assert facts(trace.report(), "summary")["step_ns"] == pytest.approx(median, rel=1e-3)
    assert set(trace.idle_gaps()["rank"]) == {0, 2}
    assert set(health.idle_causes(trace)[0]["rank"]) == {0, 2}


def test_qwen_kernel_findings_are_per_step_of_the_ranks_whose_kernels_were_recorded():
    """A fused-chain or hot kernel found on ranks 0 and 2 is averaged over their 2 steps, not over 4 (ranks 1 and
    3 ran kernels the profiler did not write): the Exp chain occurs once per step, as in each rank's kernel
    table, and the matmul hotspot's calls per step are the kernel table's count over 2."""
    trace = load_shared(*QWEN)
    chains = trace.fusion().set_index("variant")
    exp = next(v for v in chains.index if v.startswith("Exp → ReduceSum"))
    assert chains.loc[exp, "per_step"] == 1
    matmul = "aclnnMatmul_MatMulV3Common_MatMulV3"
    calls = sum(
        (pd.read_csv(shared_path(*QWEN, f"rank_{r}_ascend_pt", "ASCEND_PROFILER_OUTPUT", "kernel_details.csv"))["Name"]
         == matmul).sum()
        for r in (0, 2)
    )  # fmt: skip
    finding = next(f for f in trace.findings() if f.analyzer == "hotspots" and matmul in f.title)
    assert f"in {calls // 2} calls" in finding.title


def test_qwen_ranks_without_host_events_or_kernels_leave_host_span_and_kernel_count_unknown():
    """Ranks 1 and 3 wrote no trace_view.json, kernel_details.csv or profiler database (their folders hold only
    step_trace_time.csv, communication*.json and an analysis.db of CommAnalyzer* / StepTraceTime tables): their
    host span, kernel count and bound are not known, not the span and count of their communication ops (722.8 ms
    and 15 on rank 1), and the job medians are those of ranks 0 and 2, which the warning of each says."""
    trace = load_shared(*QWEN)
    for rank in (1, 3):
        folder = shared_path(*QWEN, f"rank_{rank}_ascend_pt", "ASCEND_PROFILER_OUTPUT")
        assert not {"trace_view.json", "kernel_details.csv"} & {f.name for f in folder.iterdir()}
        with sqlite3.connect(sqlite_reader.uri(folder / "analysis.db"), uri=True) as con:
            tables = {t for (t,) in con.execute("select name from sqlite_master where type = 'table'")}
        assert tables == {"CommAnalyzerBandwidth", "CommAnalyzerMatrix", "CommAnalyzerTime", "StepTraceTime"}
    report = trace.report()
    steps = {r["rank"]: r for r in rows(report, "summary", "steps")}
    for rank in (1, 3):
        assert steps[rank]["host_ns"] is None and steps[rank]["kernels"] is None
        assert steps[rank]["bound"] == summary.BOUND_UNKNOWN
    kernels = {}
    for rank in (0, 2):  # one step each: every row of the rank's kernel table
        with open(shared_path(*QWEN, f"rank_{rank}_ascend_pt", "ASCEND_PROFILER_OUTPUT", "kernel_details.csv")) as f:
            kernels[rank] = len(list(csv.DictReader(f)))
    assert [steps[r]["kernels"] for r in (0, 2)] == [kernels[0], kernels[2]]
    lacking = [w for w in trace.meta.warnings if "host span, kernel count and step bound are left unknown" in w]
    assert sorted(w.split("/st_level2_qwen3_4rank/")[1][:16] for w in lacking) == [
        "rank_1_ascend_pt",
        "rank_3_ascend_pt",
    ]
    assert facts(report, "ledger")["ranks_from_figures"].startswith("2 (ranks 1, 3): compute, communication and free")
    figures = facts(report, "summary")
    assert figures["kernels"] == pd.Series(list(kernels.values())).median()
    assert figures["host_step_ns"] == pd.Series([steps[0]["host_ns"], steps[2]["host_ns"]]).median()
    assert figures["bound"].startswith("host (2 of 4 steps)") and summary.BOUND_UNKNOWN in figures["bound"]
