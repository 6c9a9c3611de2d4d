"""Analyzer rows as sortable, filterable Dash tables: units chosen by the report's key-suffix conventions."""

from __future__ import annotations

import math
from collections.abc import Mapping
from numbers import Number

import pandas as pd
from dash import dash_table
from dash.dash_table.Format import Format, Scheme, Trim

from traceanalyzer import humanize
from traceanalyzer.schema import NO_ROW
from traceanalyzer.section import Table, Unit, column_unit

MS_PER_NS = 1e-6
MIB_PER_BYTE = 1 / (1 << 20)
TEXT_WIDTH = "220px"
BASIS = "_basis"
BASIS_WIDTH = "110px"
"""Columns named ``*_basis`` (how a figure was obtained: "measured (…)", "modelled (…)") are cut narrower: their
first word says which, the rest shows on hover."""
TIP_CHARS = 28
"""Text cells longer than this (about what TEXT_WIDTH shows) make their column a long-text one: cut to one line
of TEXT_WIDTH, the full text as a tooltip."""
LONG_TEXT = ("name", "where", "path", "stack", "module", "replacement", "detail", "input_dims", "advice", "title")
"""Columns always cut to one line (others are when a cell is longer than TIP_CHARS); the full text shows on hover."""
ID_COLUMNS = {"rank", "step", "late_rank", "device", "stream", "tid", "pid", "op", "launch", "correlation"}
"""Columns where NO_ROW (-1) means none: shown as what it means (NONE_TEXT) or an empty cell, never as -1."""
NONE_TEXT = {"step": "outside every step", "device": "host"}
"""What NO_ROW means in these columns (a memory pool of device -1 is the host's)."""


def _unit(unit: Unit) -> tuple[str, float, Format | None]:
    """Header suffix, scale and number format of a column in this unit."""
    if unit is Unit.NS:
        return " (ms)", MS_PER_NS, Format(precision=3, scheme=Scheme.fixed)
    if unit is Unit.INSTANT:  # on the trace's clock: whole ns, as the Timeline's ``at`` takes them
        return " (ns)", 1.0, Format(precision=0, scheme=Scheme.fixed)
    if unit is Unit.SHARE:
        return " (%)", 100.0, Format(precision=1, scheme=Scheme.fixed)
    if unit in (Unit.BYTES, Unit.BYTES_PER_STEP):
        return " (MiB" + ("/step)" if unit is Unit.BYTES_PER_STEP else ")"), MIB_PER_BYTE, FIXED2
    if unit in (Unit.TFLOPS, Unit.GBPS):
        return f" ({unit.value})", 1.0, FIXED2
    return "", 1.0, PLAIN


FIXED2 = Format(precision=2, scheme=Scheme.fixed)
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


def section_table(
    table_id: str,
    t: Table,
    columns: list[str] | None = None,
    page_size: int = 10,
    only: Mapping[str, object] | None = None,
    evidence: Mapping[str, object] | None = None,
    hidden: list[str] | None = None,
    links: list[str] | None = None,
):
    """A section's table as a DataTable, each column in the unit the section declares for it; optionally filtered
    to the rows holding only's values (a filter the user can edit in the header) and with a finding's evidence rows
    (those holding evidence's values) highlighted, the page of the first one open; the hidden columns are left
    out until the user shows them (the table's Toggle Columns button); links, one Markdown link (or text) per row,
    shown first as the ``timeline`` column."""
    columns = columns or [str(c) for c in t.frame.columns]
    props = content(t.frame, columns, {c: t.unit(c) for c in columns})
    if links is not None:
        props["columns"] = [{"name": "timeline", "id": LINK_COLUMN, "presentation": "markdown"}, *props["columns"]]
        for row, link in zip(props["data"], links, strict=True):
            row[LINK_COLUMN] = link
    only = {c: v for c, v in (only or {}).items() if v is not None and c in t.frame}
    shown = matching_rows(t.frame, only) if only else None
    query = " && ".join(f"{{{c}}} = {_text(v)}" for c, v in only.items())
    props = marked(props, matching_rows(t.frame, evidence or {}), page_size, shown)
    if hidden:
        props["columns"] = [{**c, "hideable": True} for c in props["columns"]]
        props["hidden_columns"] = [c for c in hidden if c in columns]
    return grid(table_id, {**props, "filter_query": query}, page_size)


LINK_COLUMN = "timeline"
"""The id of a section table's column of links to the Timeline (not a column of the section's)."""


def grid(table_id: str | dict, props: dict, page_size: int = 25) -> dash_table.DataTable:
    """A sortable, filterable DataTable of prepared content (see content), with an Export button that downloads
    its filtered, sorted rows (every page) as CSV under the headers shown."""
    return dash_table.DataTable(
        id=table_id,
        **props,
        markdown_options={"link_target": "_self", "html": False},  # a link column opens its page here
        export_format="csv",
        export_headers="display",
        tooltip_duration=None,
        sort_action="native",
        filter_action="native",
        page_action="native",
        page_size=page_size,
        style_table={"overflowX": "auto"},
        style_cell={"fontFamily": "monospace", "fontSize": "12px", "textAlign": "left", "padding": "2px 6px"},
        style_header={"fontWeight": "bold", "whiteSpace": "normal", "height": "auto"},  # headers wrap
    )


