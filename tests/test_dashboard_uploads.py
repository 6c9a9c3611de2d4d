"""The dashboard's upload box in headless Chromium: size-limited, and parsed without executing anything."""

from __future__ import annotations

import os
import pickle
import threading
import time

import pytest

from tests.conftest import REPO, headless_chromium

pytestmark = pytest.mark.browser

WAIT_S = 30
FUSED = REPO / "sample_traces" / "fused_ops.json.gz"


@pytest.fixture(scope="module")
def browser():
    """A headless Chromium driven by selenium."""
    yield from headless_chromium()


@pytest.fixture(scope="module")
def app_url():
    """The real app with one small trace loaded, served on a free local port."""
    from traceanalyzer.dashboards.cli import serve
    from traceanalyzer.dashboards.store import Store

    store = Store()
    store.open([str(FUSED)], wait=True)
    server = serve(store, "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}", store
    server.shutdown()


def _wait_text(browser, css: str, text: str) -> str:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(browser, WAIT_S).until(ec.text_to_be_present_in_element((By.CSS_SELECTOR, css), text))
    return browser.find_element(By.CSS_SELECTOR, css).text


def _upload(browser, url: str, path) -> None:
    from selenium.webdriver.common.by import By

    browser.get(url)
    _wait_text(browser, "details summary", "Open another trace")
    browser.find_element(By.CSS_SELECTOR, "details summary").click()
    browser.find_element(By.CSS_SELECTOR, "#upload input[type=file]").send_keys(str(path))


def test_an_upload_over_the_limit_is_refused_with_the_one_message(browser, app_url, tmp_path):
    from traceanalyzer.dashboards.app import UPLOAD_LIMIT_BYTES, UPLOAD_TOO_LARGE

    url, store = app_url
    big = tmp_path / "big.json"
    with big.open("wb") as f:  # sparse: the browser reads its size, never its bytes
        f.truncate(UPLOAD_LIMIT_BYTES + 1)
    jobs = len(store.jobs())
    _upload(browser, url, big)
    assert _wait_text(browser, "#open-msg", "upload refused") == UPLOAD_TOO_LARGE
    time.sleep(1)  # nothing was sent: no load started
    assert len(store.jobs()) == jobs


def test_the_server_refuses_an_upload_over_the_limit_with_the_same_message(monkeypatch):
    import base64

    from traceanalyzer.dashboards import app

    monkeypatch.setattr(app, "UPLOAD_LIMIT_BYTES", 1000)  # a browser that ignores max_size
    contents = "data:application/json;base64," + base64.b64encode(b"x" * 1001).decode()
    with pytest.raises(ValueError) as refused:
        app.save_upload(contents, "big.json")
    assert str(refused.value) == app.UPLOAD_TOO_LARGE


class _Payload:
    """A pickle that would create a file if anything in it ran."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.mkdir, (self.marker,))


def test_a_pickle_upload_is_not_executed(browser, app_url, tmp_path):
    url, store = app_url
    marker = tmp_path / "pwned"
    evil = tmp_path / "memory_snapshot.pickle"
    evil.write_bytes(pickle.dumps({"segments": [], "device_traces": [_Payload(str(marker))]}))
    _upload(browser, url, evil)
    error = _wait_text(browser, "#load-status", "memory_snapshot.pickle (uploaded)")
    assert "could not open memory_snapshot.pickle (uploaded)" in error
    assert not marker.exists() and [j.state for j in store.jobs()][-1] == "error"
    from selenium.webdriver.common.by import By

    browser.find_element(By.CSS_SELECTOR, "#load-status button.dismiss").click()  # and the app keeps running
    _wait_text(browser, "#nav-overview", "Overview")
    assert store.view(store.jobs()[0].key) is not None
