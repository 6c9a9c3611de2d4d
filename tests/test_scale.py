"""Jobs of many ranks: a rank that cannot be read is named in a warning with how many ranks were analysed (not
dropped silently), per-rank adjustments add up across ranks, and bench/gen_large.py makes larger real inputs that
load as a longer recording or a larger job of the same run."""

from __future__ import annotations

import gzip
import io
import shutil
import subprocess
import sys

import orjson
import pytest

import traceanalyzer as ta
from tests.conftest import REPO, SHARED
from traceanalyzer import footprint, loading
from traceanalyzer.cli import main
from traceanalyzer.progress import Messages, Stderr

FSDP = REPO / "sample_traces" / "fsdp"
FUSED = REPO / "sample_traces" / "fused_ops.json.gz"
GEN = REPO / "bench" / "gen_large.py"
DLRM = SHARED / "public" / "torch" / "param" / "dlrm_kineto_8rank"
needs_dlrm = pytest.mark.skipif(not DLRM.exists(), reason=f"real trace not available: {DLRM}")


def _job(tmp_path, rank1: bytes | None) -> object:
    """A copy of the 2-rank FSDP sample (with its .meta.json files) whose rank 1 file holds the given bytes."""
    job = tmp_path / "job"
    shutil.copytree(FSDP, job)
    if rank1 is not None:
        (job / "fsdp_rank1.json.gz").write_bytes(rank1)
    return job


def _left_out(trace: ta.Trace) -> list[str]:
    return [w for w in trace.meta.warnings if "left out" in w]


@pytest.mark.parametrize(
    ("rank1", "problem"),
    [
        (b"", "is empty"),
        (gzip.compress(b"\x00\x01 not json at all", mtime=0), "is not a trace"),
        (gzip.compress(orjson.dumps({"schemaVersion": 1, "traceEvents": []}), mtime=0), ""),  # a trace with no events
    ],
    ids=["empty", "not-a-trace", "no-events"],
)
def test_rank_that_cannot_be_read_is_named_with_the_count_of_ranks_analysed(tmp_path, rank1, problem):
    job = _job(tmp_path, rank1)
    trace = ta.load(job)
    assert trace.meta.ranks == [0]
    (warning,) = _left_out(trace)
    assert warning.startswith(f"{job / 'fsdp_rank1.json.gz'}: {problem}")
    assert warning.endswith("left out: 1 of 2 ranks analysed")


def test_cli_names_the_rank_left_out(tmp_path, capsys):
    job = _job(tmp_path, b"")
    assert main([str(job), "--format", "json", "-o", str(tmp_path / "r.json")]) == 0
    assert "fsdp_rank1.json.gz: is empty; left out: 1 of 2 ranks analysed" in capsys.readouterr().err


def test_whole_job_is_not_warned_about_files_beside_it(tmp_path):
    """The sample's .meta.json files are not rank traces: nothing is said about them."""
    trace = ta.load(_job(tmp_path, None))
    assert trace.meta.ranks == [0, 1] and _left_out(trace) == []


def test_a_file_given_alone_is_not_judged_by_its_siblings(tmp_path):
    job = _job(tmp_path, b"")
    trace = ta.load(job / "fsdp_rank0.json.gz")
    assert _left_out(trace) == []