EVIDENCE = "evidence"
"""The data key (not a column) that marks a row as the evidence of the finding the user followed."""
EVIDENCE_STYLE = [{"if": {"filter_query": f"{{{EVIDENCE}}} = 1"}, "backgroundColor": "#fff3b0", "fontWeight": 600}]


def _text(value: object) -> str:
    """A value as text for comparing cells with a finding's ``where`` (1, 1.0 and '1' alike)."""
    if isinstance(value, Number) and not isinstance(value, bool) and float(value).is_integer():
        return str(int(value))
    return str(value)


def matching_rows(data: pd.DataFrame | list[dict], key: Mapping[str, object]) -> list[int]:
    """Positions of the rows holding key's values in the columns of data that key names (compared as text);
    none when key names no column."""
    rows = rows_of(data)
    columns = [c for c in key if rows and c in rows[0]]
    if not columns:
        return []
    wanted = {c: _text(key[c]) for c in columns}
    return [i for i, r in enumerate(rows) if all(_text(r.get(c)) == v for c, v in wanted.items())]


def marked(props: dict, rows: list[int], page_size: int, shown: list[int] | None = None) -> dict:
    """A table's content with rows (positions in its data) marked and highlighted as a finding's evidence, and the
    page of the first one open (counting only the shown rows where a filter hides some)."""
    if not rows:
        return props
    picked = set(rows)
    data = [{**r, EVIDENCE: 1} if i in picked else r for i, r in enumerate(props["data"])]
    order = list(range(len(data))) if shown is None else shown
    first = next((n for n, i in enumerate(order) if i in picked), 0)
    return {**props, "data": data, "style_data_conditional": EVIDENCE_STYLE, "page_current": first // page_size}


CONTENT = ("columns", "data", "tooltip_data", "style_cell_conditional")
"""The DataTable props that content() fills, in order (a callback can update a table in place with them)."""


def content(
    data: pd.DataFrame | list[dict], columns: list[str] | None = None, units: Mapping[str, Unit] | None = None
) -> dict:
    """A table's columns, cells, hover texts and long-text styles, keyed by DataTable prop (see CONTENT); a column's
    unit is the one given, else the one its name says."""
    rows = rows_of(data)
    columns = columns or (list(rows[0]) if rows else [])
    units = {c: (units or {}).get(c) or column_unit(c) for c in columns}
    long_text = [c for c in columns if c in LONG_TEXT or c.endswith(BASIS) or any(_long(r.get(c)) for r in rows)]
    return {
        "columns": [_column(c, rows, units[c]) for c in columns],
        "data": [{c: _cell(c, r.get(c), units[c]) for c in columns} for r in rows],
        "tooltip_data": [{c: str(r.get(c)) for c in long_text if _cut(c, r.get(c))} for r in rows]
        if long_text
        else None,
        "style_cell_conditional": [
            {
                "if": {"column_id": c},
                "maxWidth": BASIS_WIDTH if c.endswith(BASIS) else TEXT_WIDTH,
                "overflow": "hidden",
                "textOverflow": "ellipsis",
            }
            for c in long_text
        ],
    }


def _cut(column: str, value: object) -> bool:
    """Is this cell of a long-text column shown cut (so its full text goes in a tooltip)?"""
    return bool(str(value)) and (column.endswith(BASIS) or len(str(value)) > TIP_CHARS)


def _long(value: object) -> bool:
    """A text cell too long for its column to be shown whole."""
    return isinstance(value, str) and len(value) > TIP_CHARS


def _column(key: str, rows: list[dict], unit: Unit) -> dict:
    suffix, _, fmt = _unit(unit)
    numeric = any(isinstance(r.get(key), Number) and not isinstance(r.get(key), bool) for r in rows)
    col = {"name": humanize.label(key) + suffix, "id": key, "type": "numeric" if numeric else "text"}
    if numeric and fmt is not None:
        col["format"] = fmt
    return col


def _cell(key: str, value: object, unit: Unit) -> object:
    """A cell value: numbers scaled to the column unit, everything else as text (none: an empty cell, or in an id
    column what none means there)."""
    if value is None or value is pd.NA:
        return NONE_TEXT.get(key, "") if key in ID_COLUMNS else ""
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, Number):
        v = float(value)
        if math.isnan(v):
            return None
        if key in ID_COLUMNS and value == NO_ROW:
            return NONE_TEXT.get(key)
        return v * _unit(unit)[1]
    return str(value)


def facts(pairs: dict) -> list[tuple[str, str]]:
    """Key/value facts formatted for reading."""
    return [(humanize.label(k), humanize.value(k, v)) for k, v in pairs.items() if not isinstance(v, list | dict)]
