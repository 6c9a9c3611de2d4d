"""Pieces every page uses: a notice for a missing analysis, a facts list, and one analysis table with its basis."""

from __future__ import annotations

import pandas as pd
from dash import html
from traceanalyzer.dashboards import tables


def unavailable(what: str, reason: str) -> html.Div:
    """The notice a page shows when an analysis has nothing for this trace."""
    return html.Div(
        [html.B(f"{what}: not available for this trace."), html.Span(f" ({reason})" if reason else "")],
        className="unavailable",
    )


def facts_list(pairs: dict, list_id: str | None = None) -> html.Dl:
    """Facts as a definition list."""
    items = []
    for key, value in tables.facts(pairs):
        items += [html.Dt(key), html.Dd(value)]
    return html.Dl(items, id=list_id or "", className="facts")


def analysis(block_id: str, title: str, basis: str, data: object, empty: str, page_size: int = 10) -> html.Section:
    """One analysis table under its title, with what its numbers are (per step or total, unit), or why it is empty."""
    if isinstance(data, pd.DataFrame) and len(data):
        body = tables.table(f"{block_id}-table", data, page_size=page_size)
    else:
        body = html.P(empty, className="empty")
    return html.Section([html.H3(title), html.P(basis, className="note"), body], id=block_id, className="analysis")
