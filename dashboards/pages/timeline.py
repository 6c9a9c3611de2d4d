"""The Timeline page: one step of one rank (or of all ranks stacked on one clock-aligned axis) as Gantt lanes with
the findings and step boundaries drawn on it, its pickers, its zoom (finer segments, names inside the bars), launch →
kernel lines for a clicked bar, and the annotated trace to download for Perfetto."""

from __future__ import annotations

import gzip
from html import unescape
from typing import NamedTuple

import dash
import numpy as np
import orjson
import pandas as pd
import plotly.graph_objects as go
from dash import Input, Output, Patch, State, dcc, html, no_update
from traceanalyzer.dashboards import charts, memory_track, slices, state, timeline_panels
from traceanalyzer.dashboards import timeline as timeline_lanes
from traceanalyzer.dashboards.blocks import LOADING_DELAY_MS, dropdown, no_such, unavailable
from traceanalyzer.dashboards.names import middle
from traceanalyzer.dashboards.state import ALL
from traceanalyzer.dashboards.store import Store
from traceanalyzer.dashboards.timeline import Steps
from traceanalyzer.dashboards.views import View

from traceanalyzer import humanize
from traceanalyzer.humanize import NS_PER_MS
from traceanalyzer.renderers import figures, palette, perfetto

TITLE = "Timeline"
WIDTH_PX = 1_200
"""The plot area's width the labels are cut for (px; a label that still does not fit its bar is hidden)."""
MARGIN = 0.25
"""A finding shown in place is zoomed to with this share of its length either side."""
SELECTED_CHARS = 120
"""The clicked bar's name in the Selected line is cut to this many characters."""


def picked_rank(value: object) -> int | None:
    """The rank picker's value as a rank, or None for all ranks."""
    return None if value in (None, ALL) else int(value)


SPANS = (1, 2, 4, 8)
"""How many steps the Timeline can draw at once (from the picked one on); the first is the default."""


def shown_steps(view: View, step: int, span: int) -> Steps:
    """The steps drawn: the picked step and the span - 1 profiled steps after it (as many as there are); one step as
    an int."""
    steps = view.steps()
    at = steps.index(step) if step in steps else 0
    shown = tuple(steps[at : at + max(span, 1)])
    return shown[0] if len(shown) == 1 else shown


def picked(view: View, rank, step, span, levels, python) -> tuple[int | None, Steps, int, bool]:
    """The pickers' values as the timeline's arguments: rank (None for all), the step(s) shown, levels, python."""
    return picked_rank(rank), shown_steps(view, int(step), int(span or 1)), int(levels), bool(python)


def rank_choices(view: View) -> list:
    """The rank picker's options: each rank, and 'all' when there are several."""
    return [*view.ranks(), *([ALL] if len(view.ranks()) > 1 else [])]


def layout(view: View, query: dict[str, str]) -> list:
    """Step and rank pickers (a rank, or all stacked), how many host levels to show (Python frames collapsed or
    not), a finding to show in place, the Perfetto download, and the step's Gantt as the URL asks (drawn with the
    page: its chart is drawn once, with no round trip after the page's)."""
    steps = view.steps()
    if not steps:
        return [unavailable("Timeline", "the trace has no step markers")]
    ranks = rank_choices(view)
    wrong = no_such(query, {"step": [ALL, *steps], "rank": [ALL, *ranks]})  # 'all' (the Hotspots page's): the first
    if wrong:
        return wrong
    drawn = defaults(view)
    rank = state.choice(query, "rank", ranks, drawn["rank"])
    step = state.choice(query, "step", steps, drawn["step"])
    span = state.choice(query, "span", SPANS, drawn["span"])
    levels = state.choice(query, "levels", timeline_lanes.LEVEL_CHOICES, drawn["levels"])
    frames = ["python"] if query.get("frames") == "python" else []
    first = opened(view, rank, step, span, levels, frames, query.get("find", ""), state.encode(query), query.get("at"))
    return [
        html.Div(
            [
                dropdown("tl-rank", ranks, rank, "rank"),
                dropdown("tl-step", steps, step, "step"),
                dropdown("tl-span", list(SPANS), span, "steps shown"),
                dropdown("tl-levels", list(timeline_lanes.LEVEL_CHOICES), levels, "host levels per thread"),
                dcc.Checklist(
                    id="tl-python",
                    options=[
                        {"label": " show Python frames", "value": "python", "disabled": not view.has_python_frames()}
                    ],
                    value=frames,
                    className="control",
                ),
                html.Label(
                    [
                        "highlight names containing",
                        dcc.Input(id="tl-find", value=query.get("find", ""), debounce=True, type="search"),
                    ],
                    className="control",
                ),
                html.Label(
                    [
                        "show a finding in place",
                        dcc.Dropdown(id="tl-goto", options=first.drawn.options, placeholder="finding…"),
                    ],
                    className="control wide",
                ),
                html.Div(
                    [
                        html.Button("Open in Perfetto (download)", id="tl-perfetto", className="control"),
                        dcc.Download(id="tl-download"),
                    ],
                    className="control",
                    title=PERFETTO_HELP,
                ),
            ],
            className="controls",
        ),
        html.P(TIMELINE_BASIS, className="note"),
        html.P(first.drawn.note, id="tl-note"),
        html.P(id="tl-selected", className="note"),
        dcc.Store(id="tl-focus", data=query.get("at")),
        dcc.Store(id="tl-drawn", data=drawn_picks(view, rank, step, span, levels, frames, query.get("find", ""))),
        dcc.Store(id="tl-window"),
        dcc.Store(id="tl-picked"),
        dcc.Loading(
            dcc.Graph(
                id="tl-graph",
                figure=first.drawn.figure,
                config={"scrollZoom": True},
                style=graph_style(first.drawn.figure),
            ),
            delay_show=LOADING_DELAY_MS,
            overlay_style={"visibility": "visible", "opacity": 0.6},  # the graph stays in place while it redraws
        ),
        html.Div(
            [html.Div(id="tl-details", className="col"), html.Div(id="tl-range", className="col")], className="row"
        ),
    ]


