"""Interval algebra on integer-ns [start, end) intervals, vectorized with numpy, and the small lossless form in
which a rank's part carries intervals (``pack``) and integer columns (``narrow``).

An interval set is a pair of sorted, disjoint arrays ``(starts, ends)`` as returned by ``union``.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import numpy as np

Intervals = tuple[np.ndarray, np.ndarray]

EMPTY: Intervals = (np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64))


def union(starts: np.ndarray, ends: np.ndarray) -> Intervals:
    """Merge possibly overlapping intervals into a sorted disjoint set."""
    if len(starts) == 0:
        return EMPTY
    order = np.argsort(starts, kind="stable")
    s = np.asarray(starts, dtype=np.int64)[order]
    e = np.asarray(ends, dtype=np.int64)[order]
    del order
    new_group = np.empty(len(s), dtype=bool)
    new_group[0] = True
    new_group[1:] = s[1:] > np.maximum.accumulate(e)[:-1]
    first = np.flatnonzero(new_group)  # each group's first interval; its end is the group's largest end
    return s[first], np.maximum.reduceat(e, first)


def length(ivs: Intervals) -> int:
    """Total covered length."""
    return int((ivs[1] - ivs[0]).sum())


def clip(ivs: Intervals, lo: int, hi: int) -> Intervals:
    """The part of a disjoint set inside [lo, hi), cut from the intervals that reach into it (two binary searches:
    a window costs its own intervals, not the whole set's)."""
    first, last = np.searchsorted(ivs[1], lo, side="right"), np.searchsorted(ivs[0], hi, side="left")
    s = np.clip(ivs[0][first:last], lo, hi)
    e = np.clip(ivs[1][first:last], lo, hi)
    keep = e > s
    return s[keep], e[keep]


def intersect(a: Intervals, b: Intervals) -> Intervals:
    """Intersection of two disjoint sets."""
    if len(a[0]) == 0 or len(b[0]) == 0:
        return EMPTY
    # For each interval of a, the b intervals that can overlap it form a contiguous range.
    lo = np.searchsorted(b[1], a[0], side="right")
    hi = np.searchsorted(b[0], a[1], side="left")
    counts = np.maximum(hi - lo, 0)
    if counts.sum() == 0:
        return EMPTY
    ai = np.repeat(np.arange(len(a[0])), counts)
    offsets = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)
    bi = np.repeat(lo, counts) + offsets
    s = np.maximum(a[0][ai], b[0][bi])
    e = np.minimum(a[1][ai], b[1][bi])
    keep = e > s
    return s[keep], e[keep]


def subtract(a: Intervals, b: Intervals) -> Intervals:
    """The parts of a not covered by b (both disjoint sets)."""
    if len(a[0]) == 0 or len(b[0]) == 0:
        return a
    lo = min(int(a[0].min()), int(b[0].min()))
    hi = max(int(a[1].max()), int(b[1].max()))
    return intersect(a, complement(b, lo, hi))


def complement(ivs: Intervals, lo: int, hi: int) -> Intervals:
    """The gaps of a disjoint set within [lo, hi)."""
    s = np.concatenate(([lo], ivs[1]))
    e = np.concatenate((ivs[0], [hi]))
    keep = e > s
    return s[keep].astype(np.int64), e[keep].astype(np.int64)


def overlap_length(a: Intervals, b: Intervals) -> int:
    """Length of the intersection of two disjoint sets."""
    return length(intersect(a, b))


def covered_within(ivs: Intervals, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """For each query interval, how much of it a disjoint set covers."""
    if len(ivs[0]) == 0 or len(starts) == 0:
        return np.zeros(len(starts), dtype=np.int64)
    cum = np.concatenate(([0], np.cumsum(ivs[1] - ivs[0])))
    return _covered_before(ivs, cum, ends) - _covered_before(ivs, cum, starts)


def _covered_before(ivs: Intervals, cum: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Covered length in (-inf, t) for each t."""
    i = np.searchsorted(ivs[0], t, side="right")
    full = cum[np.maximum(i - 1, 0)]
    partial = np.where(i > 0, np.minimum(t, ivs[1][np.maximum(i - 1, 0)]) - ivs[0][np.maximum(i - 1, 0)], 0)
    return np.where(i > 0, full + np.maximum(partial, 0), 0)


NARROW_TYPES = (np.int8, np.int16, np.int32)
"""The types ``narrow`` tries before int64, narrowest first."""


def narrow(values: np.ndarray) -> np.ndarray:
    """The integers in the narrowest signed type that holds them all (a copy)."""
    values = np.asarray(values)
    if not len(values):
        return values.astype(NARROW_TYPES[0])
    lo, hi = int(values.min()), int(values.max())
    kind = next((t for t in NARROW_TYPES if np.iinfo(t).min <= lo and hi <= np.iinfo(t).max), np.int64)
    return values.astype(kind)


@dataclass(frozen=True)
class Packed:
    """Intervals in their small form (``pack``): how many, the first start, and per interval the gap from the
    previous end to its start and its length, each ``narrow``ed, its bytes grouped by significance and compressed
    (zlib level 1) as (dtype, bytes)."""

    count: int
    first: int
    gaps: tuple[str, bytes]
    lengths: tuple[str, bytes]

    def unpacked(self) -> Intervals:
        """The starts and ends (int64) ``pack`` was given, in their order."""
        if not self.count:
            return EMPTY
        lengths = _unsqueezed(self.lengths, self.count)
        steps = lengths[:-1] + _unsqueezed(self.gaps, self.count - 1)
        starts = np.cumsum(np.concatenate(([self.first], steps)))
        return starts, starts + lengths


def pack(starts: np.ndarray, ends: np.ndarray) -> Packed:
    """Intervals (int64 starts and ends of equal length, in any order, even overlapping or of negative length) in
    their small form; lossless: ``pack(s, e).unpacked()`` equals ``(s, e)``. Differences that overflow int64 wrap
    around, as the sums that undo them do. Sorted disjoint sets of device work pack best (a quarter or less of the
    two int64 arrays' bytes)."""
    starts, ends = np.asarray(starts, dtype=np.int64), np.asarray(ends, dtype=np.int64)
    if len(starts) != len(ends):
        raise ValueError(f"pack: {len(starts)} starts but {len(ends)} ends")
    first = int(starts[0]) if len(starts) else 0
    return Packed(len(starts), first, _squeezed(starts[1:] - ends[:-1]), _squeezed(ends - starts))


def _squeezed(values: np.ndarray) -> tuple[str, bytes]:
    """Integers ``narrow``ed, their bytes grouped by significance (all lowest bytes first), compressed."""
    small = narrow(values)
    planes = small.view(np.uint8).reshape(-1, small.itemsize).T
    return small.dtype.str, zlib.compress(planes.tobytes(), 1)


def _unsqueezed(squeezed: tuple[str, bytes], count: int) -> np.ndarray:
    """The ``count`` integers ``_squeezed`` squeezed, as int64."""
    kind = np.dtype(squeezed[0])
    planes = np.frombuffer(zlib.decompress(squeezed[1]), dtype=np.uint8).reshape(kind.itemsize, count)
    return np.ascontiguousarray(planes.T).view(kind).reshape(count).astype(np.int64)
