"""The call tree's one home: every walk along an event table's ``parent``/``depth`` links.

Linking gives each host event its ``parent`` (the enclosing host event on its thread, NO_ROW at the top) and its
``depth`` (a parent is one level above its child). Walks come in two shapes, both here and nowhere else:

- ``CallTree``: every row at once, one pass per depth level, outermost first, each row's answer taken from its
  parent's, so all rows cost a few numpy operations per level: the innermost or outermost row at or above each
  row where a mask holds, a count accumulated down the levels, or a pass of one's own (``down``).
- ``ancestors``, ``nearest`` and ``with_ancestors``: a few given rows, walked up from them one level a step.

Arrays answered for every row end in a sentinel for NO_ROW (-1), so a missing parent or ancestor indexes it.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd

from traceanalyzer.memo import remember
from traceanalyzer.schema import NO_ROW
from traceanalyzer.tracedata import TraceData


def of(trace: TraceData) -> CallTree:
    """The call tree of a (scoped) trace's event table, made once per trace."""
    return remember(trace, "calltree.of", lambda: CallTree.of(trace.events))


class CallTree:
    """The rows of an event table level by level, each with its parent (of the rows ``among`` and their ancestors
    where given; other rows then read as if they had no ancestor)."""

    def __init__(self, parent: np.ndarray, depth: np.ndarray, among: np.ndarray | None = None) -> None:
        parent = np.asarray(parent, dtype=np.int64)
        self.size = len(parent)
        walked = np.arange(len(parent)) if among is None else with_ancestors(parent, among)
        depth = np.asarray(depth)[walked]
        small = depth.astype(np.uint16) if int(depth.max(initial=0)) < 2**16 else depth  # 16-bit keys: radix sort
        order = walked[np.argsort(small, kind="stable")]
        cuts = np.cumsum(np.bincount(depth))[:-1]
        self.levels = [(rows, parent[rows]) for rows in np.split(order, cuts) if len(rows)]

    @classmethod
    def of(cls, events: pd.DataFrame, among: np.ndarray | None = None) -> CallTree:
        """The call tree of an event table (its ``parent`` and ``depth`` columns)."""
        return cls(events["parent"].to_numpy(), events["depth"].to_numpy(), among)

    def down(self, visit: Callable[[np.ndarray, np.ndarray], object]) -> None:
        """Calls ``visit(rows, parents)`` with each level's rows and their parents, outermost level first, so a row's
        parent has been visited before it: the one loop over the levels."""
        for rows, parents in self.levels:
            visit(rows, parents)

    def innermost(self, mask: np.ndarray) -> np.ndarray:
        """Per row (and the sentinel: NO_ROW): the innermost of itself and its ancestors where ``mask`` holds
        (NO_ROW if none)."""
        out = self._own(mask)

        def visit(rows: np.ndarray, parents: np.ndarray) -> None:
            take = ~mask[rows]
            out[rows[take]] = out[parents[take]]

        self.down(visit)
        return out

    def outermost(self, mask: np.ndarray) -> np.ndarray:
        """Per row (and the sentinel: NO_ROW): the outermost of itself and its ancestors where ``mask`` holds
        (NO_ROW if none)."""
        out = self._own(mask)

        def visit(rows: np.ndarray, parents: np.ndarray) -> None:
            above = out[parents]
            take = above != NO_ROW
            out[rows[take]] = above[take]

        self.down(visit)
        return out

    def accumulated(self, add: np.ndarray, reset: np.ndarray) -> np.ndarray:
        """Per row (and the sentinel: 0): the sum of ``add`` over its ancestors below the innermost one where
        ``reset`` holds (over all its ancestors where none does; 0 at the top), in ``add``'s dtype."""
        add, reset = np.r_[add, np.zeros(1, add.dtype)], np.r_[reset, False]
        out = np.zeros(self.size + 1, dtype=add.dtype)

        def visit(rows: np.ndarray, parents: np.ndarray) -> None:
            out[rows] = np.where(reset[parents], 0, out[parents] + add[parents])

        self.down(visit)
        return out

    def _own(self, mask: np.ndarray) -> np.ndarray:
        """Per row (and the sentinel): itself where ``mask`` holds, else NO_ROW."""
        return np.where(np.r_[mask, False], np.arange(self.size + 1, dtype=np.int64), NO_ROW)


def ancestors(parent: np.ndarray, rows: np.ndarray, stop: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The ancestors of given rows as pairs (index into ``rows``, ancestor), each row's innermost first: all of
    them, or where ``stop`` (per row of the table) is given, those up to and with the innermost where it holds."""
    rows = np.asarray(rows, dtype=np.int64)
    at = np.flatnonzero(rows != NO_ROW)
    up = parent[rows[at]]
    found: list[tuple[np.ndarray, np.ndarray]] = []
    while len(at):
        climbing = up != NO_ROW
        at, up = at[climbing], up[climbing]
        found.append((at, up))
        if stop is not None:
            go = ~stop[up]
            at, up = at[go], up[go]
        up = parent[up]
    if not found:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    index, ancestor = np.concatenate([a for a, _ in found]), np.concatenate([u for _, u in found])
    order = np.argsort(index, kind="stable")
    return index[order], ancestor[order]


def nearest(parent: np.ndarray, rows: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Per given row: itself where ``mask`` holds, else its innermost ancestor where it holds (NO_ROW if none, and
    at NO_ROW)."""
    rows = np.asarray(rows, dtype=np.int64)
    out = np.full(len(rows), NO_ROW, dtype=np.int64)
    here = np.r_[mask, False][rows]
    out[here] = rows[here]
    todo = np.flatnonzero(~here)
    at, up = ancestors(parent, rows[todo], stop=mask)
    hit = mask[up]
    out[todo[at[hit]]] = up[hit]
    return out


def with_ancestors(parent: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """The distinct rows (NO_ROW left out) and all their ancestors, in order (a shared ancestor walked once)."""
    rows = np.asarray(rows, dtype=np.int64)
    seen = np.zeros(len(parent), dtype=bool)
    frontier = rows[rows != NO_ROW]
    while len(frontier):
        seen[frontier] = True
        up = parent[frontier]
        up = up[up != NO_ROW]
        frontier = np.unique(up[~seen[up]])
    return np.flatnonzero(seen)