TIMELINE_BASIS = (
    "One step of one rank, ms from the step's first event ('steps shown': that step and the next ones on one "
    "axis; rank 'all': every rank's lanes stacked on one time axis, the clock offsets applied, as the note says). "
    "Each host thread has lanes per call level, counted in that thread from its step marker; Python frames are "
    "collapsed unless shown, and deeper levels expand with 'host levels'. The findings lane and the bands over the "
    "device lanes show the analyzers' evidence; the dashed lines are each step's start and end as the device "
    "experiences it (the step model of the report); the memory track under the lanes shows each device's allocated "
    "and reserved memory. Point at or click a runtime launch or a kernel for its launch → kernel lines (a click "
    "also shows the slice's details under the chart); zoom in for names inside the bars; pick Box Select in the "
    "chart's tool bar and drag across a time range for its totals by kind and name, its findings and its launch → "
    "kernel lines (double-click clears it)."
)
PERFETTO_HELP = (
    "Downloads the whole trace with a findings track (the CLI's --perfetto file, gzipped JSON): open it at "
    "ui.perfetto.dev or chrome://tracing."
)


def defaults(view: View | None) -> dict[str, object]:
    """The picks the page draws when the URL names none."""
    if view is None or not view.steps():
        return {}
    return {
        "rank": rank_choices(view)[0],
        "step": view.steps()[0],
        "span": SPANS[0],
        "levels": timeline_lanes.LEVEL_CHOICES[0],
    }


def timeline_figure(
    view: View,
    rank: int | None,
    step: Steps,
    levels: int,
    python: bool,
    find: str = "",
    window: tuple[int, int] | None = None,
    focus: str | None = None,
) -> tuple:
    """The Gantt of one step (segments whose name contains find outlined, names inside the bars when few are in
    view), the findings and step boundaries drawn on it, and the note saying what it draws; focus (the URL's
    ``at``, ``start_ns-end_ns`` absolute) zooms to a place and outlines the findings there. rank None draws
    every rank stacked on the lowest rank's clock, each with its findings and step boundaries."""
    full = view.segments(rank, step, levels, python)
    if not len(full):
        return figures.empty("no events in this step"), "The step has no events on this rank."
    origin = full.attrs["origin_ns"]
    place = _place(focus, origin)
    if window is None and place is not None:
        window = _around(place)
    seg = view.segments(rank, step, levels, python, window) if window else full
    span = (window[1] - window[0]) if window else int(full["end_ns"].max())
    found = view.marks(rank, step, levels, python)
    bounds = view.boundaries(rank, step, levels, python)
    stacked = rank is None
    lanes = [*(figures.findings_lane(r if stacked else None) for r in found["rank"].unique()), *full["lane"].unique()]
    order = figures.lane_order(lanes)
    spans = figures.rank_spans(order) if stacked else {}
    bands = band_spans(order, rank)
    shapes = [*(_shade(mark, place, bands) for mark in found.itertuples()), *boundary_shapes(bounds, spans)]
    fig = figures.gantt(
        seg,
        (rank, step, levels, python, focus),
        timeline_lanes.labels(seg, span, WIDTH_PX),
        lanes,
        extra=finding_bars(found, span, origin, stacked),
        shapes=shapes,
    )
    fig.update_layout(selectdirection="h")  # a box selection is a time range across every lane
    lo, hi = window or (0, int(full["end_ns"].max()))
    lines, memory_note = memory_traces(view, rank, origin, lo, hi)
    if lines:
        fig.add_traces(lines)
        fig.update_layout(**memory_track.layout(fig.layout.height, fig.layout.margin.b))
    if window is not None:  # the figure says the window it drew (a zoom set by a script is not kept by uirevision)
        fig.update_xaxes(range=[window[0] / NS_PER_MS, window[1] / NS_PER_MS])
    note = _note(seg, found, bounds, stacked) + memory_note
    several = timeline_lanes.steps_of(step)
    if len(several) > 1:
        fig.update_xaxes(title_text=f"ms from step {several[0]}'s first event")
        note = (
            f"Steps {', '.join(map(str, several))} drawn on one axis (each step's device start and end dashed). {note}"
        )
    if stacked:
        fig.update_xaxes(title_text=f"ms from the step's first event of any rank (on rank {min(view.ranks())}'s clock)")
        note = f"{all_ranks_note(view, levels)} {note}"
    if find.strip():
        hits = seg[seg["name"].str.contains(find.strip(), case=False, regex=False)]
        under = charts.outline(hits, f"contains '{find.strip()}'")  # drawn first: under the segments it outlines
        fig = go.Figure([under, *fig.data], layout=fig.layout)
        many = "segments contain" if len(hits) != 1 else "segment contains"
        note += f" {len(hits):,} drawn {many} '{find.strip()}' (outlined; a merged one shows its first name)."
    return fig, note


