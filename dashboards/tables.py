"""Analyzer rows as sortable, filterable Dash tables: units chosen by the report's key-suffix conventions."""

from __future__ import annotations

import math
from numbers import Number

import pandas as pd
from dash import dash_table
from dash.dash_table.Format import Format, Scheme, Trim

from traceanalyzer import humanize
from traceanalyzer.schema import NO_ROW

MS_PER_NS = 1e-6
MIB_PER_BYTE = 1 / (1 << 20)
TEXT_WIDTH = "300px"
TIP_CHARS = 40
"""Long-text cells longer than this (about what TEXT_WIDTH shows) get their full text as a tooltip."""
LONG_TEXT = ("name", "where", "path", "stack", "module", "replacement", "detail", "input_dims", "advice", "title")
"""Columns cut to one line; the full text shows on hover."""
ID_COLUMNS = {"rank", "step", "late_rank", "device", "stream", "tid", "pid", "op", "launch", "correlation"}
"""Columns where NO_ROW (-1) means none: shown as an empty cell, never as -1."""


def _unit(key: str) -> tuple[str, float, Format | None]:
    """Header suffix, scale and number format for a column key (the renderers' conventions)."""
    if key.endswith("_ns") or key.endswith("_ns_per_step") or key.endswith("_ns_mean"):
        return " (ms)", MS_PER_NS, Format(precision=3, scheme=Scheme.fixed)
    if key.endswith("share") or key.endswith("_pct"):
        return " (%)", 100.0, Format(precision=1, scheme=Scheme.fixed)
    if key.endswith("bytes"):
        return " (MiB)", MIB_PER_BYTE, Format(precision=2, scheme=Scheme.fixed)
    return "", 1.0, PLAIN


PLAIN = Format(precision=2, scheme=Scheme.fixed, trim=Trim.yes)
"""Other numbers: at most two decimals, none for whole numbers (counts per step such as 87.33, 49)."""


def rows_of(data: pd.DataFrame | list[dict]) -> list[dict]:
    """Table rows as plain dicts."""
    if isinstance(data, pd.DataFrame):
        return data.to_dict(orient="records")
    return list(data)


def table(table_id: str | dict, data: pd.DataFrame | list[dict], columns: list[str] | None = None, page_size: int = 25):
    """A sortable, filterable DataTable; every cell is shown as text (never as HTML)."""
    return grid(table_id, content(data, columns), page_size)


def grid(table_id: str | dict, props: dict, page_size: int = 25) -> dash_table.DataTable:
    """A sortable, filterable DataTable of prepared content (see content)."""
    return dash_table.DataTable(
        id=table_id,
        **props,
        tooltip_duration=None,
        sort_action="native",
        filter_action="native",
        page_action="native",
        page_size=page_size,
        style_table={"overflowX": "auto"},
        style_cell={"fontFamily": "monospace", "fontSize": "12px", "textAlign": "left", "padding": "2px 6px"},
        style_header={"fontWeight": "bold"},
    )


CONTENT = ("columns", "data", "tooltip_data", "style_cell_conditional")
"""The DataTable props that content() fills, in order (a callback can update a table in place with them)."""


def content(data: pd.DataFrame | list[dict], columns: list[str] | None = None) -> dict:
    """A table's columns, cells, hover texts and long-text styles, keyed by DataTable prop (see CONTENT)."""
    rows = rows_of(data)
    columns = columns or (list(rows[0]) if rows else [])
    long_text = [c for c in columns if c in LONG_TEXT]
    return {
        "columns": [_column(c, rows) for c in columns],
        "data": [{c: _cell(c, r.get(c)) for c in columns} for r in rows],
        "tooltip_data": [{c: str(r[c]) for c in long_text if len(str(r.get(c))) > TIP_CHARS} for r in rows]
        if long_text
        else None,
        "style_cell_conditional": [
            {"if": {"column_id": c}, "maxWidth": TEXT_WIDTH, "overflow": "hidden", "textOverflow": "ellipsis"}
            for c in long_text
        ],
    }


def _column(key: str, rows: list[dict]) -> dict:
    suffix, _, fmt = _unit(key)
    numeric = any(isinstance(r.get(key), Number) and not isinstance(r.get(key), bool) for r in rows)
    col = {"name": humanize.label(key) + suffix, "id": key, "type": "numeric" if numeric else "text"}
    if numeric and fmt is not None:
        col["format"] = fmt
    return col


def _cell(key: str, value: object) -> object:
    """A cell value: numbers scaled to the column unit, everything else as text."""
    if isinstance(value, bool) or value is None:
        return "" if value is None else str(value)
    if isinstance(value, Number):
        v = float(value)
        if math.isnan(v) or (key in ID_COLUMNS and value == NO_ROW):
            return None
        return v * _unit(key)[1] if _unit(key)[2] is not None else value
    return str(value)


def facts(pairs: dict) -> list[tuple[str, str]]:
    """Key/value facts formatted for reading."""
    return [(humanize.label(k), humanize.value(k, v)) for k, v in pairs.items() if not isinstance(v, list | dict)]
