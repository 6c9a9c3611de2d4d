"""Rows grouped by key columns in first-seen order, as ``groupby(keys, sort=False)`` groups them, reduced with numpy:
a check's few hundred rows without pandas' fixed cost per aggregation."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pandas as pd


class Groups:
    """The groups of rows sharing every key, the first-seen group first; a row missing a key is in no group, as
    pandas leaves it out."""

    def __init__(self, keys: Sequence[np.ndarray | pd.api.extensions.ExtensionArray | pd.Series]) -> None:
        codes = [pd.factorize(_plain(key))[0] for key in keys]
        rows = np.flatnonzero(np.logical_and.reduce([c >= 0 for c in codes]))
        ids = np.zeros(len(rows), dtype=np.int64)
        for c in codes:
            ids = pd.factorize(ids * (int(c.max(initial=0)) + 1) + c[rows])[0]  # renumbered: ids stay below rows²
        self.order = rows[np.argsort(ids, kind="stable")]  # row positions, group after group, in row order
        self.sizes = np.bincount(ids)
        self.starts = np.cumsum(self.sizes) - self.sizes
        self.first = self.order[self.starts]

    def __len__(self) -> int:
        return len(self.sizes)

    def reduce(self, ufunc: np.ufunc, values: np.ndarray) -> np.ndarray:
        """Per group: ``ufunc`` (add, minimum, maximum) over its rows' values."""
        ordered = values[self.order]
        return ufunc.reduceat(ordered, self.starts) if len(self) else ordered

    def sum(self, values: np.ndarray) -> np.ndarray:
        """Per group: the sum of its rows' values."""
        return self.reduce(np.add, values)

    def max(self, values: np.ndarray) -> np.ndarray:
        """Per group: the largest of its rows' values."""
        return self.reduce(np.maximum, values)

    def each(self, values: np.ndarray | pd.Series, reduce: Callable) -> list:
        """Per group: ``reduce`` of its rows' values (in row order)."""
        ordered = values.iloc[self.order] if isinstance(values, pd.Series) else values[self.order]
        ends = self.starts + self.sizes
        return [reduce(ordered[lo:hi]) for lo, hi in zip(self.starts.tolist(), ends.tolist(), strict=True)]

    def median(self, values: np.ndarray) -> np.ndarray:
        """Per group: the median of its rows' values, as a float."""
        return np.array(self.each(values.astype(np.float64), np.median), dtype=np.float64)


def _plain(key: np.ndarray | pd.api.extensions.ExtensionArray | pd.Series) -> object:
    """``key`` as factorize takes it on every supported pandas: a numpy-backed array as its ndarray (pandas 2 warns
    on a ``NumpyExtensionArray``, which ``Series.array`` gives for numpy columns), anything else as it is."""
    return key.to_numpy() if isinstance(key, pd.arrays.NumpyExtensionArray) else key
