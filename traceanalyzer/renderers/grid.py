"""Rows of cells drawn in columns within a width: each column measured (its widest word and widest line), the
widest shrunk first when the whole does not fit, then every cell wrapped in its column's width.

The columns get the widths rich gives a ``Table`` of the same columns, so the text report reads as it did when rich
drew it.
"""

from __future__ import annotations

from dataclasses import dataclass

from traceanalyzer.renderers import cells


@dataclass(frozen=True)
class Column:
    """A column: the spaces after its cells (``gap``), a fixed ``width`` (None: measured from its cells) or a
    ``widest`` it may be, its cells aligned right or left, and whether they may wrap."""

    gap: int = 0
    width: int | None = None
    widest: int | None = None
    right: bool = False
    no_wrap: bool = False


@dataclass(frozen=True)
class Painted:
    """A left-aligned cell's text in terminal styles: each of ``runs`` (end offset, style) paints its characters up
    to that end, the padding left plain; or ``whole`` paints each of its lines, padding included."""

    text: str
    runs: tuple[tuple[int, str], ...] = ()
    whole: str = ""


Cell = str | Painted


def draw(
    columns: list[Column],
    rows: list[list[Cell]],
    width: int,
    header: list[str] | None = None,
    divider: str = "",
    header_style: str = "",
) -> list[str]:
    """Lines of the rows in ``width`` cells, ``divider`` between columns; ``header``: a first row aligned on its last
    line, in ``header_style`` (an SGR style, '' plain), and underlined."""
    if not columns:
        return [""]
    body: list[list[Cell]] = [list(header), *rows] if header is not None else rows
    between = len(divider) * (len(columns) - 1)
    widths = column_widths(columns, [[_text(row[i]) for row in body] for i in range(len(columns))], width - between)
    lines = []
    for n, row in enumerate(body):
        top = header is not None and n == 0
        style = header_style if top else ""
        drawn = [_cell(cell, col, w, style) for cell, col, w in zip(row, columns, widths, strict=True)]
        height = max(len(c) for c in drawn)
        drawn = [_shape(c, w, height, top, style) for c, w in zip(drawn, widths, strict=True)]
        lines += [divider.join(parts) for parts in zip(*drawn, strict=True)]
        if top:
            lines.append("─" * (sum(widths) + between))
    return lines


def _text(cell: Cell) -> str:
    return cell.text if isinstance(cell, Painted) else cell


def _cell(cell: Cell, col: Column, w: int, style: str) -> list[str]:
    """A cell's lines in its column's width ``w``: wrapped, aligned, then its gap; all in ``style``."""
    inner = w - col.gap
    gap = cells.paint(" " * col.gap, style)
    if isinstance(cell, Painted):
        lines = _painted(cell, inner, col.no_wrap)
    else:
        wrapped = cells.wrap(cell, inner, "right" if col.right else "left", col.no_wrap)
        lines = [cells.paint(line, style) for line in wrapped]
    return [cells.fit(cells.fit(line, inner) + gap, w) for line in lines]


def _painted(cell: Painted, inner: int, no_wrap: bool) -> list[str]:
    if cell.whole:
        return [cells.paint(line, cell.whole) for line in cells.wrap(cell.text, inner, "left", no_wrap)]
    out = []
    for start, piece in cells.pieces(cell.text, inner, no_wrap):
        line = cells.finish(piece, inner, "left")
        out.append(_runs(line[: len(piece)], start, cell.runs) + line[len(piece) :])
    return out


def _runs(piece: str, start: int, runs: tuple[tuple[int, str], ...]) -> str:
    """A piece of a painted text (starting at offset ``start``) in the styles of the runs it overlaps."""
    parts, begin = [], start
    for end, style in runs:
        if end > begin:
            parts.append(cells.paint(piece[begin - start : end - start], style))
            begin = end
    return "".join(parts) + piece[begin - start :]


