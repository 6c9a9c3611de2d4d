"""The report as text: headings, facts, tables fitted to the width and numbered findings; plain in a file or a pipe,
on a terminal with bold headings and headers and the findings' severity marks in colour.

Names longer than their column's share of the width are cut in the middle (distinct names stay distinct); the
``wide`` display keeps them whole and folds them.
"""

from __future__ import annotations

from traceanalyzer.renderers import cells, grid
from traceanalyzer.renderers.document import Block, Display, layout
from traceanalyzer.renderers.fitting import INDENT, Fitted, fitted, more_rows, printable_block
from traceanalyzer.report import Report

FACT_KEY = grid.Column(gap=2, widest=56)
FACT_VALUE = grid.Column()
ITEM_NUMBER = grid.Column(gap=1, right=True, no_wrap=True)
ITEM_TEXT = grid.Column()
RULE = {1: "=", 2: "─"}
"""The line under a heading of each level."""
BOLD, ITALIC = "1", "3"
SEVERITY_STYLE = {"high": "1;31", "medium": "33", "low": "36", "info": "2"}
"""Each severity's mark in terminal styles (SGR): bold red, yellow, cyan, dim."""
MARK = {"high": "▲", "medium": "●", "low": "○", "info": "·"}


def render(report: Report, display: Display = Display()) -> str:  # noqa: B008 - frozen
    """Text of the report: compact (the first rows of each table) unless ``display.full``."""
    return render_blocks(layout(report, display), display)


def render_blocks(blocks: list[Block], display: Display = Display()) -> str:  # noqa: B008 - frozen
    """Text of laid-out blocks (headings, facts, tables, numbered lists) at ``display.width`` columns, coloured when
    ``display.color``; lines carry no trailing spaces."""
    lines = [cells.crop(line, display.width) for b in blocks for line in _block(printable_block(b), display)]
    return "\n".join(line.rstrip() for line in "".join(line + "\n" for line in lines).splitlines()) + "\n"


def _block(b: Block, display: Display) -> list[str]:
    width = display.width
    if b.kind == "heading":
        return ["", rule(b.title, width, RULE[1 if b.level == 1 else 2], BOLD if display.color else "")]
    if b.kind == "facts":
        return _indent(grid.draw([FACT_KEY, FACT_VALUE], [list(f) for f in b.facts], width - INDENT), INDENT, width)
    if b.kind == "list":
        return _indent(grid.draw([ITEM_NUMBER, ITEM_TEXT], _item_rows(b, display.color), width - 1), 1, width)
    return _table(b, display)


def rule(title: str, width: int, char: str, style: str = "") -> str:
    """A heading: its title (cut with '…' to leave room) and a line of ``char`` to the width, in ``style``."""
    if not title or width <= 2:
        return cells.paint(char * width, style)
    title = cells.expand_tabs(title.replace("\n", " "))
    if cells.width(title) > width - 2:
        title = cells.fit(title, width - 3) + "…"
    head = title + " "
    line = cells.fit(head + char * (width - cells.width(head)), width)
    return line[: len(head)] + cells.paint(line[len(head) :], style)


def _item_rows(b: Block, color: bool) -> list[list[grid.Cell]]:
    """Numbered findings: the number and headline (bold, after its severity's mark in colour), then each of its
    texts, then a blank row."""
    rows: list[list[grid.Cell]] = []
    severities = b.severities or [""] * len(b.items)
    for number, ((headline, texts), severity) in enumerate(zip(b.items, severities, strict=True), 1):
        rows += [[f"{number}.", _headline(headline, severity, color)], *([""] + [text] for text in texts), ["", ""]]
    return rows


def _headline(headline: str, severity: str, color: bool) -> grid.Cell:
    if not color:
        return headline
    if not severity:
        return grid.Painted(headline, whole=BOLD)
    mark = MARK[severity] + " "
    return grid.Painted(mark + headline, runs=((len(mark), SEVERITY_STYLE[severity]), (len(mark + headline), BOLD)))


def _table(b: Block, display: Display) -> list[str]:
    """A table's title and its column groups (the key columns repeated when it cannot fit whole)."""
    width = display.width
    lines = ["", *(cells.paint(line, ITALIC if display.color else "") for line in cells.wrap(b.title, width))]
    for t in fitted(b, width - INDENT, display.wide):
        lines += _indent(_draw(t, width - INDENT, BOLD if display.color else ""), INDENT, width)
    if b.more:
        lines += _indent(cells.wrap(more_rows(b.more), width - INDENT), INDENT, width)
    return lines


def _draw(t: Fitted, width: int, header_style: str) -> list[str]:
    """A table of fixed widths: numbers right-aligned, headers wrapped by word, underlined and in ``header_style``,
    text folded."""
    last = len(t.widths) - 1
    pairs = enumerate(zip(t.widths, t.numeric, strict=True))
    columns = [grid.Column(gap=int(i < last), width=w, right=num) for i, (w, num) in pairs]
    return grid.draw(columns, list(t.rows), width, header=t.headers, divider=" ", header_style=header_style)


def _indent(lines: list[str], left: int, width: int) -> list[str]:
    """Lines moved ``left`` cells right, each fitted to the ``width - left`` cells left to it."""
    return [" " * left + cells.fit(line, width - left) for line in lines]
