"""Every refusal is one line and exit 2 (usage mistakes too); a file name's control characters and undecodable
bytes are shown as escapes; numbers read from a file never size the work; an analyzer that fails is exit 1 unless
--keep-going, which names the missing section in the ledger."""

from __future__ import annotations

import gzip
import json
import os
import pickle
import shutil
from dataclasses import replace

import pytest
from traceanalyzer.dashboards import cli as dashboard_cli
from traceanalyzer.dashboards.access import Allowed, Refused

from tests.conftest import REPO
from traceanalyzer import analyzers, cli, humanize

SAMPLE = REPO / "sample_traces" / "sync_stalls.json.gz"


@pytest.fixture(autouse=True)
def _no_cache(monkeypatch):
    monkeypatch.setenv("TRACEANALYZER_CACHE", "0")


def _error_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if "error" in line]


USAGE = {
    "a width of a billion columns": [str(SAMPLE), "--width", "1000000000"],
    "an unknown option": [str(SAMPLE), "--bogus"],
    "no path": [],
}


@pytest.mark.parametrize("argv", USAGE.values(), ids=USAGE.keys())
def test_a_usage_mistake_is_one_line_and_exit_2(capsys, argv):
    with pytest.raises(SystemExit) as stop:
        cli.main(argv)
    assert stop.value.code == 2
    captured = capsys.readouterr()
    assert len(captured.err.splitlines()) == 1 and captured.err.startswith("traceanalyze: error:"), captured.err


MCP_USAGE = {
    "an unknown option": ["--bogus"],
    "a negative port": ["--http", "-1"],
    "a port beyond 65535": ["--http", "99999"],
    "a port that is not a number": ["--http", "abc"],
    "a folder that does not exist": ["--allow", "/nonexistent\n\x1b[31m"],
    "a missing value": ["--allow"],
}


@pytest.mark.parametrize("argv", MCP_USAGE.values(), ids=MCP_USAGE.keys())
def test_an_mcp_usage_mistake_is_one_line_and_exit_2(capsys, argv):
    """``traceanalyze mcp`` says a mistake as the report command does: one escaped line, exit 2, nothing served."""
    pytest.importorskip("mcp", reason="the MCP SDK (traceanalyzer[mcp]) is not installed")
    with pytest.raises(SystemExit) as stop:
        cli.main(["mcp", *argv])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and err.startswith("traceanalyze mcp: error:"), err
    assert "\x1b" not in err


@pytest.mark.parametrize("port", ["-1", "99999", "0"])
def test_a_dashboard_port_out_of_range_is_one_line_and_exit_2(capsys, port):
    with pytest.raises(SystemExit) as stop:
        dashboard_cli.main(["--port", port])
    assert stop.value.code == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert "port" in line and "Traceback" not in line, line


