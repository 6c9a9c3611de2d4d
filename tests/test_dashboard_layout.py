"""Every dashboard page 800, 1280 and 1920 px wide (1280 on a single-GPU, a multi-rank and an Ascend trace): drawn,
nothing wider than the window or its container, no table that needs a sideways scroll (from 1280 px; at 800 px a wide
table scrolls inside its box), the Overview's advice and links on screen, no -1 in a cell. The full-page
screenshots are kept as test artifacts ($TRACEANALYZER_ARTIFACTS/dashboard-layout if set, else a pytest temporary
folder; never beside the traces)."""

from __future__ import annotations

import base64
import time
from pathlib import Path

import pytest

from tests.conftest import PUBLIC_ASCEND, REPO, SHARED, artifact_folder, headless_chromium, serving

pytestmark = pytest.mark.browser

WAIT_S = 60
SIZES = {
    (800, 900): ("ddp_overlap", "ascend"),
    (1280, 800): ("gpu_bound", "ddp_overlap", "ascend"),
    (1920, 1080): ("ddp_overlap",),
}
"""Window sizes and the traces whose every page is drawn at each (1280 px, the smallest laptop, on all three)."""
NARROW = 800
"""A window this narrow may scroll a wide table inside its box (the page itself never scrolls sideways)."""
TRACES = {
    "gpu_bound": REPO / "sample_traces" / "gpu_bound",
    "ddp_overlap": SHARED / "h200" / "ddp_overlap",
    "ascend": PUBLIC_ASCEND / "msinsight" / "pytorch_text" / "level1" / "rank0_ascend_pt",
}
"""A single-GPU, a 2-rank DDP and an Ascend trace."""
MAX_SHOT_PX = 8000

OVERFLOW = """
const page = document.getElementById('page').getBoundingClientRect();
const out = [];
if (document.documentElement.scrollWidth > window.innerWidth) {
    out.push(`page ${document.documentElement.scrollWidth} px wide in a ${window.innerWidth} px window`);
}
for (const el of document.querySelectorAll('#page .dash-table-container, #page .js-plotly-plot, #page table')) {
    if (el.closest('.dash-spreadsheet-container')) { continue; }  // a table's cells scroll in its box (below)
    const box = el.getBoundingClientRect();
    if (box.width && box.right > page.right + 1) {
        out.push(`${el.id || el.closest('[id]').id}: right edge ${Math.round(box.right)} > ${Math.round(page.right)}`);
    }
}
for (const el of document.querySelectorAll('#page .dash-spreadsheet-container')) {
    if (window.innerWidth > arguments[0] && el.scrollWidth > el.clientWidth + 1) {
        out.push(`${el.closest('.dash-table-container').id}: ${el.scrollWidth} px of columns in ${el.clientWidth} px`);
    }
}
return out;
"""
"""What is wider than the window or its container, as readable lines (none when everything fits)."""
OFF_SCREEN = """
return Array.from(document.querySelectorAll('#findings td'))
    .filter(td => td.getBoundingClientRect().right > window.innerWidth + 1)
    .map(td => td.innerText.slice(0, 40));
"""
"""The Overview's findings cells (advice, evidence links) that reach past the window's right edge."""
CELLS = "return Array.from(document.querySelectorAll('#page td')).map(c => c.innerText)"
DRAWN = """
const plots = Array.from(document.querySelectorAll('#page .js-plotly-plot'));
return !document.querySelector('[data-dash-is-loading=true]') && plots.every(p => p.querySelector('.main-svg'));
"""


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory) -> Path:
    """Where the screenshots go (conftest.artifact_folder)."""
    return artifact_folder(tmp_path_factory, "dashboard-layout")


@pytest.fixture(scope="module")
def browser():
    """A headless Chromium driven by selenium."""
    yield from headless_chromium()


@pytest.fixture(scope="module")
def app_url():
    """The real app with the three traces loaded, served on a free local port."""
    from traceanalyzer.dashboards.store import Store

    missing = [str(p) for p in TRACES.values() if not p.exists()]
    if missing:
        pytest.skip(f"real traces not available: {missing}")
    store = Store()
    keys = {name: store.open([str(path)]) for name, path in TRACES.items()}
    with serving(store) as url:
        yield url, keys


def _clickable(browser, css: str):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(browser, WAIT_S).until(ec.element_to_be_clickable((By.CSS_SELECTOR, css)))


def _full_page(browser, path: Path) -> None:
    """A screenshot of the whole page (down to MAX_SHOT_PX), not only the window."""
    size = browser.execute_cdp_cmd("Page.getLayoutMetrics", {})["cssContentSize"]
    clip = {"x": 0, "y": 0, "width": size["width"], "height": min(size["height"], MAX_SHOT_PX), "scale": 1}
    shot = browser.execute_cdp_cmd("Page.captureScreenshot", {"captureBeyondViewport": True, "clip": clip})
    path.write_bytes(base64.b64decode(shot["data"]))


@pytest.mark.parametrize("size", SIZES, ids=[f"{w}x{h}" for w, h in SIZES])
def test_every_page_fits_the_window(browser, app_url, artifacts, size):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait
    from traceanalyzer.dashboards.routing import PAGES

    url, keys = app_url
    browser.set_window_size(*size)
    problems = []
    for trace in SIZES[size]:
        key = keys[trace]
        browser.get(f"{url}/?trace={key}")
        for path, title in PAGES.items():
            _clickable(browser, f"#nav-{title.lower()}").click()  # in-app navigation: no reload per page
            wait = WebDriverWait(browser, WAIT_S)
            wait.until(ec.text_to_be_present_in_element((By.CSS_SELECTOR, ".page-title"), title))
            wait.until(lambda b: b.execute_script(DRAWN))
            time.sleep(0.3)  # plotly's last relayout
            body = browser.find_element(By.CSS_SELECTOR, "#page").text
            assert "internal error" not in body and "Traceback" not in body, (trace, path, body[:300])
            problems += [f"{trace} {title}: {p}" for p in browser.execute_script(OVERFLOW, NARROW)]
            if path == "/":
                problems += [f"{trace} Overview: off screen: {c}" for c in browser.execute_script(OFF_SCREEN)]
            cells = browser.execute_script(CELLS)
            problems += [f"{trace} {title}: a cell shows -1"] if "-1" in cells else []
            name = f"{size[0]}x{size[1]}-{trace}-{title.lower()}"
            _full_page(browser, artifacts / f"{name}.png")
            if path == "/":
                browser.save_screenshot(str(artifacts / f"{name}-window.png"))  # what the window shows first
    assert not problems, "\n".join(problems)
