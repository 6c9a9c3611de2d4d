"""Shared test fixtures: real traces from ../shared/traces, skipped with a reason where absent."""

from __future__ import annotations

import contextlib
import functools
import gzip
import json
import os
import shutil
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from traceanalyzer.dashboards.cli import serve

import traceanalyzer as ta
from traceanalyzer import analyzers, cli, perrank
from traceanalyzer.analyzers import as_job
from traceanalyzer.analyzers.summary import BASIS_EVENTS
from traceanalyzer.findings import Finding
from traceanalyzer.options import DEFAULT, Options
from traceanalyzer.section import Section
from traceanalyzer.tracedata import TraceData

# pytest imports this file as ``conftest``, most test modules as ``tests.conftest``: one module under both names, so
# what is loaded once per session (``load_shared``, ``job_pair``, ``call_tree_scopes``) is, not once per name.
sys.modules.setdefault("tests.conftest", sys.modules[__name__])

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "traces"
H200 = SHARED / "h200"
PUBLIC_TORCH = SHARED / "public" / "torch"
PUBLIC_ASCEND = SHARED / "public" / "ascend"
LEGACY_2021 = (
    "public",
    "torch",
    "kineto_tb_plugin",
    "samples",
    "resnet50_num_workers_0",
    "worker0.1623143089861.pt.trace.json.gz",
)
"""The oldest Kineto trace we have (2021: legacy categories, ``async`` flows), as parts under SHARED."""


SAMPLE_COLLECTIONS = ("memory_snapshot", "pairs", "gate", "inference")
"""Folders of sample_traces/ that hold separate runs, not the ranks of one job (loaded as one they are refused as
"not one job"): their traces are cases of their own."""


def shared_path(*parts: str) -> Path:
    """A path under ../shared/traces; skips the test when it is not there."""
    path = SHARED.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"real trace not available: {path} (../shared/traces is absent on this machine)")
    return path


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which reads the groups into the test ids
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Keep a module's tests on one xdist worker when they share a module-scoped fixture (a served app, a set of
    loaded traces), so ``-n 2 --dist loadgroup`` builds each such fixture once, not once per worker."""
    for item in items:
        info = getattr(item, "_fixtureinfo", None)
        defs = info.name2fixturedefs.values() if info else ()
        if any(d[-1].scope == "module" for d in defs if d):
            item.add_marker(pytest.mark.xdist_group(item.module.__name__ if item.module else item.nodeid))


@pytest.fixture(scope="session", autouse=True)
def private_cache(tmp_path_factory):
    """The suite never writes to the user's cache folder, parses afresh unless a test asks for the cache, and prints
    progress only where a test asks for it (tests/test_cli.py), so stderr does not depend on the machine's load."""
    root = tmp_path_factory.getbasetemp()
    _RUN_CACHE["folder"] = (root.parent if os.environ.get("PYTEST_XDIST_WORKER") else root) / "shared-traces-cache"
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("TRACEANALYZER_CACHE_DIR", raising=False)
        mp.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("xdg-cache")))
        mp.setenv("TRACEANALYZER_CACHE", "0")
        mp.setattr(cli, "PROGRESS_AFTER_S", float("inf"))  # no progress lines from a load slowed by a busy machine
        yield


_LOADED: dict = {}
_RUN_CACHE: dict[str, Path] = {}
"""The trace cache folder every process of this test run shares (``private_cache`` names it: beside the xdist
workers' own temporary folders)."""


def renamed_top_kernel(path: Path, name: str) -> Path:
    """``path`` written as sample_traces/cuda_graph with its top kernel (by total time) renamed to ``name``."""
    with gzip.open(REPO / "sample_traces" / "cuda_graph" / "cuda_graph.json.gz", "rt") as f:
        raw = json.load(f)
    kernels = [e for e in raw["traceEvents"] if e.get("cat") == "kernel"]
    totals = {n: sum(e["dur"] for e in kernels if e["name"] == n) for n in {e["name"] for e in kernels}}
    top = max(totals, key=totals.get)
    for e in kernels:
        if e["name"] == top:
            e["name"] = name
    path.write_text(json.dumps(raw))
    return path


def load_shared(*parts: str) -> ta.Trace:
    """Load a shared trace once per test process and parse it once per test run: the first process to load it parses
    it and keeps its tables in the cache folder all of this run's processes share (empty when the run starts); the
    other xdist worker reads them from there instead of parsing again."""
    path = shared_path(*parts)
    if path not in _LOADED:
        with run_cache():
            _LOADED[path] = ta.load(path, cache=True)
    return _LOADED[path]


