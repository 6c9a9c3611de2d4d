"""The Hotspots page: filters (from the URL), the hotspot table and chart drawn for them, and the picked op's or
kernel's details; its callbacks redraw them for the filters and the pick and write both to the URL (see state)."""

from __future__ import annotations

import dash
import pandas as pd
from dash import Input, Output, State, dcc, html, no_update
from traceanalyzer.dashboards import charts, state, tables
from traceanalyzer.dashboards.blocks import LOADING_DELAY_MS, dropdown, evidence_note, no_such
from traceanalyzer.dashboards.names import shortened
from traceanalyzer.dashboards.state import ALL
from traceanalyzer.dashboards.store import Store
from traceanalyzer.dashboards.views import View

from traceanalyzer import humanize
from traceanalyzer.analyzers.hotspots import Level

TITLE = "Hotspots"
DETAIL_LEVELS = (Level.KERNEL.value, Level.CPU_OP.value, Level.OP_DEVICE.value)
"""Hotspot levels whose rows name an op or kernel (they have kernels, shapes and a call stack)."""
PICK_HINT = "Click a name in the table or a bar in the chart: its kernels, CPU ops, shapes and call stack show here."
HOTSPOT_ROWS = 20


def layout(view: View, query: dict[str, str]) -> list:
    """Filters (from the URL), the hotspot table and chart drawn for them, and the selected op's details."""
    levels = [lv.value for lv in Level]
    wrong = no_such(query, {"step": [ALL, *view.steps()], "rank": [ALL, *view.ranks()], "level": levels})
    if wrong:
        return wrong
    picks = {
        "level": state.choice(query, "level", levels, HOTSPOT_DEFAULTS["level"]),
        "step": state.choice(query, "step", [ALL, *view.steps()], ALL),
        "rank": state.choice(query, "rank", [ALL, *view.ranks()], ALL),
        "kind": state.choice(query, "kind", [ALL, *view.kinds()], ALL),
    }
    table = hotspot_table(view, **picks)
    kernel_only = picks["level"] != Level.KERNEL.value
    key = state.evidence(query)
    content = hotspot_content(table, picks["level"])
    content = tables.marked(content, tables.matching_rows(table, key or {}), HOTSPOT_ROWS)
    grid = tables.grid("hs-table", content, page_size=HOTSPOT_ROWS)
    return [
        html.Div(
            [
                dropdown("hs-level", levels, picks["level"], "level"),
                dropdown("hs-step", [ALL, *view.steps()], picks["step"], "step"),
                dropdown("hs-rank", [ALL, *view.ranks()], picks["rank"], "rank"),
                dropdown("hs-kind", [ALL, *view.kinds()], picks["kind"], "kind (kernel level)", kernel_only),
                html.Span(f"platform: {view.trace.meta.platform.value}", className="platform"),
            ],
            className="controls",
        ),
        html.P(HOTSPOT_BASIS, className="note"),
        *evidence_note(key),
        dcc.Loading(grid, delay_show=LOADING_DELAY_MS),
        html.Div(
            [
                html.Div(dcc.Graph(id="hs-bars", figure=charts.hotspot_bars(table)), className="col-wide"),
                html.Div(
                    [
                        html.H3("Selected"),
                        dcc.Store(id="hs-selected", data=query.get("sel")),
                        dcc.Loading(html.Div(id="hs-details", children=_picked(view, picks, query.get("sel")))),
                    ],
                    className="col-narrow",
                ),
            ],
            className="row",
        ),
    ]


def _picked(view: View, picks: dict, name: str | None) -> list:
    """The details of the name the URL picked (the hint when none)."""
    if not name:
        return [html.P(PICK_HINT)]
    return selection(view, picks["level"], name, picks["step"], picks["rank"])


HOTSPOT_BASIS = (
    "Times are totals over the steps and ranks picked (all: the whole recorded window); share is of the table's "
    "total, cumulative share down the ranking."
)
HOTSPOT_NAME_WIDTH = "350px"
HOTSPOT_FIRST = ("name", "kind", "total_ns", "share", "cum_share")
"""Hotspot columns shown first, so share and cumulative share sit beside the total at any width."""
HOTSPOT_HEADERS = {
    Level.CPU_OP.value: {
        "total_ns": "self time (ms)",
        "inclusive_ns": "inclusive time (ms)",
        "device_self_ns": "device time launched (ms)",
    },
    Level.OP_DEVICE.value: {"total_ns": "device time (ms)"},
}
"""Headers that say which time a level's total is (a CPU op's total is its self host time)."""


