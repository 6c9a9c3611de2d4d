"""Pieces every page uses: a notice for a missing analysis, a facts list, and one analysis table with its basis."""

from __future__ import annotations

import pandas as pd
from dash import html
from traceanalyzer.dashboards import tables

from traceanalyzer import humanize


def unavailable(what: str, reason: str) -> html.Div:
    """The notice a page shows when an analysis has nothing for this trace."""
    return html.Div(
        [html.B(f"{what}: not available for this trace."), html.Span(f" ({reason})" if reason else "")],
        className="unavailable",
    )


def facts_list(pairs: dict | list, list_id: str | None = None) -> html.Dl:
    """Facts as a definition list: a section's facts (a list of {id, title, value, unit, per} records, or a plain
    {key: value} mapping formatted by the key's suffix)."""
    return labelled(tables.facts(pairs) if isinstance(pairs, dict) else [_fact(f) for f in pairs], list_id)


def labelled(pairs: list[tuple[str, str]], list_id: str | None = None) -> html.Dl:
    """Label/text pairs as a definition list."""
    items = []
    for label, text in pairs:
        items += [html.Dt(label), html.Dd(text)]
    return html.Dl(items, id=list_id or "", className="facts")


PER = {"step": "per step", "total": "total"}


def _fact(fact: dict) -> tuple[str, str]:
    """A section fact's label (with per step or total) and its value in its unit."""
    basis = PER.get(fact.get("per", ""), "")
    label = f"{fact['title']} ({basis})" if basis else fact["title"]
    return label, humanize.value(_UNIT_KEYS.get(fact.get("unit", ""), fact["id"]), fact["value"])


_UNIT_KEYS = {"ns": "value_ns", "share": "value_share", "bytes": "value_bytes"}
"""A fact's unit as the key suffix units.value formats by."""


def analysis(block_id: str, title: str, basis: str, data: object, empty: str, page_size: int = 10) -> html.Section:
    """One analysis table under its title, with what its numbers are (per step or total, unit), or why it is empty."""
    if isinstance(data, pd.DataFrame) and len(data):
        body = tables.table(f"{block_id}-table", data, page_size=page_size)
    else:
        body = html.P(empty, className="empty")
    return html.Section([html.H3(title), html.P(basis, className="note"), body], id=block_id, className="analysis")