def _shape(lines: list[str], w: int, height: int, bottom: bool, style: str) -> list[str]:
    """A cell's lines made ``height`` tall: blank lines (in ``style``) above (a header, aligned on its last line) or
    below."""
    blank = [cells.paint(" " * w, style)] * (height - len(lines))
    return blank + lines if bottom else lines + blank


def column_widths(columns: list[Column], texts: list[list[str]], width: int) -> list[int]:
    """Each column's width with its gap: as wide as its widest line, then, while the sum exceeds ``width``, the
    widest columns that may wrap narrowed towards the next widest, then every column evenly."""
    widths = [_measure(col, t, width)[1] or 1 for col, t in zip(columns, texts, strict=True)]
    if sum(widths) <= width:
        return widths
    widths = _collapse(widths, [col.width is None and not col.no_wrap for col in columns], width)
    if sum(widths) > width:
        widths = _reduce(sum(widths) - width, [1] * len(widths), widths, widths)
    return [_measure(col, t, w)[1] or 0 for col, t, w in zip(columns, texts, widths, strict=True)]


def _measure(col: Column, texts: list[str], width: int) -> tuple[int, int]:
    """The narrowest and widest a column can be drawn in ``width`` cells, its gap included."""
    if width < 1:
        return 0, 0
    if col.width is not None:
        return min(col.width + col.gap, width), min(col.width + col.gap, width)
    spans = [_measure_cell(t, col.gap, width) for t in texts]
    least = min(max((s[0] for s in spans), default=1), width)
    most = min(max((s[1] for s in spans), default=width), width)
    if col.widest is not None:
        least, most = min(least, col.widest + col.gap), min(most, col.widest + col.gap)
    return least, most


def _measure_cell(text: str, gap: int, width: int) -> tuple[int, int]:
    """A cell's narrowest (its longest word) and widest (its longest line) width with its gap, within ``width``."""
    if width < 1:
        return 0, 0
    if width - gap < 1:
        return _within(width, width, width)
    lines, words = text.splitlines(), text.split()
    most = max((cells.width(line) for line in lines), default=0)
    least, most = _within(max((cells.width(word) for word in words), default=most), most, width)
    return _within(min(least + gap, width), min(most + gap, width), width)


def _within(least: int, most: int, width: int) -> tuple[int, int]:
    """A measured span kept ordered and at most ``width``; none at all when it is empty."""
    least = min(max(0, least), most)
    least, most = min(least, width), min(max(0, least, most), width)
    if most < 1:
        return 0, 0
    least = min(max(0, least), most)
    return least, max(0, least, most)


def _collapse(widths: list[int], wrappable: list[bool], width: int) -> list[int]:
    """Widths with the widest wrappable columns narrowed, towards the next widest, until they fit ``width``."""
    excess = sum(widths) - width
    while excess > 0 and any(wrappable) and sum(widths) > 0:
        widest = max(w for w, ok in zip(widths, wrappable, strict=True) if ok)
        second = max(w if ok and w != widest else 0 for w, ok in zip(widths, wrappable, strict=True))
        ratios = [1 if (w == widest and ok) else 0 for w, ok in zip(widths, wrappable, strict=True)]
        if not any(ratios) or widest == second:
            break
        widths = _reduce(excess, ratios, [min(excess, widest - second)] * len(widths), widths)
        excess = sum(widths) - width
    return widths


def _reduce(total: int, ratios: list[int], most: list[int], widths: list[int]) -> list[int]:
    """Widths less ``total`` in all, shared by ``ratios``, each cut by at most its ``most``."""
    ratios = [r if m else 0 for r, m in zip(ratios, most, strict=True)]
    left, weight = total, sum(ratios)
    out = []
    for ratio, limit, w in zip(ratios, most, widths, strict=True):
        if ratio and weight > 0:
            cut = min(limit, round(ratio * left / weight))
            out.append(w - cut)
            left -= cut
            weight -= ratio
        else:
            out.append(w)
    return out
