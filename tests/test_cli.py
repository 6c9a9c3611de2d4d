"""The ``traceanalyze`` command on real traces: formats, options, exit codes, progress, and the numbers it reports."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import traceanalyzer.loading
from tests.conftest import REPO, facts, load_shared, rows, section, shared_path
from traceanalyzer import cli
from traceanalyzer.cli import main

SCHEMA_DOC = REPO / "docs" / "report-schema.md"
GPT_TRAIN = ("h200", "gpt_train", "gpt_train.json.gz")
SMALL = ("h200", "fp32_matmul", "fp32_matmul.json.gz")
JSON_TYPES = {
    "integer": int,
    "number": (int, float),
    "string": str,
    "boolean": bool,
    "object": dict,
    "array": list,
    "null": type(None),
}


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = main([str(a) for a in args])
    out = capsys.readouterr()
    return code, out.out, out.err


def report_json(capsys, tmp_path: Path, *args: str) -> dict:
    path = tmp_path / f"report{len(list(tmp_path.glob('report*.json')))}.json"  # -o refuses an existing file
    code, _, err = run(capsys, *args, "--format", "json", "-o", path)
    assert code == 0, err
    return json.loads(path.read_text())


@pytest.fixture(scope="module")
def gpt_report(tmp_path_factory) -> dict:
    """The JSON report of gpt_train, as the CLI writes it."""
    path = tmp_path_factory.mktemp("report") / "gpt_train.json"
    assert main([str(shared_path(*GPT_TRAIN)), "--format", "json", "-o", str(path)]) == 0
    return json.loads(path.read_text())


def documented(section: str) -> dict[str, tuple[type, ...]]:
    """Keys and JSON types of one table of docs/report-schema.md (the heading's text, e.g. '`summary`')."""
    text = SCHEMA_DOC.read_text()
    body = text.split(f"\n## {section}\n", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `(\w+)` \| ([a-z]+(?: \\\| [a-z]+)*) \|", body, flags=re.MULTILINE)
    assert rows, f"no key table under '## {section}'"
    return {key: tuple(JSON_TYPES[t.strip()] for t in types.split("\\|")) for key, types in rows}


def assert_typed(obj: dict, schema: dict[str, tuple[type, ...]], where: str) -> None:
    for key, types in schema.items():
        assert key in obj, f"{where}: {key} missing"
        value = obj[key]
        ok = isinstance(value, types) and not (isinstance(value, bool) and bool not in types)
        assert ok, f"{where}.{key} = {value!r} is not {types}"


def test_json_report_has_every_documented_key_with_its_type(gpt_report):
    assert_typed(gpt_report, documented("Top-level keys"), "report")
    assert gpt_report["schema_version"] == 3
    assert_typed(gpt_report["trace"], documented("`trace`"), "trace")
    assert list(gpt_report["sections"])[:3] == ["ledger", "summary", "hotspots"]
    for sid, sec in gpt_report["sections"].items():
        assert_typed(sec, documented("section"), sid)
        for fact in sec["facts"]:
            assert_typed(fact, documented("fact"), f"{sid}.{fact['id']}")
        for table in sec["tables"]:
            assert_typed(table, documented("table"), f"{sid}.{table['id']}")
            names = [c["name"] for c in table["columns"]]
            assert all(list(row) == names for row in table["rows"]), f"{sid}.{table['id']}"
    assert {t["id"] for t in section(gpt_report, "hotspots")["tables"]} == {"kernel", "cpu_op", "op_device", "category"}
    assert gpt_report["findings"]
    for finding in gpt_report["findings"]:
        assert_typed(finding, documented("`findings`"), "findings")


def test_every_documented_section_id_is_what_the_report_uses(gpt_report):
    text = SCHEMA_DOC.read_text().split("\n## Section and table ids\n", 1)[1].split("\n## ", 1)[0]
    for sid, sec in gpt_report["sections"].items():
        line = next(row for row in text.splitlines() if row.startswith(f"| `{sid}` |"))
        for item in sec["facts"] + sec["tables"]:
            assert f"`{item['id']}`" in line or f"`{item['id'].split('_', 1)[0]}_" in line, (sid, item["id"])


def test_gpt_train_report_matches_ground_truth(gpt_report):
    summary = facts(gpt_report, "summary")
    assert summary["kernels"] == 1332
    assert summary["kernel_ns"] / 1e6 == pytest.approx(66.5, abs=0.1)
    assert rows(gpt_report, "hotspots", "op_device")[0]["name"] == "aten::mm"


def test_self_device_time_per_op_matches_key_averages(gpt_train):
    meta = json.loads(shared_path("h200", "gpt_train", "gpt_train.meta.json").read_text())
    ours = gpt_train.hotspots("cpu_op").set_index("name")["device_self_ns"]
    top = meta["key_averages_top_by_self_device_time"][:10]
    compared = [row for row in top if row["name"] in ours.index]
    assert len(compared) >= 3  # the rest are kernels or annotations, which are not CPU ops in our table
    for row in compared:
        assert ours[row["name"]] / 1e3 == pytest.approx(row["self_device_time_total_us"], rel=0.01), row["name"]


@pytest.mark.parametrize(
    ("parts", "share"),
    [
        (("public", "torch", "deepseek_profile_data", "train.json"), 0.465),  # DeepEP dispatch/combine kernels
        (("public", "torch", "tracelens", "b200", "eager_trace.json.gz"), 0.197),  # multimem_all_reduce
    ],
    ids=["deepseek DeepEP", "b200 symmetric memory"],
)
def test_communication_share_of_kernel_time(parts, share):
    assert facts(load_shared(*parts).report(), "summary")["communication_share"] == pytest.approx(share, abs=0.02)


def test_markdown_report(capsys):
    code, out, _ = run(capsys, shared_path(*SMALL), "--format", "markdown")
    assert code == 0
    assert out.lstrip().startswith("# traceanalyzer report")
    assert "## Summary" in out and "**Top device kernels (total)**" in out
    assert re.search(r"^\|( --- \||---\|)", out, flags=re.MULTILINE)


def test_text_report_is_the_default(capsys):
    code, out, _ = run(capsys, shared_path(*SMALL))
    assert code == 0 and "aten::mm" in out and not out.lstrip().startswith("#")


def test_top_limits_every_hotspot_table(capsys, tmp_path):
    report = report_json(capsys, tmp_path, shared_path(*SMALL), "--top", "2")
    assert all(len(t["rows"]) == 2 for t in section(report, "hotspots")["tables"])


def test_step_restricts_the_report_to_one_step(capsys, tmp_path):
    whole = report_json(capsys, tmp_path, shared_path(*SMALL))
    one = report_json(capsys, tmp_path, shared_path(*SMALL), "--step", "3")
    assert [s["step"] for s in rows(one, "summary", "steps")] == [3]
    assert facts(one, "summary")["steps"] == 1 and one["scope"] == {"step": 3, "rank": None}
    assert facts(one, "ledger")["device_ns"] < facts(whole, "ledger")["device_ns"]
    kernels = {r["name"]: r["count"] for r in rows(one, "hotspots", "kernel")}
    assert sum(kernels.values()) < sum(r["count"] for r in rows(whole, "hotspots", "kernel"))
    assert all(f["steps"] == 1 for f in one["findings"])


def test_a_step_or_rank_the_trace_lacks_is_a_one_line_error(capsys):
    for option, value in (("--step", "999"), ("--rank", "5")):
        code, out, err = run(capsys, shared_path(*SMALL), option, value)
        assert (code, out) == (2, "") and len(err.splitlines()) == 1
        assert f"has no {option[2:]} {value}; its {option[2:]}s are" in err


def test_kind_restricts_the_kernel_table(capsys, tmp_path):
    report = report_json(capsys, tmp_path, shared_path(*SMALL), "--kind", "memcpy")
    kinds = {r["kind"] for r in rows(report, "hotspots", "kernel")}
    assert kinds == {"memcpy"}
    assert all(r["name"].startswith("Memcpy") for r in rows(report, "hotspots", "kernel"))


def test_rank_restricts_a_multi_rank_folder_to_one_rank(capsys, tmp_path):
    folder = shared_path("public", "torch", "param", "dlrm_kineto_8rank")
    report = report_json(capsys, tmp_path, folder, "--rank", "3")
    assert report["trace"]["ranks"] == [3] and report["trace"]["world_size"] == 8
    assert {s["rank"] for s in rows(report, "summary", "steps")} == {3}
    assert {r["rank"] for t in section(report, "distributed")["tables"] if t["id"] == "overlap" for r in t["rows"]} == {
        3
    }
    assert all(f["where"].get("rank", 3) == 3 for f in report["findings"])


def test_exit_code_2_for_bad_input(capsys, tmp_path):
    code, out, err = run(capsys, tmp_path / "nope.json")
    assert (code, out) == (2, "")
    assert err.startswith("traceanalyze: error:") and len(err.splitlines()) == 1


def test_exit_code_1_for_an_internal_error_in_one_line(capsys, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(traceanalyzer.loading, "load", broken)
    code, out, err = run(capsys, shared_path(*SMALL))
    assert (code, out) == (1, "")
    assert err.strip() == "traceanalyze: internal error: RuntimeError: boom (rerun with --debug for details)"


def test_progress_line_when_loading_takes_longer_than_the_threshold(capsys, monkeypatch):
    monkeypatch.setattr(cli, "PROGRESS_AFTER_S", 0.0)  # every load takes longer than 0 s: no real wait in the test
    path = shared_path(*SMALL)
    code, _, err = run(capsys, path)
    assert code == 0
    lines = err.splitlines()
    assert f"traceanalyze: loading {path} …" in lines
    assert any(re.fullmatch(r"traceanalyze: done in \d+\.\d s", line) for line in lines)
