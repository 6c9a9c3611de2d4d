"""The dashboard in headless Chromium on real traces: every page opens and shows what a user checks."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest
from traceanalyzer.dashboards.names import shortened

from tests.conftest import LOAD_S, REPO, SHARED, artifact_folder, headless_chromium, serving, shared_path

pytestmark = pytest.mark.browser

SCREENSHOTS: list[Path] = []
"""Where this module's screenshots go: $TRACEANALYZER_ARTIFACTS/dashboard if set, else a pytest temporary folder."""
WAIT_S = 30
XSS = "<script>alert(1)</script>"
FORMULAS = ('=HYPERLINK("http://example.invalid","x")', "+1+1", "-2+3", "@SUM(A1:A2)", "\tcmd")
BAR_LABELS = "return Array.from(document.querySelectorAll('#hs-bars .ytick')).map(e => e.textContent)"
FUSED, UNFUSED = (REPO / "sample_traces" / f"{n}_ops.json.gz" for n in ("fused", "unfused"))
ASCEND = SHARED / "public" / "ascend" / "msinsight" / "pytorch_text" / "level1" / "rank0_ascend_pt"


@pytest.fixture(scope="module")
def browser():
    """A headless Chromium driven by selenium."""
    yield from headless_chromium()


@pytest.fixture(scope="module")
def crafted(tmp_path_factory) -> Path:
    """gpt_train with its top kernel renamed to a script tag, the next ones to what a spreadsheet runs."""
    source = shared_path("h200", "gpt_train", "gpt_train.json.gz")
    doc = json.loads(gzip.decompress(source.read_bytes()))
    durations: dict[str, int] = {}
    for e in doc["traceEvents"]:
        if e.get("cat") == "kernel":
            durations[e["name"]] = durations.get(e["name"], 0) + e.get("dur", 0)
    ranked = sorted(durations, key=durations.get, reverse=True)
    names = dict(zip(ranked[:6], (XSS, *FORMULAS), strict=True))
    for e in doc["traceEvents"]:
        if e.get("cat") == "kernel" and e["name"] in names:
            e["name"] = names[e["name"]]
    path = tmp_path_factory.mktemp("crafted") / "crafted.json.gz"
    path.write_bytes(gzip.compress(json.dumps(doc).encode(), compresslevel=1))
    return path


@pytest.fixture(scope="module")
def allowed_dir(tmp_path_factory) -> Path:
    """A folder the page may open from: a trace, a JSON file that is not one, a link out, a folder too deep."""
    folder = tmp_path_factory.mktemp("allowed")
    shutil.copy(REPO / "sample_traces" / "sync_stalls.json.gz", folder / "stalls.json.gz")
    (folder / "notes.json").write_text(json.dumps({"inner_secret_key": 1}))
    (folder / "escape.json").symlink_to("/etc/passwd")
    deep = folder / "deep"
    deep.joinpath(*["d"] * 8).mkdir(parents=True)
    return folder


@pytest.fixture(scope="module")
def app_url(crafted, allowed_dir):
    """The real app on real traces (each PATH one picker entry), served on a free local port."""
    from traceanalyzer.dashboards.access import Allowed
    from traceanalyzer.dashboards.store import Store

    starting = [
        shared_path("h200", "gpt_train", "gpt_train.json.gz"),
        shared_path("h200", "ddp_no_overlap"),
        shared_path("h200", "memory_peak", "memory_peak.json.gz"),
        crafted,
        FUSED,
        UNFUSED,
    ]
    store = Store(Allowed([*starting, allowed_dir]))
    keys = {
        "gpt_train": store.open([str(shared_path("h200", "gpt_train", "gpt_train.json.gz"))]),
        "ddp": store.open([str(shared_path("h200", "ddp_no_overlap"))]),
        "memory_peak": store.open([str(shared_path("h200", "memory_peak", "memory_peak.json.gz"))]),
        "crafted": store.open([str(crafted)]),
        "fused": store.open([str(FUSED)]),
        "unfused": store.open([str(UNFUSED)]),
    }
    if ASCEND.exists():
        keys["ascend"] = store.open([str(ASCEND)])
    with serving(store) as url:
        yield url, store, keys


def _wait(browser, css: str, text: str | None = None, timeout: float = WAIT_S):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    wait = WebDriverWait(browser, timeout)
    if text is None:
        return wait.until(ec.visibility_of_element_located((By.CSS_SELECTOR, css)))
    wait.until(ec.text_to_be_present_in_element((By.CSS_SELECTOR, css), text))
    return browser.find_element(By.CSS_SELECTOR, css)


