"""What every tool answers: plain data that states its unit and scope, in a token budget, rows paged to fit.

An answer's size is the token count (``traceanalyzer.tokens``) of its JSON text, the text the
server sends. Rows are split into pages greedily from the first, so page N is the same page on every call; a row's
long texts (kernel signatures run to thousands of characters) are cut in the middle to ``TEXT_LIMIT``, and lists
inside it to ``LIST_LIMIT`` items and a last item counting the rest; the answer counts the cuts in ``cut_texts``, so
nothing is shortened silently.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import orjson

from traceanalyzer.records import plain
from traceanalyzer.renderers.document import middle
from traceanalyzer.tokens import ANSWER_BUDGET, tokens

TEXT_LIMIT = 160
"""Longest text (a name, a where) a row of an answer shows, cut in the middle."""
LIST_LIMIT = 20
"""Most items a list inside an answer's row or head shows (the rest are counted in a last item)."""


def dumps(answer: Mapping) -> str:
    """The JSON text of an answer, as the server sends it (compact, UTF-8, numpy values as numbers)."""
    return orjson.dumps(answer, option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS).decode()


def size(answer: Mapping) -> int:
    """An answer's size in tokens."""
    return tokens(dumps(answer))


def cut_texts(value: object, limit: int = TEXT_LIMIT, items: int | None = LIST_LIMIT) -> tuple[object, int]:
    """Plain data with every text longer than ``limit`` cut in the middle and every list to ``items`` items (and one
    saying how many more there were; None: lists whole), and how many cuts were made."""
    if isinstance(value, str):
        return (middle(value, limit), 1) if len(value) > limit else (value, 0)
    if isinstance(value, Mapping):
        pairs = [(k, cut_texts(v, limit, items)) for k, v in value.items()]
        return {k: v for k, (v, _) in pairs}, sum(n for _, (_, n) in pairs)
    if isinstance(value, list | tuple):
        kept = value if items is None else value[:items]
        cut = [cut_texts(v, limit, items) for v in kept]
        more = [f"… {len(value) - len(kept)} more (cut)"] if len(kept) < len(value) else []
        return [v for v, _ in cut] + more, sum(n for _, n in cut) + len(more)
    return plain(value), 0


def paged(head: dict, rows: Sequence[Mapping], page: int, budget: int = ANSWER_BUDGET, key: str = "rows") -> dict:
    """``head`` with page ``page`` (from 1) of ``rows`` under ``key``: as many rows as fit ``budget`` with the head,
    and ``page``, ``pages``, ``rows_total``, ``next_page`` (None on the last) and ``cut_texts``."""
    cut = [cut_texts(r, items=None if isinstance(r, list | tuple) else LIST_LIMIT) for r in rows]  # a row's cells whole
    pages = _pages([r for r, _ in cut], head, budget, key)
    if not 1 <= page <= max(len(pages), 1):
        raise ValueError(f"page {page} does not exist: there are {len(pages)} page(s) of {key}")
    start, end = pages[page - 1] if pages else (0, 0)
    answer = dict(head)
    answer.update(
        {
            key: [r for r, _ in cut[start:end]],
            "page": page,
            "pages": max(len(pages), 1),
            "rows_total": len(rows),
            "next_page": page + 1 if page < len(pages) else None,
            "cut_texts": sum(n for _, n in cut[start:end]),
        }
    )
    return answer


def _pages(rows: list, head: dict, budget: int, key: str) -> list[tuple[int, int]]:
    """Page bounds (start, end) of rows so that each page with the head fits the budget (at least one row each)."""
    room = budget - size({**head, key: [], "page": 0, "pages": 0, "rows_total": 0, "next_page": 0, "cut_texts": 0})
    bounds, start, used = [], 0, 0
    for i, row in enumerate(rows):
        cost = tokens(dumps(row)) + 1
        if i > start and used + cost > room:
            bounds.append((start, i))
            start, used = i, 0
        used += cost
    if start < len(rows):
        bounds.append((start, len(rows)))
    return bounds
