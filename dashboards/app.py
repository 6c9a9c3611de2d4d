"""The Dash app: a trace picker, an open/upload panel with load progress, and one page per analysis."""

from __future__ import annotations

import base64
import binascii
import re
import tempfile
from pathlib import Path

import dash
from dash import Input, Output, State, dcc, html, no_update
from traceanalyzer.dashboards import pages, tables
from traceanalyzer.dashboards.store import Store

from traceanalyzer.analyzers.hotspots import Level
from traceanalyzer.renderers import figures

UPLOAD_LIMIT_BYTES = 200 * (1 << 20)
"""Largest trace file accepted by the upload box."""

POLL_MS = 700
NS_PER_MS = 1_000_000
_SAFE_NAME = re.compile(r"[^A-Za-z0-9._-]")
_STYLE = {
    "fontFamily": "system-ui, sans-serif",
    "margin": "0 auto",
    "maxWidth": "1500px",
    "padding": "8px 16px",
}


def create_app(store: Store) -> dash.Dash:
    """The dashboard app over the traces in store."""
    app = dash.Dash(
        __name__, title="traceanalyzer", suppress_callback_exceptions=True, update_title=None, eager_loading=True
    )
    app.server.config["MAX_CONTENT_LENGTH"] = UPLOAD_LIMIT_BYTES * 4 // 3 + (1 << 20)
    app.layout = _layout()
    _loading_callbacks(app, store)
    _page_callbacks(app, store)
    return app


def _layout() -> html.Div:
    nav = [
        dcc.Link(title, href=path, id=f"nav-{title.lower()}", className="nav") for path, title in pages.PAGES.items()
    ]
    open_panel = html.Details(
        [
            html.Summary("Open another trace"),
            dcc.Input(id="open-path", placeholder="path to a trace file or run folder", style={"width": "50%"}),
            html.Button("Open", id="open-btn"),
            dcc.Upload(
                id="upload",
                children=html.Span(f"… or drop / pick a .json or .json.gz file (up to {UPLOAD_LIMIT_BYTES >> 20} MiB)"),
                max_size=UPLOAD_LIMIT_BYTES,
                style={"border": "1px dashed #999", "padding": "6px", "marginTop": "4px"},
            ),
            html.Div(id="open-msg", className="message"),
        ]
    )
    return html.Div(
        [
            dcc.Location(id="url"),
            dcc.Interval(id="poll", interval=POLL_MS),
            html.Div(
                [
                    html.B("traceanalyzer", style={"marginRight": "12px"}),
                    html.Div(
                        dcc.Dropdown(id="trace", clearable=False, placeholder="loading…"),
                        style={"width": "420px", "display": "inline-block", "verticalAlign": "middle"},
                    ),
                    html.Span([" ", *_spaced(nav)], style={"marginLeft": "12px"}),
                ]
            ),
            open_panel,
            html.Div(id="load-status", className="status"),
            dcc.Loading(html.Div(id="page"), delay_show=pages.LOADING_DELAY_MS),
        ],
        style=_STYLE,
    )


def _spaced(items: list) -> list:
    out: list = []
    for item in items:
        out += [item, " · "]
    return out[:-1]


def _loading_callbacks(app: dash.Dash, store: Store) -> None:
    @app.callback(
        Output("open-msg", "children"),
        Output("poll", "disabled", allow_duplicate=True),
        Input("open-btn", "n_clicks"),
        State("open-path", "value"),
        prevent_initial_call=True,
    )
    def open_path(clicks, path):
        if not clicks or not path:
            return no_update, no_update
        store.open([path.strip()])
        return f"opening {path.strip()} …", False

    @app.callback(
        Output("open-msg", "children", allow_duplicate=True),
        Output("poll", "disabled", allow_duplicate=True),
        Input("upload", "contents"),
        State("upload", "filename"),
        prevent_initial_call=True,
    )
    def upload(contents, filename):
        try:
            path = save_upload(contents, filename)
        except ValueError as e:
            return f"upload refused: {e}", no_update
        store.open([str(path)], label=f"{Path(path).name} (uploaded)")
        return f"opening uploaded {Path(path).name} …", False

    @app.callback(
        Output("load-status", "children"),
        Output("trace", "options"),
        Output("trace", "value"),
        Output("poll", "disabled"),
        Input("poll", "n_intervals"),
        State("trace", "options"),
        State("trace", "value"),
    )
    def poll(_n, options, value):
        idle = not store.busy()  # asked first: once idle, the lists below are final, so polling can stop
        ready = [{"label": j.label, "value": j.key} for j in store.ready()]
        status = [_status_line(j) for j in store.jobs() if j.state != "ready"]
        if ready == (options or []):
            return status, no_update, no_update, idle
        return status, ready, value if value else ready[0]["value"], idle


def _status_line(job) -> html.Div:
    if job.state == "error":
        return html.Div(f"could not open {job.label}: {job.message}", className="error")
    return html.Div(f"loading {job.label}: {job.message} … {job.elapsed_s():.1f} s", className="progress")