class Drawn(NamedTuple):
    """The Gantt as sent to the browser (a figure's dict), the note under the pickers and the step's findings as
    'show a finding in place' options."""

    figure: dict
    note: str
    options: list[dict]


def drawn(
    view: View,
    rank,
    step,
    span,
    levels,
    python,
    find: str | None,
    window: tuple[int, int] | None = None,
    focus: str | None = None,
    zoom: str | None = None,
) -> Drawn:
    """The Gantt for the pickers' values (timeline_figure; zoom: the URL's window, absolute ns, where no window is
    given), drawn once per view and picks."""
    rank, step, levels, python = picked(view, rank, step, span, levels, python)
    if window is None and zoom:  # the URL's zoom on the drawn segments' clock
        full = view.segments(rank, step, levels, python)
        window = _place(zoom, full.attrs["origin_ns"]) if len(full) else None
    find = find or ""

    def draw() -> Drawn:
        fig, note = timeline_figure(view, rank, step, levels, python, find, window, focus)
        return Drawn(fig.to_plotly_json(), note, goto_options(view, rank, step, levels, python))

    return view.drawn((TITLE, rank, step, levels, python, find, window, focus), draw)


def prepare(view: View) -> None:
    """Draw the chart the page opens with when the URL names no picks (kept in the view: opening the page then only
    sends it)."""
    if view.steps():
        picks = defaults(view)
        drawn(view, picks["rank"], picks["step"], picks["span"], picks["levels"], False, "")


def drawn_picks(view: View, rank, step, span, levels, python, find: str | None) -> list:
    """The pickers' values the chart is drawn for, as the page keeps them (JSON: the steps as a list)."""
    rank, step, levels, python = picked(view, rank, step, span, levels, python)
    return [rank, timeline_lanes.steps_of(step), levels, python, find or ""]


def annotated(figure: dict, arrows: list[dict]) -> dict:
    """A drawn figure with these annotations (the drawing itself, kept for others, unchanged)."""
    return {**figure, "layout": {**figure["layout"], "annotations": arrows}}


def graph_style(figure: dict) -> dict:
    """The chart's box, as tall as its figure: the figure drawn into it, the box keeps its size and the chart is
    not drawn again for a resize."""
    return {"height": f"{figure['layout']['height']}px"}


class Opened(NamedTuple):
    """The Timeline as the pickers and the URL open it."""

    drawn: Drawn
    focus: str | None  # the URL's place, where it is in the step(s) drawn
    selected: str  # the Selected line of the URL's slice
    details: list  # its details panel
    record: dict  # the URL's record (state.recorded)


def url_picks(rank, step, span, levels, python, find: str | None) -> dict[str, object]:
    """The pickers' values as the URL's keys."""
    frames = "python" if python else None
    return {"rank": rank, "step": step, "span": span, "levels": levels, "frames": frames, "find": find or None}


def opened(
    view: View, rank, step, span, levels, python, find: str | None, search: str | None, focus: str | None
) -> Opened:
    """The Timeline for the pickers' values and the URL (search: its zoom and slice; focus: its place): the Gantt
    drawn at the URL's zoom or place when in the step(s) drawn, the URL's slice restored (its arrows, Selected line
    and details panel) when on them, and the URL as recorded for it."""
    query = state.parse(search)
    picks = picked(view, rank, step, span, levels, python)
    focus = in_step(view, picks[0], picks[1], focus)
    zoom = in_step(view, picks[0], picks[1], query.get("zoom"))
    row = url_slice(view, picks[0], picks[1], query.get("slice"))
    shown = url_picks(rank, step, span, levels, python, find)
    record = state.recorded(search, defaults(view), **shown, at=focus, zoom=zoom, slice=row)
    drawing = drawn(view, rank, step, span, levels, python, find, focus=focus, zoom=zoom)
    arrows, said, panel = restored_slice(view, picks, row, query.get("slice"))
    if arrows:
        drawing = drawing._replace(figure=annotated(drawing.figure, arrows))
    return Opened(drawing, focus, said, panel, record)