def test_job_with_no_readable_rank_is_an_error(tmp_path, capsys):
    job = tmp_path / "job"
    job.mkdir()
    (job / "rank0.json.gz").write_bytes(gzip.compress(orjson.dumps({"traceEvents": []})))
    (job / "rank1.json.gz").write_bytes(b"")
    assert main([str(job)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "rank0.json.gz" in err[0]


def _with_negative_durations(src, dst, count: int) -> None:
    doc = orjson.loads(gzip.decompress(src.read_bytes()))
    kernels = [e for e in doc["traceEvents"] if e.get("cat") == "kernel"]
    for e in kernels[:count]:
        e["dur"] = -1.0
    dst.write_bytes(orjson.dumps(doc))


@needs_dlrm
def test_adjustments_add_up_across_ranks(tmp_path):
    job = tmp_path / "job"
    job.mkdir()
    for rank, count in ((0, 2), (1, 3)):
        (src,) = DLRM.glob(f"worker{rank}_*.json.gz")
        _with_negative_durations(src, job / f"worker{rank}.json", count)
    per_rank = [ta.load(p).meta.adjustments for p in sorted(job.iterdir())]
    reason = next(iter(per_rank[0]))
    assert [a[reason] for a in per_rank] == [2, 3]
    assert ta.load(job).meta.adjustments == {reason: 5}


def _generate(*args) -> None:
    subprocess.run([sys.executable, str(GEN), *map(str, args)], check=True, capture_output=True)


def test_generated_long_trace_is_the_same_run_recorded_longer(tmp_path):
    out = tmp_path / "fused_x3.json"
    source = ta.load(FUSED)
    size = len(gzip.decompress(FUSED.read_bytes()))
    _generate("single", FUSED, "--size", f"{size * 2}", out)
    long = ta.load(out)
    steps, long_steps = source.steps(), long.steps()
    copies = len(long_steps) // len(steps)
    assert copies >= 2 and len(long.events) == copies * len(source.events)
    first = steps["step"].tolist()
    assert long_steps["step"].tolist() == [s + k * len(first) for k in range(copies) for s in first]
    assert long_steps["host_ns"].tolist() == steps["host_ns"].tolist() * copies
    kernels = long.events[long.events["kind"] == "kernel"]
    assert (kernels["launch"] >= 0).all() and (kernels["op"] >= 0).all(), "fresh ids: every kernel still links"


@needs_dlrm
def test_generated_job_has_the_ranks_asked_for_with_shifted_clocks(tmp_path):
    out = tmp_path / "dlrm_12"
    _generate("ranks", DLRM, "--ranks", 12, "--jitter-us", 300, out)
    job = ta.load(out)
    assert job.meta.ranks == list(range(12)) and job.meta.world_size == 12
    starts = job.events.groupby("rank")["ts"].min()
    source = ta.load(DLRM).events.groupby("rank")["ts"].min()
    shifts = [starts[r] - source[r % 8] for r in range(12)]
    assert shifts[:8] == [0] * 8, "the real ranks keep their clocks"
    assert all(0 < abs(s) <= 300_000 for s in shifts[8:]) and len(set(shifts[8:])) == 4


def test_memory_that_will_not_fit_is_one_line_with_what_to_do(monkeypatch, capsys):
    monkeypatch.setenv("TRACEANALYZER_MEMORY_LIMIT", "10M")
    assert main([str(FUSED)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert str(FUSED) in line and "not enough memory" in line and "10 MiB" not in line
    assert "needs about" in line and "run it on a machine with more memory" in line
    assert "TRACEANALYZER_MEMORY_CHECK=0" in line
    monkeypatch.setenv("TRACEANALYZER_MEMORY_CHECK", "0")
    assert main([str(FUSED), "--format", "json", "-o", "/dev/null"]) == 0


def test_job_that_will_not_fit_joined_suggests_analysing_it_rank_by_rank(monkeypatch, capsys):
    sizes = [footprint.json_size(p) for p in sorted(FSDP.glob("*.json.gz"))]
    joined = footprint.estimate(sizes, 1).need_bytes  # the least a joined load needs: one parse at a time
    ranked = footprint.estimate(sizes, 1, kept=False).need_bytes  # one rank at a time, nothing joined
    assert ranked < joined
    monkeypatch.setenv("TRACEANALYZER_MEMORY_LIMIT", str(int((joined + ranked) / 2)))
    assert main([str(FSDP), "--format", "json", "-o", "/dev/null"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "not enough memory; analyse it rank by rank (--per-rank" in line and "--scheduler" in line
    assert main([str(FSDP), "--per-rank", "--format", "json", "-o", "/dev/null"]) == 0


def test_gzip_json_size_is_the_inflated_size():
    assert footprint.json_size(FUSED) == len(gzip.decompress(FUSED.read_bytes()))


@pytest.mark.parametrize("tail", [b"\xff\xff\xff\xff", b"\x00\x00\x00\x7f"])
def test_a_cut_gzip_file_is_not_estimated_to_need_gigabytes(tmp_path, tail, monkeypatch):
    """A cut file's last 4 bytes are compressed data, not the trailer's size field: a value deflate could never
    reach is not believed, so the load reads what is there and says it was cut, instead of refusing for want of
    memory."""
    cut = tmp_path / "cut.json.gz"
    cut.write_bytes(FUSED.read_bytes()[: FUSED.stat().st_size // 2] + tail)
    assert footprint.json_size(cut) == cut.stat().st_size * footprint.MIN_GZIP_RATIO
    monkeypatch.setenv("TRACEANALYZER_MEMORY_LIMIT", "1G")
    trace = ta.load(cut)
    assert len(trace.events) and any("ends early (truncated file?)" in w for w in trace.meta.warnings)


def test_progress_of_bytes_read_and_the_estimate(monkeypatch):
    monkeypatch.setattr(loading, "SHOWN_FROM_BYTES", 0)
    said: list[str] = []
    ta.load(FUSED, progress=said.append)
    assert any(" of JSON: needs about" in m and "GiB available" in m for m in said)
    size = FUSED.stat().st_size / 1e6
    assert said[-1] == f"reading {FUSED.name}: {size:,.0f} of {size:,.0f} MB"


@needs_dlrm
def test_progress_of_ranks_done(tmp_path):
    _generate("ranks", DLRM, "--ranks", 8, tmp_path / "job")
    said: list[str] = []
    ta.load(tmp_path / "job", progress=Messages(said.append))
    counts = [m for m in said if m.startswith("ranks parsed")]
    assert counts[-1] == "ranks parsed: 8 of 8 ranks" and len(counts) == 8


def test_plain_progress_lines_when_stderr_is_not_a_terminal():
    out = io.StringIO()
    stderr = Stderr(out)
    for done in range(0, 1001, 10):
        stderr.count("ranks parsed", done, 1000, "ranks")
    stderr.count("ranks parsed", 1000, 1000, "ranks")
    lines = out.getvalue().splitlines()
    assert lines[0] == "traceanalyze: ranks parsed: 100 of 1,000 ranks" and len(lines) == 10
    assert lines[-1] == "traceanalyze: ranks parsed: 1,000 of 1,000 ranks"