def test_a_file_name_that_is_not_utf8_is_read_and_shown_with_escapes(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a short relative name: the text report cuts or wraps a long path to fit its width
    name = os.fsdecode(b"tr\xff\xfece.json.gz")
    shutil.copy(SAMPLE, name)
    for fmt in ("json", "html", "text"):
        out = tmp_path / f"report.{fmt}"
        assert cli.main([name, "--format", fmt, "-o", str(out)]) == 0, capsys.readouterr().err
        assert "tr\\udcff\\udcfece.json.gz" in out.read_text(encoding="utf-8").replace("\\\\", "\\")


def test_a_file_name_with_a_newline_and_an_escape_is_one_error_line(tmp_path, capsys):
    path = tmp_path / "bad\n\x1b[31mname.json"
    path.write_text("not a trace")
    assert cli.main([str(path)]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert "bad\\n\\x1b[31mname.json" in line and "\x1b" not in line, line


def test_control_characters_in_names_do_not_reach_the_terminal(tmp_path, capsys):
    doc = json.loads(gzip.decompress(SAMPLE.read_bytes()))
    for event in doc["traceEvents"]:
        if event.get("cat") == "kernel":
            event["name"] = "\x1b]0;owned\x07\x1b[2J" + event["name"]
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(doc))
    assert cli.main([str(path), "--full"]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out and "\\x1b]0;owned" in out


def test_a_world_size_of_a_billion_does_not_size_the_report(tmp_path, capsys):
    doc = json.loads(gzip.decompress(SAMPLE.read_bytes()))
    doc["distributedInfo"] = {"rank": 0, "world_size": 10**9, "backend": "nccl"}
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(doc))
    out = tmp_path / "r.json"
    assert cli.main([str(path), "--format", "json", "-o", str(out)]) == 0
    assert "world_size is 1000000000, not a whole number in [1, 1,048,576]" in capsys.readouterr().err
    assert out.stat().st_size < 2 * SAMPLE.stat().st_size * 10


@pytest.mark.parametrize("keep_going", [False, True])
def test_an_analyzer_that_fails_is_exit_1_unless_keep_going(tmp_path, capsys, monkeypatch, keep_going):
    def broken(*args: object):
        raise RuntimeError("boom")

    registry = tuple(replace(a, section=broken) if a.name == "hotspots" else a for a in analyzers.ANALYZERS)
    monkeypatch.setattr(analyzers, "ANALYZERS", registry)
    out = tmp_path / "r.json"
    argv = [str(SAMPLE), "--format", "json", "-o", str(out)] + (["--keep-going"] if keep_going else [])
    code = cli.main(argv)
    err = capsys.readouterr().err
    if not keep_going:
        assert code == 1 and not out.exists()
        assert "internal error: analyzer hotspots failed: RuntimeError: boom" in err, err
        return
    assert code == 0, err
    ledger = json.loads(out.read_text())["sections"]["ledger"]
    facts = {f["id"]: f["value"] for f in ledger["facts"]}
    assert facts["missing_sections"] == "hotspots"


def test_missing_ranks_are_ranges_not_a_list_of_every_rank():
    runs = humanize.missing_runs(10**9, [0, 5])
    assert runs == [(1, 4), (6, 10**9 - 1)]
    assert humanize.ranges(runs) == f"1–4, 6–{10**9 - 1}"
    assert humanize.ranges([(i * 2, i * 2) for i in range(50)], shown=3).endswith("… (50 in all)")


@pytest.mark.parametrize("typed", ["{tmp}/a\x00b.json", "{tmp}/" + "x" * 100_000], ids=["nul", "long"])
def test_the_dashboard_refuses_a_nul_byte_or_an_overlong_path_like_any_other(tmp_path, typed):
    allowed = Allowed([tmp_path])
    with pytest.raises(Refused) as refused:
        allowed.check(typed.format(tmp=tmp_path))
    assert str(refused.value) == allowed.refused


FSDP = REPO / "sample_traces" / "fsdp"


@pytest.fixture(scope="module")
def fsdp_ranks() -> list[dict]:
    """The two ranks of our FSDP recording, each cut to its first 3,000 events (small enough to parse at once)."""
    docs = [json.loads(gzip.decompress((FSDP / f"fsdp_rank{rank}.json.gz").read_bytes())) for rank in (0, 1)]
    return [doc | {"traceEvents": doc["traceEvents"][:3000]} for doc in docs]


def _other(doc: dict, hours: float = 0, **dist) -> dict:
    """The rank with distributedInfo fields changed, or its times shifted by hours."""
    events = [
        e | {"ts": e["ts"] + hours * 3.6e9} if isinstance(e.get("ts"), int | float) else e for e in doc["traceEvents"]
    ]
    return doc | {"distributedInfo": doc["distributedInfo"] | dist, "traceEvents": events}


MIXED = {
    "another world size": {"world_size": 4},
    "another NCCL version": {"nccl_version": "2.21.5"},
    "another backend": {"backend": "gloo"},
    "recorded two hours later": {"hours": 2},
}


@pytest.mark.parametrize("change", MIXED.values(), ids=MIXED.keys())
def test_ranks_of_two_jobs_in_one_folder_are_refused_in_one_line(tmp_path, capsys, fsdp_ranks, change):
    """A folder holding rank 0 of one job and rank 1 of another (its distributedInfo says another world size,
    backend or NCCL version, or it ran hours later) is not joined into one job: exit 2, one line naming both."""
    (tmp_path / "fsdp_rank0.json").write_text(json.dumps(fsdp_ranks[0]))
    (tmp_path / "fsdp_rank1.json").write_text(json.dumps(_other(fsdp_ranks[1], **change)))
    assert cli.main([str(tmp_path)]) == 2
    errors = _error_lines(capsys.readouterr().err)
    assert len(errors) == 1 and "not one job" in errors[0] and "fsdp_rank0" in errors[0], errors


def test_the_two_ranks_of_one_job_are_joined(tmp_path, fsdp_ranks):
    """The same two ranks unchanged are one job."""
    for rank, doc in enumerate(fsdp_ranks):
        (tmp_path / f"fsdp_rank{rank}.json").write_text(json.dumps(doc))
    assert cli.main([str(tmp_path), "-o", str(tmp_path.parent / f"{tmp_path.name}.txt")]) == 0


def test_ranks_of_two_jobs_given_one_by_one_are_joined_with_a_warning(tmp_path, capsys, fsdp_ranks):
    """Named one by one, the user asked for them together: loaded, with a warning that they are not one job."""
    paths = [tmp_path / "fsdp_rank0.json", tmp_path / "fsdp_rank1.json"]
    paths[0].write_text(json.dumps(fsdp_ranks[0]))
    paths[1].write_text(json.dumps(_other(fsdp_ranks[1], world_size=4)))
    assert cli.main([*map(str, paths), "-o", str(tmp_path / "r.txt")]) == 0
    err = capsys.readouterr().err
    assert any("warning" in line and "world size 4" in line and "not one job" in line for line in err.splitlines())


HUGE = {"beyond int64": 1 << 64, "beyond int32": (1 << 31) + 5, "negative": -(1 << 63) - 1}


@pytest.mark.parametrize("value", HUGE.values(), ids=HUGE.keys())
def test_ranks_and_devices_beyond_int64_or_int32_are_read_with_a_warning(tmp_path, capsys, fsdp_ranks, value):
    """A rank or world size beyond int64/int32 in distributedInfo, a device index beyond int32 on the events, and a
    rank number of 25 digits in the file name: read (the rank from elsewhere, the bad value a warning), exit 0."""
    doc = _other(fsdp_ranks[0], rank=value, world_size=value)
    for e in doc["traceEvents"][::5]:
        if "device" in e.get("args", {}):
            e["args"]["device"] = value
    path = tmp_path / f"rank{'9' * 25}.json"
    path.write_text(json.dumps(doc))
    assert cli.main([str(path), "-o", str(tmp_path / "r.txt")]) == 0
    warned = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    assert any("distributedInfo.rank" in line for line in warned), warned
    assert any("distributedInfo.world_size" in line for line in warned), warned


@pytest.mark.parametrize("value", HUGE.values(), ids=HUGE.keys())
def test_snapshot_segment_devices_beyond_int64_or_int32_are_dropped_and_counted(tmp_path, capsys, value):
    """A memory snapshot whose segments or history name a device beyond int64/int32: those are not read (a ledger
    count), the rest is: exit 0."""
    doc = pickle.loads((REPO / "sample_traces" / "memory_snapshot" / "oom.snapshot.pickle").read_bytes())
    doc["segments"][0]["device"] = value
    path = tmp_path / "snap.pickle"
    path.write_bytes(pickle.dumps(doc))
    assert cli.main([str(path), "-o", str(tmp_path / "r.txt")]) == 0
    assert "snapshot entries with missing or wrongly typed fields" in capsys.readouterr().err
