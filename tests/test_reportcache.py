"""The dashboard's report kept in the trace cache: a trace opened again shows the same report, findings' links and
notes without running the analyzers; a stale or damaged entry is built again; nothing is kept with the cache off."""

from __future__ import annotations

import warnings

import pytest
from traceanalyzer.dashboards.pages import overview
from traceanalyzer.dashboards.store import Store

from tests.conftest import shared_path
from traceanalyzer import cache, reportcache
from traceanalyzer.renderers import json as json_renderer
from traceanalyzer.trace import Trace

KEPT = "(the dashboard's report)"


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    """A fresh, empty cache folder for one test, with the cache on."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("TRACEANALYZER_CACHE", "1")
    monkeypatch.delenv("TRACEANALYZER_CACHE_DIR", raising=False)
    monkeypatch.delenv("TRACEANALYZER_CACHE_SIZE", raising=False)
    return tmp_path / "xdg" / "traceanalyzer"


@pytest.fixture
def builds(monkeypatch):
    """Counts the reports built (not read from the cache) in this process."""
    count = {"n": 0}
    build = Trace.build_report

    def counting(self, *args, **kwargs):
        count["n"] += 1
        return build(self, *args, **kwargs)

    monkeypatch.setattr(Trace, "build_report", counting)
    return count


def _opened(path) -> tuple[dict, list[str], list[str]]:
    """A fresh store's view of path: its report as the JSON report, its notes and the Overview's finding links."""
    store = Store()
    view = store.view(store.open([str(path)], wait=True))
    assert view is not None
    report = view.report()
    links = [overview.finding_link(view, f, "") + str(view.place(f).timeline) for f in report.findings]
    return json_renderer.data(report), view.notes, links


def test_a_trace_opened_again_shows_its_kept_report_without_the_analyzers(cache_dir, builds):
    trace = shared_path("h200", "ddp_no_overlap")
    first = _opened(trace)
    assert builds["n"] == 1 and first[0]["findings"]
    assert [e.source for e in cache.entries() if e.source.endswith(KEPT)] == [f"ddp_no_overlap {KEPT}"]
    again = _opened(trace)
    assert builds["n"] == 1  # read back, not built
    assert again == first
    assert any("rank" in link and "'at'" in link for link in again[2])  # the findings' Timeline places came back


def test_a_stale_or_damaged_kept_report_is_built_again(cache_dir, builds, monkeypatch):
    trace = shared_path("h200", "gpt_train", "gpt_train.json.gz")
    first = _opened(trace)
    (entry,) = [e.path for e in cache.entries() if e.source.endswith(KEPT)]
    built_with = reportcache.built_with()
    monkeypatch.setattr(reportcache, "built_with", lambda: [*built_with, "other code"])
    assert _opened(trace) == first and builds["n"] == 2  # built by other code: built again, and kept anew
    entry.write_bytes(entry.read_bytes()[:-100])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert _opened(trace) == first and builds["n"] == 3
    assert any(f"{entry}: the kept report could not be read" in str(w.message) for w in caught)
    assert _opened(trace) == first and builds["n"] == 3  # and kept again, whole


def test_no_report_is_kept_with_the_cache_off(cache_dir, builds, monkeypatch):
    monkeypatch.setenv("TRACEANALYZER_CACHE", "0")
    trace = shared_path("h200", "gpt_train", "gpt_train.json.gz")
    assert _opened(trace) == _opened(trace) and builds["n"] == 2
    assert not cache_dir.exists() or not list(cache_dir.iterdir())


def test_a_kept_report_others_can_write_is_not_read(cache_dir, builds):
    """A pickle runs code when read: an entry that group or others may write is built again, never unpickled."""
    trace = shared_path("h200", "gpt_train", "gpt_train.json.gz")
    first = _opened(trace)
    (entry,) = [e.path for e in cache.entries() if e.source.endswith(KEPT)]
    entry.chmod(0o666)
    assert _opened(trace) == first and builds["n"] == 2