def memory_traces(view: View, rank: int | None, origin: int, lo: int, hi: int) -> tuple[list[dict], str]:
    """The memory track's lines and peak markers from lo to hi (ns from origin; each rank's, on its shifted clock,
    when rank is None) and what the note says of it; none where the trace has no device memory events."""
    memory = view.optional("memory").data
    if memory is None or not (memory.timeline["device"] >= 0).any():
        return [], ""
    ranks = view.ranks() if rank is None else [rank]
    offsets = view.offsets() if rank is None else pd.Series(dtype="int64")
    lines, shown = [], []
    for r in ranks:
        at = origin + int(offsets.get(r, 0))
        peaks = memory_track.peaks_in(memory.peaks, r, at + lo, at + hi)
        prefix = f"rank {r} · " if rank is None else ""
        lines += memory_track.traces(memory_track.series(memory.timeline, r, at + lo, at + hi), peaks, at, prefix)
        shown.append(peaks)
    return lines, memory_track.said(memory.peaks, pd.concat(shown), rank)


def all_ranks_note(view: View, levels: int) -> str:
    """What the all-ranks view applies: each rank's clock offset (µs, from the distributed analyzer) or that none
    is known, and the host levels each rank shows."""
    offsets = view.offsets()
    table = view.optional("clock_offsets").data
    clock = f"rank {min(view.ranks())}'s clock"
    if table is None:
        note = f"All {len(view.ranks())} ranks on one time axis; no clock offsets known, none applied "
        note += f"({view.optional('clock_offsets').reason})."
    elif not table["calls"].any():
        note = f"All {len(view.ranks())} ranks on one time axis; no clock offsets applied: the distributed analyzer "
        note += f"found no matched calls to estimate them from ({table['method'].iloc[0]})."
    elif not offsets.any():
        note = f"All {len(view.ranks())} ranks on one time axis, on {clock}; no clock offsets needed (the "
        note += "distributed analyzer estimates 0 µs for every rank)."
    else:
        per = ", ".join(_offset_said(o, min(view.ranks())) for o in table.itertuples())
        how = " and ".join(dict.fromkeys(table.loc[table["calls"] > 0, "method"]))
        note = f"All {len(view.ranks())} ranks on one time axis, on {clock}; clock offsets applied "
        note += f"(subtracted from each rank's times): {per}; estimated by the distributed analyzer from {how}, "
        note += f"spread up to {humanize.duration(table['spread_ns'].max())}."
    shown = timeline_lanes.all_ranks_levels(levels, len(view.ranks()))
    if shown < levels:
        note += f" With {len(view.ranks())} ranks each shows its device streams and {shown} host level"
        note += f"{'s' if shown > 1 else ''} per thread (of the {levels} picked; pick one rank for more)."
    return note + " Each rank's findings and step boundaries are drawn over its own lanes."


def _offset_said(offset, lowest: int) -> str:
    """One rank's clock offset as the note says it (µs, and how many matched calls it rests on)."""
    if offset.rank == lowest:
        return f"rank {offset.rank} 0.00 µs (the reference)"
    if not offset.calls:
        return f"rank {offset.rank} none known (0 applied)"
    return f"rank {offset.rank} {humanize.duration(offset.offset_ns)} ({offset.calls} matched calls)"


def _note(seg: pd.DataFrame, found: pd.DataFrame, bounds: pd.DataFrame, stacked: bool = False) -> str:
    """What the figure draws: events as segments, the findings by kind and colour (of each rank when stacked), the
    step boundaries."""
    merged = int(seg["count"].sum()) if len(seg) else 0
    note = f"{merged:,} events drawn as {len(seg):,} segments (near-adjacent ones of one lane and colour merged"
    note += "; zoom in to split them)." if merged > len(seg) else ")."
    counts = found["what"].value_counts()
    if len(counts):
        shown = ", ".join(
            f"{n} {what}{'s' if n > 1 else ''} ({palette.MARK_NAMES[what]})" for what, n in counts.items()
        )
        lane = "each rank's findings lane and bands over its device lanes" if stacked else "the findings lane and bands"
        each = " per rank" if stacked else ""
        note += f" Findings drawn ({lane}; the longest {timeline_lanes.MAX_MARKS} of a kind{each}): "
        note += f"{shown}."
    if len(bounds):
        note += " Step boundaries (device): " + "; ".join(bounds["label"]) + "."
    return note


def finding_bars(found: pd.DataFrame, span: int, origin: int, stacked: bool = False) -> list[dict]:
    """The marks as bars of the findings lane (each rank's when stacked), one trace per kind (hover says what;
    customdata is the mark's place, ``start_ns-end_ns`` absolute, for 'show it in place')."""
    least = span / 400  # an instant or a very short mark still gets a bar one can point at
    out = []
    for what, mine in found.groupby("what", sort=False):
        start, end = mine["start_ns"].to_numpy(), mine["end_ns"].to_numpy()
        out.append(
            {
                "type": "bar",
                "base": start / NS_PER_MS,
                "x": np.maximum(end - start, least) / NS_PER_MS,
                "y": [figures.findings_lane(r if stacked else None) for r in mine["rank"]],
                "orientation": "h",
                "width": figures.BAR_WIDTH,
                "name": what,
                "marker": {"color": palette.MARK[what], "line": {"width": 0}},
                "customdata": [[f"{s + origin}-{e + origin}", -1] for s, e in zip(start, end, strict=True)],
                "hovertext": [figures.text(label) for label in mine["label"]],
                "hovertemplate": "%{hovertext}<br>click: show it in place<extra>finding</extra>",
            }
        )
    return out


