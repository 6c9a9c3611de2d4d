"""A table fitted to a width: its columns split into groups that fit (the key columns repeated), each column's
width, and the longest cell a text column may show before it is cut in the middle.

Widths count characters; numbers are never cut, text columns are cut to no less than ``NARROWEST``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from traceanalyzer.humanize import printable
from traceanalyzer.renderers.document import Block, shorten_columns

NARROWEST = 12
"""A text column is never cut below this many characters."""
INDENT = 2
GAP = 2
"""Columns between table columns (padding and rule)."""


@dataclass(frozen=True)
class Fitted:
    """One table as drawn: its headers, its rows (text cut to fit), which columns hold numbers, their widths."""

    headers: list[str]
    rows: list[list[str]]
    numeric: list[bool]
    widths: list[int]


def fitted(b: Block, width: int, wide: bool) -> list[Fitted]:
    """The tables a table block is drawn as in ``width`` columns: one per column group, names cut in the middle to
    their column's share unless ``wide``."""
    tables = []
    for group in column_groups(b, b.numeric, width):
        headers = [b.headers[i] for i in group]
        rows = [[r[i] for i in group] for r in b.rows]
        numeric = [b.numeric[i] for i in group]
        if not wide:
            rows = shorten_columns(rows, cut_limits(headers, rows, numeric, width))
        tables.append(Fitted(headers, rows, numeric, column_widths(headers, rows, numeric, width)))
    return tables


def more_rows(more: int) -> str:
    """The line under a compact table saying how many rows it left out."""
    return f"… {more:,} more rows (--full shows every row)"


def printable_block(b: Block) -> Block:
    """The block with control characters in its text (ANSI escapes in a kernel's name) shown, not acted on."""
    return replace(
        b,
        title=printable(b.title),
        facts=[(printable(k), printable(v)) for k, v in b.facts],
        headers=[printable(h) for h in b.headers],
        rows=[[printable(c) for c in row] for row in b.rows],
        items=[(printable(head), [printable(line) for line in lines]) for head, lines in b.items],
    )


def column_widths(headers: list[str], rows: list[list[str]], numeric: list[bool], width: int) -> list[int]:
    """Each column at its narrowest, then widened towards its natural width while there is room: text columns
    first (their cells were cut to fit), then numbers whose headers would wrap."""
    least = _narrowest_each(headers, rows, numeric)
    natural = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(headers)]
    widths = list(least)
    room = width - sum(widths) - GAP * (len(widths) - 1)
    for i in sorted(range(len(widths)), key=lambda i: (numeric[i], natural[i] - least[i])):
        grow = min(max(room, 0), natural[i] - widths[i])
        widths[i] += grow
        room -= grow
    return widths


def column_groups(b: Block, numeric: list[bool], width: int) -> list[list[int]]:
    """Column indexes per table drawn: all at once if their narrowest widths fit, else the key columns (the
    leading short ones, or a leading name) repeated before as many of the others as fit."""
    least = _narrowest_each(b.headers, b.rows, numeric)
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


def _narrowest_each(headers: list[str], rows: list[list[str]], numeric: list[bool]) -> list[int]:
    return [narrowest(h, [r[i] for r in rows], num) for i, (h, num) in enumerate(zip(headers, numeric, strict=True))]


def narrowest(header: str, cells: list[str], numeric: bool) -> int:
    """The narrowest a column can be drawn: numbers whole, text cut to ``NARROWEST``, headers wrapped by word."""
    natural = max([len(c) for c in cells] or [0])
    word = max((len(w) for w in header.split()), default=1)
    return max(word, natural if numeric else min(natural, NARROWEST))


def cut_limits(headers: list[str], rows: list[list[str]], numeric: list[bool], width: int) -> list[int]:
    """Per column, the longest cell it may show: numbers whole, text columns an equal share of the rest."""
    natural = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(headers)]
    least = _narrowest_each(headers, rows, numeric)
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
