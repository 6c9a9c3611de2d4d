"""Lay a report out as a sequence of blocks (headings, facts, tables, numbered items) that text and Markdown share.

Every number is shown in its declared unit; facts and tables say whether they are per step or totals.
"""

from __future__ import annotations

import os
from collections import defaultdict
from dataclasses import dataclass, field
from numbers import Number

import pandas as pd

from traceanalyzer import humanize
from traceanalyzer.findings import Finding
from traceanalyzer.report import Report
from traceanalyzer.section import Fact, Per, Section, Table, Unit, column_unit

NAME_WIDTH = 70
"""Longest name Markdown tables show (cut in the middle, distinct names kept distinct)."""
COMPACT_ROWS = 8
"""Rows of each table the compact report shows (``--full``: all)."""
PER_SUFFIX = {Per.STEP: " (per step)", Per.TOTAL: " (total)", Per.NONE: ""}


@dataclass(frozen=True)
class Display:
    """How a report is shown: width in columns, colour, full names (``wide``), every row of every table (``full``)."""

    width: int = 100
    color: bool = False
    wide: bool = False
    full: bool = False


@dataclass
class Block:
    """A heading (level 1/2), a list of facts, a table, or a numbered list of items (a headline and its text)."""

    kind: str
    title: str = ""
    level: int = 2
    facts: list[tuple[str, str]] = field(default_factory=list)
    headers: list[str] = field(default_factory=list)
    rows: list[list[str]] = field(default_factory=list)
    items: list[tuple[str, list[str]]] = field(default_factory=list)
    more: int = 0
    severities: list[str] = field(default_factory=list)
    numeric: list[bool] = field(default_factory=list)
    """Per table column, whether its unit is a number's (drawn right-aligned and never cut)."""


def layout(report: Report, display: Display = Display(full=True)) -> list[Block]:  # noqa: B008 - frozen
    """All blocks of a report, in reading order: trace, ledger, summary, findings, then every other section; the
    compact display (not ``full``) keeps the first ``COMPACT_ROWS`` rows of each table and says how many it left."""
    blocks = [Block("heading", "traceanalyzer report", level=1)]
    blocks += _trace(report.trace)
    first = [s for s in report.sections if s.id in ("ledger", "summary")]
    rest = [s for s in report.sections if s.id not in ("ledger", "summary")]
    origin = int(report.trace["start_ns"])
    for section in first:
        blocks += section_blocks(section, origin)
    blocks += _findings(report.findings)
    for section in rest:
        blocks += section_blocks(section, origin)
    return blocks if display.full else [_compact(b) for b in blocks]


def _compact(b: Block) -> Block:
    if b.kind != "table" or len(b.rows) <= COMPACT_ROWS:
        return b
    return Block(
        "table",
        b.title,
        headers=b.headers,
        rows=b.rows[:COMPACT_ROWS],
        more=len(b.rows) - COMPACT_ROWS,
        numeric=b.numeric,
    )


def _trace(t: dict) -> list[Block]:
    devices = ", ".join(sorted({d["name"] for d in t["devices"] if d["name"]})) or "–"
    facts = [
        ("file", "; ".join(t["paths"])),
        ("platform", f"{t['platform']} ({t['source_format']} {t['format_version']})".strip()),
        ("devices", devices),
        ("events", f"{t['events']:,} (+{t['memory_events']:,} memory)"),
    ]
    facts += [("warning", w) for w in t["warnings"]]
    return [Block("heading", "Trace"), Block("facts", facts=facts)]


def section_blocks(section: Section, origin: int) -> list[Block]:
    """A section's heading, its facts and its non-empty tables (instants shown from ``origin``, ns: the trace's
    start)."""
    blocks = [Block("heading", section.title)]
    if section.facts:
        blocks.append(Block("facts", facts=[(f.title + PER_SUFFIX[f.per], fact_value(f)) for f in section.facts]))
    blocks += [frame_table(t, origin) for t in section.tables if len(t.frame)]
    return blocks


def fact_value(fact: Fact) -> str:
    """A fact's value in its unit, marked when estimated."""
    text = cell(fact.value, fact.unit)
    return text + " (estimated)" if fact.estimated else text


def frame_table(t: Table, origin: int) -> Block:
    """A table block of a section's table, cells in their columns' units (instants as the time since ``origin``,
    ns, their header saying so)."""
    columns = [str(c) for c in t.frame.columns]
    units = [t.unit(c) for c in columns]
    body = [[cell(v, u, origin) for v, u in zip(row, units, strict=True)] for row in t.frame.itertuples(index=False)]
    title = t.title + PER_SUFFIX[t.per] + (f" — {t.note}" if t.note else "")
    headers = [header(c, u) for c, u in zip(columns, units, strict=True)]
    return Block("table", title, headers=headers, rows=body, numeric=[numeric(u) for u in units])


def numeric(unit: Unit) -> bool:
    """Whether a column of this unit holds numbers: every presenter aligns those right and never cuts them."""
    return unit is not Unit.TEXT


