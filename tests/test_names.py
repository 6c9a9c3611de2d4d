"""Names cut for labels stay distinct and are escaped once; a finding's title is cut to a maximum in the page."""

from __future__ import annotations

import dataclasses

from traceanalyzer.dashboards import charts
from traceanalyzer.dashboards.names import LABEL_CHARS, shortened
from traceanalyzer.dashboards.pages import overview
from traceanalyzer.dashboards.views import View

import traceanalyzer as ta
from tests.conftest import REPO

UNFUSED = REPO / "sample_traces" / "unfused_ops.json.gz"


def _kernels() -> list[str]:
    return [str(n) for n in ta.load(UNFUSED).hotspots("kernel")["name"].head(20)]


def test_unfused_kernel_names_cut_apart_in_the_table_and_the_bars():
    names = _kernels()
    assert len(set(names)) == len(names) and any(len(n) > 2 * LABEL_CHARS for n in names)
    for limit in (LABEL_CHARS, charts.BAR_LABEL_CHARS):
        cut = shortened(names, limit)
        assert len(set(cut)) == len(names), [c for c in cut if cut.count(c) > 1]
        assert max(len(c) for c in cut) < 3 * limit, max(cut, key=len)
    fig = charts.hotspot_bars(ta.load(UNFUSED).hotspots("kernel"))
    labels = [label for trace in fig.data for label in trace.y]
    assert len(set(labels)) == len(labels) and not [label for label in labels if "&amp;" in label]


def test_names_alike_in_several_places_each_show_where_they_differ():
    base = "void at::native::elementwise_kernel<128, 4, at::native::{0}<float>>(at::TensorIteratorBase&, {0})#{1}"
    names = [base.format(f, n) for f in ("AddFunctor", "MulFunctor", "DivFunctor") for n in (1, 2)]
    cut = shortened(names)
    assert len(set(cut)) == len(names) and all(len(c) < len(n) for c, n in zip(cut, names, strict=True))


def test_a_megabyte_title_is_cut_in_the_findings_table():
    view = View(ta.load(UNFUSED), "unfused")
    finding = view.report().findings[0]
    huge = dataclasses.replace(finding, title="aten::" + "x" * 5_000_000)
    title = overview.findings_table(view, [huge]).children[1].children[0].children[1].children
    assert len(title.children) <= overview.TITLE_CHARS and len(title.title) <= overview.HOVER_CHARS
