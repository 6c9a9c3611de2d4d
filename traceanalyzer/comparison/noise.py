"""Is a change beyond the step-to-step variation? A one-sided Mann–Whitney U test of the candidate's per-step values
against the baseline's, in the direction of the change.

The samples are the (rank, step) pairs each run profiled. With fewer than ``MIN_STEPS`` per run the test is not
made and the verdict says so. A rank test asks only that the candidate's steps rank above (or below) the
baseline's: with 3 steps per run, only a complete separation (every candidate step slower than every baseline step)
reaches p = 0.05. The test is ``rankstats.mann_whitney`` (numpy; the p-values of scipy's).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

import numpy as np

from traceanalyzer.comparison.rankstats import mann_whitney

MIN_STEPS = 3
"""Steps per run below which the variation is not assessed."""
ALPHA = 0.05
"""A change is beyond noise when the one-sided p-value is at most this."""
TEST = "one-sided Mann–Whitney U over the (rank, step) samples"


class Verdict(str, Enum):
    """What the step-to-step variation says about one change."""

    BEYOND = "beyond noise"
    WITHIN = "within noise"
    FEW_STEPS = "too few steps"
    UNCHANGED = "no change"


@dataclass(frozen=True)
class Noise:
    """The verdict on one change, its p-value (None where no test was made) and the samples behind it."""

    verdict: Verdict
    p_value: float | None
    baseline_steps: int
    candidate_steps: int


def assess(baseline: np.ndarray, candidate: np.ndarray) -> Noise:
    """The verdict on candidate vs baseline (per-step values of one quantity); one value throughout, or the same
    values in both runs, is no change."""
    b, c = np.asarray(baseline, dtype=float), np.asarray(candidate, dtype=float)
    n = (len(b), len(c))
    if not (len(b) and len(c)) or np.ptp(np.concatenate((b, c))) == 0 or np.array_equal(np.sort(b), np.sort(c)):
        return Noise(Verdict.UNCHANGED, None, *n)
    if min(n) < MIN_STEPS:
        return Noise(Verdict.FEW_STEPS, None, *n)
    alternative = "greater" if c.mean() > b.mean() else "less"
    p = mann_whitney(c, b, alternative)[1]
    return Noise(Verdict.BEYOND if p <= ALPHA else Verdict.WITHIN, p, *n)