@contextlib.contextmanager
def run_cache() -> Iterator[None]:
    """Inside, a load asked to use the cache (``cache=True``) keeps and reads tables in the folder all of this run's
    test processes share."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TRACEANALYZER_CACHE_DIR", str(_RUN_CACHE["folder"]))
        yield


@functools.cache
def call_tree_scopes() -> dict[str, ta.Trace]:
    """Scopes whose call trees are deep or unusual, for the call-tree tests: with_stack and with_modules Python
    stacks (whole and one step), record_function ranges written as CPU ops (one DDP rank), an Ascend run; made once
    per test session (tests/test_callpath.py and tests/test_calltree.py walk the same scopes)."""
    dynamic = ta.load(REPO / "sample_traces" / "dynamic_shapes")
    ascend = load_shared("public", "ascend", "msinsight", "pytorch_text", "level2")
    return {
        "dynamic_shapes": dynamic,
        "dynamic_shapes step 4": dynamic.scoped(step=4),
        "ddp rank 1": load_shared("h200", "ddp_overlap").scoped(rank=1),
        "ascend": ascend,
    }


def assert_inside_the_trace(trace: ta.Trace) -> None:
    """No step timed by its events ends past the last event the trace recorded (a step marker's tail is not an event
    of its own) and no finding claims time before its first event or after that last one: public inference traces'
    last ProfilerStep outlasts every other event (12.2 ms on the H100 Qwen trace), and epoch-ns times once lost up to
    256 ns in a float step edge. Checked on every public trace by the corpus and digest tests, which have run the
    findings."""
    ev = trace.events
    held = ev[ev["kind"] != "step"]
    first, last = int(ev["ts"].min()), int((held["ts"] + held["dur"]).max())
    steps = trace.steps()
    steps = steps[steps["basis"] == BASIS_EVENTS]  # a rank timed by its profiler's own figures ran unrecorded kernels
    assert (steps["start_ns"] + steps["step_ns"] <= last).all()
    for finding in trace.findings():
        for starts, ends in finding.claims.values():
            assert not len(starts) or (starts.min() >= first and ends.max() <= last), finding.title


JOBS = {
    "ddp_overlap": ("h200", "ddp_overlap"),
    "ddp_no_overlap": ("h200", "ddp_no_overlap"),
    "dlrm_8rank": ("public", "torch", "param", "dlrm_kineto_8rank"),
    "ascend_pp2_4rank": ("public", "ascend", "msinsight", "st_level2_qwen3_4rank"),
    "ascend_level1_2rank": ("public", "ascend", "msinsight", "pytorch_text", "level1"),
}
"""Real multi-rank jobs (under ../shared/traces) the rank-by-rank analysis is checked on, by name."""
_JOBS: dict = {}


def job_pair(name: str) -> tuple[perrank.Job, ta.Trace]:
    """A job of ``JOBS`` (or "fsdp", the bundled sample) analysed rank by rank and loaded joined, once per session
    (the ranks of a shared job parsed once per run: the rank-by-rank load reads what the joined one kept)."""
    path = REPO / "sample_traces" / "fsdp" if name == "fsdp" else shared_path(*JOBS[name])
    if name not in _JOBS:
        joined = load_shared(*JOBS[name]) if name in JOBS else ta.load(path)
        with run_cache():
            _JOBS[name] = (perrank.load_job(path, cache=True), joined)
    return _JOBS[name]


def step_pair(name: str, index: int = 1) -> tuple[perrank.Job, ta.Trace]:
    """One step of a job of ``JOBS`` (the ``index``-th it recorded) analysed rank by rank, and the same step of the
    joined job."""
    _, joined = job_pair(name)
    step = sorted(joined.steps_recorded())[index]
    with run_cache():
        return perrank.load_job(shared_path(*JOBS[name]), step=step, cache=True), joined.scoped(step=step)


def assert_same_data(got, want, where: str = "") -> None:
    """Plain data (dicts, lists, numbers, text) equal, floats to 1e-9 relative (sums in another order), NaN equal
    to NaN; the first difference is named by its place."""
    if isinstance(want, dict):
        assert isinstance(got, dict) and list(got) == list(want), f"{where}: keys {list(got)} != {list(want)}"
        for key in want:
            assert_same_data(got[key], want[key], f"{where}.{key}")
    elif isinstance(want, list | tuple):
        assert isinstance(got, list | tuple) and len(got) == len(want), f"{where}: {len(got)} items != {len(want)}"
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            assert_same_data(g, w, f"{where}[{i}]")
    elif isinstance(want, float) and isinstance(got, int | float):
        assert got == pytest.approx(want, rel=1e-9, abs=1e-12, nan_ok=True), f"{where}: {got} != {want}"
    else:
        assert got == want, f"{where}: {got!r} != {want!r}"


def joined_section(module, view: TraceData, options: Options = DEFAULT) -> Section | None:
    """An analyzer module's section of a joined trace (or a scoped view of one), as the report makes it: the job of
    its one part (made by every analyzer: also by one that the report leaves out as saying nothing of the trace)."""
    one = as_job(view, options, analyzers.ANALYZERS)
    return module.job_section(one.merged(_analyzer(module)), one, options)


def joined_findings(module, view: TraceData) -> list[Finding]:
    """An analyzer module's findings of a joined trace (or a scoped view of one), unranked, as the report makes
    them: the job of its one part."""
    one = as_job(view, DEFAULT, analyzers.ANALYZERS)
    return module.job_findings(one.merged(_analyzer(module)), one)


def _analyzer(module) -> str:
    """The registered name of an analyzer module (its last dotted name)."""
    return module.__name__.rsplit(".", 1)[-1]


def same_section(module, job: perrank.Job, joined: ta.Trace, options: Options = DEFAULT) -> dict | None:
    """A module's section of a job analysed rank by rank against the joined trace's, the job of its one part (both
    None, or equal as plain data); the joined one, as plain data."""
    want = joined_section(module, joined, options)
    got = module.job_section(job.merged(_analyzer(module)), job, options)
    assert (got is None) == (want is None), module.__name__
    if want is None:
        return None
    assert_same_data(got.to_dict(), want.to_dict(), module.__name__)
    return want.to_dict()


def same_findings(got: list, want: list) -> list:
    """Findings equal as plain data and in the device intervals they claim, per rank; the wanted ones."""
    assert_same_data([f.to_dict() for f in got], [f.to_dict() for f in want], "findings")
    for g, w in zip(got, want, strict=True):
        assert list(g.claims) == list(w.claims), w.title
        for rank, (starts, ends) in w.claims.items():
            assert np.array_equal(g.claims[rank][0], starts) and np.array_equal(g.claims[rank][1], ends), w.title
    return want


def table_rows(section: dict, table_id: str) -> list[dict]:
    """The rows of one table of a section (plain data)."""
    return next(t["rows"] for t in section["tables"] if t["id"] == table_id)


@pytest.fixture(scope="session")
def gpt_train() -> ta.Trace:
    return load_shared("h200", "gpt_train", "gpt_train.json.gz")


def section(report: dict, section_id: str) -> dict:
    """A section of a JSON report (schema 2), by id."""
    return report["sections"][section_id]


def facts(report: dict, section_id: str) -> dict:
    """The facts of a report's section as {id: value}."""
    return {f["id"]: f["value"] for f in section(report, section_id)["facts"]}