def header(column: str, unit: Unit) -> str:
    """A column's header: its label, and for an instant what it counts from."""
    return humanize.label(column) + (f" ({INSTANT_FROM})" if unit is Unit.INSTANT else "")


INSTANT_FROM = "from trace start"
"""What the text, Markdown and HTML reports show an instant as: the time since the trace's first event."""


def cell(value: object, unit: Unit, origin: int = 0) -> str:
    """One value in its unit, as short text ('–' for none: None, NaN or pandas' NA); an instant as the time since
    ``origin`` (ns)."""
    if value is None or value is pd.NA or (isinstance(value, float) and value != value):
        return "–"
    if not isinstance(value, Number) or isinstance(value, bool) or unit is Unit.TEXT:
        return str(value)
    if unit is Unit.ID:
        return str(int(value)) if float(value).is_integer() else str(value)
    if unit is Unit.NS:
        return humanize.duration(value)
    if unit is Unit.INSTANT:
        return humanize.duration(int(value) - origin)
    if unit in (Unit.BYTES, Unit.BYTES_PER_STEP):
        return humanize.size(value) + ("/step" if unit is Unit.BYTES_PER_STEP else "")
    if unit is Unit.SHARE:
        return humanize.share(value)
    if unit in (Unit.TFLOPS, Unit.GBPS):
        return f"{float(value):,.1f} {unit.value}"
    return humanize.value("", value)


def _findings(findings: list[Finding]) -> list[Block]:
    if not findings:
        return [Block("heading", "Findings"), Block("facts", facts=[("", "no findings")])]
    items = [(f"[{f.severity.value}] {f.title}", finding_lines(f)) for f in findings]
    severities = [f.severity.value for f in findings]
    return [
        Block("heading", "Findings (by estimated saving per step)"),
        Block("list", items=items, severities=severities),
    ]


def finding_lines(f: Finding) -> list[str]:
    """What a finding is worth per step and on what basis (``Finding.worth``), and its advice."""
    return [f.worth(), f.advice]


def table(title: str, rows: list[dict], columns: list[str]) -> Block:
    """A table block of plain rows, each column in the unit its key says (``*_ns`` times, ``*share`` %,
    ``*bytes``; text where a value is not a number), formatted as a section's table is."""
    columns = [c for c in columns if any(c in r for r in rows)]
    units = [_plain_unit(c, [r.get(c) for r in rows]) for c in columns]
    body = [[cell(r.get(c), u) for c, u in zip(columns, units, strict=True)] for r in rows]
    headers = [humanize.label(c) for c in columns]
    return Block("table", title, headers=headers, rows=body, numeric=[numeric(u) for u in units])


def _plain_unit(column: str, values: list[object]) -> Unit:
    """The unit of a column of plain values: text if any is not a number, else what its name says."""
    if any(v is not None and (isinstance(v, bool) or not isinstance(v, Number)) for v in values):
        return Unit.TEXT
    return column_unit(column)


def shorten_columns(rows: list[list[str]], limits: list[int]) -> list[list[str]]:
    """Rows with each column's cells cut in the middle to its limit, distinct cells kept distinct."""
    columns = [shorten(list(col), limit) for col, limit in zip(zip(*rows, strict=True), limits, strict=True)]
    return [list(r) for r in zip(*columns, strict=True)] if rows else []


def shorten(cells: list[str], limit: int) -> list[str]:
    """Cells cut in the middle to ``limit`` (their start and end tell names apart); cells whose cuts look alike
    show where they differ instead, and any still alike are shown whole."""
    short = [middle(c, limit) for c in cells]
    alike = _alike(cells, short)
    short = [
        _around_difference(c, alike[s] - {c}, limit) if len(alike[s]) > 1 else s
        for c, s in zip(cells, short, strict=True)
    ]
    alike = _alike(cells, short)
    return [s if len(alike[s]) == 1 else c for c, s in zip(cells, short, strict=True)]


def _alike(cells: list[str], short: list[str]) -> dict[str, set[str]]:
    owners: dict[str, set[str]] = defaultdict(set)
    for full, cut in zip(cells, short, strict=True):
        owners[cut].add(full)
    return owners


def _around_difference(name: str, others: set[str], limit: int) -> str:
    """name as its start, the stretch where it first differs from ``others``, and its end, in ``limit`` chars."""
    at = max(len(os.path.commonprefix([name, other])) for other in others)
    end = limit // 5
    head = limit // 5
    window = limit - head - end - 2
    start = min(max(head, at - window // 2), max(head, len(name) - end - window))
    if start <= head + 1 or len(name) <= limit:
        return middle(name, limit)
    return f"{name[:head]}…{name[start : start + window]}…{name[len(name) - end :]}"


def middle(text: str, limit: int) -> str:
    """text with its middle cut to fit ``limit`` characters, three fifths of them kept from the start."""
    if len(text) <= limit:
        return text
    head = (limit - 1) * 3 // 5
    return f"{text[:head]}…{text[len(text) - (limit - 1 - head) :]}"