def hotspot_content(table: pd.DataFrame, level: str) -> dict:
    """The hotspot grid's props: names cut in the middle (full name on hover and in each row's full_name), share
    and cumulative share beside the total."""
    columns = [c for c in HOTSPOT_FIRST if c in table] + [c for c in table if c not in HOTSPOT_FIRST]
    full = [str(n) for n in table["name"]] if len(table) else []
    shown = table.assign(name=shortened(full)) if len(table) else table
    content = tables.content(shown, columns)
    headers = HOTSPOT_HEADERS.get(level, {})
    content["style_cell_conditional"] = [  # the short names whole: 48 characters of monospace
        {**c, "maxWidth": HOTSPOT_NAME_WIDTH} if c["if"]["column_id"] == "name" else c
        for c in content["style_cell_conditional"]
    ]
    content["columns"] = [{**c, "name": headers.get(c["id"], c["name"])} for c in content["columns"]]
    for row, tip, name in zip(content["data"], content["tooltip_data"], full, strict=True):
        tip.pop("name", None)
        if row["name"] != name:  # cut: the row keeps its full name for a click, the tooltip shows it
            row["full_name"] = tip["name"] = name
    return content


HOTSPOT_DEFAULTS = {"level": Level.KERNEL.value, "step": ALL, "rank": ALL, "kind": ALL}


def hotspot_picks_changed(query: dict[str, str], picks: dict[str, object]) -> bool:
    """Whether the filters differ from those the URL holds (the user changed one since the page opened)."""
    return any(str(v) != query.get(k, HOTSPOT_DEFAULTS[k]) for k, v in picks.items())


def hotspot_filter(value: object) -> object:
    """A dropdown value as an analyzer argument (``all`` → None)."""
    return None if value in (None, ALL) else value


def hotspot_table(view: View, level: str, step: object = ALL, rank: object = ALL, kind: object = ALL) -> pd.DataFrame:
    """The hotspot table for the pickers' values (the kind filter applies at the kernel level only)."""
    kind = hotspot_filter(kind) if level == Level.KERNEL.value else None
    return view.hotspots(level, hotspot_filter(step), hotspot_filter(rank), kind)


def selection(view: View, level: str, name: str, step: object, rank: object) -> list:
    """The details of a picked name for the step and rank picked, or why there are none."""
    if level not in DETAIL_LEVELS:
        return [html.P(f"{name}: pick the kernel, cpu_op or op_device level to see kernels, shapes and stacks.")]
    where = ", ".join(f"{k} {v}" for k, v in (("step", step), ("rank", rank)) if v not in (None, ALL)) or "all steps"
    info = view.details(level, name, hotspot_filter(step), hotspot_filter(rank))
    if not info["kernels"] and not info["ops"]:
        return [html.H4(name, id="selected-name"), html.P(f"Nothing of this name in {where}.", id="selected-none")]
    return [html.P(f"in {where} (times are totals there)", className="note"), *details(info)]


def details(info: dict) -> list:
    """A selected op or kernel: the kernels it runs, the ops that launch it, its shapes and call stack."""
    stack = [html.Li(f"[{f['kind']}] {f['name']} ({humanize.duration(f['dur_ns'])})") for f in info["stack"]]
    return [
        html.H4(info["name"], id="selected-name"),
        html.Div(
            [
                html.Div(
                    [html.H5("Kernels"), tables.table("det-kernels", info["kernels"], page_size=10)], className="col"
                ),
                html.Div([html.H5("CPU ops"), tables.table("det-ops", info["ops"], page_size=10)], className="col"),
            ],
            className="row",
        ),
        html.H5("Input shapes"),
        tables.table("det-shapes", info["shapes"], page_size=10) if info["shapes"] else html.P("no shapes recorded"),
        html.H5("Call stack of the longest instance (outermost first)"),
        html.Ol(stack, id="det-stack") if stack else html.P("no host frames linked"),
    ]