def _shade(mark, place: tuple[int, int] | None, spans: dict[int, tuple[float, float]] | None = None) -> dict:
    """A finding's place on the timeline: a band across the lanes of spans (its rank's findings and device lanes),
    or a line for an instant; outlined when it is the place the page was asked to show."""
    at = place is not None and mark.start_ns <= place[1] and mark.end_ns >= place[0]
    shape = {
        "xref": "x",
        "x0": mark.start_ns / NS_PER_MS,
        "x1": mark.end_ns / NS_PER_MS,
        **_span(spans, mark.rank),
        "layer": "below",
        "name": f"{mark.what}: {figures.text(mark.label)}",
    }
    if mark.end_ns == mark.start_ns:
        return {**shape, "type": "line", "line": {"color": palette.MARK[mark.what], "width": 2, "dash": "dot"}}
    edge = {"width": 2, "color": "#000"} if at else {"width": 0}
    return {**shape, "type": "rect", "fillcolor": palette.MARK[mark.what], "opacity": 0.18, "line": edge}


def boundary_shapes(bounds: pd.DataFrame, spans: dict[int, tuple[float, float]] | None = None) -> list[dict]:
    """The step's device start and end as dashed lines, labelled inside the plot on the step's side; across the
    whole plot, or with spans (y edges per rank) across its rank's lanes only."""
    return [
        {
            "type": "line",
            "xref": "x",
            "x0": b.at_ns / NS_PER_MS,
            "x1": b.at_ns / NS_PER_MS,
            **_span(spans, b.rank),
            "line": {"color": "#333", "width": 1.5, "dash": "dash"},
            "label": {
                "text": b.label,
                "textposition": "end",
                "textangle": 0,
                "yanchor": "top",
                "xanchor": "left" if i % 2 == 0 else "right",  # a start, then its end
                "font": {"size": 10},
            },
            "name": f"step boundary: {b.label}",
        }
        for i, b in enumerate(bounds.itertuples())
    ]


def band_spans(order: list[str], rank: int | None) -> dict[int, tuple[float, float]]:
    """Per rank, the y extent (category positions, lanes in order top to bottom) of its findings and device lanes:
    a finding's band covers those and leaves the host threads' lanes clear. Lanes are ``rank R · …`` when stacked
    (rank None), else all of rank."""
    top, spans = len(order) - 1, {}
    for i, lane in enumerate(order):
        mine = int(lane.split(" ", 2)[1]) if rank is None and lane.startswith("rank ") else rank
        if mine is None or "thread " in lane:
            continue
        low, high = spans.get(mine, (top - i - 0.5, top - i + 0.5))
        spans[mine] = (min(low, top - i - 0.5), max(high, top - i + 0.5))
    return spans


def _span(spans: dict[int, tuple[float, float]] | None, rank: int) -> dict:
    """A shape's vertical extent: its rank's lanes when spans has it, else the whole plot."""
    if spans and rank in spans:
        return {"yref": "y", "y0": spans[rank][0], "y1": spans[rank][1]}
    return {"yref": "paper", "y0": 0, "y1": 1}


def _place(focus: str | None, origin: int) -> tuple[int, int] | None:
    """The URL's ``at`` (``start_ns-end_ns``, absolute) in ns from origin, or None when absent or not a range."""
    try:
        lo, hi = (int(v) for v in str(focus).split("-"))
    except ValueError:
        return None
    return (lo - origin, hi - origin) if hi >= lo else None


def in_step(view: View, rank: int | None, step: Steps, focus: str | None) -> str | None:
    """focus (``start_ns-end_ns``, absolute) when it overlaps the step of this rank (so a link's place stays
    while host levels or the search change, and is dropped for another step or rank; any rank's step for all
    ranks: rank None), else None."""
    steps = view.trace.steps()
    mine = steps[((steps["rank"] == rank) | (rank is None)) & steps["step"].isin(timeline_lanes.steps_of(step))]
    place = _place(focus, 0)
    if place is None or not len(mine):
        return None
    lo, hi = int(mine["host_start_ns"].min()), int((mine["start_ns"] + mine["step_ns"]).max())
    return focus if place[0] <= hi and place[1] >= lo else None


def _around(place: tuple[int, int]) -> tuple[int, int]:
    """A window showing a place with some context either side."""
    pad = max(int((place[1] - place[0]) * MARGIN), 1_000)
    return place[0] - pad, place[1] + pad


def goto_options(view: View, rank: int | None, step: Steps, levels: int, python: bool) -> list[dict]:
    """The step's findings as the options of 'show a finding in place' (value: its place, absolute ns)."""
    full = view.segments(rank, step, levels, python)
    if not len(full):
        return []
    origin = full.attrs["origin_ns"]
    found = view.marks(rank, step, levels, python).sort_values("start_ns")
    return [
        {
            "label": f"{m.what} at {humanize.axis_ms(m.start_ns, 2)}: {m.label}",
            "value": f"{m.start_ns + origin}-{m.end_ns + origin}",
        }
        for m in found.itertuples()
    ]


