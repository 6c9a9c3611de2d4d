"""The report as aligned plain text for a terminal."""

from __future__ import annotations

import textwrap

from traceanalyzer.renderers.document import Block, layout
from traceanalyzer.report import Report

_RULE = {1: "=", 2: "-"}
WIDTH = 110
"""Where list items' text wraps."""


def render(report: Report) -> str:
    """Terminal text of the report."""
    return render_blocks(layout(report))


def render_blocks(blocks: list[Block]) -> str:
    """Terminal text of laid-out blocks (headings, facts, tables)."""
    return "\n".join(line for block in blocks for line in _block(block)) + "\n"


def _block(b: Block) -> list[str]:
    if b.kind == "heading":
        return ["", b.title, _RULE[b.level] * len(b.title)]
    if b.kind == "facts":
        width = max((len(k) for k, _ in b.facts), default=0)
        return [f"  {k:<{width}}  {v}" if k else f"  {v}" for k, v in b.facts]
    if b.kind == "list":
        return [line for i, item in enumerate(b.items, 1) for line in _item(i, *item)]
    return ["", f"  {b.title}", *_table(b.headers, b.rows)]


def _item(number: int, headline: str, texts: list[str]) -> list[str]:
    """A numbered headline, its texts wrapped and indented under it, and a blank line."""
    lead = f"  {number}. "
    indent = " " * len(lead)
    lines = textwrap.wrap(headline, WIDTH, initial_indent=lead, subsequent_indent=indent)
    for text in texts:
        lines += textwrap.wrap(text, WIDTH, initial_indent=indent, subsequent_indent=indent)
    return [*lines, ""]


def _table(headers: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    numeric = [all(_numeric(r[i]) for r in rows) for i in range(len(headers))]

    def line(cells: list[str]) -> str:
        parts = [c.rjust(w) if num else c.ljust(w) for c, w, num in zip(cells, widths, numeric, strict=True)]
        return "  " + "  ".join(parts).rstrip()

    return [line(headers), "  " + "  ".join("-" * w for w in widths), *(line(r) for r in rows)]


def _numeric(cell: str) -> bool:
    return bool(cell) and (cell[0].isdigit() or cell[0] in "-–") and len(cell) < 16