def rows(report: dict, section_id: str, table_id: str) -> list[dict]:
    """The rows of one table of a report's section."""
    return next(t["rows"] for t in section(report, section_id)["tables"] if t["id"] == table_id)


CHROMIUM_FLAGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--window-size=1280,800",  # the smallest laptop screen the pages must fit
)


def _browser_paths() -> tuple[str, str]:
    driver = shutil.which("chromedriver")
    chromium = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if not driver or not chromium:
        pytest.skip("chromedriver/chromium not installed (scripts/test.sh installs Debian chromium chromium-driver)")
    return driver, chromium


def headless_chromium(offline: bool = False):
    """A headless Chromium driven by selenium, its console log kept (skips where Chromium is not installed);
    ``offline`` switches its network off. Use as ``yield from headless_chromium()`` in a fixture."""
    webdriver = pytest.importorskip("selenium.webdriver")
    service = pytest.importorskip("selenium.webdriver.chrome.service")
    driver_path, chromium = _browser_paths()
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=service.Service(driver_path), options=options)
    if offline:
        driver.set_network_conditions(offline=True, latency=0, download_throughput=0, upload_throughput=0)
    yield driver
    driver.quit()


LOAD_S = 180
"""How long a test waits for the dashboard's background loads."""


def artifact_folder(tmp_path_factory, name: str) -> Path:
    """Where a test module keeps its screenshots: $TRACEANALYZER_ARTIFACTS/<name> if set, else a pytest temporary
    folder (never beside the user's files)."""
    given = os.environ.get("TRACEANALYZER_ARTIFACTS")
    folder = Path(given) / name if given else tmp_path_factory.mktemp(name)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@contextlib.contextmanager
def serving(store) -> Iterator[str]:
    """The dashboard over store on a free local port once every load it was given is ready: its URL."""
    deadline = time.monotonic() + LOAD_S
    while store.busy() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert all(j.state == "ready" for j in store.jobs()), [j.message for j in store.jobs()]
    server = serve(store, "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
