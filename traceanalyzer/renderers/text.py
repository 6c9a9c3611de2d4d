"""The report for a terminal, drawn with rich: fits the width, colour and severity marks only on a terminal.

Names longer than their column's share of the width are cut in the middle (distinct names stay distinct); the
``wide`` display keeps them whole and lets rich fold them.
"""

from __future__ import annotations

import io
from dataclasses import replace

from rich import box
from rich.console import Console, Group, RenderableType
from rich.padding import Padding
from rich.rule import Rule
from rich.table import Table
from rich.text import Text

from traceanalyzer.humanize import printable
from traceanalyzer.renderers.document import Block, Display, layout, shorten_columns
from traceanalyzer.report import Report

SEVERITY_STYLE = {"high": "bold red", "medium": "yellow", "low": "cyan", "info": "dim"}
MARK = {"high": "▲", "medium": "●", "low": "○", "info": "·"}
NARROWEST = 12
"""A text column is never cut below this many characters."""
INDENT = 2
GAP = 2
"""Columns between table columns (padding and rule)."""


def render(report: Report, display: Display = Display()) -> str:  # noqa: B008 - frozen
    """Terminal text of the report: compact (the first rows of each table) unless ``display.full``."""
    return render_blocks(layout(report, display), display)


def render_blocks(blocks: list[Block], display: Display = Display()) -> str:  # noqa: B008 - frozen
    """Terminal text of laid-out blocks (headings, facts, tables, numbered lists) at ``display.width`` columns."""
    console = Console(
        file=io.StringIO(),
        width=display.width,
        color_system="standard" if display.color else None,
        force_terminal=display.color,
        no_color=not display.color,
        highlight=False,
        emoji=False,
        markup=False,
    )
    for block in blocks:
        console.print(_block(_printable(block), display))
    return "\n".join(line.rstrip() for line in console.file.getvalue().splitlines()) + "\n"


def _printable(b: Block) -> Block:
    """The block with control characters in its text (ANSI escapes in a kernel's name) shown, not acted on."""
    return replace(
        b,
        title=printable(b.title),
        facts=[(printable(k), printable(v)) for k, v in b.facts],
        headers=[printable(h) for h in b.headers],
        rows=[[printable(c) for c in row] for row in b.rows],
        items=[(printable(head), [printable(line) for line in lines]) for head, lines in b.items],
    )


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
    numeric = b.numeric
    parts: list[RenderableType] = [Text(""), Text(b.title, style="italic" if display.color else "")]
    width = display.width - INDENT
    for group in _groups(b, numeric, width):
        headers = [b.headers[i] for i in group]
        rows = [[r[i] for i in group] for r in b.rows]
        kinds = [numeric[i] for i in group]
        if not display.wide:
            rows = shorten_columns(rows, _limits(headers, rows, kinds, width))
        parts.append(Padding(_rich_table(headers, rows, kinds, width), (0, 0, 0, INDENT)))
    if b.more:
        parts.append(Padding(Text(f"… {b.more:,} more rows (--full shows every row)"), (0, 0, 0, INDENT)))
    return Group(*parts)


def _rich_table(headers: list[str], rows: list[list[str]], numeric: list[bool], width: int) -> Table:
    """Columns of fixed widths that fit ``width``: numbers whole, headers wrapped by word, text cut or folded."""
    table = Table(box=box.SIMPLE_HEAD, padding=(0, 1, 0, 0), show_edge=False, pad_edge=False, header_style="bold")
    for header, num, w in zip(headers, numeric, _widths(headers, rows, numeric, width), strict=True):
        table.add_column(header, justify="right" if num else "left", overflow="fold", width=w)
    for row in rows:
        table.add_row(*row)
    return table


def _widths(headers: list[str], rows: list[list[str]], numeric: list[bool], width: int) -> list[int]:
    """Each column at its narrowest, then widened towards its natural width while there is room: text columns
    first (their cells were cut to fit), then numbers whose headers would wrap."""
    least = [_least(h, [r[i] for r in rows], num) for i, (h, num) in enumerate(zip(headers, numeric, strict=True))]
    natural = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(headers)]
    widths = list(least)
    room = width - sum(widths) - GAP * (len(widths) - 1)
    for i in sorted(range(len(widths)), key=lambda i: (numeric[i], natural[i] - least[i])):
        grow = min(max(room, 0), natural[i] - widths[i])
        widths[i] += grow
        room -= grow
    return widths


def _groups(b: Block, numeric: list[bool], width: int) -> list[list[int]]:
    """Column indexes per table drawn: all at once if their narrowest widths fit, else the key columns (the
    leading short ones, or a leading name) repeated before as many of the others as fit."""
    least = [_least(h, [r[i] for r in b.rows], num) for i, (h, num) in enumerate(zip(b.headers, numeric, strict=True))]
    if sum(least) + GAP * len(least) <= width:
        return [list(range(len(least)))]
    keys = [i for i in range(min(2, len(least))) if least[i] <= 8 or (i == 0 and not numeric[0])]
    keys = keys if keys == list(range(len(keys))) else []
    groups, used = [], sum(least[i] + GAP for i in keys)
    current: list[int] = []
    for i in range(len(keys), len(least)):
        if current and used + sum(least[j] + GAP for j in current) + least[i] + GAP > width:
            groups.append(keys + current)
            current = []
        current.append(i)
    return [*groups, keys + current]


def _least(header: str, cells: list[str], numeric: bool) -> int:
    """The narrowest a column can be drawn: numbers whole, text cut to ``NARROWEST``, headers wrapped by word."""
    natural = max([len(c) for c in cells] or [0])
    word = max((len(w) for w in header.split()), default=1)
    return max(word, natural if numeric else min(natural, NARROWEST))


def _limits(headers: list[str], rows: list[list[str]], numeric: list[bool], width: int) -> list[int]:
    """Per column, the longest cell it may show: numbers whole, text columns an equal share of the rest."""
    natural = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(headers)]
    least = [_least(h, [r[i] for r in rows], num) for i, (h, num) in enumerate(zip(headers, numeric, strict=True))]
    fixed = sum(w for w, num in zip(least, numeric, strict=True) if num) + GAP * len(natural)
    texts = [i for i, num in enumerate(numeric) if not num]
    if not texts:
        return natural
    spare = max(width - fixed, NARROWEST * len(texts))
    wide = [i for i in texts if natural[i] > spare // len(texts)]
    room = spare - sum(natural[i] for i in texts if i not in wide)
    limits = list(natural)
    for i in wide:
        limits[i] = max(NARROWEST, room // len(wide))
    return limits
