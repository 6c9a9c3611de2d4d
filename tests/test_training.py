"""In-training use: torchtitan-style ``profile_traces/iteration_N/`` folders load as they are, and
``ta.on_trace_ready`` writes each profiled window's trace and digest there and fails the run on the gate (a real
torch.profiler run on the CPU; skipped where torch is not installed)."""

from __future__ import annotations

import shutil
import time

import pytest

import traceanalyzer as ta
from tests.conftest import REPO
from traceanalyzer.cli import main
from traceanalyzer.errors import TraceError
from traceanalyzer.tokens import DIGEST_BUDGET, tokens
from traceanalyzer.training import Regression

FSDP = REPO / "sample_traces" / "fsdp"


def _profile_traces(tmp_path, iterations=(10, 20)):
    """A torchtitan ``profile_traces`` folder: each iteration holds rank<R>_trace.json(.gz) of both FSDP ranks."""
    root = tmp_path / "profile_traces"
    for it in iterations:
        (root / f"iteration_{it}").mkdir(parents=True)
        for rank in (0, 1):
            shutil.copy(FSDP / f"fsdp_rank{rank}.json.gz", root / f"iteration_{it}" / f"rank{rank}_trace.json.gz")
    return root


def test_an_iteration_folder_loads_as_the_job_it_holds(tmp_path):
    root = _profile_traces(tmp_path)
    trace = ta.load(root / "iteration_20")
    assert trace.meta.ranks == [0, 1] and len(trace.events) == len(ta.load(FSDP).events)


def test_the_folder_of_several_iterations_is_one_line_naming_them(tmp_path, capsys):
    root = _profile_traces(tmp_path, (9, 10, 20))
    with pytest.raises(TraceError, match=r"holds 3 profiled iterations \(iteration_9, iteration_10, iteration_20\)"):
        ta.load(root)
    assert main([str(root)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[-1].endswith(f"give one of them, e.g. {root / 'iteration_20'}")


def _train(handler, slow_from: int | None = None) -> None:
    """A small CPU training loop profiled in two windows of a warm-up and 5 active steps (the gate's least for its
    99 % interval); steps from ``slow_from`` first sleep 1 s (more than a loaded machine's hiccups; before the
    step's ops, so that the step time holds it, the last step's too) and run the forward 20 more times."""
    torch = pytest.importorskip("torch", reason="torch is not installed (pip install torch: a CPU build will do)")
    model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(64, 256)
    schedule = torch.profiler.schedule(wait=0, warmup=1, active=5, repeat=2)
    cpu = [torch.profiler.ProfilerActivity.CPU]
    with torch.profiler.profile(activities=cpu, schedule=schedule, on_trace_ready=handler) as prof:
        for i in range(12):
            slow = slow_from is not None and i >= slow_from
            if slow:
                time.sleep(1.0)
            for _ in range(20 if slow else 0):
                model(x)
            model(x).sum().backward()
            opt.step()
            opt.zero_grad()
            prof.step()


def test_on_trace_ready_writes_each_window_and_its_digest(tmp_path):
    handler = ta.on_trace_ready(tmp_path / "profile_traces", rank=0)
    _train(handler)
    assert [p.relative_to(tmp_path).as_posix() for p in handler.written] == [
        "profile_traces/iteration_6/rank0_trace.json",
        "profile_traces/iteration_12/rank0_trace.json",
    ]
    for path in handler.written:
        written = (path.parent / "rank0_digest.md").read_text()
        assert written == ta.load(path).digest() + "\n" and tokens(written) <= DIGEST_BUDGET
    assert ta.load(tmp_path / "profile_traces" / "iteration_12").meta.paths == [str(handler.written[1])]


def test_a_window_slower_than_the_first_past_the_threshold_fails_the_run(tmp_path):
    handler = ta.on_trace_ready(tmp_path / "profile_traces", rank=0, fail_on_regression=20)
    with pytest.raises(Regression, match=r"beyond \+20.0% per step"):
        _train(handler, slow_from=6)
    second = (tmp_path / "profile_traces" / "iteration_12" / "rank0_digest.md").read_text()
    assert "Gate against " in second and ": fail: " in second
    assert "Gate" not in (tmp_path / "profile_traces" / "iteration_6" / "rank0_digest.md").read_text()


def test_bad_gate_arguments_are_refused_before_training(tmp_path):
    with pytest.raises(TraceError, match="threshold must be a number >= 0"):
        ta.on_trace_ready(tmp_path, fail_on_regression=-1)
    with pytest.raises(TraceError, match="does not exist"):
        ta.on_trace_ready(tmp_path, fail_on_regression=5, baseline=tmp_path / "missing.json")
