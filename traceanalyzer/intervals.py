"""Interval algebra on integer-ns [start, end) intervals, vectorized with numpy.

An interval set is a pair of sorted, disjoint arrays ``(starts, ends)`` as returned by ``union``.
"""

from __future__ import annotations

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
    reach = np.maximum.accumulate(e)
    new_group = np.empty(len(s), dtype=bool)
    new_group[0] = True
    new_group[1:] = s[1:] > reach[:-1]
    group = np.cumsum(new_group) - 1
    out_s = s[new_group]
    out_e = np.zeros(len(out_s), dtype=np.int64)
    np.maximum.at(out_e, group, e)
    return out_s, out_e


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
