"""The Timeline page: one step of one rank as Gantt lanes with the findings shaded, its pickers and its zoom."""

from __future__ import annotations

import dash
import plotly.graph_objects as go
from dash import Input, Output, State, dcc, html, no_update
from traceanalyzer.dashboards import charts, state
from traceanalyzer.dashboards import timeline as timeline_lanes
from traceanalyzer.dashboards.blocks import dropdown, unavailable
from traceanalyzer.dashboards.store import Store
from traceanalyzer.dashboards.views import View

from traceanalyzer.renderers import figures

NS_PER_MS = 1_000_000


def timeline(view: View, query: dict[str, str]) -> list:
    """Step and rank pickers, how many host levels to show (Python frames collapsed or not), and the step's Gantt."""
    steps = view.steps()
    if not steps:
        return [unavailable("Timeline", "the trace has no step markers")]
    levels = state.choice(query, "levels", timeline_lanes.LEVEL_CHOICES, timeline_lanes.LEVEL_CHOICES[0])
    frames = ["python"] if query.get("frames") == "python" else []
    return [
        html.Div(
            [
                dropdown("tl-rank", view.ranks(), state.choice(query, "rank", view.ranks(), view.ranks()[0]), "rank"),
                dropdown("tl-step", steps, state.choice(query, "step", steps, steps[0]), "step"),
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
            ],
            className="controls",
        ),
        html.P(TIMELINE_BASIS, className="note"),
        html.P(id="tl-note"),
        dcc.Loading(dcc.Graph(id="tl-graph", config={"scrollZoom": True})),
    ]


TIMELINE_BASIS = (
    "One step of one rank, ms from the step's first event. Each host thread has lanes per call level, counted in "
    "that thread; Python frames are collapsed unless shown, and deeper levels expand with 'host levels'."
)


def timeline_figure(
    view: View, rank: int, step: int, levels: int, python: bool, find: str = "", window: tuple[int, int] | None = None
) -> tuple:
    """The Gantt of one step (segments whose name contains find outlined) and the note saying how many events it
    draws as how many segments, and what it shades and outlines."""
    seg = view.segments(rank, step, levels, python, window)
    merged = int(seg["count"].sum()) if len(seg) else 0
    note = f"{merged:,} events drawn as {len(seg):,} segments (near-adjacent ones of one lane and colour merged"
    note += "; zoom in to split them)." if merged > len(seg) else ")."
    fig = figures.gantt(seg, (rank, step, levels, python))
    found = view.marks(rank, seg)
    fig.update_layout(shapes=[_shade(mark) for mark in found.itertuples()])
    counts = found["what"].value_counts()
    if len(counts):
        shaded = ", ".join(f"{n} {what}{'s' if n > 1 else ''} ({MARK_NAMES[what]})" for what, n in counts.items())
        note += f" Shaded from the Health page: {shaded}."
    if find.strip():
        hits = seg[seg["name"].str.contains(find.strip(), case=False, regex=False)]
        under = charts.outline(hits, f"contains '{find.strip()}'")  # drawn first: under the segments it outlines
        fig = go.Figure([under, *fig.data], layout=fig.layout)
        many = "segments contain" if len(hits) != 1 else "segment contains"
        note += f" {len(hits):,} drawn {many} '{find.strip()}' (outlined; a merged one shows its first name)."
    return fig, note


def _shade(mark) -> dict:
    """A finding's place on the timeline: a band across every lane."""
    return {
        "type": "rect",
        "xref": "x",
        "yref": "paper",
        "x0": mark.start_ns / 1e6,
        "x1": mark.end_ns / 1e6,
        "y0": 0,
        "y1": 1,
        "fillcolor": MARK_COLOURS[mark.what],
        "opacity": 0.18,
        "line": {"width": 0},
        "layer": "below",
        "name": f"{mark.what}: {figures.text(mark.label)}",
    }


MARK_COLOURS = {"idle gap": "#ff7f0e", "host sync": "#d62728"}
MARK_NAMES = {"idle gap": "orange", "host sync": "red"}


def register(app: dash.Dash, store: Store) -> None:
    """The step's Gantt for the pickers (written to the URL), redrawn finer on zoom."""

    def draw(key, rank, step, levels, python, find, window: tuple[int, int] | None = None):
        view = store.view(key)
        if view is None or rank is None or step is None:
            return no_update, no_update
        return timeline_figure(view, int(rank), int(step), int(levels), bool(python), find or "", window)

    @app.callback(
        Output("tl-graph", "figure"),
        Output("tl-note", "children"),
        state.URL,
        Input("tl-rank", "value"),
        Input("tl-step", "value"),
        Input("tl-levels", "value"),
        Input("tl-python", "value"),
        Input("tl-find", "value"),
        State("trace", "value"),
        State("url", "search"),
        prevent_initial_call="initial_duplicate",  # draws when the page opens
    )
    def timeline(rank, step, levels, python, find, key, search):
        frames = "python" if python else None
        search = state.updated(search, rank=rank, step=step, levels=levels, frames=frames, find=find or None)
        return *draw(key, rank, step, levels, python, find), search

    # Zooms are a callback of their own: the graph's first relayout event (autosize) must not supersede the
    # request that draws the step.
    @app.callback(
        Output("tl-graph", "figure", allow_duplicate=True),
        Output("tl-note", "children", allow_duplicate=True),
        Input("tl-graph", "relayoutData"),
        State("tl-rank", "value"),
        State("tl-step", "value"),
        State("tl-levels", "value"),
        State("tl-python", "value"),
        State("tl-find", "value"),
        State("trace", "value"),
        prevent_initial_call=True,
    )
    def timeline_zoom(relayout, rank, step, levels, python, find, key):
        window = zoom_window(relayout)
        if window is None and not _reset(relayout):
            return no_update, no_update
        return draw(key, rank, step, levels, python, find, window)


def zoom_window(relayout: dict | None) -> tuple[int, int] | None:
    """The x range (ns) a zoom on the timeline asked for, or None when it was not a zoom."""
    if not relayout or "xaxis.range[0]" not in relayout:
        return None
    lo, hi = (relayout[f"xaxis.range[{i}]"] for i in (0, 1))
    return int(float(lo) * NS_PER_MS), int(float(hi) * NS_PER_MS)


def _reset(relayout: dict | None) -> bool:
    return bool(relayout) and relayout.get("xaxis.autorange") is True
