"""Notebook figures: each draws what its analyzer found, on a real trace."""

from __future__ import annotations

from pathlib import Path

import traceanalyzer as ta

FSDP = Path(__file__).resolve().parents[1] / "sample_traces" / "fsdp"


def test_hotspot_bars_show_the_top_kernel():
    t = ta.load(FSDP)
    top = t.hotspots("kernel", top=1)["name"].iloc[0]
    fig = ta.plots.hotspots(t.hotspots())
    assert list(fig.data[0].customdata)[-1] == top  # the longest bar is drawn last, at the top


def test_timeline_draws_device_and_host_lanes_of_one_step():
    t = ta.load(FSDP)
    fig = ta.plots.timeline(t.events, t.steps(), rank=1, step=3)
    categories = {trace.name for trace in fig.data}
    assert {"compute", "communication", "cpu op"} <= categories


def test_overlap_heatmap_has_a_cell_per_rank_and_step():
    fig = ta.plots.overlap(ta.load(FSDP).overlap())
    assert len(fig.data[0].z) * len(fig.data[0].z[0]) == 6  # 2 ranks x 3 steps


def test_memory_lines_mark_the_measured_peak():
    t = ta.load(FSDP)
    fig = ta.plots.memory(t.memory())
    assert any("3.17 GiB" in str(getattr(trace, "text", "")) for trace in fig.data)  # 3,404,640,768 B
