"""Rank statistics of two samples in numpy: the Mann–Whitney U test and the Hodges–Lehmann shift with its
distribution-free confidence interval (Moses' interval: order statistics of the pairwise differences).

- ``mann_whitney`` gives the p-value ``scipy.stats.mannwhitneyu`` gives with its defaults (method 'auto': the exact
  null distribution when one sample has at most 8 values and there are no ties, else the normal approximation with
  the tie and continuity corrections).
- ``shift`` is the Hodges–Lehmann estimate of how much the second sample is shifted from the first (the median of
  all pairwise differences) and the two-sided interval at a confidence, from the exact null distribution of U while
  its counts fit an int64 (about 30 values a side), else its normal approximation. With too few values no interval
  at that confidence exists (5 a side are needed at 99 %): its ends are None. Above ``MAX_SAMPLES`` values a side,
  each sample is stood for by that many of its evenly spaced quantiles, which widens the interval (conservative).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

EXACT_TEST_MAX = 8
"""The exact test is used when one sample has at most this many values and no value is tied (as scipy's 'auto')."""
MAX_SAMPLES = 2000
"""Values a side above which a sample's evenly spaced quantiles stand for it in ``shift``."""
_EXACT_COUNTS_MAX = 2**60
"""Orderings C(m + n, m) above which the null distribution of U is taken as normal (its counts would overflow)."""


def u_counts(m: int, n: int) -> np.ndarray:
    """How many of the C(m + n, m) equally likely orderings give U = 0 .. m·n (the coefficients of the Gaussian
    binomial coefficient: the product over i = 1..m of (1 - q^(n+i)) / (1 - q^i))."""
    m, n = min(m, n), max(m, n)
    coef = np.zeros(m * n + m + 1, dtype=np.int64)
    coef[0] = 1
    for i in range(1, m + 1):
        coef[n + i :] -= coef[: len(coef) - n - i].copy()
        padded = np.concatenate((coef, np.zeros(-len(coef) % i, dtype=np.int64)))
        coef = np.cumsum(padded.reshape(-1, i), axis=0).reshape(-1)[: len(coef)]
    return coef[: m * n + 1]


def _exact(m: int, n: int) -> bool:
    return math.comb(m + n, m) < _EXACT_COUNTS_MAX


def mann_whitney(x: np.ndarray, y: np.ndarray, alternative: str = "two-sided") -> tuple[float, float]:
    """U of ``x`` and the p-value of the Mann–Whitney test that ``x`` is 'greater', 'less' or 'two-sided' different
    from ``y`` (as ``scipy.stats.mannwhitneyu(x, y, alternative=alternative)``)."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    n1, n2 = len(x), len(y)
    values, inverse, ties = np.unique(np.concatenate((x, y)), return_inverse=True, return_counts=True)
    ranks = (np.cumsum(ties) - (ties - 1) / 2.0)[inverse]  # average ranks, 1-based
    u1 = float(ranks[:n1].sum() - n1 * (n1 + 1) / 2)
    u2 = n1 * n2 - u1
    u, factor = {"greater": (u1, 1), "less": (u2, 1)}.get(alternative, (max(u1, u2), 2))
    if min(n1, n2) <= EXACT_TEST_MAX and not (ties > 1).any() and _exact(n1, n2):
        counts = u_counts(n1, n2)
        p = float(counts[int(round(u)) :].sum() / counts.sum())
    else:
        n = n1 + n2
        spread = math.sqrt(n1 * n2 / 12 * ((n + 1) - float((ties**3 - ties).sum()) / (n * (n - 1))))
        centred = u - n1 * n2 / 2 - 0.5
        z = centred / spread if spread else math.copysign(math.inf, centred)
        p = 0.5 * math.erfc(z / math.sqrt(2))
    return u1, min(max(p * factor, 0.0), 1.0)


@dataclass(frozen=True)
class Shift:
    """How much the second sample sits above the first: the Hodges–Lehmann estimate and the interval at
    ``confidence`` (two-sided; its ends None where the samples are too small for one)."""

    estimate: float
    low: float | None
    high: float | None
    confidence: float


def shift(first: np.ndarray, second: np.ndarray, confidence: float) -> Shift:
    """The shift of ``second`` from ``first`` with its distribution-free interval (see the module docstring)."""
    a, b = (_thinned(np.asarray(v, dtype=float)) for v in (first, second))
    differences = np.sort(np.subtract.outer(b, a).ravel())
    k = _order(len(a), len(b), 1 - confidence)
    estimate = float(np.median(differences))
    if k < 1:
        return Shift(estimate, None, None, confidence)
    return Shift(estimate, float(differences[k - 1]), float(differences[len(differences) - k]), confidence)


def _order(m: int, n: int, alpha: float) -> int:
    """The order k of the pairwise differences that bound the interval: the largest k with P(U ≤ k - 1) ≤ α / 2."""
    if _exact(m, n):
        counts = u_counts(m, n)
        return int(np.searchsorted(np.cumsum(counts) / counts.sum(), alpha / 2 * (1 + 1e-12), side="right"))
    spread = math.sqrt(m * n * (m + n + 1) / 12)
    return max(int(math.floor(m * n / 2 + 0.5 - NormalDist().inv_cdf(1 - alpha / 2) * spread)), 0)


def min_samples(confidence: float) -> int:
    """The fewest values a side (as many in each sample) for which an interval at ``confidence`` exists."""
    n = 1
    while _order(n, n, 1 - confidence) < 1:
        n += 1
    return n


def _thinned(values: np.ndarray) -> np.ndarray:
    """The sample, or ``MAX_SAMPLES`` of its evenly spaced quantiles when it is larger."""
    if len(values) <= MAX_SAMPLES:
        return values
    return np.quantile(values, np.linspace(0, 1, MAX_SAMPLES))