def flow_annotations(
    view: View, rank: int | None, step: Steps, levels: int, python: bool, point: dict
) -> tuple[list, str]:
    """Launch → kernel arrows for a clicked or hovered bar (customdata: events merged, first row) and a sentence
    saying what they join."""
    count, row = (int(v) for v in point["customdata"][:2])
    lanes = view.lanes(rank, step, levels, python)
    origin = view.segments(rank, step, levels, python).attrs["origin_ns"]
    pairs, hidden = timeline_lanes.flows(lanes, view.trace.events, timeline_lanes.bar_rows(lanes, row, count))
    name = middle(str(view.trace.events.at[row, "name"]), SELECTED_CHARS)  # Dash escapes it (once)
    merged = f" (and {count - 1} more events merged into its bar)" if count > 1 else ""
    if not len(pairs) and not hidden:
        return [], f"Selected: {name}{merged}: no launch → kernel link (not a launch, and no device work)."
    return flow_arrows(pairs, origin), f"Selected: {name}{merged}: {flows_said(pairs, hidden)}."


def flow_arrows(pairs: pd.DataFrame, origin: int) -> list[dict]:
    """Launch → kernel pairs (timeline.flows) as arrows from the launch to the device work, in ms from origin."""
    return [
        {
            "x": (p.kernel_ns - origin) / NS_PER_MS,
            "y": p.kernel_lane,
            "ax": (p.launch_ns - origin) / NS_PER_MS,
            "ay": p.launch_lane,
            "xref": "x",
            "yref": "y",
            "axref": "x",
            "ayref": "y",
            "showarrow": True,
            "arrowhead": 2,
            "arrowwidth": 1.5,
            "arrowcolor": "#111",
            "text": "",
            "name": "launch → kernel",
        }
        for p in pairs.itertuples()
    ]


def flows_said(pairs: pd.DataFrame, hidden: int) -> str:
    """How many launch → kernel lines are drawn, their median delay, and how many are not (and why)."""
    said = f"{len(pairs)} launch → kernel line{'s' if len(pairs) != 1 else ''} drawn"
    if len(pairs):
        delay = int((pairs["kernel_ns"] - pairs["launch_ns"]).median())
        said += f" (median from launch start to kernel start {humanize.duration(delay)}; a launch below the host "
        said += "levels shown starts on its nearest drawn caller's lane, at its own time)"
    if pairs.attrs.get("of", 0) > len(pairs):
        said += f", {len(pairs)} of {pairs.attrs['of']:,} spread evenly over time"
    if hidden:
        said += f"; {hidden} not drawn: their other end is in a step not shown"
    return said


def range_hits(view: View, rank: int | None, step: Steps, lo: int, hi: int) -> pd.DataFrame:
    """The events of the drawn rank(s) and step(s) overlapping [lo, hi) (absolute ns on the drawn clock: each
    rank's clock less its offset when ranks are stacked), with the time of each inside it."""
    events = view.trace.events
    ranks = view.ranks() if rank is None else [rank]
    offsets = view.offsets() if rank is None else pd.Series(dtype="int64")
    chosen = np.isin(events["step"].to_numpy(), timeline_lanes.steps_of(step))
    frames = []
    for r in ranks:
        rows = events.index[chosen & (events["rank"] == r).to_numpy()].to_numpy()
        shift = np.full(len(rows), int(offsets.get(r, 0)), dtype=np.int64)
        frames.append(slices.in_range(events, rows, shift, lo, hi))
    return pd.concat(frames, ignore_index=True)


def slice_panel(view: View, rank: int | None, step: Steps, levels: int, python: bool, row: int) -> list:
    """The details panel of a clicked bar's first event (its event-table row; times on the drawn axis)."""
    origin = view.segments(rank, step, levels, python).attrs["origin_ns"]
    offset = int(view.offsets().get(int(view.trace.events.at[row, "rank"]), 0)) if rank is None else 0
    return timeline_panels.details_panel(slices.details(view.trace.events, row), origin + offset)


def url_slice(view: View, rank: int | None, step: Steps, value: str | None) -> int | None:
    """The URL's ``slice`` as an event row when it is one of the drawn rank(s) and step(s), else None."""
    events = view.trace.events
    if value is None or not value.isdigit() or int(value) not in events.index:
        return None
    row = int(value)
    mine = rank is None or int(events.at[row, "rank"]) == rank
    return row if mine and int(events.at[row, "step"]) in timeline_lanes.steps_of(step) else None


def restored_slice(view: View, picks: tuple, row: int | None, value: str | None) -> tuple[list, str, list]:
    """What the URL's slice restores: its launch → kernel arrows, the Selected line and the details panel; for a
    slice not on the drawn rank(s) and step(s), a line saying so."""
    if row is None:
        said = f"The selected slice (event row {value}) is not on the rank and step(s) drawn." if value else ""
        return [], said, []
    arrows, said = flow_annotations(view, *picks, {"customdata": [1, row]})
    return arrows, said, slice_panel(view, *picks, row)


