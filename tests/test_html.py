"""The HTML report opens offline in headless Chromium from a file:// URL: figures drawn, findings and the top
kernel on the page, no console errors; tables sort on a header click. Screenshots are kept in the pytest tmp dir."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import traceanalyzer as ta
from tests.conftest import REPO, SHARED, headless_chromium
from traceanalyzer import cli

pytestmark = pytest.mark.browser

ASCEND = SHARED / "public" / "ascend" / "msinsight" / "pytorch_text" / "level1" / "rank0_ascend_pt"
CASES = {
    "unfused_ops": REPO / "sample_traces" / "unfused_ops.json.gz",
    "fsdp": REPO / "sample_traces" / "fsdp",
    "ascend": ASCEND,
}


@pytest.fixture(scope="module")
def browser():
    """Headless Chromium with the network switched off and the console log kept."""
    yield from headless_chromium(offline=True)


@pytest.mark.parametrize("case", list(CASES))
def test_html_report_opens_offline_with_figures_and_findings(case, browser, tmp_path_factory):
    path = CASES[case]
    if not path.exists():
        pytest.skip(f"real trace not available: {path}")
    folder = tmp_path_factory.mktemp(f"html_{case}")
    out = folder / "report.html"
    assert cli.main([str(path), "--format", "html", "-o", str(out)]) == 0
    page = out.read_text(encoding="utf-8")
    assert page.count("plotly.js v") >= 1 and not re.search(r"<script[^>]+src=", page)
    trace = ta.load(path)
    browser.get(out.as_uri())
    browser.get_log("browser")  # the page has loaded: what it logged is below
    body = browser.find_element("tag name", "body").text
    top = str(trace.hotspots("kernel", top=1)["name"].iloc[0])
    assert top in body
    titles = [f.title for f in trace.findings()]
    assert titles and all(" ".join(t.split()) in body for t in titles)
    drawn = browser.execute_script("return document.querySelectorAll('.js-plotly-plot .main-svg').length")
    figures = browser.execute_script("return document.querySelectorAll('div.figure').length")
    assert figures >= 3 and drawn >= figures
    wide = browser.execute_script("var e = document.documentElement; return e.scrollWidth > e.clientWidth")
    assert not wide  # long paths wrap, wide tables scroll inside their box: the page does not
    errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert not errors, errors
    browser.save_screenshot(str(folder / f"{case}.png"))
    assert (folder / f"{case}.png").stat().st_size > 10_000


def test_tables_sort_by_value_on_a_header_click(browser, tmp_path):
    out = tmp_path / "report.html"
    assert cli.main([str(CASES["unfused_ops"]), "--format", "html", "-o", str(out)]) == 0
    browser.get(out.as_uri())
    table = browser.find_element("css selector", "#hotspots table.sortable")
    headers = table.find_elements("css selector", "th")
    column = next(i for i, h in enumerate(headers) if h.text == "count")

    def counts() -> list[float]:
        cells = table.find_elements("css selector", f"tbody tr td:nth-child({column + 1})")
        return [float(c.get_attribute("data-v")) for c in cells]

    headers[column].click()
    assert counts() == sorted(counts())
    headers[column].click()
    assert counts() == sorted(counts(), reverse=True) and len(set(counts())) > 1


def test_html_escapes_names(tmp_path):
    page = Path(tmp_path / "r.html")
    assert cli.main([str(CASES["unfused_ops"]), "--format", "html", "-o", str(page)]) == 0
    text = page.read_text(encoding="utf-8")
    assert "at::native::elementwise_kernel&lt;128, 4," in text


def test_scoped_html_report_draws_its_step_and_rank(tmp_path):
    page = tmp_path / "scoped.html"
    assert cli.main([str(CASES["fsdp"]), "--step", "3", "--rank", "1", "--format", "html", "-o", str(page)]) == 0
    text = page.read_text(encoding="utf-8")
    assert "Top kernels (total) (rank 1, step 3)" in text and "Timeline of step 3" in text
