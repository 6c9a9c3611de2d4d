"""The pages' interactions: hotspot filters and selection, timeline picks and zoom, the compare pickers. Each one
that changes what the user picked writes it to the URL's query string (see state)."""

from __future__ import annotations

import dash
from dash import Input, Output, State, html, no_update
from traceanalyzer.dashboards import charts, pages, state, tables, timeline_page
from traceanalyzer.dashboards.store import Store

from traceanalyzer.analyzers.hotspots import Level


def register(app: dash.Dash, store: Store) -> None:
    """Add the page callbacks to app."""
    _hotspots(app, store)
    _hotspot_selection(app, store)
    timeline_page.register(app, store)
    _compare(app, store)


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
    def hotspot_table(level, step, rank, kind, key, search):
        view = store.view(key)
        if view is None:
            return (no_update,) * (len(tables.CONTENT) + 6)
        table = pages.hotspot_table(view, level, step, rank, kind)
        picks = {"level": level, "step": step, "rank": rank, "kind": kind}
        query = state.parse(search)
        # a finding's evidence rows stay highlighted until the user changes a filter
        key = None if pages.hotspot_picks_changed(query, picks) else state.evidence(query)
        content = pages.hotspot_content(table, level)
        content = tables.marked(content, tables.matching_rows(table, key or {}), pages.HOTSPOT_ROWS)
        # a name filter or sort of one level means nothing at another: they reset when the level changes
        level_changed = _level_changed(level, query)
        reset = ("", []) if level_changed else (no_update, no_update)
        sel = None if level_changed else query.get("sel")  # a picked name belongs to its level
        url = state.recorded(search, pages.HOTSPOT_DEFAULTS, **picks, row=query.get("row") if key else None, sel=sel)
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
        return (kind if kernel else pages.ALL), not kernel


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
            return html.P(pages.PICK_HINT), None, no_update  # the picked name belongs to the other level
        picked = _selected_name(cell, click, rows)
        name = picked or selected
        if name is None:
            return html.P(pages.PICK_HINT), None, no_update
        # only a click records the name: a filter's change is recorded by the table's callback
        url = state.record(state.updated(search, sel=name)) if picked else no_update
        return pages.selection(view, level, name, step, rank), name, url


def _level_changed(level: str, query: dict[str, str]) -> bool:
    """Whether the user picked another level than the URL's (not the page drawn again for it, as after Back)."""
    return str(level) != query.get("level", pages.HOTSPOT_DEFAULTS["level"])


def _selected_name(cell, click, rows) -> str | None:
    """The name the user picked: the clicked table row, or the clicked bar."""
    trigger = dash.ctx.triggered_id
    if trigger == "hs-table" and cell and rows and cell["row"] < len(rows):
        row = rows[cell["row"]]
        return row.get("full_name", row["name"])
    if trigger == "hs-bars" and click:
        return click["points"][0].get("customdata")
    return None


def _compare(app: dash.Dash, store: Store) -> None:
    """The comparison of the two picked traces and the gate's verdict for the threshold (written to the URL)."""

    @app.callback(
        Output("cmp-body", "children"),
        state.URL,
        Input("cmp-a", "value"),
        Input("cmp-b", "value"),
        Input("cmp-pct", "value"),
        Input("cmp-ms", "value"),
        State("url", "search"),
        State("trace", "value"),
        prevent_initial_call="initial_duplicate",  # compares when the page opens
    )
    def compare(left, right, pct, ms, search, key):
        search = state.recorded(search, {"left": key}, left=left, right=right, pct=pct, ms=ms)
        diff = store.comparison(left, right)
        if diff is None:
            return html.P(pages.COMPARE_HINT, id="cmp-hint"), search
        return pages.comparison(store.view(left), store.view(right), diff, pages.threshold(pct, ms)), search
