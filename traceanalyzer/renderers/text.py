"""The report as text: headings, facts, tables fitted to the width and numbered findings; plain in a file or a pipe,
in colour on a terminal (``renderers.terminal``, imported only then).

Names longer than their column's share of the width are cut in the middle (distinct names stay distinct); the
``wide`` display keeps them whole and folds them.
"""

from __future__ import annotations

from traceanalyzer import lazy
from traceanalyzer.renderers import cells, grid
from traceanalyzer.renderers.document import Block, Display, layout
from traceanalyzer.renderers.fitting import INDENT, Fitted, fitted, more_rows, printable_block
from traceanalyzer.report import Report

terminal = lazy.Module("traceanalyzer.renderers.terminal")
FACT_KEY = grid.Column(gap=2, widest=56)
FACT_VALUE = grid.Column()
ITEM_NUMBER = grid.Column(gap=1, right=True, no_wrap=True)
ITEM_TEXT = grid.Column()
RULE = {1: "=", 2: "─"}
"""The line under a heading of each level."""


def render(report: Report, display: Display = Display()) -> str:  # noqa: B008 - frozen
    """Text of the report: compact (the first rows of each table) unless ``display.full``."""
    return render_blocks(layout(report, display), display)


def render_blocks(blocks: list[Block], display: Display = Display()) -> str:  # noqa: B008 - frozen
    """Text of laid-out blocks (headings, facts, tables, numbered lists) at ``display.width`` columns, coloured when
    ``display.color``; lines carry no trailing spaces."""
    if display.color:
        return str(terminal.render_blocks(blocks, display))
    lines = [cells.crop(line, display.width) for b in blocks for line in _block(printable_block(b), display)]
    return "\n".join(line.rstrip() for line in "".join(line + "\n" for line in lines).splitlines()) + "\n"


def _block(b: Block, display: Display) -> list[str]:
    width = display.width
    if b.kind == "heading":
        return ["", rule(b.title, width, RULE[1 if b.level == 1 else 2])]
    if b.kind == "facts":
        return _indent(grid.draw([FACT_KEY, FACT_VALUE], [list(f) for f in b.facts], width - INDENT), INDENT, width)
    if b.kind == "list":
        return _indent(grid.draw([ITEM_NUMBER, ITEM_TEXT], _item_rows(b), width - 1), 1, width)
    return _table(b, display)


def rule(title: str, width: int, char: str) -> str:
    """A heading: its title (cut with '…' to leave room) and a line of ``char`` to the width."""
    if not title or width <= 2:
        return char * width
    title = cells.expand_tabs(title.replace("\n", " "))
    if cells.width(title) > width - 2:
        title = cells.fit(title, width - 3) + "…"
    line = title + " "
    return cells.fit(line + char * (width - cells.width(line)), width)


def _item_rows(b: Block) -> list[list[str]]:
    """Numbered findings: the number and headline, then each of its texts, then a blank row."""
    rows = []
    for number, (headline, texts) in enumerate(b.items, 1):
        rows += [[f"{number}.", headline], *([""] + [text] for text in texts), ["", ""]]
    return rows


def _table(b: Block, display: Display) -> list[str]:
    """A table's title and its column groups (the key columns repeated when it cannot fit whole)."""
    width = display.width
    lines = ["", *cells.wrap(b.title, width)]
    for t in fitted(b, width - INDENT, display.wide):
        lines += _indent(_draw(t, width - INDENT), INDENT, width)
    if b.more:
        lines += _indent(cells.wrap(more_rows(b.more), width - INDENT), INDENT, width)
    return lines


def _draw(t: Fitted, width: int) -> list[str]:
    """A table of fixed widths: numbers right-aligned, headers wrapped by word and underlined, text folded."""
    last = len(t.widths) - 1
    pairs = enumerate(zip(t.widths, t.numeric, strict=True))
    columns = [grid.Column(gap=int(i < last), width=w, right=num) for i, (w, num) in pairs]
    return grid.draw(columns, t.rows, width, header=t.headers, divider=" ")


def _indent(lines: list[str], left: int, width: int) -> list[str]:
    """Lines moved ``left`` cells right, each fitted to the ``width - left`` cells left to it."""
    return [" " * left + cells.fit(line, width - left) for line in lines]