def range_view(
    view: View, rank: int | None, step: Steps, levels: int, python: bool, picked: tuple[float, float]
) -> tuple[list, list]:
    """A selected range (ms on the axis): the launch → kernel arrows of the events inside it, and its panel."""
    origin = view.segments(rank, step, levels, python).attrs["origin_ns"]
    lo, hi = (int(v * NS_PER_MS) for v in picked)
    hits = range_hits(view, rank, step, origin + lo, origin + hi)
    lanes = view.lanes(rank, step, levels, python)
    pairs, hidden = timeline_lanes.flows(lanes, view.trace.events, hits["row"].to_numpy())
    panel = timeline_panels.range_panel(lo, hi, hits, view.marks(rank, step, levels, python))
    panel.insert(2, html.P(f"Launch → kernel: {flows_said(pairs, hidden)}.", id="tl-range-flows"))
    return flow_arrows(pairs, origin), panel


def url_slice_value(search: str | None) -> int | None:
    """The slice row the query string names (None when none or not a row number)."""
    value = state.parse(search).get("slice", "")
    return int(value) if value.isdigit() else None


def perfetto_file(view: View) -> bytes:
    """The annotated trace (renderers.perfetto: the events plus a findings track) as gzipped JSON."""
    doc = perfetto.document(view.trace.annotated())
    return gzip.compress(orjson.dumps(doc, option=orjson.OPT_SERIALIZE_NUMPY), compresslevel=5)


PICKS = [State(f"tl-{pick}", "value") for pick in ("rank", "step", "span", "levels", "python", "find")] + [
    State("trace", "value")
]
"""What a redraw of the Gantt reads besides its trigger: the pickers and the trace."""


