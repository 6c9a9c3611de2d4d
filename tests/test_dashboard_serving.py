"""How the dashboard serves: security headers and a strict script policy, the machine's own names on a wildcard
bind, failed opens kept per browser page and cut, upload temp folders removed."""

from __future__ import annotations

import http.client
import shutil
import socket
import threading
import time
from pathlib import Path

import pytest
from traceanalyzer.dashboards import access, cli, routing
from traceanalyzer.dashboards.store import FAILED_KEPT, MESSAGE_CHARS, Store

from tests.conftest import REPO, headless_chromium

WAIT_S = 30
FUSED = REPO / "sample_traces" / "fused_ops.json.gz"
OVERLAP_S = 1.0
"""How long a comparison is held open for a second request to arrive while it is made."""


@pytest.fixture(scope="module")
def browser():
    """A headless Chromium driven by selenium."""
    yield from headless_chromium()


@pytest.fixture(scope="module")
def app_url():
    """The real app with one small trace loaded, served on a free local port."""
    store = Store()
    store.open([str(FUSED)], wait=True)
    server = cli.serve(store, "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}", store
    server.shutdown()


def _get(port: int, path: str, host: str, address: str = "127.0.0.1") -> http.client.HTTPResponse:
    conn = http.client.HTTPConnection(address, port, timeout=WAIT_S)
    conn.request("GET", path, headers={"Host": host})
    response = conn.getresponse()
    response.read()
    conn.close()
    return response


def _wait_text(browser, css: str, text: str) -> str:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(browser, WAIT_S).until(ec.text_to_be_present_in_element((By.CSS_SELECTOR, css), text))
    return browser.find_element(By.CSS_SELECTOR, css).text


def test_every_response_forbids_framing_and_inline_scripts(app_url):
    url, _ = app_url
    port = int(url.rsplit(":", 1)[1])
    for path in ("/", "/_dash-layout", "/assets/style.css", "/no-such-page"):
        headers = _get(port, path, f"127.0.0.1:{port}").headers
        assert headers["X-Frame-Options"] == "DENY", path
        assert headers["X-Content-Type-Options"] == "nosniff", path
        policy = dict(part.strip().split(" ", 1) for part in headers["Content-Security-Policy"].split(";"))
        script = policy["script-src"].split()
        assert script[0] == "'self'" and all(s.startswith("'sha256-") for s in script[1:]), policy
        assert policy["default-src"] == "'self'" and policy["frame-ancestors"] == "'none'", policy
    assert _get(port, "/", "attacker.example").headers["X-Frame-Options"] == "DENY"  # the 403 too


def test_a_page_asked_for_without_a_trace_names_the_first_loaded_one(app_url):
    """The page is drawn once, for the URL it keeps: a link without a trace is sent to the same page and picks
    naming the first loaded trace; one naming a trace, or a request that is no page, is answered as it is."""
    url, store = app_url
    port, key = int(url.rsplit(":", 1)[1]), store.ready()[0].key
    moved = _get(port, "/hotspots?step=3&nonsense=1", f"127.0.0.1:{port}")
    assert moved.status == 302 and moved.headers["Location"] == f"/hotspots?trace={key}&step=3"
    assert _get(port, "/", f"127.0.0.1:{port}").headers["Location"] == f"/?trace={key}"
    assert _get(port, f"/memory?trace={key}", f"127.0.0.1:{port}").status == 200
    assert _get(port, "/_dash-layout", f"127.0.0.1:{port}").status == 200
    assert _get(port, "/", f"attacker.example:{port}").status == 403  # the Host is checked first


@pytest.mark.browser
def test_every_page_works_under_the_policy_with_no_console_errors(browser, app_url):
    url, _ = app_url
    for path in routing.PAGES:
        browser.get(url + path)
        _wait_text(browser, "#trace", "fused_ops")
        time.sleep(1.0)  # the page's callbacks run
        logs = [e["message"] for e in browser.get_log("browser") if e["level"] in ("SEVERE", "WARNING")]
        assert not logs, (path, logs[:3])
    browser.get(url + "/hotspots")
    _wait_text(browser, "#page", "Hotspots")
    assert browser.find_elements("css selector", "#page .js-plotly-plot"), "the hotspot chart is drawn"
    browser.get(url + "/timeline")
    _wait_text(browser, "#page", "Timeline")
    assert browser.find_elements("css selector", "#page .js-plotly-plot"), "the timeline is drawn"
    assert not [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]


def _lan_address() -> str:
    """This machine's address on its default route (a UDP socket sends nothing to connect); skips when none."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.1", 9))
        except OSError:
            pytest.skip("this machine has no IPv4 route")
        address = s.getsockname()[0]
    if address.startswith("127."):
        pytest.skip("this machine has only a loopback address")
    return address


def test_a_wildcard_bind_answers_the_machines_own_address_and_refuses_others():
    address = _lan_address()
    store = Store()
    server = cli.serve(store, "0.0.0.0", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        port = server.server_port
        assert _get(port, "/", f"{address}:{port}", address).status == 200
        assert _get(port, "/", f"localhost:{port}", address).status == 200
        assert _get(port, "/", f"attacker.example:{port}", address).status == 403
    finally:
        server.shutdown()
    assert address in access.host_names("::")


@pytest.mark.browser
def test_a_browser_reaches_a_wildcard_bind_by_the_machines_lan_address(browser):
    address = _lan_address()
    store = Store()
    store.open([str(FUSED)], wait=True)
    server = cli.serve(store, "0.0.0.0", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        browser.get(f"http://{address}:{server.server_port}/timeline")
        _wait_text(browser, "#page", "Timeline")
        assert browser.find_elements("css selector", "#page .js-plotly-plot"), "the timeline is drawn"
        assert not [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    finally:
        server.shutdown()


def test_the_wildcard_warning_lists_the_names_the_page_answers(monkeypatch, capsys):
    address = _lan_address()

    def no_dash(*_args):
        raise cli.MissingDependency("stop here")

    monkeypatch.setattr(cli, "serve", no_dash)
    assert cli.main(["--host", "0.0.0.0"]) == 2
    warning = capsys.readouterr().err.splitlines()[0]
    assert warning.startswith("traceanalyze: warning: serving on 0.0.0.0:")
    names = warning.split("these names: ", 1)[1].split(", ")
    assert address in names and "localhost" in names and socket.gethostname().lower() in names


def test_failed_opens_are_cut_and_only_the_last_few_kept_per_session():
    store = Store()
    huge = "/nowhere/" + "x" * 5_000_000
    for _ in range(FAILED_KEPT + 3):
        store.open_requested(huge, owner="a")
    store.open_requested("/elsewhere", owner="b")
    mine = store.pending("a")
    assert len(mine) == FAILED_KEPT and all(j.state == "error" for j in mine)
    assert all(len(j.label) < MESSAGE_CHARS + 40 and len(j.message) < MESSAGE_CHARS + 40 for j in mine)
    assert "more characters" in mine[0].label
    assert [j.label for j in store.pending("b")] == ["/elsewhere"]


@pytest.mark.browser
def test_a_failed_open_shows_only_on_the_page_that_asked(browser, app_url):
    from selenium.webdriver.common.by import By

    url, store = app_url
    browser.get(url)
    _wait_text(browser, "details summary", "Open another trace")
    browser.find_element(By.CSS_SELECTOR, "details summary").click()
    browser.find_element(By.CSS_SELECTOR, "#open-path").send_keys("/etc/passwd")
    browser.find_element(By.CSS_SELECTOR, "#open-btn").click()
    assert "could not open /etc/passwd" in _wait_text(browser, "#load-status", "/etc/passwd")
    browser.get(url)  # another page: a new session
    _wait_text(browser, "#trace", "fused_ops")
    time.sleep(1.0)  # a few polls
    assert "/etc/passwd" not in browser.find_element(By.CSS_SELECTOR, "#load-status").text
    assert any(j.label == "/etc/passwd" and j.state == "error" for j in store.jobs())


@pytest.mark.browser
def test_an_uploads_temp_folder_is_removed_once_read(browser, app_url, tmp_path):
    from selenium.webdriver.common.by import By

    url, store = app_url
    copy = tmp_path / "uploaded_unfused.json.gz"
    shutil.copy(REPO / "sample_traces" / "unfused_ops.json.gz", copy)  # not the open trace: that would be it again
    browser.get(url)
    _wait_text(browser, "details summary", "Open another trace")
    browser.find_element(By.CSS_SELECTOR, "details summary").click()
    browser.find_element(By.CSS_SELECTOR, "#upload input[type=file]").send_keys(str(copy))
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline and not any(j.label.startswith(copy.name) for j in store.ready()):
        time.sleep(0.2)
    job = next(j for j in store.ready() if j.label.startswith(copy.name))
    saved = Path(job.paths[0])
    assert saved.parent.name.startswith("traceanalyzer-upload-") and not saved.parent.exists()
    assert store.view(job.key).report() is not None and copy.exists()


@pytest.mark.browser
def test_a_table_exports_its_filtered_rows_as_csv(app_url, tmp_path):
    import csv

    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    url, store = app_url
    for driver in headless_chromium():
        driver.execute_cdp_cmd("Page.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(tmp_path)})
        driver.get(url + "/hotspots")
        _wait_text(driver, "#hs-table", "Export")
        buttons = driver.find_elements(By.CSS_SELECTOR, "button.export")
        assert len(buttons) == len(driver.find_elements(By.CSS_SELECTOR, ".dash-spreadsheet-container")), "each table"
        shown = driver.find_element(By.CSS_SELECTOR, "#hs-table td[data-dash-column=name]").text
        cell = driver.find_element(By.CSS_SELECTOR, "#hs-table .dash-filter[data-dash-column=name] input[type=text]")
        cell.send_keys(shown[:12] + Keys.ENTER)
        time.sleep(1.0)
        driver.find_element(By.CSS_SELECTOR, "#hs-table button.export").click()
        deadline = time.monotonic() + WAIT_S
        while not list(tmp_path.glob("*.csv")) and time.monotonic() < deadline:
            time.sleep(0.2)
        (path,) = tmp_path.glob("*.csv")
        rows = list(csv.DictReader(path.read_text(encoding="utf-8-sig").splitlines()))
        visible = driver.find_elements(By.CSS_SELECTOR, "#hs-table td[data-dash-column=name]")
        assert rows and len(rows) == len(visible) and all(shown[:12] in r["name"] for r in rows)
        logs = [e["message"] for e in driver.get_log("browser") if e["level"] in ("SEVERE", "WARNING")]
        assert not logs, logs[:3]


def test_a_trace_is_keyed_by_its_contents_not_by_when_or_where_it_was_opened(tmp_path):
    copy = tmp_path / "renamed.json.gz"
    shutil.copy(FUSED, copy)
    first, second = Store(), Store()
    key = first.open([str(FUSED)], wait=True)
    second.open([str(REPO / "sample_traces" / "unfused_ops.json.gz")], wait=True)
    assert second.open([str(copy)], wait=True) == key  # opened second, from another path: the same key
    assert second.open([str(FUSED)], wait=True) == key and len(second.jobs()) == 2  # and not a second copy
    assert second.open(["/no/such/trace.json"], wait=True).startswith("failed-")  # no key a link could name


def test_two_requests_for_one_comparison_while_it_is_made_make_it_once(monkeypatch):
    """A threshold typed while Compare computes asks for the same pair again: it waits for the one being made."""
    from traceanalyzer import comparison

    store = Store()
    left = store.open([str(FUSED)], wait=True)
    right = store.open([str(REPO / "sample_traces" / "unfused_ops.json.gz")], wait=True)
    real, made, again = comparison.compare, [], threading.Event()

    def slow(baseline, candidate, *args, **kwargs):
        made.append(candidate)
        if len(made) == 1:
            again.wait(OVERLAP_S)  # the first call waits for a second one to come (none with the pair's lock)
        else:
            again.set()
        return real(baseline, candidate, *args, **kwargs)

    monkeypatch.setattr(comparison, "compare", slow)
    results: list = []
    threads = [threading.Thread(target=lambda: results.append(store.comparison(left, right))) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(made) == 1 and len(results) == 2 and results[0] is results[1] is not None
