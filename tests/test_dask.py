"""Ranks parsed on a real Dask cluster (a LocalCluster: a scheduler and two worker processes) give the same job as
parsing them here; a job analysed rank by rank there (only the parts come back) gives the local report; without
Dask, or without a reachable scheduler, --scheduler is one line and exit 2."""

from __future__ import annotations

import json
import os
import shutil
import sys

import pytest

import traceanalyzer as ta
from tests import toy_analyzer
from tests.conftest import REPO, assert_same_data
from tests.test_cache import assert_same
from traceanalyzer import analyzers, perrank
from traceanalyzer.cli import main

distributed = pytest.importorskip("distributed", reason="Dask distributed is not installed (the 'dask' extra)")
dask = pytest.importorskip("dask")

FSDP = REPO / "sample_traces" / "fsdp"


@pytest.fixture(scope="module")
def scheduler():
    """A real cluster: scheduler and 2 single-threaded worker processes."""
    with distributed.LocalCluster(
        processes=True, n_workers=2, threads_per_worker=1, dashboard_address=None, silence_logs=40
    ) as cluster:
        yield cluster.scheduler_address


@pytest.fixture(scope="module")
def local():
    return ta.load(FSDP)


def test_job_parsed_on_the_cluster_equals_the_local_one(scheduler, monkeypatch):
    monkeypatch.chdir(REPO)  # a relative path: the workers get it resolved, the result names it as given
    relative = FSDP.relative_to(REPO)
    remote = ta.load(relative, scheduler=scheduler)
    assert_same(ta.load(relative), remote)
    assert remote.meta.paths == [str(relative / f"fsdp_rank{r}.json.gz") for r in (0, 1)]
    assert remote.meta.ranks == [0, 1]


def test_the_workers_did_the_parsing(scheduler):
    with distributed.Client(scheduler, set_as_default=False) as client:
        with distributed.get_task_stream(client) as stream:
            ta.load(FSDP, scheduler=client)
        workers = set(client.run(os.getpid).values())
    parsed = [t for t in stream.data if "_parse_indexed" in str(t["key"])]
    assert len(parsed) == 2, "one task per rank"
    assert os.getpid() not in workers


def test_environment_variable_sends_the_ranks(scheduler, local, monkeypatch):
    """TRACEANALYZER_SCHEDULER: what the dashboard and any ta.load without scheduler= use."""
    monkeypatch.setenv("TRACEANALYZER_SCHEDULER", scheduler)
    with distributed.Client(scheduler, set_as_default=False) as client, distributed.get_task_stream(client) as stream:
        remote = ta.load(FSDP)
    assert len([t for t in stream.data if "_parse_indexed" in str(t["key"])]) == 2
    assert_same(local, remote)


def test_job_analysed_rank_by_rank_on_the_cluster_gives_the_local_report(scheduler, monkeypatch):
    monkeypatch.chdir(REPO)  # a relative path: the workers get it resolved, the report names it as given
    relative = FSDP.relative_to(REPO)
    with distributed.Client(scheduler, set_as_default=False) as client, distributed.get_task_stream(client) as stream:
        job = perrank.load_job(relative, scheduler=client)
    assert len([t for t in stream.data if "_work_on_rank" in str(t["key"])]) == 2, "one summary task per rank"
    assert [s.rank for s in job.ranks] == [0, 1]
    assert job.meta.paths == [str(relative / f"fsdp_rank{r}.json.gz") for r in (0, 1)]
    assert [s.meta.paths for s in job.ranks] == [[str(relative / f"fsdp_rank{r}.json.gz")] for r in (0, 1)]
    assert_same_data(job.report(), ta.load(relative).report())


def test_cli_with_a_scheduler_analyses_rank_by_rank(scheduler, local, tmp_path):
    out = tmp_path / "report.json"
    with distributed.Client(scheduler, set_as_default=False) as client, distributed.get_task_stream(client) as stream:
        assert main([str(FSDP), "--scheduler", scheduler, "--format", "json", "-o", str(out)]) == 0
    assert len([t for t in stream.data if "_work_on_rank" in str(t["key"])]) == 2
    assert_same_data(json.loads(out.read_text()), local.report())


def test_unreachable_scheduler_is_one_line(capsys):
    with dask.config.set({"distributed.comm.timeouts.connect": "1s"}):
        assert main([str(FSDP), "--scheduler", "tcp://127.0.0.1:1"]) == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert (
        line.startswith("traceanalyze: error: --scheduler")
        and "cannot reach the Dask scheduler" in line
        and "tcp://127.0.0.1:1" in line
    )


def test_without_dask_scheduler_says_how_to_install(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "distributed", None)  # as if not installed: importing it fails
    assert main([str(FSDP), "--scheduler", "tcp://127.0.0.1:8786"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == (
        "traceanalyze: error: --scheduler tcp://127.0.0.1:8786: needs Dask distributed, not installed: "
        "pip install 'traceanalyzer-hotspots[dask]' (the distribution's name; in the repository: pip install '.[dask]')"
    )


def test_an_analyzer_added_to_the_registry_is_in_the_report_made_on_the_cluster(scheduler, monkeypatch, tmp_path):
    """A toy analyzer (tests/toy_analyzer.py) runs on the workers and shows what it shows in the joined report."""
    steps = [a for a in analyzers.ANALYZERS if a.name == "summary"]
    monkeypatch.setattr(analyzers, "ANALYZERS", (analyzers.LEDGER, *steps, toy_analyzer.TOY))
    for name, source in (("a", "fused_ops.json.gz"), ("b", "unfused_ops.json.gz")):
        shutil.copy(REPO / "sample_traces" / source, tmp_path / f"{name}.json.gz")
    with distributed.Client(scheduler, set_as_default=False) as client, distributed.get_task_stream(client) as stream:
        job = perrank.load_job(tmp_path, scheduler=client)
    assert len([t for t in stream.data if "_work_on_rank" in str(t["key"])]) == 2, "one summary task per rank"
    joined = ta.load(tmp_path).report()
    assert [f["id"] for f in joined["findings"]] == ["toy.kernels"]
    assert_same_data(job.report(), joined)
