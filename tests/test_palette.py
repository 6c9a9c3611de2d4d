"""One palette: no two meanings drawn together share a colour, and the charts draw only its colours."""

from __future__ import annotations

import itertools

from traceanalyzer.dashboards import charts

import traceanalyzer as ta
from tests.conftest import REPO
from traceanalyzer.renderers import palette
from traceanalyzer.renderers.timeline import CATEGORY


def test_no_two_meanings_share_a_colour():
    pairs = itertools.combinations(palette.meanings().items(), 2)
    gap, a, b = min((palette.distance(x, y), k1, k2) for (k1, x), (k2, y) in pairs)
    assert gap >= palette.MIN_DISTANCE, f"{a} and {b} are {gap:.0f} apart"
    colours = palette.meanings().values()
    assert len(set(colours)) == len(colours)


def test_the_collisions_of_issue_31_are_gone():
    pairs = [
        (palette.MARK["exposed collective"], palette.CATEGORY["cpu op"]),
        (palette.MARK["idle gap"], palette.CATEGORY["sync/wait"]),
        (palette.MARK["host sync"], palette.CATEGORY["communication"]),
    ]
    assert all(palette.distance(x, y) >= palette.MIN_DISTANCE for x, y in pairs)


def test_every_timeline_category_and_mark_has_a_colour_and_a_name():
    assert set(CATEGORY.values()) <= set(palette.CATEGORY)
    assert set(palette.MARK) == set(palette.MARK_NAMES)


def test_hotspot_bars_draw_only_palette_colours():
    fig = charts.hotspot_bars(ta.load(REPO / "sample_traces" / "gpu_bound").hotspots("kernel"))
    used = {t.marker.color for t in fig.data}
    assert len(used) >= 3 and used <= set(palette.meanings().values()), used
