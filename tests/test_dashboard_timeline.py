"""The Timeline page in headless Chromium on a real with_stack trace (ddp_no_overlap): the findings and the step
boundaries drawn where the analyzers put them, a finding shown in place, a finding's Overview link opening its
rank and place (the legend clear of the mode bar), launch → kernel lines, names inside the bars at zoom, the
Perfetto download, and all ranks stacked with their clock offsets; and, without a browser, the launch → kernel
pairs, the marks the page draws from the analyzers' results and the all-ranks view's shift by each rank's clock
offset."""

from __future__ import annotations

import gzip
import json
import time
from pathlib import Path

import pytest
from traceanalyzer.dashboards import state, timeline
from traceanalyzer.dashboards.views import View

import traceanalyzer as ta
from tests.conftest import artifact_folder, headless_chromium, serving, shared_path
from traceanalyzer.renderers import perfetto
from traceanalyzer.schema import TIMELINE_DEVICE

WAIT_S = 30
RANK, STEP = 1, 3
GRAPH = "document.querySelector('#tl-graph .js-plotly-plot')"
SHAPES = f"return {GRAPH}.layout.shapes.map(s => [s.name, s.x0, s.x1])"
FINDINGS = f"return {GRAPH}.data.filter(t => t.y && t.y[0] === 'findings').map(t => t.name)"
RANGE = f"return {GRAPH}._fullLayout.xaxis.range"
BAR_PLACE = f"""const g = {GRAPH}, xa = g._fullLayout.xaxis, ya = g._fullLayout.yaxis, [lo, hi] = xa.range;
const t = g._fullData.find(t => t.name === arguments[0]);
const shown = (i) => Math.min(t.base[i] + t.x[i], hi) - Math.max(t.base[i], lo);
const bars = [...Array(t.x.length).keys()].filter(i => t.hovertext[i].startsWith(arguments[1]));
const widest = bars.sort((a, b) => shown(b) - shown(a))[0];
const mid = (Math.max(t.base[widest], lo) + Math.min(t.base[widest] + t.x[widest], hi)) / 2;
const x = xa._offset + xa.d2p(mid), y = ya._offset + ya.d2p(t.y[widest]);
window.scrollTo(0, g.getBoundingClientRect().top + window.scrollY + y - 300);
const box = g.getBoundingClientRect();
return [Math.round(box.left + x), Math.round(box.top + y)];"""
"""Script: the place in the viewport (px) of the middle of the widest bar of a named trace whose hover text starts
with a name, scrolled into view."""
ROW_PLACE = f"""const g = {GRAPH}, xa = g._fullLayout.xaxis, ya = g._fullLayout.yaxis;
const t = g._fullData.find(t => t.customdata && t.customdata.some(c => c[1] === arguments[0]));
const i = t.customdata.findIndex(c => c[1] === arguments[0]);
const x = xa._offset + xa.d2p(t.base[i] + t.x[i] / 2), y = ya._offset + ya.d2p(t.y[i]);
window.scrollTo(0, g.getBoundingClientRect().top + window.scrollY + y - 300);
const box = g.getBoundingClientRect();
return [Math.round(box.left + x), Math.round(box.top + y)];"""
"""Script: the place in the viewport (px) of the middle of the bar whose first event is a row, scrolled into view."""
X_PLACE = f"""const g = {GRAPH}, xa = g._fullLayout.xaxis, ya = g._fullLayout.yaxis;
window.scrollTo(0, g.getBoundingClientRect().top + window.scrollY + ya._offset - 100);
const box = g.getBoundingClientRect();
return [Math.round(box.left + xa._offset + xa.d2p(arguments[0])), Math.round(box.top + ya._offset + 100)];"""
"""Script: the place in the viewport (px) of a time (ms) on the x axis, 100 px under the lanes' top, scrolled into
view."""


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    """A headless Chromium that saves downloads in a folder of its own (``browser.downloads``)."""
    for driver in headless_chromium():
        driver.downloads = tmp_path_factory.mktemp("downloads")
        driver.execute_cdp_cmd("Page.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(driver.downloads)})
        yield driver


@pytest.fixture(scope="module")
def shots(tmp_path_factory) -> Path:
    """Where the screenshots go (conftest.artifact_folder)."""
    return artifact_folder(tmp_path_factory, "dashboard-timeline")


@pytest.fixture(scope="module")
def app():
    """The real app on ddp_no_overlap (recorded with_stack), served on a free local port: (url, view, key)."""
    from traceanalyzer.dashboards.access import Allowed
    from traceanalyzer.dashboards.store import Store

    path = shared_path("h200", "ddp_no_overlap")
    store = Store(Allowed([path]))
    key = store.open([str(path)])
    with serving(store) as url:
        yield url, store.view(key), key


def _wait(browser, css: str, text: str = ""):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    wait = WebDriverWait(browser, WAIT_S)
    wait.until(ec.text_to_be_present_in_element((By.CSS_SELECTOR, css), text))
    return browser.find_element(By.CSS_SELECTOR, css)


def _until(browser, script: str, ok=bool):
    """The value script returns once ok(value) holds."""
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(browser, WAIT_S).until(lambda b: (lambda v: v if ok(v) else False)(b.execute_script(script)))


def _open(browser, url: str, key: str, extra: str = "") -> None:
    browser.get(f"{url}/timeline?trace={key}&rank={RANK}&step={STEP}{extra}")
    _wait(browser, "#tl-note", "segments")


def _zoom(browser, lo_ms: float, hi_ms: float) -> None:
    _until(browser, f"const g = {GRAPH}; return g && g.data && g.data.length && g._fullLayout.xaxis.range")
    browser.execute_script(f"Plotly.relayout({GRAPH}, {{'xaxis.range[0]': {lo_ms}, 'xaxis.range[1]': {hi_ms}}})")


@pytest.mark.browser
def test_findings_and_step_boundaries_are_drawn_and_a_finding_shows_in_place(browser, app, shots):
    url, view, key = app
    _open(browser, url, key)
    steps = view.trace.steps()
    mine = steps[(steps["rank"] == RANK) & (steps["step"] == STEP)].iloc[0]
    note = _wait(browser, "#tl-note", "Step boundaries").text
    assert f"step {STEP} ends" in note and "idle gap" in note and "exposed collective" in note, note
    shapes = browser.execute_script(SHAPES)
    lines = {name: x0 for name, x0, _ in shapes if name.startswith("step boundary")}
    start = next(x for name, x in lines.items() if "starts" in name)
    end = next(x for name, x in lines.items() if "ends" in name)
    assert end - start == pytest.approx(mine["step_ns"] / 1e6, abs=1e-3)  # the step model's device window, in ms
    assert {"idle gap", "exposed collective", "fusion chain"} <= set(browser.execute_script(FINDINGS))
    gaps = view.trace.idle_gaps()
    longest = gaps[gaps["rank"] == RANK]["dur_ns"].max() / 1e6  # the straggler's sleep leaves the GPU idle
    gap = max(([x0, x1] for name, x0, x1 in shapes if name.startswith("idle gap")), key=lambda g: g[1] - g[0])
    drawn = gap[1] - gap[0]
    assert drawn == pytest.approx(longest, rel=0.05)
    full = browser.execute_script(RANGE)

    _pick_first_gap(browser)  # 'show a finding in place': the page zooms to it and links to it
    shown = _until(browser, RANGE, lambda r: r and r[1] - r[0] < 0.9 * (full[1] - full[0]))
    assert "at=" in browser.current_url
    assert shown[0] < gap[0] < gap[1] < shown[1] and shown[1] - shown[0] < 2 * drawn  # the gap and around it
    browser.get(browser.current_url)  # the link keeps the place
    _wait(browser, "#tl-note", "segments")
    again = _until(browser, RANGE, lambda r: r and r[1] - r[0] < 0.9 * (full[1] - full[0]))
    assert again == pytest.approx(shown, rel=1e-6)
    _shot(browser, shots, "timeline-findings")


@pytest.mark.browser
def test_a_findings_timeline_link_opens_its_rank_with_the_legend_clear_of_the_mode_bar(browser, app, shots):
    from selenium.webdriver.common.by import By

    url, view, key = app
    browser.get(f"{url}/?trace={key}")
    _wait(browser, "#findings", "timeline")
    links = browser.find_elements(By.CSS_SELECTOR, "a.timeline-link")
    link = next(a for a in links if "rank=1" in a.get_attribute("href"))
    href = link.get_attribute("href")
    browser.execute_script("arguments[0].scrollIntoView()", link)
    link.click()  # as the user follows it: the Overview's link, opened in the page
    _shows_rank_1_at(browser, view, state.parse(href.split("?")[1]))
    browser.get(href)  # and the link opened afresh (a new tab, a shared link)
    _shows_rank_1_at(browser, view, state.parse(href.split("?")[1]))
    legend, bar = (browser.execute_script(BOX, part) for part in (".legend", ".modebar"))
    assert legend and bar and not _overlap(legend, bar), (legend, bar)  # no legend entry under the tool icons
    _shot(browser, shots, "timeline-link")


def _shows_rank_1_at(browser, view: View, query: dict[str, str]) -> None:
    """The Timeline shows rank 1 (its picker, the URL, its lanes only), zoomed to the link's place."""
    _wait(browser, "#tl-note", "segments")
    _until(browser, "return window.location.search", lambda s: "rank=1" in s)  # the Timeline's pick is written
    assert _wait(browser, "#tl-rank-value").text == "1"
    assert state.parse(browser.execute_script("return window.location.search"))["rank"] == "1"
    full = view.segments(1, int(query["step"]), timeline.LEVEL_CHOICES[0], False)
    drawn = _until(browser, f"return {GRAPH}._fullLayout.yaxis._categories")
    assert set(drawn) == {"findings", *full["lane"]} and any(lane.startswith("device 1 ") for lane in drawn)
    lo, hi = (int(v) - full.attrs["origin_ns"] for v in query["at"].split("-"))
    shown = _until(browser, RANGE, lambda r: r and r[1] - r[0] < full["end_ns"].max() / 1e6)
    assert shown[0] < lo / 1e6 < hi / 1e6 < shown[1]  # the finding's place, zoomed to


BOX = f"""const b = {GRAPH}.querySelector(arguments[0]).getBoundingClientRect();
return [b.left, b.top, b.right, b.bottom];"""
"""Script: the viewport box (px: left, top, right, bottom) of a part of the graph (a CSS selector)."""


def _overlap(a: list[float], b: list[float]) -> bool:
    """Whether two boxes (left, top, right, bottom) share any area."""
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def _pick_first_gap(browser) -> None:
    """Choose the longest idle gap in 'show a finding in place'."""
    from selenium.webdriver.common.by import By

    browser.find_element(By.CSS_SELECTOR, "#tl-goto").click()
    options = [o for o in browser.find_elements(By.CSS_SELECTOR, "[role=option]") if "idle gap" in o.text]
    max(options, key=lambda o: float(o.text.split("idle ")[-1].split(" ms")[0])).click()


@pytest.mark.browser
def test_zoom_labels_the_bars_and_a_clicked_launch_draws_its_kernel_line(browser, app, shots):
    url, view, key = app
    _open(browser, url, key)
    lanes = view.lanes(RANK, STEP, 4, False)
    origin = view.segments(RANK, STEP, 4, False).attrs["origin_ns"]
    events = view.trace.events
    launches = lanes[lanes["name"] == "cudaLaunchKernel"]
    launched = launches[launches["row"].isin(events.loc[events["launch"] >= 0, "launch"])]
    first = launched.iloc[len(launched) // 2]
    lo = (first["start_ns"] - origin) / 1e6
    _zoom(browser, lo - 0.01, lo + 0.03)  # 40 µs around one launch: few bars, each wide
    _wait(browser, "#tl-note", "events drawn as")
    labels = _until(browser, "return [...document.querySelectorAll('#tl-graph .bartext')].map(t => t.textContent)")
    assert any("cudaLaunch" in t or "aten" in t for t in labels), labels

    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.common.actions.action_builder import ActionBuilder

    for attempt in range(3):  # a click that lands while the zoomed figure is still being redrawn is lost: again
        x, y = browser.execute_script(BAR_PLACE, "runtime call", "cudaLaunchKernel")
        click = ActionBuilder(browser)
        click.pointer_action.move_to_location(x, y).click()
        click.perform()
        try:
            said = _wait(browser, "#tl-selected", "launch → kernel line").text
            break
        except TimeoutException:
            if attempt == 2:
                raise
    assert said.startswith("Selected: cudaLaunchKernel") and " 0 launch" not in said, said
    arrows = _until(browser, f"return {GRAPH}.layout.annotations || []")
    assert all(a["name"] == "launch → kernel" and a["y"].startswith("device") for a in arrows)
    assert all(a["ay"].startswith("thread") and a["x"] >= a["ax"] for a in arrows)  # a kernel starts after its launch
    _shot(browser, shots, "timeline-flow")


@pytest.mark.browser
def test_perfetto_download_is_the_annotated_trace(browser, app):
    url, view, key = app
    _open(browser, url, key)
    browser.find_element("css selector", "#tl-perfetto").click()
    deadline = time.monotonic() + WAIT_S
    while not list(browser.downloads.glob("*.json.gz")) and time.monotonic() < deadline:
        time.sleep(0.2)
    (path,) = browser.downloads.glob("*.json.gz")
    doc = json.loads(gzip.decompress(path.read_bytes()))
    names = {e["args"]["name"] for e in doc["traceEvents"] if e.get("ph") == "M" and e["name"] == "process_name"}
    assert "traceanalyzer findings" in names
    assert doc["otherData"]["events_written"] == len(view.trace.events)
    claimed = {f.id for f in view.trace.findings() if f.claims}
    track = {e["cat"] for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("pid") == perfetto.FINDINGS_PID}
    assert claimed and claimed <= track  # each claiming finding's intervals are on the findings track
    flows = [e for e in doc["traceEvents"] if e.get("ph") in ("s", "f")]
    assert len(flows) == 2 * doc["otherData"]["launch_flows"] > 0  # and each launch is joined to its kernel


@pytest.mark.browser
def test_all_ranks_are_stacked_on_one_axis_with_the_clock_offsets_said(browser, app, shots):
    from traceanalyzer import humanize

    url, view, key = app
    browser.get(f"{url}/timeline?trace={key}&rank=all&step={STEP}")
    note = _wait(browser, "#tl-note", "clock offsets applied").text
    offsets = view.trace.clock_offsets().set_index("rank")["offset_ns"]
    assert offsets[1] != 0  # the two ranks' clocks differ on this trace
    for rank, offset in offsets.items():  # the reference rank's 0, the others' as every duration is written
        said = "0.00 µs (the reference)" if rank == min(offsets.index) else humanize.duration(int(offset))
        assert f"rank {rank} {said}" in note, note
    assert "collective ends" in note
    bars = f"{GRAPH}._fullData.filter(t => t.type === 'bar')"
    drawn = _until(browser, f"return {bars}.flatMap(t => [...t.y]).filter(y => y.includes('device'))")
    assert {y.split(" · ")[0] for y in drawn} == {"rank 0", "rank 1"}  # both ranks' device lanes, labelled by rank
    order = browser.execute_script(f"return {GRAPH}._fullLayout.yaxis._categories")[::-1]  # top to bottom
    ranks = [y.split(" · ")[0] for y in order]
    assert ranks == sorted(ranks) and order[0] == "rank 0 · findings"  # each rank's group: its findings first
    assert order[1].startswith("rank 0 · device") and "rank 1 · findings" in order
    assert browser.execute_script(f"return Object.keys({GRAPH}._fullLayout).filter(k => /^xaxis\\d/.test(k))") == []
    _shot(browser, shots, "timeline-all-ranks")


def test_all_ranks_view_shifts_each_rank_by_its_clock_offset(view):
    offset = int(view.offsets()[1])
    assert offset == int(view.trace.clock_offsets().set_index("rank").at[1, "offset_ns"]) != 0
    alone = view.lanes(1, STEP, 4, False).set_index("row")
    stacked = view.lanes(None, STEP, 4, False)
    mine = stacked[stacked["lane"].str.startswith("rank 1 · ")].set_index("row")
    assert len(mine) == len(alone) and (stacked["lane"].str.startswith("rank 0 · ")).any()
    assert (alone.loc[mine.index, "start_ns"] - mine["start_ns"] == offset).all()
    assert (alone.loc[mine.index, "end_ns"] - mine["end_ns"] == offset).all()
    drawn = view.segments(None, STEP, 4, False)  # decimated on the one axis: each bar starts at a shifted event
    bars = drawn[drawn["lane"].str.startswith("rank 1 · ")]
    starts = bars["start_ns"] + drawn.attrs["origin_ns"] + offset
    assert len(bars) and starts.isin(alone["start_ns"]).all()
    own = view.boundaries(1, STEP, 4, False)  # each rank's step boundaries moved with its lanes
    both = view.boundaries(None, STEP, 4, False)
    shifted = both.loc[both["rank"] == 1, "at_ns"].to_numpy() + drawn.attrs["origin_ns"] + offset
    assert list(shifted) == list(own["at_ns"] + view.segments(1, STEP, 4, False).attrs["origin_ns"])
    calls = view.marks(None, STEP, 4, False)  # and its findings: the exposed collectives inside its step
    calls = calls[(calls["rank"] == 1) & (calls["what"] == "exposed collective")]
    alone_calls = view.marks(1, STEP, 4, False)
    alone_calls = alone_calls[alone_calls["what"] == "exposed collective"]
    at = sorted(calls["start_ns"] + drawn.attrs["origin_ns"] + offset)
    assert len(at) and at == sorted(alone_calls["start_ns"] + view.segments(1, STEP, 4, False).attrs["origin_ns"])


def _shot(browser, folder: Path, name: str) -> None:
    browser.save_screenshot(str(folder / f"{name}.png"))


@pytest.fixture(scope="module")
def view():
    """The dashboard's view of ddp_no_overlap (no browser)."""
    return View(ta.load(shared_path("h200", "ddp_no_overlap")), "ddp_no_overlap")


def test_a_launch_bar_joins_each_kernel_it_launched(view):
    lanes = view.lanes(RANK, STEP, 4, False)
    events = view.trace.events
    launch = lanes[(lanes["name"] == "cudaLaunchKernel") & lanes["row"].isin(events["launch"])].iloc[0]
    pairs, hidden = timeline.flows(lanes, events, timeline.bar_rows(lanes, int(launch["row"]), 1))
    kernels = events[events["launch"] == launch["row"]]
    assert len(pairs) + hidden == len(kernels) >= 1
    assert (pairs["launch_ns"] == launch["start_ns"]).all() and (pairs["kernel_ns"] >= pairs["launch_ns"]).all()
    assert set(pairs["kernel"]) <= set(kernels["name"].astype(str))


def test_marks_are_the_analyzers_evidence_inside_the_step(view):
    marks = view.marks(RANK, STEP, 4, False)
    span = int(view.segments(RANK, STEP, 4, False)["end_ns"].max())
    assert ((marks["start_ns"] >= 0) & (marks["end_ns"] <= span) & (marks["start_ns"] <= marks["end_ns"])).all()
    assert (marks["what"].value_counts() <= timeline.MAX_MARKS).all()
    calls = view.trace.collectives()
    exposed = calls[(calls["rank"] == RANK) & (calls["exposed_ns"] > 0)]
    drawn = marks[marks["what"] == "exposed collective"]
    longest = (exposed["dur_ns"].max()) / 1e6
    assert len(drawn) and (drawn["end_ns"] - drawn["start_ns"]).max() / 1e6 <= longest + 1e-6


def test_each_fusion_chain_spans_the_device_work_its_ops_launched(view):
    events = view.trace.events
    chains = view.fusion_occurrences
    chains = chains[(chains["rank"] == RANK) & (chains["step"] == STEP)]
    marks = timeline.fusion_marks(chains, events, RANK, STEP)
    assert len(marks) == len(chains) > 0
    mine = events[(events["rank"] == RANK) & (events["step"] == STEP) & events["kind"].isin(TIMELINE_DEVICE)]
    for (what, start, end, label), chain in zip(marks, chains.itertuples(), strict=True):
        work = mine[mine["top_op"].isin(chain.entry_rows)]
        ops = events.loc[list(chain.entry_rows)] if not len(work) else work  # no device work: the ops themselves
        assert (what, start, end) == ("fusion chain", ops["ts"].min(), (ops["ts"] + ops["dur"]).max())
        assert label.startswith(f"fusion chain {chain.pattern}: {chain.variant} ({chain.kernels} kernels")


def test_ascend_lanes_name_what_has_no_stream_instead_of_the_sentinel():
    from tests.conftest import load_shared

    trace = load_shared("public", "ascend", "msinsight", "pytorch_text", "level1", "rank0_ascend_pt")
    events = trace.events
    rank, step = int(events["rank"].iloc[0]), int(sorted(trace.steps_recorded())[0])
    lanes = timeline.step_lanes(events, timeline.host_levels(events), rank, step)
    names = set(lanes["lane"])
    assert not [n for n in names if "-1" in n], names
    assert "device 0 · communication" in names or "device · communication" in names, names
    assert any(n.startswith("device 0 · stream ") for n in names), names


def _zoom_drawn(browser, lo_ms: float, hi_ms: float) -> None:
    """Zoom, and wait until the server's redraw of the window is in place."""
    _until(browser, f"const g = {GRAPH}; return g && g.data && g.data.length && (window.drawn = g.data)")
    _zoom(browser, lo_ms, hi_ms)
    _until(browser, f"return {GRAPH}.data !== window.drawn")  # the server's figure for the window replaced it
    _until(browser, RANGE, lambda r: r and r[0] == pytest.approx(lo_ms) and r[1] == pytest.approx(hi_ms))


def _pointer(browser, at: tuple[int, int], click: bool = False, drag_to: tuple[int, int] | None = None) -> None:
    """Move the mouse to a viewport place (px), and click there or drag from there."""
    from selenium.webdriver.common.actions.action_builder import ActionBuilder

    act = ActionBuilder(browser)
    act.pointer_action.move_to_location(*at)
    if click:
        act.pointer_action.click()
    if drag_to:
        act.pointer_action.pointer_down()
        act.pointer_action.move_to_location((at[0] + drag_to[0]) // 2, at[1])
        act.pointer_action.move_to_location(*drag_to)
        act.pointer_action.pointer_up()
    act.perform()


WIDEST_OF = f"""const g = {GRAPH}, rows = new Set(window.deep_rows), [lo, hi] = g._fullLayout.xaxis.range;
let best = null, width = 0;
for (const t of g._fullData) (t.customdata || []).forEach((c, i) => {{
  const w = Math.min(t.base[i] + t.x[i], hi) - Math.max(t.base[i], lo);
  if (rows.has(c[1]) && w > width) {{ best = c[1]; width = w; }}
}});
return best;"""
"""Script: the first row of the widest bar in view whose first row is one of window.deep_rows (null when none is)."""


@pytest.mark.browser
def test_a_pointed_then_clicked_kernel_shows_its_launch_line_below_the_levels_shown_and_its_details(
    browser, app, shots
):
    from traceanalyzer import humanize

    url, view, key = app
    _open(browser, url, key)
    events = view.trace.events
    lanes = view.lanes(RANK, STEP, 4, False)
    origin = view.segments(RANK, STEP, 4, False).attrs["origin_ns"]
    mine = events[(events["rank"] == RANK) & (events["step"] == STEP) & (events["kind"] == "kernel")]
    deep = mine[(mine["launch"] >= 0) & ~mine["launch"].isin(lanes["row"])]  # launched below the 4 levels shown
    widest = deep.loc[deep["dur"].idxmax()]
    at = (widest["ts"] - origin) / 1e6
    browser.execute_script("window.deep_rows = arguments[0]", [int(r) for r in deep.index])
    _zoom_drawn(browser, at - 0.05, at + widest["dur"] / 1e6 + 0.05)
    row = _until(browser, f"return {GRAPH}._fullLayout.xaxis.range[1] < {at + 1} && (() => {{{WIDEST_OF}}})()")
    kernel, launch = events.loc[row], events.loc[int(events.at[row, "launch"])]
    place = browser.execute_script(ROW_PLACE, row)
    _pointer(browser, place)  # pointing at the bar draws its launch's line
    starts = f"return ({GRAPH}.layout.annotations || []).map(a => a.x)"
    kernel_ms = (kernel["ts"] - origin) / 1e6
    _until(browser, starts, lambda xs: any(x == pytest.approx(kernel_ms, abs=1e-6) for x in xs or []))
    assert not browser.find_elements("css selector", "#tl-details-facts")  # not clicked yet
    _pointer(browser, place, click=True)
    facts = _wait(browser, "#tl-details-facts", "self time").text
    assert str(kernel["name"])[:60] in facts and f"duration\n{humanize.duration(int(kernel['dur']))}" in facts
    assert f"self time\n{humanize.duration(int(kernel['dur']))}" in facts  # device work: its whole duration
    args = _wait(browser, "#tl-details-args").text
    assert f"correlation\n{kernel['correlation']}" in args and f"stream\n{kernel['stream']}" in args
    assert str(launch["name"]) in _wait(browser, "#tl-details-link td[data-dash-column=name]").text
    stack = _wait(browser, "#tl-details-stack").text.split("\n")
    assert stack[0].startswith(f"step · ProfilerStep#{STEP} ") and sum("ProfilerStep" in f for f in stack) == 1
    assert stack[-1].startswith(f"runtime · {launch['name']}") and len(stack) > 5  # from the step down to the launch
    arrows = _until(browser, f"return {GRAPH}.layout.annotations || []")
    mine = [a for a in arrows if a["x"] == pytest.approx(kernel_ms, abs=1e-6)]
    assert mine and mine[0]["ay"].startswith(f"thread {launch['tid']} ")  # the launch's nearest drawn caller's lane
    assert mine[0]["ax"] == pytest.approx((launch["ts"] - origin) / 1e6, abs=1e-6)  # at the launch's own time
    _shot(browser, shots, "timeline-details")


def _search(browser) -> str:
    return browser.execute_script("return window.location.search")


def _details_row(browser) -> str | None:
    """The event row the details panel shows, once the page is drawn (None when it shows none)."""
    _wait(browser, "#tl-note", "segments")
    shown = browser.find_elements("css selector", "#tl-details-facts")
    return shown[0].text.split("event row\n")[1].split("\n")[0] if shown else None


@pytest.mark.browser
def test_a_clicked_slice_lives_in_the_url_through_back_forward_and_a_shared_link(browser, app, shots):
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    url, view, key = app
    _open(browser, url, key)
    events = view.trace.events
    origin = view.segments(RANK, STEP, 4, False).attrs["origin_ns"]
    mine = events[(events["rank"] == RANK) & (events["step"] == STEP) & (events["kind"] == "kernel")]
    launched = mine[mine["launch"] >= 0]
    widest = launched.loc[launched["dur"].idxmax()]
    at = (widest["ts"] - origin) / 1e6
    browser.execute_script("window.deep_rows = arguments[0]", [int(r) for r in launched.index])
    end = at + widest["dur"] / 1e6 + 0.05
    _zoom_drawn(browser, at - 0.05, end)
    zoom = _until(browser, RANGE)
    row = _until(browser, f"return {GRAPH}._fullLayout.xaxis.range[1] <= {end} && (() => {{{WIDEST_OF}}})()")
    unclicked = _search(browser)
    assert "zoom=" in unclicked and "slice=" not in unclicked
    _pointer(browser, browser.execute_script(ROW_PLACE, row), click=True)
    _until(browser, "return window.location.search", lambda q: f"slice={row}" in q)
    clicked = _search(browser)
    assert _details_row(browser) == str(row)
    kernel_ms = (events.at[row, "ts"] - origin) / 1e6
    arrows = f"return ({GRAPH}.layout.annotations || []).map(a => a.x)"
    drawn = browser.find_element("css selector", ".page-title")
    browser.back()  # the view before the click: zoomed, nothing selected
    _until(browser, "return window.location.search", lambda q: q == unclicked)
    WebDriverWait(browser, WAIT_S).until(ec.staleness_of(drawn))
    assert _details_row(browser) is None and not _wait(browser, "#tl-selected").text
    assert _until(browser, RANGE) == pytest.approx(zoom, rel=1e-6)
    drawn = browser.find_element("css selector", ".page-title")
    browser.forward()  # the click again: its details, its Selected line and its launch → kernel line
    _until(browser, "return window.location.search", lambda q: q == clicked)
    WebDriverWait(browser, WAIT_S).until(ec.staleness_of(drawn))
    assert _details_row(browser) == str(row)
    assert str(events.at[row, "name"])[:40] in _wait(browser, "#tl-selected", "Selected: ").text
    _until(browser, arrows, lambda xs: any(x == pytest.approx(kernel_ms, abs=1e-6) for x in xs or []))
    assert _until(browser, RANGE) == pytest.approx(zoom, rel=1e-6)
    browser.get("about:blank")
    browser.get(f"{url}/timeline{clicked}")  # the link shared: the same zoom and the same slice
    assert _details_row(browser) == str(row) and _until(browser, RANGE) == pytest.approx(zoom, rel=1e-6)
    _shot(browser, shots, "timeline-shared-slice")
    elsewhere = int(events.index[(events["rank"] == RANK) & (events["step"] == STEP + 1)][0])
    browser.get(f"{url}/timeline?trace={key}&rank={RANK}&step={STEP}&slice={elsewhere}")
    said = _wait(browser, "#tl-selected", "not on the rank").text
    assert f"event row {elsewhere}" in said and _details_row(browser) is None


LEGEND = f"""return {GRAPH}._fullData.filter(t => t.showlegend)
  .map(t => [t.name, (t.marker && typeof t.marker.color === 'string') ? t.marker.color : t.line && t.line.color]);"""
"""Script: each legend entry of the drawn timeline and its colour."""


@pytest.mark.browser
def test_the_drawn_timeline_gives_each_legend_meaning_its_own_palette_colour(browser, app):
    from traceanalyzer.renderers import palette

    url, _, key = app
    _open(browser, url, key)
    legend = dict(_until(browser, LEGEND))
    named = {n for n in legend if not n.startswith("device ")}  # the memory track's lines are per device
    assert {"communication", "exposed collective", "idle gap", "cpu op"} <= named, legend
    colours = [legend[n].lower() for n in named]
    assert len(set(colours)) == len(colours), legend  # no two meanings share a colour
    assert set(colours) <= {c.lower() for c in palette.meanings().values()}, legend


@pytest.mark.browser
def test_a_dragged_range_totals_equal_the_json_report_with_its_findings_and_flows(browser, app, shots):
    from traceanalyzer.renderers import json as json_report

    url, view, key = app
    _open(browser, url, key)
    end = view.segments(RANK, STEP, 4, False)["end_ns"].max() / 1e6
    _zoom_drawn(browser, -2, end + 2)
    browser.execute_script(f"Plotly.relayout({GRAPH}, {{dragmode: 'select'}})")
    _pointer(browser, browser.execute_script(X_PLACE, -1), drag_to=browser.execute_script(X_PLACE, end + 1))
    said = _wait(browser, "#tl-range-said", "events overlap").text
    assert said.startswith("Range -1.")
    kinds = browser.execute_script(
        "return Array.from(document.querySelectorAll('#tl-range-kinds tbody tr')).filter(r => r.querySelector('td'))"
        ".map(r => [r.querySelector('td[data-dash-column=kind]').innerText,"
        " r.querySelector('td[data-dash-column=time_ns]').innerText])"
    )
    shown = {kind: float(ms) for kind, ms in kinds}
    report = json.loads(json_report.render(view.report()))
    steps = next(t for t in report["sections"]["summary"]["tables"] if t["id"] == "steps")["rows"]
    step = next(r for r in steps if r["rank"] == RANK and r["step"] == STEP)
    for kind in ("kernel", "communication", "memcpy"):  # the whole step selected: its device time by kind
        assert shown[kind] == pytest.approx(step[f"{kind}_ns"] / 1e6, abs=6e-4), (kind, shown)
    found = _wait(browser, "#tl-range-findings").text
    assert "idle gap" in found and "exposed collective" in found
    lines = _wait(browser, "#tl-range-flows", "launch → kernel").text
    events = view.trace.events
    launched = ((events["rank"] == RANK) & (events["step"] == STEP) & (events["launch"] >= 0)).sum()
    assert f"{timeline.MAX_FLOWS} launch → kernel lines drawn" in lines and f"of {launched:,} spread" in lines
    arrows = _until(browser, f"return {GRAPH}.layout.annotations || []", lambda a: len(a) == timeline.MAX_FLOWS)
    assert all(a["y"].startswith("device") and a["ay"].startswith("thread") for a in arrows)
    assert max(a["x"] for a in arrows) > end / 2  # spread over the step, not its first 64 launches
    _shot(browser, shots, "timeline-range")
    browser.execute_script(f"Plotly.relayout({GRAPH}, {{dragmode: 'zoom'}})")


MEMORY = f"""const g = {GRAPH}, l = g._fullLayout;
return [g._fullData.filter(t => t.yaxis === 'y2').map(t => [t.name, t.x, t.y, t.customdata || null]),
        l.yaxis.domain, l.yaxis2.domain];"""
"""Script: the memory track's traces (name, x, y, customdata) and the lanes' and the track's y domains."""


@pytest.mark.browser
def test_the_memory_track_marks_the_json_reports_peak_under_the_step_boundaries(browser, app, shots):
    from traceanalyzer.renderers import figures
    from traceanalyzer.renderers import json as json_report

    url, view, key = app
    report = json.loads(json_report.render(view.report()))
    peaks = next(t for t in report["sections"]["memory"]["tables"] if t["id"] == "peaks")["rows"]
    peak = next(p for p in peaks if p["rank"] == RANK and p["device"] >= 0)
    browser.get(f"{url}/timeline?trace={key}&rank={RANK}&step={peak['step']}")
    note = _wait(browser, "#tl-note", "Memory track").text
    assert "the peak marked" in note and f"step {peak['step']} ends" in note
    drawn, lanes, track = _until(browser, MEMORY, lambda m: m and m[0])
    assert track[1] < lanes[0]  # the track under the lanes
    by_name = {name: (x, y, data) for name, x, y, data in drawn}
    device = f"device {peak['device']}"
    assert {f"{device} allocated", f"{device} reserved", f"{device} peak"} <= set(by_name)
    x, y, data = by_name[f"{device} peak"]
    assert data == [[peak["peak_allocated_bytes"]]]  # the report's peak, in bytes
    origin = view.segments(RANK, peak["step"], 4, False).attrs["origin_ns"]
    assert x[0] == pytest.approx((report["trace"]["start_ns"] + peak["at_ns"] - origin) / 1e6, abs=1e-6)
    assert max(by_name[f"{device} allocated"][1]) * figures.GIB == pytest.approx(peak["peak_allocated_bytes"])
    browser.execute_script(f"{GRAPH}.scrollIntoView(false)")
    _shot(browser, shots, "timeline-memory")
    browser.get(f"{url}/timeline?trace={key}&rank={RANK}&step={peak['step'] + 1}")
    assert f"the peak is not in view (it is in step {peak['step']})" in _wait(browser, "#tl-note", "Memory").text


def _main_thread(view: View) -> str:
    """The thread of the rank's step markers (its main thread)."""
    events = view.trace.events
    return str(events.loc[(events["kind"] == "step") & (events["rank"] == RANK), "tid"].iloc[0])


def test_python_frames_are_levelled_from_the_step_and_each_shows_once(view):
    main = _main_thread(view)
    events = view.trace.events
    mine = events[(events["rank"] == RANK) & (events["step"] == STEP)]
    host = mine[mine["kind"].isin(["cpu_op", "python", "annotation", "runtime"])]
    for levels in timeline.LEVEL_CHOICES:
        lanes = view.lanes(RANK, STEP, levels, True)
        drawn = sorted(lane for lane in lanes["lane"].unique() if lane.startswith(f"thread {main} · level"))
        assert drawn[0] == f"thread {main} · level  0" and len(drawn) == min(levels, len(drawn)), drawn
        python = lanes[lanes["lane"].isin(drawn) & lanes["row"].isin(host.index[host["kind"] == "python"])]
        assert len(python)  # the step's own Python frames, from its first level on
    every = view.lanes(RANK, STEP, timeline.LEVEL_CHOICES[-1], True)
    assert host.index.isin(every["row"]).all()  # at 64 levels every host event of the step is drawn, once
    assert every["row"].is_unique
    bars = every[every["lane"].str.contains("level")].sort_values(["lane", "start_ns"])
    same = bars["lane"].to_numpy()[1:] == bars["lane"].to_numpy()[:-1]
    assert not (same & (bars["start_ns"].to_numpy()[1:] < bars["end_ns"].to_numpy()[:-1])).any()  # none overlap


def test_a_stack_stops_at_its_step_though_the_profiler_nests_the_steps(view):
    events = view.trace.events
    marker = events[(events["kind"] == "step") & (events["rank"] == RANK) & (events["step"] == STEP)].index[0]
    up, above = int(events.at[marker, "parent"]), []
    while up >= 0:
        above.append(str(events.at[up, "name"]))
        up = int(events.at[up, "parent"])
    assert any(name.startswith("ProfilerStep#") for name in above)  # the trace nests one step under the last
    ops = events[(events["kind"] == "cpu_op") & (events["tid"].astype(str) == _main_thread(view))]
    deepest = ops[(ops["rank"] == RANK) & (ops["step"] == STEP)]["depth"].idxmax()
    stack = view._stack(int(deepest))  # as the Hotspots page's details show an op's stack
    assert stack[0]["name"] == f"ProfilerStep#{STEP}" and sum(f["kind"] == "step" for f in stack) == 1
    assert stack[-1]["name"] == str(events.at[deepest, "name"]) and len(stack) > 10


@pytest.mark.browser
def test_several_steps_on_one_axis_and_python_frames_from_the_steps_first_level(browser, app, shots):
    from selenium.webdriver.common.by import By

    url, view, key = app
    shown = view.steps()[:4]
    browser.get(f"{url}/timeline?trace={key}&rank={RANK}&step={shown[0]}&span=4")
    note = _wait(browser, "#tl-note", "drawn on one axis").text
    assert note.startswith(f"Steps {', '.join(map(str, shown))} drawn on one axis"), note
    _until(browser, "return window.location.search", lambda s: "span=4" in s)  # the view is in the URL
    starts = sorted(x0 for name, x0, _ in browser.execute_script(SHAPES) if name.endswith("starts (device)"))
    steps = view.trace.steps()
    mine = steps[(steps["rank"] == RANK) & steps["step"].isin(shown)].sort_values("start_ns")
    assert len(starts) == len(shown) > 1  # each step's device start, as far apart as the step model has them
    apart = list(mine["start_ns"].diff()[1:] / 1e6)
    assert [b - a for a, b in zip(starts[:-1], starts[1:], strict=True)] == pytest.approx(apart)
    _shot(browser, shots, "timeline-steps")
    browser.find_element(By.CSS_SELECTOR, "#tl-python input").click()  # at the default 4 host levels
    _wait(browser, "#tl-note", "drawn on one axis")
    main = _main_thread(view)
    python = f"return {GRAPH}._fullData.filter(t => t.name === 'python').flatMap(t => [...t.y])"
    lanes = set(_until(browser, python))
    assert f"thread {main} · level  0" in lanes and "frames=python" in browser.current_url


def test_an_ops_details_hold_its_shapes_self_time_and_launches(view):
    from traceanalyzer.dashboards import slices

    events = view.trace.events
    ops = events[(events["rank"] == RANK) & (events["step"] == STEP) & (events["name"] == "aten::mm")]
    op = ops.index[0]
    found = slices.details(events, op)
    children = events[events["parent"] == op]
    assert found["self_ns"] == events.at[op, "dur"] - children["dur"].sum() < events.at[op, "dur"]
    assert found["args"]["input_dims"] == str(events.at[op, "input_dims"]) != ""
    assert found["link"] == "" and found["stack"][-1]["name"] == "aten::mm"  # an op launches through its runtime call
    launch = children.index[children["kind"] == "runtime"][0]
    assert slices.details(events, launch)["link"] == "launched"
