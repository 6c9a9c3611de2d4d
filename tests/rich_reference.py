"""The text report as rich drew it (``Console.print`` of tables, grids, rules and padding), plain or in colour: the
reference ``renderers.text`` is compared with, character by character (tests/test_text.py, bench/bench_text.py).

Its layout is the text report's (``renderers.fitting``): the same column groups, widths and cut names.
"""

from __future__ import annotations

import io

from rich import box
from rich.console import Console, Group, RenderableType
from rich.padding import Padding
from rich.rule import Rule
from rich.table import Table
from rich.text import Text

from traceanalyzer.renderers.document import Block, Display
from traceanalyzer.renderers.fitting import INDENT, Fitted, fitted, more_rows, printable_block

SEVERITY_STYLE = {"high": "bold red", "medium": "yellow", "low": "cyan", "info": "dim"}
MARK = {"high": "▲", "medium": "●", "low": "○", "info": "·"}


def render_blocks(blocks: list[Block], display: Display = Display()) -> str:  # noqa: B008 - frozen
    """Terminal text of laid-out blocks (headings, facts, tables, numbered lists) at ``display.width`` columns, in
    colour when ``display.color``."""
    out = io.StringIO()
    console = Console(
        file=out,
        width=display.width,
        color_system="standard" if display.color else None,
        force_terminal=display.color,
        no_color=not display.color,
        highlight=False,
        emoji=False,
        markup=False,
    )
    for block in blocks:
        console.print(_block(printable_block(block), display))
    return "\n".join(line.rstrip() for line in out.getvalue().splitlines()) + "\n"


def _block(b: Block, display: Display) -> RenderableType:
    if b.kind == "heading":
        style = "bold" if display.color else ""
        return Group(Text(""), Rule(b.title, align="left", style=style, characters="=" if b.level == 1 else "─"))
    if b.kind == "facts":
        return _facts(b.facts)
    if b.kind == "list":
        return _items(b, display)
    return _table(b, display)


def _facts(facts: list[tuple[str, str]]) -> Padding:
    grid = Table.grid(padding=(0, 2))
    grid.add_column(overflow="fold", max_width=56)
    grid.add_column(overflow="fold")
    for key, value in facts:
        grid.add_row(key, value)
    return Padding(grid, (0, 0, 0, INDENT))


def _items(b: Block, display: Display) -> Padding:
    """Numbered findings: a severity mark (coloured on a terminal) and headline, then its texts indented."""
    grid = Table.grid(padding=(0, 1))
    grid.add_column(justify="right", no_wrap=True)
    grid.add_column(overflow="fold")
    severities = b.severities or [""] * len(b.items)
    for number, ((headline, texts), severity) in enumerate(zip(b.items, severities, strict=True), 1):
        head = Text(headline, style="bold" if display.color else "")
        if display.color and severity:
            head = Text.assemble((MARK[severity] + " ", SEVERITY_STYLE[severity]), head)
        grid.add_row(f"{number}.", head)
        for text in texts:
            grid.add_row("", text)
        grid.add_row("", "")
    return Padding(grid, (0, 0, 0, 1))


def _table(b: Block, display: Display) -> Group:
    """A table fitted to the width: split into column groups (the key columns repeated) when it cannot fit whole."""
    parts: list[RenderableType] = [Text(""), Text(b.title, style="italic" if display.color else "")]
    for t in fitted(b, display.width - INDENT, display.wide):
        parts.append(Padding(_rich_table(t), (0, 0, 0, INDENT)))
    if b.more:
        parts.append(Padding(Text(more_rows(b.more)), (0, 0, 0, INDENT)))
    return Group(*parts)


def _rich_table(t: Fitted) -> Table:
    """Columns of fixed widths: numbers right-aligned, headers bold and wrapped by word, text folded."""
    table = Table(box=box.SIMPLE_HEAD, padding=(0, 1, 0, 0), show_edge=False, pad_edge=False, header_style="bold")
    for header, num, w in zip(t.headers, t.numeric, t.widths, strict=True):
        table.add_column(header, justify="right" if num else "left", overflow="fold", width=w)
    for row in t.rows:
        table.add_row(*row)
    return table
