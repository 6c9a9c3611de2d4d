"""Lossless small forms of the integer arrays a rank's fusion part carries (device intervals, per-entry columns):
each integer array in the narrowest signed type that holds its values, times as differences from the previous one.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

NARROW_TYPES = (np.int8, np.int16, np.int32)
"""The types ``narrow`` tries before int64, narrowest first."""


def narrow(values: np.ndarray) -> np.ndarray:
    """The integers in the narrowest signed type that holds them all."""
    values = np.asarray(values)
    if not len(values):
        return values.astype(NARROW_TYPES[0])
    lo, hi = int(values.min()), int(values.max())
    kind = next((t for t in NARROW_TYPES if np.iinfo(t).min <= lo and hi <= np.iinfo(t).max), np.int64)
    return values.astype(kind)


@dataclass
class Packed:
    """Intervals (starts and ends, any order) as the first start, each next start's difference from the one before
    and the lengths, ``narrow``ed."""

    first: int
    steps: np.ndarray
    lengths: np.ndarray

    def unpacked(self) -> tuple[np.ndarray, np.ndarray]:
        """The starts and ends (int64)."""
        if not len(self.lengths):
            return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
        starts = np.cumsum(np.concatenate(([self.first], self.steps.astype(np.int64))))
        return starts, starts + self.lengths.astype(np.int64)


def pack(starts: np.ndarray, ends: np.ndarray) -> Packed:
    """Intervals in their small form."""
    starts = np.asarray(starts, dtype=np.int64)
    first = int(starts[0]) if len(starts) else 0
    return Packed(first, narrow(np.diff(starts)), narrow(np.asarray(ends, dtype=np.int64) - starts))