def register(app: dash.Dash, store: Store) -> None:
    """Add the page's callbacks to app: the table and chart for the filters, the picked name's details."""
    _hotspots(app, store)
    _hotspot_selection(app, store)


def _hotspots(app: dash.Dash, store: Store) -> None:
    """The hotspot table and chart for the filters (written to the URL), and the kind filter's state."""

    @app.callback(
        *[Output("hs-table", prop) for prop in tables.CONTENT],
        Output("hs-table", "page_current"),
        Output("hs-table", "filter_query"),
        Output("hs-table", "sort_by"),
        Output("hs-table", "active_cell"),
        Output("hs-bars", "figure"),
        state.URL,
        Input("hs-level", "value"),
        Input("hs-step", "value"),
        Input("hs-rank", "value"),
        Input("hs-kind", "value"),
        State("trace", "value"),
        State("url", "search"),
        prevent_initial_call=True,
    )
    def redrawn(level, step, rank, kind, key, search):
        view = store.view(key)
        if view is None:
            return (no_update,) * (len(tables.CONTENT) + 6)
        table = hotspot_table(view, level, step, rank, kind)
        picks = {"level": level, "step": step, "rank": rank, "kind": kind}
        query = state.parse(search)
        # a finding's evidence rows stay highlighted until the user changes a filter
        key = None if hotspot_picks_changed(query, picks) else state.evidence(query)
        content = hotspot_content(table, level)
        content = tables.marked(content, tables.matching_rows(table, key or {}), HOTSPOT_ROWS)
        # a name filter or sort of one level means nothing at another: they reset when the level changes
        level_changed = _level_changed(level, query)
        reset = ("", []) if level_changed else (no_update, no_update)
        sel = None if level_changed else query.get("sel")  # a picked name belongs to its level
        url = state.recorded(search, HOTSPOT_DEFAULTS, **picks, row=query.get("row") if key else None, sel=sel)
        bars = charts.hotspot_bars(table)
        page = content.get("page_current", 0)
        return *(content[p] for p in tables.CONTENT), page, *reset, None, bars, url

    @app.callback(
        Output("hs-kind", "value"),
        Output("hs-kind", "disabled"),
        Input("hs-level", "value"),
        State("hs-kind", "value"),
        prevent_initial_call=True,
    )
    def kind_filter(level, kind):
        """The kind filter applies at the kernel level only: elsewhere it is off and shows all."""
        kernel = level == Level.KERNEL.value
        return (kind if kernel else ALL), not kernel


def _hotspot_selection(app: dash.Dash, store: Store) -> None:
    """The picked row or bar's details, following the step and rank filters."""

    @app.callback(
        Output("hs-details", "children"),
        Output("hs-selected", "data"),
        state.URL,
        Input("hs-table", "active_cell"),
        Input("hs-bars", "clickData"),
        Input("hs-step", "value"),
        Input("hs-rank", "value"),
        Input("hs-level", "value"),
        State("hs-table", "derived_viewport_data"),
        State("hs-selected", "data"),
        State("trace", "value"),
        State("url", "search"),
        prevent_initial_call=True,
    )
    def hotspot_details(cell, click, step, rank, level, rows, selected, key, search):
        view = store.view(key)
        if view is None:
            return no_update, no_update, no_update
        if _level_changed(level, state.parse(search)):
            return html.P(PICK_HINT), None, no_update  # the picked name belongs to the other level
        picked = _selected_name(cell, click, rows)
        name = picked or selected
        if name is None:
            return html.P(PICK_HINT), None, no_update
        # only a click records the name: a filter's change is recorded by the table's callback
        url = state.record(state.updated(search, sel=name)) if picked else no_update
        return selection(view, level, name, step, rank), name, url


def _level_changed(level: str, query: dict[str, str]) -> bool:
    """Whether the user picked another level than the URL's (not the page drawn again for it, as after Back)."""
    return str(level) != query.get("level", HOTSPOT_DEFAULTS["level"])


def _selected_name(cell, click, rows) -> str | None:
    """The name the user picked: the clicked table row, or the clicked bar."""
    trigger = dash.ctx.triggered_id
    if trigger == "hs-table" and cell and rows and cell["row"] < len(rows):
        row = rows[cell["row"]]
        return row.get("full_name", row["name"])
    if trigger == "hs-bars" and click:
        return click["points"][0].get("customdata")
    return None
