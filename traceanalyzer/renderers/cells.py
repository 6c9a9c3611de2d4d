"""Text measured in terminal cells: a character's width, lines cut or padded to a width, and word wrapping.

A wide East Asian character takes two cells, a combining mark or format character none; lines wrap between words
and a word longer than the line is folded, as terminals and rich draw them.
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache

TAB = 8
"""Columns between tab stops."""
_ZERO_WIDTH = {"Mn", "Me", "Mc", "Cf", "Zl", "Zp"}
_HANGUL_VOWELS = ((0x1160, 0x1200), (0xD7B0, 0xD800))
"""Hangul vowels and final consonants, drawn in the syllable's cells."""
_VISIBLE_FORMAT = frozenset([0xAD, *range(0x600, 0x606), 0x6DD, 0x70F, 0x890, 0x891, 0x8E2, 0x110BD, 0x110CD])
"""Format characters drawn in a cell of their own: the soft hyphen and the marks that prefix a number."""
_WORD = re.compile(r"\s*\S+\s*")
_STYLE = re.compile(r"\x1b\[[0-9;]*m")
"""A terminal style (SGR) sequence: takes no cells (the report's own text never holds one: ``printable``)."""
_COMMON = ((0x20, 0x7E), (0xA0, 0x2FF), (0x370, 0x482), (0x2010, 0x2027), (0x2190, 0x21FF), (0x2500, 0x25FC))
"""Latin, Greek, Cyrillic, punctuation, arrows and box drawing: where the characters of a report mostly come from."""


@lru_cache(maxsize=4096)
def char_width(char: str) -> int:
    """Cells one character takes: 0 (control, combining, format), 2 (East Asian wide or full width) or 1."""
    code = ord(char)
    if code < 32 or 0x7F <= code < 0xA0:
        return 0
    category = unicodedata.category(char)
    if category == "Cn" or code in _VISIBLE_FORMAT:
        return 1
    if category in _ZERO_WIDTH or any(lo <= code < hi for lo, hi in _HANGUL_VOWELS):
        return 0
    return 2 if unicodedata.east_asian_width(char) in "WF" else 1


_ONE_CELL = frozenset(c for lo, hi in _COMMON for c in map(chr, range(lo, hi + 1)) if char_width(c) == 1)
"""Common characters one cell wide: a text of only these takes as many cells as it has characters."""


def width(text: str) -> int:
    """Cells a line of text takes (its style sequences none)."""
    if _ONE_CELL.issuperset(text):
        return len(text)
    return sum(map(char_width, _STYLE.sub("", text) if "\x1b" in text else text))


def paint(text: str, style: str) -> str:
    """text in a terminal style (SGR parameters such as '1' bold, '1;31' bold red), reset after it; none if empty."""
    return f"\x1b[{style}m{text}\x1b[0m" if text and style else text


def fit(text: str, cells: int) -> str:
    """text cut or padded with spaces to exactly ``cells`` cells (a wide character cut in two shown as a space);
    styled text is drawn within its cells, so only padded."""
    if _ONE_CELL.issuperset(text):
        return text[:cells] + " " * (cells - len(text))
    if "\x1b" in text:
        return text + " " * (cells - width(text))
    if cells <= 0:
        return ""
    used = 0
    for i, char in enumerate(text):
        w = char_width(char)
        if w and used + w > cells:
            return text[:i] + " " * (cells - used)
        used += w
    return text + " " * (cells - used)


def crop(text: str, cells: int) -> str:
    """text cut to at most ``cells`` cells (never padded)."""
    return fit(text, cells) if width(text) > cells else text


def chop(text: str, cells: int) -> list[str]:
    """text folded into pieces of at most ``cells`` cells."""
    pieces, start, used = [], 0, 0
    for i, char in enumerate(text):
        w = char_width(char)
        if w and used + w > cells:
            pieces.append(text[start:i])
            start, used = i, 0
        used += w
    return [*pieces, text[start:]] if used else pieces


def expand_tabs(line: str) -> str:
    """A line with each tab replaced by the spaces up to the next tab stop."""
    parts = line.split("\t")
    out, column = [], 0
    for part in parts[:-1]:
        column += width(part) + 1
        stop = -column % TAB
        out.append(part + " " * (1 + stop))
        column += stop
    return "".join(out) + parts[-1]


def breaks(line: str, cells: int) -> list[int]:
    """Offsets at which to break a line to wrap it in ``cells``: between words, inside a word that cannot fit."""
    offsets: list[int] = []
    used = 0
    for match in _WORD.finditer(line):
        start, word = match.start(), match.group()
        needed = width(word.rstrip())
        if cells - used >= needed:
            used += width(word)
        elif needed > cells:
            folded = chop(word, cells)
            for piece in folded[:-1]:
                if start:
                    offsets.append(start)
                start += len(piece)
            if start:
                offsets.append(start)
            used = width(folded[-1])
        elif used and start:
            offsets.append(start)
            used = width(word)
    return offsets


def wrap(text: str, cells: int, align: str = "", no_wrap: bool = False) -> list[str]:
    """Lines of text in ``cells`` cells: its own lines, each wrapped (unless ``no_wrap``) and cut to fit; ``align``
    'left' or 'right' pads each line to ``cells``, '' leaves it as wrapped."""
    return [finish(piece, cells, align) for _, piece in pieces(text, cells, no_wrap)]


def pieces(text: str, cells: int, no_wrap: bool = False) -> list[tuple[int, str]]:
    """The wrapped lines of text before they are aligned, each with the offset in text where it starts."""
    out, start = [], 0
    for line in text.split("\n"):
        drawn = expand_tabs(line) if "\t" in line else line
        if no_wrap or width(drawn) <= cells:
            out.append((start, drawn))
        else:
            out += _divide(drawn, breaks(drawn, cells), cells, start)
        start += len(line) + 1
    return out


def finish(piece: str, cells: int, align: str = "") -> str:
    """A wrapped line aligned ('left', 'right' or '' as it is) and cut to ``cells``."""
    return crop(_align(piece, cells, align), cells)


def _divide(line: str, offsets: list[int], cells: int, start: int) -> list[tuple[int, str]]:
    """The line cut at the offsets, each piece (and its offset from ``start``) without the spaces it has beyond
    ``cells`` characters."""
    bounds = [0, *offsets, len(line)]
    return [(start + a, _strip_beyond(line[a:b], cells)) for a, b in zip(bounds, bounds[1:], strict=False)]


def _strip_beyond(piece: str, cells: int) -> str:
    excess = len(piece) - cells
    if excess <= 0:
        return piece
    spaces = len(piece) - len(piece.rstrip())
    return piece[: len(piece) - min(spaces, excess)]


def _align(piece: str, cells: int, align: str) -> str:
    if align == "left":
        return fit(piece, cells)
    if align == "right":
        piece = crop(piece.rstrip(), cells)
        return " " * (cells - width(piece)) + piece
    return piece
