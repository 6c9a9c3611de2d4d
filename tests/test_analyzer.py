"""The analyzer contract (``traceanalyzer.analyzer``): an analysis registered as README's recipe says shows the
same section and findings in the joined report and the ``--per-rank`` report (the Dask report: tests/test_dask.py);
a part that fails is named where it failed, and an analyzer that needs it says so instead of failing on it."""

from __future__ import annotations

import dataclasses
import json
import shutil
from collections import Counter

import pytest

import traceanalyzer as ta
from tests import toy_analyzer
from tests.conftest import REPO, assert_same_data
from traceanalyzer import analyzers, perrank
from traceanalyzer.cli import main
from traceanalyzer.errors import AnalyzerFailed

SMALL = (analyzers.LEDGER, *(a for a in analyzers.ANALYZERS if a.name == "summary"))
"""The ledger and what it needs: the least registry a report runs."""


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    """A job of two small single-GPU traces, ranks 0 and 1 by their place."""
    folder = tmp_path_factory.mktemp("two_ranks")
    for name, source in (("a", "fused_ops.json.gz"), ("b", "unfused_ops.json.gz")):
        shutil.copy(REPO / "sample_traces" / source, folder / f"{name}.json.gz")
    return folder


@pytest.fixture(scope="module")
def with_toy():
    """The registry with the toy analyzer added, for the module's tests."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(analyzers, "ANALYZERS", (*analyzers.ANALYZERS, toy_analyzer.TOY))
        yield


@pytest.fixture(scope="module")
def joined(two_ranks, with_toy):
    return ta.load(two_ranks).report()


def test_the_toy_is_in_the_joined_report(joined, two_ranks):
    events = ta.load(two_ranks).events
    want = {int(r): int(n) for r, n in events[events["kind"] == "kernel"].groupby("rank").size().items()}
    toy = joined["sections"]["toy"]
    (rows,) = [t["rows"] for t in toy["tables"] if t["id"] == "by_rank"]
    assert {row["rank"]: row["kernels"] for row in rows} == want and list(want) == [0, 1]
    assert [f["value"] for f in toy["facts"] if f["id"] == "kernels"] == [sum(want.values())]
    assert [f["id"] for f in joined["findings"] if f["analyzer"] == "toy"] == ["toy.kernels"]


def test_the_toy_is_the_same_in_the_cli_per_rank_report(joined, two_ranks, tmp_path):
    out = tmp_path / "ranks.json"
    assert main([str(two_ranks), "--per-rank", "--format", "json", "-o", str(out)]) == 0
    report = json.loads(out.read_text())
    assert_same_data(report["sections"]["toy"], joined["sections"]["toy"], "toy")
    assert_same_data(report["findings"], joined["findings"], "findings")


@pytest.fixture
def broken(monkeypatch):
    """A registry whose ``broken`` analyzer fails on rank 1, ``needs_broken`` reads its merged part as it declares,
    and ``reads_broken`` reads it without declaring it."""
    registry = (*SMALL, toy_analyzer.BROKEN, toy_analyzer.NEEDS_BROKEN, toy_analyzer.READS_BROKEN)
    monkeypatch.setattr(analyzers, "ANALYZERS", registry)


@pytest.mark.parametrize("per_rank", [False, True], ids=["joined", "per_rank"])
def test_a_failing_part_is_named_where_and_what_needs_it_says_so(broken, two_ranks, per_rank):
    with pytest.warns(AnalyzerFailed) as caught:
        report = (perrank.load_job(two_ranks) if per_rank else ta.load(two_ranks)).report()
    where = "rank 1" if per_rank else "ranks 0, 1"
    said = [str(w.message) for w in caught if w.category is AnalyzerFailed]
    assert f"analyzer broken failed on {where}: ValueError: a bug on rank 1" in said
    for reader in ("needs_broken", "reads_broken"):
        assert f"analyzer {reader} needs broken, which failed on {where} (ValueError: a bug on rank 1)" in said
    assert not [w for w in said if "TypeError" in w or "AttributeError" in w], said
    ledger = {f["id"]: f["value"] for f in report["sections"]["ledger"]["facts"]}
    assert ledger["missing_sections"] == "broken, needs_broken, reads_broken"
    assert list(report["sections"]) == ["ledger", "summary"]


def test_every_analyzer_has_a_unique_name_and_needs_only_registered_ones():
    names = [a.name for a in analyzers.ANALYZERS]
    assert len(set(names)) == len(names) and names[0] == "ledger"
    for analyzer in analyzers.ANALYZERS:
        assert set(analyzer.needs) <= set(names) - {analyzer.name}, analyzer.name


def test_an_analysis_runs_once_per_scope_of_a_trace(monkeypatch):
    """Findings, report and a scoped view's findings share one part and one findings call per scope."""
    calls: Counter[str] = Counter()

    def counted(what, call):
        def run(*args):
            calls[what] += 1
            return call(*args)

        return run

    toy = dataclasses.replace(
        toy_analyzer.TOY,
        rank_part=counted("part", toy_analyzer.rank_part),
        findings=counted("findings", toy_analyzer.findings),
    )
    monkeypatch.setattr(analyzers, "ANALYZERS", (*analyzers.ANALYZERS, toy))
    t = ta.load(REPO / "sample_traces" / "unfused_ops.json.gz")
    step = int(t.steps()["step"].iloc[0])
    for _ in range(2):
        assert any(f.analyzer == "toy" for f in t.findings())
        assert any(f.analyzer == "toy" for f in t.build_report().findings)
        assert any(f.analyzer == "toy" for f in t.scoped(step=step).findings())
        assert any(f.analyzer == "toy" for f in t.build_report(step=step).findings)
    assert calls == {"part": 2, "findings": 2}, "once for the whole trace, once for the step"
