"""Per-phase rows of a comparison of two generation runs: time to first token and time per output token.

Each metric's samples are what it is a statistic of (TTFT: the requests; TPOT: the decode tokens), so its noise
verdict is the Mann–Whitney test of ``noise`` over them. A run without generation (``analyzers.inference``) gives
no rows.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from traceanalyzer.analyzers.inference import InferenceAnalysis
from traceanalyzer.analyzers.inference.phases import DECODE, PREFILL
from traceanalyzer.comparison.diff import relative
from traceanalyzer.comparison.gate import TPOT, TTFT
from traceanalyzer.comparison.noise import assess

COLUMNS = [
    "metric", "phase", "baseline_ns", "candidate_ns", "delta_ns", "delta_share", "noise", "p_value",
    "baseline_samples", "candidate_samples",
]  # fmt: skip
"""One row per metric: its value in each run (ns), the change, its noise verdict over the samples counted."""

METRICS = (
    ("ttft_ns", PREFILL, 0.5),
    ("tpot_p50_ns", DECODE, 0.5),
    ("tpot_p90_ns", DECODE, 0.9),
)
"""Metric, phase and the quantile of its samples it reports."""


def rows(baseline: InferenceAnalysis, candidate: InferenceAnalysis) -> pd.DataFrame:
    """The per-phase rows (``COLUMNS``); none when either run has no generation."""
    if not (len(baseline.timeline) and len(candidate.timeline)):
        return pd.DataFrame(columns=COLUMNS)
    out = []
    for metric, phase, q in METRICS:
        b, c = _samples(baseline, phase), _samples(candidate, phase)
        if not (len(b) and len(c)):
            continue
        noise = assess(b, c)
        b_value, c_value = float(np.quantile(b, q)), float(np.quantile(c, q))
        out.append((metric, phase, b_value, c_value, c_value - b_value, np.nan, noise.verdict.value, noise.p_value,
                    len(b), len(c)))  # fmt: skip
    table = pd.DataFrame(out, columns=COLUMNS)
    table["delta_share"] = relative(table["delta_ns"], table["baseline_ns"])
    return table


def samples(baseline: InferenceAnalysis, candidate: InferenceAnalysis) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """What the gate judges per phase, by quantity: TTFT per request and the time of every decode token, in each
    run; none when either run has no generation (or a quantity has no samples in one of them)."""
    if not (len(baseline.timeline) and len(candidate.timeline)):
        return {}
    pairs = {quantity: (_samples(baseline, phase), _samples(candidate, phase)) for quantity, phase in PHASES.items()}
    return {quantity: (b, c) for quantity, (b, c) in pairs.items() if len(b) and len(c)}


PHASES = {TTFT: PREFILL, TPOT: DECODE}
"""The phase each quantity the gate judges is a time of."""


def _samples(analysis: InferenceAnalysis, phase: str) -> np.ndarray:
    """TTFT per request (prefill) or time per token of every decode iteration."""
    if phase == PREFILL:
        return analysis.requests["ttft_ns"].dropna().to_numpy(dtype=float)
    line = analysis.timeline
    return line.loc[line["phase"] == DECODE, "token_ns"].dropna().to_numpy(dtype=float)