def save_upload(contents: str | None, filename: str | None) -> Path:
    """Write an uploaded file (a data URL) to a private temp folder; refuse empty or oversized ones."""
    if not contents or "," not in contents:
        raise ValueError("empty upload")
    try:
        data = base64.b64decode(contents.split(",", 1)[1], validate=True)
    except (binascii.Error, ValueError) as e:
        raise ValueError("the upload is not valid base64") from e
    if len(data) > UPLOAD_LIMIT_BYTES:
        raise ValueError(f"{len(data):,} bytes is over the {UPLOAD_LIMIT_BYTES:,}-byte limit")
    name = _SAFE_NAME.sub("_", Path(filename or "upload.json").name) or "upload.json"
    path = Path(tempfile.mkdtemp(prefix="traceanalyzer-upload-")) / name
    path.write_bytes(data)
    return path


def _page_callbacks(app: dash.Dash, store: Store) -> None:
    def views():
        return [j.view for j in store.ready()]

    @app.callback(Output("page", "children"), Input("url", "pathname"), Input("trace", "value"))
    def page(path, key):
        return pages.render(path or "/", views(), store.view(key))

    @app.callback(
        *[Output("hs-table", prop) for prop in tables.CONTENT],
        Output("hs-table", "page_current"),
        Output("hs-bars", "figure"),
        Output("hs-kind", "disabled"),
        Input("hs-level", "value"),
        Input("hs-step", "value"),
        Input("hs-rank", "value"),
        Input("hs-kind", "value"),
        State("trace", "value"),
        prevent_initial_call=True,
    )
    def hotspot_table(level, step, rank, kind, key):
        view = store.view(key)
        if view is None:
            return (no_update,) * (len(tables.CONTENT) + 3)
        table = pages.hotspot_table(view, level, step, rank, kind)
        content = tables.content(table)
        first_page, bars = 0, figures.hotspot_bars(table)
        return *(content[prop] for prop in tables.CONTENT), first_page, bars, level != Level.KERNEL.value

    @app.callback(
        Output("hs-details", "children"),
        Input("hs-table", "active_cell"),
        Input("hs-bars", "clickData"),
        State("hs-table", "derived_viewport_data"),
        State("hs-level", "value"),
        State("trace", "value"),
        prevent_initial_call=True,
    )
    def hotspot_details(cell, click, rows, level, key):
        view = store.view(key)
        name = _selected_name(cell, click, rows)
        if view is None or name is None:
            return no_update
        if level not in pages.DETAIL_LEVELS:
            return html.P(f"{name}: pick the kernel, cpu_op or op_device level to see kernels, shapes and stacks.")
        return pages.details(view.details(level, name))

    def draw_timeline(key, rank, step, window: tuple[int, int] | None = None):
        view = store.view(key)
        if view is None or rank is None or step is None:
            return no_update, no_update
        seg = view.segments(int(rank), int(step), window)
        merged = int(seg["count"].sum()) if len(seg) else 0
        note = f"{merged:,} events drawn as {len(seg):,} segments (near-adjacent ones of one lane and colour merged"
        note += "; zoom in to split them)." if merged > len(seg) else ")."
        return figures.gantt(seg, (rank, step)), note

    @app.callback(
        Output("tl-graph", "figure"),
        Output("tl-note", "children"),
        Input("tl-rank", "value"),
        Input("tl-step", "value"),
        State("trace", "value"),
    )
    def timeline(rank, step, key):
        return draw_timeline(key, rank, step)

    # Zooms are a callback of their own: the graph's first relayout event (autosize) must not supersede the
    # request that draws the step.
    @app.callback(
        Output("tl-graph", "figure", allow_duplicate=True),
        Output("tl-note", "children", allow_duplicate=True),
        Input("tl-graph", "relayoutData"),
        State("tl-rank", "value"),
        State("tl-step", "value"),
        State("trace", "value"),
        prevent_initial_call=True,
    )
    def timeline_zoom(relayout, rank, step, key):
        window = zoom_window(relayout)
        if window is None and not _reset(relayout):
            return no_update, no_update
        return draw_timeline(key, rank, step, window)

    @app.callback(Output("cmp-body", "children"), Input("cmp-a", "value"), Input("cmp-b", "value"))
    def compare(a, b):
        loaded = views()
        if a is None or b is None or max(a, b) >= len(loaded):
            return html.P("Pick two loaded traces.")
        return pages.comparison(loaded[a], loaded[b])


def _selected_name(cell, click, rows) -> str | None:
    """The name the user picked: the clicked table row, or the clicked bar."""
    trigger = dash.ctx.triggered_id
    if trigger == "hs-table" and cell and rows and cell["row"] < len(rows):
        return rows[cell["row"]]["name"]
    if trigger == "hs-bars" and click:
        return click["points"][0].get("customdata")
    return None


def zoom_window(relayout: dict | None) -> tuple[int, int] | None:
    """The x range (ns) a zoom on the timeline asked for, or None when it was not a zoom."""
    if not relayout or "xaxis.range[0]" not in relayout:
        return None
    lo, hi = (relayout[f"xaxis.range[{i}]"] for i in (0, 1))
    return int(float(lo) * NS_PER_MS), int(float(hi) * NS_PER_MS)


def _reset(relayout: dict | None) -> bool:
    return bool(relayout) and relayout.get("xaxis.autorange") is True