def register(app: dash.Dash, store: Store) -> None:
    """The step's Gantt for the pickers (written to the URL), redrawn finer on zoom, zoomed to a finding, the
    launch → kernel lines of a clicked bar, and the Perfetto download."""

    def draw(key, rank, step, span, levels, python, find, window=None, focus=None):
        view = store.view(key)
        if view is None or rank is None or step is None:
            return no_update, no_update, no_update
        return drawn(view, rank, step, span, levels, python, find, window, focus)

    @app.callback(
        Output("tl-graph", "figure"),
        Output("tl-note", "children"),
        Output("tl-goto", "options"),
        Output("tl-focus", "data"),
        Output("tl-selected", "children", allow_duplicate=True),
        Output("tl-details", "children", allow_duplicate=True),
        Output("tl-graph", "style"),
        Output("tl-drawn", "data"),
        state.URL,
        Input("tl-rank", "value"),
        Input("tl-step", "value"),
        Input("tl-span", "value"),
        Input("tl-levels", "value"),
        Input("tl-python", "value"),
        Input("tl-find", "value"),
        State("trace", "value"),
        State("url", "search"),
        State("tl-focus", "data"),
        State("tl-drawn", "data"),
        prevent_initial_call="initial_duplicate",  # the rest of the page when it opens (the chart is drawn)
    )
    def timeline(rank, step, span, levels, python, find, key, search, focus, shown):
        view = store.view(key)
        if view is None or rank is None or step is None:
            picks = url_picks(rank, step, span, levels, python, find)
            record = state.recorded(search, defaults(view), **picks, at=None, zoom=None, slice=None)
            return no_update, no_update, no_update, None, no_update, no_update, no_update, no_update, record
        now = opened(view, rank, step, span, levels, python, find, search, focus)
        these = drawn_picks(view, rank, step, span, levels, python, find)
        if these == shown:  # the page was just drawn, its chart with it (layout): the rest of it
            return (
                no_update,
                no_update,
                no_update,
                now.focus,
                now.selected,
                now.details,
                no_update,
                no_update,
                now.record,
            )
        figure, note, options = now.drawn
        return figure, note, options, now.focus, now.selected, now.details, graph_style(figure), these, now.record

    @app.callback(
        Output("tl-graph", "figure", allow_duplicate=True),
        Output("tl-note", "children", allow_duplicate=True),
        Output("tl-focus", "data", allow_duplicate=True),
        state.URL,
        Input("tl-goto", "value"),
        *PICKS,
        State("url", "search"),
        prevent_initial_call=True,
    )
    def timeline_goto(focus, rank, step, span, levels, python, find, key, search):
        if not focus:
            return no_update, no_update, no_update, no_update
        fig, note, _ = draw(key, rank, step, span, levels, python, find, focus=focus)
        return fig, note, focus, state.record(state.updated(search, at=focus, zoom=None))

    # A zoom reaches the server through tl-window, set in the browser only for a zoom or a reset: the graph's own
    # relayout events (autosize when it is drawn or resized) would otherwise supersede the zoom's request.
    app.clientside_callback(ZOOM_FILTER, Output("tl-window", "data"), Input("tl-graph", "relayoutData"))
    # A box selection reaches the server as its x range only (not the thousands of bars it selects).
    app.clientside_callback(  # not when the chart is new: no selection yet, nothing to clear
        SELECT_FILTER, Output("tl-picked", "data"), Input("tl-graph", "selectedData"), prevent_initial_call=True
    )

    @app.callback(
        Output("tl-graph", "figure", allow_duplicate=True),
        Output("tl-note", "children", allow_duplicate=True),
        state.URL,
        Input("tl-window", "data"),
        *PICKS,
        State("tl-focus", "data"),
        State("url", "search"),
        prevent_initial_call=True,
    )
    def timeline_zoom(zoomed, rank, step, span, levels, python, find, key, focus, search):
        window = zoom_window(zoomed)
        fig, note, _ = draw(key, rank, step, span, levels, python, find, window, focus)
        view = store.view(key)
        if view is None or fig is no_update:
            return fig, note, no_update
        origin = view.segments(*picked(view, rank, step, span, levels, python)).attrs.get("origin_ns", 0)
        zoom = f"{window[0] + origin}-{window[1] + origin}" if window else None
        return fig, note, state.record(state.updated(search, zoom=zoom))

    @app.callback(
        Output("tl-graph", "figure", allow_duplicate=True),
        Output("tl-selected", "children"),
        Output("tl-goto", "value"),
        Output("tl-details", "children"),
        state.URL,
        Input("tl-graph", "clickData"),
        *PICKS[:5],
        State("trace", "value"),
        State("url", "search"),
        prevent_initial_call=True,
    )
    def timeline_click(click, rank, step, span, levels, python, key, search):
        view = store.view(key)
        if view is None or not click or not click.get("points") or rank is None:
            return no_update, no_update, no_update, no_update, no_update
        point = click["points"][0]
        if figures.is_findings(point.get("y")):  # a finding's bar: show it in place
            said = f"Finding: {unescape(str(point.get('hovertext', '')))}"
            return no_update, said, point["customdata"][0], no_update, no_update
        if len(point.get("customdata") or []) < 2 or int(point["customdata"][1]) < 0:
            return no_update, no_update, no_update, no_update, no_update
        picks = picked(view, rank, step, span, levels, python)
        arrows, said = flow_annotations(view, *picks, point)
        patched = Patch()
        patched["layout"]["annotations"] = arrows
        row = int(point["customdata"][1])
        url = state.record(state.updated(search, slice=row)) if row != url_slice_value(search) else no_update
        return patched, said, no_update, slice_panel(view, *picks, row), url

    @app.callback(
        Output("tl-graph", "figure", allow_duplicate=True),
        Input("tl-graph", "hoverData"),
        *PICKS[:5],
        State("trace", "value"),
        State("tl-picked", "data"),
        prevent_initial_call=True,
    )
    def timeline_hover(hover, rank, step, span, levels, python, key, selected):
        view = store.view(key)
        point = ((hover or {}).get("points") or [{}])[0]
        if view is None or rank is None or len(point.get("customdata") or []) < 2 or point["customdata"][1] < 0:
            return no_update
        if selected:  # a range's lines stay while it is selected
            return no_update
        arrows, _ = flow_annotations(view, *picked(view, rank, step, span, levels, python), point)
        if not arrows:
            return no_update
        patched = Patch()
        patched["layout"]["annotations"] = arrows
        return patched

    @app.callback(
        Output("tl-graph", "figure", allow_duplicate=True),
        Output("tl-range", "children"),
        Input("tl-picked", "data"),
        *PICKS[:5],
        State("trace", "value"),
        prevent_initial_call=True,
    )
    def timeline_select(selected, rank, step, span, levels, python, key):
        view = store.view(key)
        if view is None or rank is None:
            return no_update, no_update
        if not selected:  # no selection (yet, or cleared by a double-click, which also redraws the figure)
            return no_update, []
        arrows, panel = range_view(
            view, *picked(view, rank, step, span, levels, python), (min(selected), max(selected))
        )
        patched = Patch()
        patched["layout"]["annotations"] = arrows
        return patched, panel

    @app.callback(
        Output("tl-download", "data"),
        Input("tl-perfetto", "n_clicks"),
        State("trace", "value"),
        prevent_initial_call=True,
    )
    def timeline_perfetto(clicks, key):
        view = store.view(key)
        if view is None or not clicks:
            return no_update
        name = "".join(c if c.isalnum() or c in "-_." else "_" for c in view.label)[:80] or "trace"
        return dcc.send_bytes(perfetto_file(view), f"{name}.perfetto.json.gz")


ZOOM_FILTER = """function (relayout) {
    const r = relayout || {};
    if ('xaxis.range[0]' in r) return [r['xaxis.range[0]'], r['xaxis.range[1]']];
    if (Array.isArray(r['xaxis.range'])) return r['xaxis.range'];
    if (r['xaxis.autorange'] === true) return 'all';
    return window.dash_clientside.no_update;
}"""
"""Browser side: a relayout event's x range (ms) for a zoom, 'all' for a reset, else nothing (no request)."""
SELECT_FILTER = """function (selected) {
    const x = selected && selected.range && selected.range.x;
    return Array.isArray(x) && x.length === 2 ? x : null;
}"""
"""Browser side: a box selection's x range (ms), or null once it is cleared."""


def zoom_window(picked: list | str | None) -> tuple[int, int] | None:
    """The window (ns) of a zoom's x range in ms, or None (the whole step) for a reset."""
    if not isinstance(picked, list) or len(picked) != 2:
        return None
    lo, hi = (int(float(v) * NS_PER_MS) for v in picked)
    return lo, hi