def _clickable(browser, css: str):
    """An element once it can take a click or keys (not covered by a loading overlay)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(browser, WAIT_S).until(ec.element_to_be_clickable((By.CSS_SELECTOR, css)))


def _wait_script(browser, script: str, text: str):
    """Wait until some string returned by script contains text (for SVG labels, which selenium's .text misses)."""
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(browser, WAIT_S).until(lambda b: any(text in t for t in b.execute_script(script)))


def _open(browser, app_url, page: str, trace: str):
    """Open a page with a trace picked in the dropdown."""
    url, store, keys = app_url
    browser.get(f"{url}{page}")
    _pick(browser, "#trace", store.jobs()[list(keys).index(trace)].label)
    _wait(browser, ".page-title", store.jobs()[list(keys).index(trace)].label)


DROPDOWN_OPTION = ".dash-dropdown-option"  # an open dcc.Dropdown's options (a Checklist's items are role=option too)


def _pick(browser, dropdown: str, label: str):
    """Choose an option of a dcc.Dropdown by its visible label, retrying while a redraw replaces the menu."""
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import WebDriverWait

    def chosen(b) -> bool:
        try:
            shown = [o for o in b.find_elements(By.CSS_SELECTOR, DROPDOWN_OPTION) if o.is_displayed()]
            if not shown:
                _clickable(b, dropdown).click()  # not while a redraw covers it
                return False
            match = [o for o in shown if o.text.strip() == str(label)]
            if match:
                match[0].click()
            return bool(match)
        except WebDriverException:  # the menu was redrawn under the click: open it again
            return False

    WebDriverWait(browser, WAIT_S).until(chosen)
    if browser.find_elements(By.CSS_SELECTOR, DROPDOWN_OPTION):
        browser.find_element(By.CSS_SELECTOR, "body").send_keys(Keys.ESCAPE)


@pytest.fixture(scope="module", autouse=True)
def screenshots(tmp_path_factory) -> Path:
    """The screenshots' folder, never beside the user's files."""
    folder = artifact_folder(tmp_path_factory, "dashboard")
    SCREENSHOTS[:] = [folder]
    return folder


def _shot(browser, name: str):
    browser.save_screenshot(str(SCREENSHOTS[0] / f"{name}.png"))


def _dropdown_value(browser, dropdown: str) -> str:
    return _wait(browser, dropdown).text.strip()


def _table_names(browser, table: str) -> list[str]:
    from selenium.webdriver.common.by import By

    cells = browser.find_elements(By.CSS_SELECTOR, f"#{table} td[data-dash-column=name]")
    return [c.text for c in cells]


def test_hotspots_top_kernel_filter_and_details(browser, app_url):
    _, store, keys = app_url
    view = store.view(keys["gpt_train"])
    names = [str(n) for n in view.hotspots("kernel")["name"]]
    _open(browser, app_url, "/hotspots", "gpt_train")
    _wait(browser, "#hs-table td[data-dash-column=name]")
    assert _table_names(browser, "hs-table")[0] == shortened(names)[0]
    assert len(set(_table_names(browser, "hs-table"))) == len(_table_names(browser, "hs-table"))
    bars = browser.execute_script(
        "return document.querySelector('#hs-bars .js-plotly-plot').data.map(t => [t.name, t.marker.color])"
    )
    assert len({c for _, c in bars}) == len(bars)  # one colour per kind of device work, each its own
    _pick(browser, "#hs-kind", "memset")
    _wait(browser, "#hs-table td[data-dash-column=kind]", "memset")
    memsets = _table_names(browser, "hs-table")
    assert shortened(names)[0] not in memsets and memsets
    _pick(browser, "#hs-level", "cpu_op")
    _wait(browser, "#hs-table th[data-dash-column=inclusive_ns]")  # the table is updated in place: wait for cpu_op's
    assert _dropdown_value(browser, "#hs-kind") == "all"  # the kernel-only kind filter is off at other levels
    first = _table_names(browser, "hs-table")[0]
    browser.find_element("css selector", "#hs-table td[data-dash-column=name]").click()
    _wait(browser, "#selected-name", first)
    assert _wait(browser, "#det-stack").text  # the op's call stack, outermost frame first
    _shot(browser, "hotspots")


def test_the_step_chart_names_each_steps_bound_on_its_axis_label_not_over_the_bars():
    """gpu_bound's steps: each bar's label says the report's bound for its step; no text is drawn over the bars
    (24 steps of 'host-bound' over the bars ran into each other at 1280 px)."""
    from traceanalyzer.dashboards import charts

    import traceanalyzer as ta

    steps = ta.load(REPO / "sample_traces" / "gpu_bound").build_report().section("summary").table("steps").frame
    fig = charts.step_breakdown(steps)
    parts = zip(steps["rank"], steps["step"], steps["bound"], strict=True)
    want = [f"rank {r} · step {s} · {b}-bound" for r, s, b in parts]
    assert all(list(t.x) == want for t in fig.data) and len(want) > 1 and all(steps["bound"])
    assert {t.type for t in fig.data} == {"bar"}


def test_hotspot_bars_give_each_kind_its_own_colour():
    """gpu_bound's top kernels hold kernels, a memcpy and a memset: three kinds, three colours."""
    from traceanalyzer.dashboards import charts

    import traceanalyzer as ta

    fig = charts.hotspot_bars(ta.load(REPO / "sample_traces" / "gpu_bound").hotspots("kernel"))
    colours = {t.name: t.marker.color for t in fig.data}
    assert {"kernel", "memcpy", "memset"} <= set(colours) and len(set(colours.values())) == len(colours)


def test_timeline_draws_the_step(browser, app_url):
    _open(browser, app_url, "/timeline", "gpt_train")
    note = _wait(browser, "#tl-note", "segments").text
    assert "events drawn as" in note
    _wait(browser, "#tl-graph .trace.bars")  # the Gantt bars (SVG: drawn faster than a WebGL context starts)
    _shot(browser, "timeline")


def test_distributed_names_the_late_rank(browser, app_url):
    _open(browser, app_url, "/distributed", "ddp")
    body = _wait(browser, "#page").text
    if "not available for this trace" in body:
        pytest.skip(f"distributed analyzer not available yet: {body[:200]}")
    _wait(browser, "#overlap-heatmap .main-svg")
    assert "Late rank: rank 1;" in _wait(browser, "#late-rank").text
    _wait(browser, "#collectives-table td[data-dash-column=collective]", "allreduce")
    _shot(browser, "distributed")


def test_memory_page_marks_the_peak(browser, app_url):
    _open(browser, app_url, "/memory", "memory_peak")
    body = _wait(browser, "#page").text
    if "not available for this trace" in body:
        pytest.skip(f"memory analyzer not available yet: {body[:200]}")
    assert "4.33 GiB" in _wait(browser, "#memory-facts").text
    _wait(browser, "#memory-graph .main-svg")
    _shot(browser, "memory")


def test_memory_chart_colours_each_rank_and_shows_no_sentinel(browser, app_url):
    """ddp_no_overlap: each rank's pool has its own colour in the legend; the host pool (device -1) reads 'host'."""
    _open(browser, app_url, "/memory", "ddp")
    _wait(browser, "#memory-graph .main-svg")
    traces = browser.execute_script(
        "const g = document.querySelector('#memory-graph .js-plotly-plot');"
        "return [g.layout.showlegend, g.data.map(t => [t.name, (t.line && t.line.color) || t.marker.color])]"
    )
    shown, drawn = traces
    colours: dict[str, set] = {}
    for name, colour in drawn:
        colours.setdefault(" ".join(name.split(" ")[:4]), set()).add(colour)
    assert shown and {"rank 0 device 0", "rank 1 device 1"} <= set(colours)
    assert all(len(c) == 1 for c in colours.values()), colours  # allocated, reserved and peak of a pool alike
    assert len(set.union(*colours.values())) == len(colours)  # and every pool its own colour
    cells = browser.execute_script("return Array.from(document.querySelectorAll('#page td')).map(c => c.innerText)")
    assert "-1" not in cells and "host" in cells
    assert "step -1" not in _wait(browser, "#memory-facts").text


def test_fusion_and_compare_pages_open(browser, app_url):
    _open(browser, app_url, "/fusion", "gpt_train")
    assert _wait(browser, "#page").text
    _shot(browser, "fusion")
    url, _, keys = app_url
    browser.get(f"{url}/compare?trace={keys['gpt_train']}&left={keys['gpt_train']}&right={keys['fused']}")
    _wait(browser, "#cmp-facts", "step time")
    _wait(browser, "#cmp-device-kernels td[data-dash-column=status]")
    _wait(browser, "#cmp-a-kernels td[data-dash-column=name]")
    _wait(browser, "#cmp-b-kernels td[data-dash-column=name]")
    _shot(browser, "compare")


def test_compare_shows_the_gate_verdict_of_the_cli(browser, app_url):
    """fused → unfused at 10 %: the CLI's verdict (3 steps a run: inconclusive at 99 %), what changed the step
    first, the noise and the steps behind each change, the rule that matched each kernel; a trace against itself,
    asked for, passes."""
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import WebDriverWait

    from traceanalyzer import comparison

    url, store, keys = app_url
    fused, unfused = keys["fused"], keys["unfused"]
    browser.get(f"{url}/compare?trace={fused}&left={fused}&right={unfused}")
    assert "Enter a threshold" in _wait(browser, "#cmp-gate", "threshold").text
    _clickable(browser, "#cmp-pct").send_keys("10", Keys.ENTER)
    gate = _wait(browser, "#cmp-gate", "inconclusive").text
    verdict = store.comparison(fused, unfused).gate(comparison.Threshold(share=0.10))
    assert verdict.outcome == "inconclusive" and gate == f"Gate: inconclusive — {verdict.reason}"
    assert "profile more steps" in gate
    WebDriverWait(browser, WAIT_S).until(lambda b: "pct=10" in b.current_url)
    changed = _wait(browser, "#cmp-what-changed-the-step td[data-dash-column=name]").text
    assert "masked_fill" in changed and "masked_fill" in verdict.culprits[0]["name"]  # as the CLI lists it first
    facts = _wait(browser, "#cmp-facts").text
    assert "beyond noise, p = 0.05, 3 vs 3 steps" in facts and "Mann–Whitney U" in facts
    rules = browser.execute_script(
        "return Array.from(document.querySelectorAll('#cmp-device-kernels td[data-dash-column=match]'))"
        ".map(c => c.innerText)"
    )
    assert {"exact", "normalised", "none"} <= set(rules)
    assert "normalised" in _wait(browser, "#cmp-matched td[data-dash-column=match]").text
    assert "nvjet_sm90" in _wait(browser, "#cmp-matched td[data-dash-column=baseline_names]").text
    _shot(browser, "compare-gate")
    browser.get(f"{url}/compare?trace={fused}&left={fused}&right={fused}&pct=10")
    assert _wait(browser, "#cmp-gate", "pass").text == (
        "Gate: pass — step time unchanged (the same step times in both runs), within +10.0% per step"
    )


def test_compare_computes_only_the_pair_the_user_picks_and_once(browser, app_url, monkeypatch):
    """Opening Compare computes nothing (no candidate is picked for the user); picking one computes that pair, once:
    a threshold typed after it and the page opened again reuse it."""
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import WebDriverWait

    from traceanalyzer import comparison

    url, store, keys = app_url
    made = []
    real = comparison.compare

    def counted(baseline, candidate, *args, **kwargs):
        made.append((baseline, candidate))
        return real(baseline, candidate, *args, **kwargs)

    monkeypatch.setattr(comparison, "compare", counted)
    baseline, candidate = store.view(keys["memory_peak"]), store.view(keys["gpt_train"])
    browser.get(f"{url}/compare?trace={keys['memory_peak']}")
    assert "Pick the baseline and the candidate" in _wait(browser, "#cmp-hint").text
    assert _dropdown_value(browser, "#cmp-a") == baseline.label and made == []
    _pick(browser, "#cmp-b", candidate.label)
    _wait(browser, "#cmp-facts", "step time")
    assert len(made) == 1 and made[0][0] is baseline.trace and made[0][1] is candidate.trace
    WebDriverWait(browser, WAIT_S).until(lambda b: f"right={keys['gpt_train']}" in b.current_url)
    _clickable(browser, "#cmp-pct").send_keys("10", Keys.ENTER)
    _wait(browser, "#cmp-gate", "Gate:")
    browser.get(browser.current_url)
    _wait(browser, "#cmp-gate", "Gate:")
    assert len(made) == 1


def test_compare_of_a_gpu_and_an_ascend_trace_shows_the_categories(app_url):
    from traceanalyzer.dashboards.pages import compare

    _, store, keys = app_url
    if "ascend" not in keys:
        pytest.skip(f"Ascend sample not available: {ASCEND}")
    gpu, npu = keys["gpt_train"], keys["ascend"]
    diff = store.comparison(gpu, npu)
    page = compare.comparison(store.view(gpu), store.view(npu), diff, compare.threshold(10, None))
    shown = [r["name"] for r in _component(page, "cmp-by-category").data]
    assert shown == list(diff.platforms.categories["name"]) and "gemm" in shown
    assert _component(page, "cmp-framework-ops-that-differ-most").data


def test_ascend_trace_hotspots(browser, app_url):
    _, store, keys = app_url
    if "ascend" not in keys:
        pytest.skip(f"Ascend sample not available: {ASCEND}")
    top = str(store.view(keys["ascend"]).hotspots("kernel")["name"].iloc[0])
    _open(browser, app_url, "/hotspots", "ascend")
    _wait(browser, "#hs-table td[data-dash-column=name]", top)
    assert "platform: ascend" in _wait(browser, ".platform").text
    _open(browser, app_url, "/", "ascend")
    assert "ascend" in _wait(browser, "#trace-facts").text
    _shot(browser, "ascend-hotspots")


def test_trace_names_stay_text(browser, app_url):
    _open(browser, app_url, "/hotspots", "crafted")
    _wait(browser, "#hs-table td[data-dash-column=name]", XSS)
    assert _table_names(browser, "hs-table")[0] == XSS
    _wait_script(browser, BAR_LABELS, XSS)
    assert not browser.execute_script("return Array.from(document.scripts).some(s => s.text.includes('alert(1)'))")
    from selenium.common.exceptions import NoAlertPresentException

    with pytest.raises(NoAlertPresentException):
        browser.switch_to.alert.text  # noqa: B018


def _open_by_path(browser, path: str) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    field = _wait(browser, "#open-path")
    field.send_keys(Keys.CONTROL, "a")  # clear() does not reach React's state
    field.send_keys(Keys.DELETE, path)
    browser.find_element(By.CSS_SELECTOR, "#open-btn").click()


def _errors(browser) -> list[str]:
    """The error lines under the open panel (read in one script: they are redrawn while polling)."""
    return browser.execute_script(
        "return Array.from(document.querySelectorAll('#load-status .error')).map(e => e.innerText)"
    )


def test_a_tables_csv_export_keeps_what_a_spreadsheet_would_run_as_text(browser, app_url, tmp_path):
    import csv
    import time

    url, store, keys = app_url
    browser.execute_cdp_cmd("Page.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(tmp_path)})
    browser.get(f"{url}/hotspots?trace={keys['crafted']}")
    _wait(browser, "#hs-table td[data-dash-column=name]", XSS)
    shown = _table_names(browser, "hs-table")
    assert [n.strip() for n in shown[1:5]] == [f.strip() for f in FORMULAS[:4]]  # the page shows them as they are
    _clickable(browser, "#hs-table button.export").click()
    deadline = time.monotonic() + WAIT_S
    while not list(tmp_path.glob("*.csv")) and time.monotonic() < deadline:
        time.sleep(0.2)
    (path,) = tmp_path.glob("*.csv")
    rows = list(csv.DictReader(path.read_text(encoding="utf-8-sig").splitlines()))
    names = [r["name"] for r in rows]
    assert names[0] == XSS and names[1:6] == ["'" + f for f in FORMULAS]
    assert len(rows) == len(store.view(keys["crafted"]).hotspots("kernel"))  # every page, not the one shown
    total = next(k for k in rows[0] if k.startswith("total"))
    assert all(float(r[total]) >= 0 for r in rows)  # numbers stay numbers


def test_open_by_path_reaches_only_the_allowed_folders(browser, app_url, allowed_dir, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait
    from traceanalyzer.dashboards.access import REFUSED

    url, store, _ = app_url
    outside = tmp_path / "outside.json"
    outside.write_text(json.dumps({"outer_secret_key": 1}))
    probes = [
        "/etc/shadow",
        "/no/such/trace.json",
        str(outside),
        str(allowed_dir / "notes.json"),
        str(allowed_dir / "escape.json"),
        str(allowed_dir / ".." / outside.parent.name / "outside.json"),
        str(SHARED / "h200" / "fused_ops"),
        "/",
    ]
    browser.get(url)
    _wait(browser, "details summary").click()
    for probe in probes:
        _open_by_path(browser, probe)
        WebDriverWait(browser, WAIT_S).until(
            lambda b, p=probe: any(f"open {p}:" in e for e in _errors(b)), f"{probe}: {_errors(browser)}"
        )
    errors = _errors(browser)
    assert [e.split(": ", 1)[1].rstrip(" ×\n") for e in errors] == [REFUSED] * len(probes), errors
    assert not any(w in " ".join(errors) for w in ("exist", "secret_key", "JSON", "root:"))
    _open_by_path(browser, "   ")
    assert "enter the path" in _wait(browser, "#open-msg", "enter the path").text
    _open_by_path(browser, str(allowed_dir / "deep"))
    _wait(browser, "#load-status", "levels deep")
    _shot(browser, "open-refused")
    while browser.find_elements(By.CSS_SELECTOR, "#load-status button.dismiss"):
        count = len(_errors(browser))
        browser.find_element(By.CSS_SELECTOR, "#load-status button.dismiss").click()
        WebDriverWait(browser, WAIT_S).until(lambda b, n=count: len(_errors(b)) == n - 1)
    _open_by_path(browser, str(allowed_dir / "stalls.json.gz"))
    _pick(browser, "#trace", str(allowed_dir / "stalls.json.gz"))
    assert [j.state for j in store.jobs()][-1] == "ready"
    count = len(store.jobs())
    _open_by_path(browser, str(FUSED))  # the same contents again: the trace already open, not a second copy
    assert _wait(browser, "#open-msg", "already open as").text == f"already open as {FUSED.name}: pick it in the menu"
    assert len(store.jobs()) == count


def test_requests_for_another_host_are_refused(app_url):
    import http.client

    url, _, keys = app_url
    port = int(url.rsplit(":", 1)[1])
    for host, status in ((f"attacker.example:{port}", 403), (f"localhost:{port}", 200), (f"127.0.0.1:{port}", 200)):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=WAIT_S)
        conn.request("GET", f"/?trace={keys['gpt_train']}", headers={"Host": host})
        assert conn.getresponse().status == status, host
        conn.close()


def test_bad_upload_shows_its_error_and_the_app_keeps_running(browser, app_url, tmp_path):
    url, _, _ = app_url
    browser.get(url)
    _wait(browser, "details summary").click()
    garbage = tmp_path / "garbage.json"
    garbage.write_text("this is not a trace")
    browser.find_element("css selector", "#upload input[type=file]").send_keys(str(garbage))
    error = _wait(browser, "#load-status", "garbage.json (uploaded)").text
    assert "could not open garbage.json (uploaded): is not a profiler trace" in error
    assert "traceanalyzer-upload" not in error  # the server's temp folder is not shown
    _open(browser, app_url, "/", "gpt_train")


def test_picks_live_in_the_url_and_survive_a_reload(browser, app_url):
    url, store, keys = app_url
    _open(browser, app_url, "/hotspots", "ddp")
    _pick(browser, "#hs-level", "cpu_op")
    _pick(browser, "#hs-step", "3")
    _pick(browser, "#hs-rank", "1")
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(browser, WAIT_S).until(lambda b: "rank=1" in b.current_url and "level=cpu_op" in b.current_url)
    assert f"trace={keys['ddp']}" in browser.current_url and "step=3" in browser.current_url
    first = _wait(browser, "#hs-table td[data-dash-column=name]").text
    browser.refresh()
    _wait(browser, ".page-title", store.jobs()[list(keys).index("ddp")].label)
    assert [_dropdown_value(browser, d) for d in ("#hs-level", "#hs-step", "#hs-rank")] == ["cpu_op", "3", "1"]
    assert _wait(browser, "#hs-table td[data-dash-column=name]").text == first
    browser.find_element("css selector", "#nav-timeline").click()
    _wait(browser, "#tl-note", "segments")
    assert [_dropdown_value(browser, d) for d in ("#tl-rank", "#tl-step")] == ["1", "3"]


def test_hotspot_filter_resets_and_selection_follows_the_step(browser, app_url):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    _open(browser, app_url, "/hotspots", "ddp")
    name_filter = _wait(browser, "#hs-table th.dash-filter[data-dash-column=name] input")
    name_filter.send_keys("nccl", Keys.ENTER)
    _wait(browser, "#hs-table td[data-dash-column=name]", "nccl")
    browser.find_element(By.CSS_SELECTOR, "#hs-table td[data-dash-column=name]").click()
    picked = _wait(browser, "#selected-name").text
    _pick(browser, "#hs-step", "3")
    _wait(browser, "#hs-details", "in step 3")
    assert _wait(browser, "#selected-name").text == picked
    _pick(browser, "#hs-level", "cpu_op")
    _wait(browser, "#hs-table th[data-dash-column=inclusive_ns]")
    refreshed = _wait(browser, "#hs-table th.dash-filter[data-dash-column=name] input")
    assert refreshed.get_attribute("value") == "" and _table_names(browser, "hs-table")
    assert "Click a name" in _wait(browser, "#hs-details").text


TIMELINE_NAMES = (
    "return document.querySelector('#tl-graph .js-plotly-plot').data.flatMap(t => (t.hovertext || []).filter(x => x))"
)
TIMELINE_LANES = (
    "return [...new Set(document.querySelector('#tl-graph .js-plotly-plot').data.filter(t => t.type === 'bar')"
    ".flatMap(t => t.y.filter(y => y)))]"
)


def test_timeline_shows_the_main_thread_of_a_with_stack_trace(browser, app_url):
    """ddp_no_overlap was recorded with_stack: rank 1's straggler sleep annotation is on its main Python thread."""
    url, store, keys = app_url
    view = store.view(keys["ddp"])
    sleeps = view.trace.events[view.trace.events["name"].astype(str).str.startswith("STRAGGLER_rank1_sleep")]
    main_tid = str(sleeps["tid"].iloc[0])
    browser.get(f"{url}/timeline?trace={keys['ddp']}&rank=1&step=3")
    _wait(browser, "#tl-note", "segments")
    _wait_script(browser, TIMELINE_NAMES, "STRAGGLER_rank1_sleep")
    lanes = browser.execute_script(TIMELINE_LANES)
    assert any(lane.startswith(f"thread {main_tid} ") for lane in lanes), lanes
    assert "idle gap" in _wait(browser, "#tl-note").text  # the Health page's largest gaps, shaded where they are
    shaded = browser.execute_script(
        "return document.querySelector('#tl-graph .js-plotly-plot').layout.shapes.map(s => [s.name, s.x0, s.x1])"
    )
    longest = max(x1 - x0 for name, x0, x1 in shaded if name.startswith("idle gap"))
    assert longest > 0.8 * sleeps["dur"].min() / 1e6  # the GPU idles through the straggler's 50 ms sleep
    from selenium.webdriver.common.keys import Keys

    _clickable(browser, "#tl-find").send_keys("straggler", Keys.ENTER)
    note = _wait(browser, "#tl-note", "'straggler' (outlined").text
    assert " 0 drawn segments" not in note and "find=straggler" in browser.current_url
    outlined = browser.execute_script(
        "return document.querySelector('#tl-graph .js-plotly-plot').data.filter(t => t.name.startsWith('contains'))"
        ".map(t => t.y.filter(y => y))"
    )
    assert outlined and all(lane.startswith(f"thread {main_tid} ") for lane in outlined[0])
    _shot(browser, "timeline-with-stack")
    _clickable(browser, "#tl-python input").click()  # Python frames, counted in the levels
    _pick(browser, "#tl-levels", "64")
    _wait_script(browser, TIMELINE_NAMES, "built-in function sleep")
    assert "frames=python" in browser.current_url and "levels=64" in browser.current_url


def test_health_page_has_every_health_table_and_findings_link_to_theirs(browser, app_url):
    from traceanalyzer.dashboards.pages.health import HEALTH
    from traceanalyzer.dashboards.pages.overview import finding_link

    url, store, keys = app_url
    view = store.view(keys["ddp"])
    linked = [f for f in view.report().findings if f.analyzer == "health" and "#" in finding_link(view, f, "")]
    assert linked, "ddp_no_overlap has health findings"
    _open(browser, app_url, "/", "ddp")
    anchor = finding_link(view, linked[0], "").split("#")[1]
    link = browser.find_element("css selector", f"#findings a[href$='#{anchor}']")
    link.click()
    _wait(browser, f"#{anchor} h3")
    assert browser.execute_script(f"return document.getElementById('{anchor}').getBoundingClientRect().top") < 400
    rank = linked[0].where.get("rank")
    if rank is not None:  # the link picks the finding's rank: its tables show that rank's rows
        assert f"rank={rank}" in browser.current_url and _wait(browser, "#rank-filter")
        ranks = browser.execute_script(
            f"return Array.from(document.querySelectorAll('#{anchor}-table td[data-dash-column=rank]'))"
            ".map(c => c.innerText)"
        )
        assert ranks and set(ranks) == {str(rank)}
    for block in HEALTH:
        table = view.table(block.section, block.table)
        assert table is not None, block
        section = _wait(browser, f"#{block.anchor}")
        assert table.title in section.text and ("(ms" in section.text or "ms)" in section.text)
    assert _wait(browser, "#device-busy-table td[data-dash-column=rank]").text in ("0", "1")
    _shot(browser, "health")


HIGHLIGHTED = (
    "return Array.from(document.querySelectorAll('#{table} tr')).filter(r => r.querySelector('td') &&"
    " getComputedStyle(r.querySelector('td')).backgroundColor === 'rgb(255, 243, 176)')"
    ".map(r => Object.fromEntries(Array.from(r.querySelectorAll('td')).map(c => [c.dataset.dashColumn, c.innerText])))"
)
"""The cells of a table's highlighted rows (a finding's evidence), per row {column: text}."""


def test_findings_link_to_their_rows_and_their_timeline_place(browser, app_url):
    """ddp_no_overlap: the straggler's idle-by-cause finding (rank 1: host code, its 50 ms sleep) has its rank's rows
    (rank 1, device 1) highlighted in the gap table and its timeline link shows the straggler's 50 ms gap; a hotspot
    finding's row is highlighted at its level."""
    from selenium.webdriver.common.by import By
    from traceanalyzer.dashboards.pages.overview import IDLE_CAUSE_FINDINGS

    url, store, keys = app_url
    view = store.view(keys["ddp"])
    idle = next(f for f in view.report().findings if f.id in IDLE_CAUSE_FINDINGS and f.where.get("rank") == 1)
    _open(browser, app_url, "/", "ddp")
    title = idle.title[:60]  # the table cuts long titles
    row = browser.find_element(By.XPATH, f"//table[@id='findings']//tr[td[2][starts-with(., '{title}')]]")
    timeline = row.find_element(By.CSS_SELECTOR, "a.timeline-link").get_attribute("href")
    row.find_element(By.LINK_TEXT, "health →").click()
    _wait(browser, "#evidence-note", "rank 1")
    _wait(browser, "#idle-gaps-table td[data-dash-column=rank]")
    marked = browser.execute_script(HIGHLIGHTED.format(table="idle-gaps-table"))
    assert marked and {(r["rank"], r["device"]) for r in marked} == {("1", "1")}
    gap = view.table("health", "largest_gaps").frame.iloc[0]
    query = dict(p.split("=", 1) for p in timeline.split("?", 1)[1].split("&"))
    start, end = (int(x) for x in query["at"].split("-"))
    assert query["rank"] == "1" and (end - start) == int(gap["dur_ns"])  # the longest gap the finding claims
    steps = view.trace.steps().set_index(["rank", "step"])
    step = steps.loc[(1, int(query["step"]))]
    assert step["start_ns"] <= start < step["start_ns"] + step["step_ns"]
    browser.get(timeline)  # the Timeline opens on that step (what it shows there is its own test's)
    _wait(browser, "#tl-note", "segments")
    assert _dropdown_value(browser, "#tl-step") == query["step"]
    hot = next(f for f in view.report().findings if f.id == "hotspots.op")
    _open(browser, app_url, "/", "ddp")
    browser.find_element(By.XPATH, f"//table[@id='findings']//tr[td[2]='{hot.title}']//a[text()='hotspots →']").click()
    _wait(browser, "#evidence-note", hot.where["name"])
    assert _dropdown_value(browser, "#hs-level") == "op_device"
    _wait(browser, "#hs-table td[data-dash-column=name]")
    marked = browser.execute_script(HIGHLIGHTED.format(table="hs-table"))
    assert [r["name"] for r in marked] == [hot.where["name"]]
    browser.find_element(By.CSS_SELECTOR, "#nav-health").click()  # the highlight belongs to the linked page
    _wait(browser, ".page-title", "Health")
    assert "row=" not in browser.current_url and not browser.find_elements(By.CSS_SELECTOR, "#evidence-note")


def test_ascend_page_shows_core_types(browser, app_url):
    _, store, keys = app_url
    if "ascend" not in keys:
        pytest.skip(f"Ascend sample not available: {ASCEND}")
    _open(browser, app_url, "/ascend", "ascend")
    groups = {
        c.text for c in browser.find_elements("css selector", "#core-types-table td[data-dash-column=core_group]")
    }
    view = store.view(keys["ascend"])
    expected = set(view.table("ascend", "core_breakdown").frame["core_group"])
    assert groups == expected and groups
    _shot(browser, "ascend")
    peak = view.table("memory", "peaks").frame.iloc[0]
    _open(browser, app_url, "/memory", "ascend")
    _wait(browser, "#memory-graph .main-svg")
    marked = browser.execute_script(
        "return document.querySelector('#memory-graph .js-plotly-plot').data"
        ".filter(t => t.name.includes(' peak')).map(t => t.x[0])"
    )
    assert marked == [pytest.approx(peak["at_ns"] / 1e6)]  # chart and table put the peak at the same time
    _open(browser, app_url, "/ascend", "gpt_train")
    assert "not an Ascend (CANN) trace" in _wait(browser, ".unavailable").text


def _json_report(path: Path) -> dict:
    """The CLI's JSON report of a trace (traceanalyze PATH --format json)."""
    import subprocess
    import sys

    run = [sys.executable, "-c", "import sys; from traceanalyzer.cli import main; sys.exit(main())"]
    done = subprocess.run([*run, str(path), "--format", "json"], capture_output=True, text=True, timeout=LOAD_S)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _headline(browser) -> dict[str, str]:
    pairs = browser.execute_script(
        "return Array.from(document.querySelectorAll('#headline dt')).map(t => [t.innerText, t.nextSibling.innerText])"
    )
    return dict(pairs)


def _as_shown(fact: dict) -> tuple[str, str]:
    """A JSON report fact as the page should show it: its title with per step or total, its value in its unit."""
    from traceanalyzer import humanize

    per = {"step": " (per step)", "total": " (total)"}.get(fact["per"], "")
    value, unit = fact["value"], fact["unit"]
    text = {"ns": humanize.duration, "share": humanize.share, "bytes": humanize.size}.get(unit)
    shown = text(value) if text and value is not None else humanize.value("", value) if unit == "count" else str(value)
    return fact["title"] + per, shown


@pytest.mark.parametrize("trace", ["gpt_train", "ddp", "ascend"])
def test_overview_figures_equal_the_json_report(browser, app_url, trace):
    from traceanalyzer.dashboards.blocks import HEADLINE

    from traceanalyzer import humanize

    _, store, keys = app_url
    if trace not in keys:
        pytest.skip(f"Ascend sample not available: {ASCEND}")
    report = _json_report(Path(store.jobs()[list(keys).index(trace)].paths[0]))
    _open(browser, app_url, "/", trace)
    assert {d["name"] for d in report["trace"]["devices"]} <= set(_wait(browser, "#trace-facts").text.split("\n"))
    sections = report["sections"]
    expected = dict(
        _as_shown(f) for sid, fid in HEADLINE if sid in sections for f in sections[sid]["facts"] if f["id"] == fid
    )
    assert _headline(browser) == expected
    assert any("per step" in label for label in expected) and "step time" in " ".join(expected)
    first = _wait(browser, "#findings tbody tr td:nth-child(2)").text
    assert first == report["findings"][0]["title"]
    saving = _wait(browser, "#findings tbody tr td:nth-child(3)").text
    assert saving == humanize.duration(report["findings"][0]["saving_ns_per_step"])
    by_kind = _wait(browser, "#by-kind").text
    assert "cpu_op" not in by_kind and "runtime" not in by_kind
    kinds = next(t for t in sections["summary"]["tables"] if t["id"] == "time_by_kind")["rows"]
    kernel = next(r for r in kinds if r["kind"] == "kernel")
    assert f"kernel {humanize.duration(kernel['total_ns'])}" in by_kind
    waits = [r for r in kinds if r["kind"] == "sync"]  # Ascend's EVENT_WAIT: a stream waiting, apart from work
    assert all(f"(not work): sync {humanize.duration(r['total_ns'])}" in by_kind for r in waits)
    _wait(browser, "#step-chart .main-svg")
    _shot(browser, f"overview-{trace}")


def test_single_rank_trace_has_no_cross_rank_views(browser, app_url):
    _open(browser, app_url, "/distributed", "gpt_train")
    assert "no cross-rank views" in _wait(browser, "#single-rank").text
    assert not browser.find_elements("css selector", "#overlap-heatmap")
    cells = browser.execute_script("return Array.from(document.querySelectorAll('#page td')).map(c => c.innerText)")
    assert "-1" not in cells


def _component(tree, component_id: str):
    """The component of a layout with this id (depth first), or None."""
    if getattr(tree, "id", None) == component_id:
        return tree
    children = tree if isinstance(tree, list) else getattr(tree, "children", None)
    for child in children if isinstance(children, list) else [children] if children is not None else []:
        found = _component(child, component_id) if not isinstance(child, str) else None
        if found is not None:
            return found
    return None


def test_compare_never_pairs_a_lone_trace_with_itself(app_url):
    from traceanalyzer.dashboards.pages import compare

    _, store, keys = app_url
    one, two = keys["gpt_train"], keys["ddp"]
    lone = compare.layout({one: store.view(one)}, one, {})
    assert _component(lone, "cmp-a").value == one and _component(lone, "cmp-b").value is None
    pair = compare.layout({one: store.view(one), two: store.view(two)}, one, {})
    assert _component(pair, "cmp-b").value is None  # no pair compared unasked
    asked = compare.layout({one: store.view(one), two: store.view(two)}, one, {"right": one})
    assert _component(asked, "cmp-b").value == one  # the user asked for it (in the URL)


ZOOM_RANGE = "return document.querySelector('#tl-graph .js-plotly-plot')._fullLayout.xaxis.range"


def _where(browser) -> str:
    """The page's path and query string as the address bar shows them."""
    return browser.execute_script("return window.location.pathname + window.location.search")


def _at(browser, where: str) -> None:
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(browser, WAIT_S).until(lambda b: _where(b) == where, f"{where} != {_where(browser)}")


def _zoomed(browser, lo: float, hi: float) -> list[float]:
    """Zoom the timeline to a share lo..hi of the range it shows (as a drag does); the range it then shows."""
    from selenium.webdriver.support.ui import WebDriverWait

    full = WebDriverWait(browser, WAIT_S).until(lambda b: b.execute_script(ZOOM_RANGE))
    want = [full[0] + (full[1] - full[0]) * lo, full[0] + (full[1] - full[0]) * hi]
    browser.execute_script(
        "Plotly.relayout(document.querySelector('#tl-graph .js-plotly-plot'), "
        f"{{'xaxis.range[0]': {want[0]}, 'xaxis.range[1]': {want[1]}}})"
    )
    WebDriverWait(browser, WAIT_S).until(lambda b: "zoom=" in _where(b))
    return want


def test_back_and_forward_restore_each_view_and_a_shared_link_its_zoom(browser, app_url):
    from selenium.webdriver.common.by import By

    url, store, keys = app_url
    gpt, fused = keys["gpt_train"], keys["fused"]
    browser.get(f"{url}/hotspots?trace={gpt}")
    _wait(browser, ".page-title", store.view(gpt).label)
    views = [_where(browser)]  # each view the user made, oldest first
    _pick(browser, "#hs-level", "cpu_op")
    _at(browser, f"/hotspots?trace={gpt}&level=cpu_op")
    views.append(_where(browser))
    first = _wait(browser, "#hs-table td[data-dash-column=name]")
    name = first.text
    first.click()
    picked = _wait(browser, "#selected-name").text
    _wait_script(browser, "return [window.location.search]", "sel=")
    views.append(_where(browser))
    _pick(browser, "#trace", store.view(fused).label)
    _wait(browser, ".page-title", store.view(fused).label)
    _at(browser, f"/hotspots?trace={fused}&level=cpu_op&sel={views[-1].split('sel=')[1]}")
    views.append(_where(browser))
    browser.find_element(By.CSS_SELECTOR, "#nav-timeline").click()
    _wait(browser, "#tl-note", "segments")
    views.append(_where(browser))
    _pick(browser, "#tl-step", str(store.view(fused).steps()[1]))
    _wait_script(browser, "return [window.location.search]", f"step={store.view(fused).steps()[1]}")
    _wait(browser, "#tl-note", "segments")
    views.append(_where(browser))
    want = _zoomed(browser, 0.2, 0.3)
    views.append(_where(browser))
    entries = browser.execute_script("return history.length")
    assert len(set(views)) == len(views), views  # every pick is its own entry

    def shown() -> tuple:
        """What the page shows, once drawn again: its title, and the pickers and zoom of its kind of page."""
        from selenium.webdriver.support import expected_conditions as ec
        from selenium.webdriver.support.ui import WebDriverWait

        WebDriverWait(browser, WAIT_S).until(ec.staleness_of(drawn[0]))
        drawn[0] = _wait(browser, ".page-title", " · ")  # drawn, not only placed
        title = drawn[0].text
        if "/timeline" in _where(browser):
            _wait(browser, "#tl-note", "segments")
            return title, _dropdown_value(browser, "#tl-step"), tuple(browser.execute_script(ZOOM_RANGE))
        _wait(browser, "#hs-table td[data-dash-column=name]")
        selected = browser.find_elements(By.CSS_SELECTOR, "#selected-name")
        return title, _dropdown_value(browser, "#hs-level"), selected[0].text if selected else None

    drawn = [_wait(browser, ".page-title")]
    browser.refresh()  # the last view, as a reload shows it
    _at(browser, views[-1])
    seen = {views[-1]: shown()}
    assert seen[views[-1]][2] == pytest.approx(want, rel=1e-6)
    for where in reversed(views[:-1]):  # Back through every view ...
        browser.back()
        _at(browser, where)
        seen[where] = shown()
    assert seen[views[0]][1:] == ("kernel", None) and seen[views[1]][1:] == ("cpu_op", None)
    assert seen[views[2]][2] == picked and name.rstrip("…")[:20] in picked
    assert store.view(fused).label in seen[views[3]][0]
    assert seen[views[5]][1] == str(store.view(fused).steps()[1]) and seen[views[5]][2] != seen[views[6]][2]
    for where in views[1:]:  # ... and Forward again: each the same, and no entry cut or added on the way
        browser.forward()
        _at(browser, where)
        again = shown()
        assert again[:2] == seen[where][:2], where
        assert again[2] == (pytest.approx(seen[where][2], rel=1e-6) if "/timeline" in where else seen[where][2])
    assert browser.execute_script("return history.length") == entries
    browser.get(f"{url}{views[-1]}")  # the link shared: the same zoom
    _wait(browser, "#tl-note", "segments")
    assert browser.execute_script(ZOOM_RANGE) == pytest.approx(want, rel=1e-6)


def test_a_link_to_a_trace_or_step_not_loaded_says_so(browser, app_url):
    url, store, keys = app_url
    browser.get(f"{url}/timeline?trace=0123456789ab&step=2")
    assert "Trace 0123456789ab is not loaded here" in _wait(browser, "#not-loaded").text
    assert _wait(browser, "#trace").text.strip() in ("", "loading…")  # no other trace shown in its place
    gpt = keys["gpt_train"]
    steps = store.view(gpt).steps()
    for page in ("timeline", "hotspots"):
        browser.get(f"{url}/{page}?trace={gpt}&step=999")
        said = _wait(browser, "#no-such-step").text
        assert "No such step '999'" in said and ", ".join(map(str, steps)) in said
        browser.find_element("css selector", "#no-such-step a").click()
        _wait(browser, ".page-title", store.view(gpt).label)
        assert "step=" not in _where(browser)


def test_an_idle_gap_row_links_to_its_place_on_the_timeline(browser, app_url):
    url, store, keys = app_url
    browser.get(f"{url}/health?trace={keys['ddp']}")
    link = _wait(browser, "#idle-gaps-table td[data-dash-column=timeline] a")
    assert "at=" in link.get_attribute("href") and link.text.startswith("step ")
    link.click()
    _wait(browser, "#tl-note", "segments")
    assert _where(browser).startswith("/timeline") and "at=" in _where(browser)
    outlined = browser.execute_script(  # the gap's band, outlined as the place the link asked for
        "return document.querySelector('#tl-graph .js-plotly-plot').layout.shapes"
        ".filter(s => s.name.startsWith('idle gap') && s.line && s.line.width === 2).length"
    )
    assert outlined >= 1


@pytest.mark.parametrize("rank", [1, None], ids=["one-rank", "all-ranks"])
def test_finding_bands_cover_the_device_lanes_and_leave_the_host_lanes_clear(app_url, rank):
    from traceanalyzer.dashboards.pages import timeline as timeline_page

    _, store, keys = app_url
    view = store.view(keys["ddp"])
    fig, _ = timeline_page.timeline_figure(view, rank, 3, 4, False)
    lanes = list(fig.layout.yaxis.categoryarray or [])  # bottom to top: a lane's category position is its index
    assert lanes, "the Gantt names its lanes in order"
    host = {p for p, lane in enumerate(lanes) if "thread " in lane}
    bands = [s for s in fig.layout.shapes if s.type == "rect" and s.xref == "x"]
    assert bands, "the findings are drawn as bands"
    for band in bands:
        covered = {p for p in range(len(lanes)) if band.y0 < p < band.y1}
        assert covered and not covered & host, band.name
