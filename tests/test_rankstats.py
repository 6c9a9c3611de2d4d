"""The numpy rank statistics against scipy.stats: the Mann–Whitney p-values scipy gives, and Hodges–Lehmann
intervals that are exactly the shifts the exact Mann–Whitney test does not reject."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import mannwhitneyu

from traceanalyzer.comparison import rankstats

SIZES = [(1, 1), (2, 7), (3, 3), (5, 5), (4, 9), (8, 30), (12, 15), (40, 50), (3, 100)]


@pytest.mark.parametrize("m, n", SIZES, ids=[f"{m}x{n}" for m, n in SIZES])
@pytest.mark.parametrize("ties", [False, True], ids=["distinct", "tied"])
def test_mann_whitney_p_values_are_scipys(m, n, ties):
    rng = np.random.default_rng(m * 1000 + n)
    for _ in range(5):
        x, y = rng.normal(size=m), rng.normal(0.4, size=n)
        if ties:
            x, y = np.round(x), np.round(y)
        for alternative in ("two-sided", "less", "greater"):
            u, p = rankstats.mann_whitney(x, y, alternative)
            expected = mannwhitneyu(x, y, alternative=alternative)
            assert (u, p) == (pytest.approx(expected.statistic), pytest.approx(_scipy_p(expected, x, y), abs=1e-12))


def _scipy_p(expected, x: np.ndarray, y: np.ndarray) -> float:
    """scipy's p-value; where every value is the same one, scipy 1.17's 1.0 (scipy 1.18 gives nan there, the
    statistic having no variance), which is what we keep: nothing tells such samples apart."""
    if math.isnan(expected.pvalue) and len(np.unique(np.concatenate((x, y)))) == 1:
        return 1.0
    return float(expected.pvalue)


@pytest.mark.parametrize("m, n", [(1, 1), (3, 4), (6, 6), (10, 25), (30, 30)])
def test_u_counts_are_the_null_distribution(m, n):
    counts = rankstats.u_counts(m, n)
    assert counts.sum() == math.comb(m + n, m) and len(counts) == m * n + 1
    assert (counts == counts[::-1]).all() and (counts > 0).all()


@pytest.mark.parametrize("m, n", [(5, 5), (6, 8), (4, 12), (10, 10), (20, 24)], ids=str)
@pytest.mark.parametrize("confidence", [0.95, 0.99], ids=["95", "99"])
def test_shift_interval_is_the_set_of_shifts_the_exact_test_keeps(m, n, confidence):
    """Moses' interval inverts the two-sided exact test: a shift just inside it is not rejected at 1 - confidence,
    one just outside is."""
    rng = np.random.default_rng(m * n)
    a, b = rng.normal(10, 1, size=m), rng.normal(11, 1, size=n)
    result = rankstats.shift(a, b, confidence)
    assert result.low < result.estimate < result.high
    assert result.estimate == pytest.approx(np.median(np.subtract.outer(b, a)))

    def p(delta: float) -> float:
        return mannwhitneyu(b - delta, a, method="exact").pvalue

    eps = 1e-9
    alpha = 1 - confidence
    assert p(result.low + eps) > alpha and p(result.high - eps) > alpha
    assert p(result.low - eps) <= alpha and p(result.high + eps) <= alpha


def test_shift_interval_needs_enough_values_and_covers_as_stated():
    assert rankstats.min_samples(0.99) == 5 and rankstats.min_samples(0.95) == 4
    few = rankstats.shift([1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.0], 0.99)
    assert (few.low, few.high, few.estimate) == (None, None, 4.0)
    rng = np.random.default_rng(7)  # the normal approximation (45 a side): coverage near 95 %
    covered = [
        (s := rankstats.shift(rng.normal(size=45), rng.normal(size=45) + 1.0, 0.95)).low < 1.0 < s.high
        for _ in range(400)
    ]
    assert 0.92 < np.mean(covered) < 0.98
