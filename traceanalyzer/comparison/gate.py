"""The regression gate: is the candidate's step time longer than the baseline's by more than a threshold, at a
stated confidence?

The rule, in order:

1. **The step's change and its interval.** The change in step time is the Hodges–Lehmann shift of the candidate's
   per-unit step times from the baseline's (``rankstats.shift``: the median of all pairwise differences of the
   (rank, step) samples), with its distribution-free two-sided interval at ``confidence`` (default 99 %). The
   threshold (a share of the baseline's median step time and/or ns per step; with both, the larger) is compared
   with the whole interval: **fail** when all of it lies above the threshold, **pass** when all of it lies at or
   below, **inconclusive** otherwise (the interval straddles the threshold, or the runs have too few steps for an
   interval at that confidence: 5 a run at 99 %). When the steps are independent samples of one distribution, an
   unchanged program fails at most (1 - confidence) / 2 of the time (0.5 % at 99 %), and so does one that
   regressed by exactly the threshold. ``detectable`` is the interval's reach below the estimate: a change smaller
   than that cannot be told from noise with these steps.
2. **What the code controls, for host-bound steps.** Within-run samples cannot see how much a host-bound step varies
   from process to process (the same program in separate processes: medians 15–22 ms). When most compared steps of
   either run are host-bound (the step model's ``bound``), the gate also judges the work per step by the same rule
   and the same threshold as a share: device work (device time of the kernels, copies and sets launched in the
   step, summed; collectives left out, their time includes waiting for peers) and CPU ops (their count). Work
   beyond the threshold **fails** the gate, even when the step time did not change (the work fills the idle of a
   host-bound step until it no longer can). A step time that is not a pass (beyond the threshold, or straddling
   it) with that work unchanged is **inconclusive** ("host-bound, device work unchanged": the host side or the
   environment, not the code). Host time per CPU op is reported beside them, not judged.

3. **Generation, per phase.** When both runs are generation (``comparison.inference``), the gate also judges the
   time per output token over the decode tokens and the time to first token over the requests, by the same rule
   and the same threshold as a share of their baseline medians: either beyond it **fails** the gate. One
   ``generate()`` call per profiler step leaves too few steps to judge the step time; the gate then passes when
   both phases pass, and stays inconclusive while either cannot tell (a single request each: its TTFT cannot be
   told from noise).

Same samples in both runs are no change and pass. ``culprits`` are the rows of the step delta's decomposition
(``contributions``), biggest first.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import Enum

import numpy as np
import pandas as pd

from traceanalyzer import humanize
from traceanalyzer.comparison.rankstats import min_samples, shift

DEFAULT_CONFIDENCE = 0.99
"""Confidence of the gate's interval unless told otherwise."""
HOST_BOUND_SHARE = 0.5
"""A run's steps are host-bound when more than this share of its compared steps is."""

TTFT, TPOT = "time to first token", "time per output token"
"""The generation quantities the gate judges (rule 3)."""
PHASE_SAMPLES = {TTFT: "requests", TPOT: "decode tokens"}
"""What the samples of each generation quantity are."""

WORK = {"device_work_ns": "device work", "cpu_ops": "CPU ops"}
"""The per-unit work the gate judges for host-bound steps (``samples.WORK``) and what it is called."""


class Outcome(str, Enum):
    """The gate's verdict."""

    PASS = "pass"
    FAIL = "fail"
    INCONCLUSIVE = "inconclusive"


@dataclass(frozen=True)
class Threshold:
    """How much slower the candidate may be: a share of the baseline's step time and/or ns per step."""

    share: float | None = None
    ns: float | None = None

    def describe(self) -> str:
        """E.g. '+10.0% and +1.00 ms per step'."""
        parts = ([f"+{humanize.share(self.share)}"] if self.share is not None else []) + (
            [f"+{humanize.duration(self.ns)}"] if self.ns is not None else []
        )
        return " and ".join(parts) + " per step"

    def limit_ns(self, baseline_ns: float) -> float:
        """The threshold in ns per step for a baseline step time: the larger of those given (both must be exceeded)."""
        limits = ([self.share * baseline_ns] if self.share is not None else []) + (
            [self.ns] if self.ns is not None else []
        )
        return max(limits, default=0.0)


@dataclass(frozen=True)
class Change:
    """One per-unit quantity's change, candidate vs baseline: the baseline's median, the shift with its interval
    (None ends: too few units), the limit it is judged against and its outcome."""

    quantity: str
    unit: str  # "ns" or "count"
    baseline: float
    estimate: float
    low: float | None
    high: float | None
    limit: float
    steps: tuple[int, int]
    outcome: Outcome

    def share(self, value: float | None) -> float | None:
        """A value of this change as a share of the baseline's median."""
        return None if value is None or not self.baseline else value / self.baseline

    @property
    def detectable(self) -> float | None:
        """The smallest change told from noise: the interval's reach below the estimate."""
        return None if self.low is None else self.estimate - self.low

    def to_dict(self) -> dict:
        """Plain data, with shares of the baseline."""
        out = {**asdict(self), "steps": list(self.steps), "outcome": self.outcome.value}
        for key in ("estimate", "low", "high", "limit", "detectable"):
            out[f"{key}_share"] = self.share(getattr(self, key))
        out = {**out, "detectable": self.detectable}
        return {k: None if isinstance(v, float) and not np.isfinite(v) else v for k, v in out.items()}  # no limit


def change(quantity: str, unit: str, baseline: np.ndarray, candidate: np.ndarray, limit: float, confidence: float):
    """The change of one quantity and its outcome against ``limit`` (same unit, per unit of the runs)."""
    b, c = np.asarray(baseline, dtype=float), np.asarray(candidate, dtype=float)
    steps = (len(b), len(c))
    base = float(np.median(b)) if len(b) else 0.0
    if not (len(b) and len(c)) or np.array_equal(np.sort(b), np.sort(c)):
        return Change(quantity, unit, base, 0.0, None, None, limit, steps, Outcome.PASS)  # no change
    s = shift(b, c, confidence)
    if s.low is None:
        outcome = Outcome.INCONCLUSIVE
    else:
        outcome = Outcome.FAIL if s.low > limit else Outcome.PASS if s.high <= limit else Outcome.INCONCLUSIVE
    return Change(quantity, unit, base, s.estimate, s.low, s.high, limit, steps, outcome)


@dataclass
class GateVerdict:
    """The gate's verdict on one comparison: outcome, the sentence that says why (after 'FAIL: ', 'pass: ' or
    'inconclusive: '), the step's change, the work
    judged for host-bound steps, and the culprits (the step delta's decomposition)."""

    outcome: str
    reason: str
    threshold: Threshold
    confidence: float
    host_bound: bool
    step: Change
    work: list[Change] = field(default_factory=list)
    host_time_per_op: Change | None = None
    culprits: list[dict] = field(default_factory=list)
    generation: list[Change] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        """The candidate regressed (the CLI's exit 3)."""
        return self.outcome == Outcome.FAIL.value

    def to_dict(self) -> dict:
        """Plain-data form (the JSON's ``gate``)."""
        return {
            "outcome": self.outcome,
            "failed": self.failed,
            "reason": self.reason,
            "threshold": asdict(self.threshold),
            "confidence": self.confidence,
            "min_steps": min_samples(self.confidence),
            "host_bound": self.host_bound,
            "step": self.step.to_dict(),
            "work": [w.to_dict() for w in self.work],
            "host_time_per_op": self.host_time_per_op.to_dict() if self.host_time_per_op else None,
            "culprits": self.culprits,
            "generation": [{**g.to_dict(), "samples": PHASE_SAMPLES[g.quantity]} for g in self.generation],
        }


def judge(
    sides: tuple[pd.DataFrame, pd.DataFrame],
    culprits: pd.DataFrame,
    threshold: Threshold,
    confidence: float,
    generation: dict[str, tuple[np.ndarray, np.ndarray]] | None = None,
) -> GateVerdict:
    """The verdict from both runs' per-unit samples (``samples.metrics``), the step delta's decomposition and, for
    generation runs, each phase's samples by quantity (``inference.samples``: TTFT per request, TPOT per token)."""
    b, c = sides
    limit = threshold.limit_ns(float(np.median(b["step_ns"])) if len(b) else 0.0)
    step = change("step time", "ns", b["step_ns"], c["step_ns"], limit, confidence)
    host_bound = any(len(s) and s["host_bound"].mean() > HOST_BOUND_SHARE for s in sides)
    rows = [{k: _plain(v) for k, v in row.items()} for row in culprits.to_dict("records")]
    verdict = GateVerdict(Outcome.PASS.value, "", threshold, confidence, host_bound, step, culprits=rows)
    share = limit / step.baseline if step.baseline else 0.0
    if host_bound:
        verdict.work = [_work(column, sides, share, confidence) for column in WORK]
        verdict.host_time_per_op = change(
            "host time per CPU op", "ns", *(_per_op(s) for s in sides), np.inf, confidence
        )
    verdict.generation = [
        change(quantity, "ns", pb, pc, share * float(np.median(pb)), confidence)
        for quantity, (pb, pc) in (generation or {}).items()
    ]
    verdict.outcome, verdict.reason = _decide(verdict)
    return verdict


def _work(column: str, sides: tuple[pd.DataFrame, pd.DataFrame], share: float, confidence: float) -> Change:
    b, c = (s[column].to_numpy(float) for s in sides)
    unit = "count" if column == "cpu_ops" else "ns"
    return change(WORK[column], unit, b, c, share * (float(np.median(b)) if len(b) else 0.0), confidence)


def _per_op(side: pd.DataFrame) -> np.ndarray:
    return (side["cpu_op_ns"] / side["cpu_ops"].where(side["cpu_ops"] > 0)).dropna().to_numpy(float)


def _decide(verdict: GateVerdict) -> tuple[str, str]:
    """The outcome and its sentence (rules 1 and 2 of the module docstring)."""
    step, limit, conf = verdict.step, verdict.threshold.describe(), humanize.share(verdict.confidence, 0)
    grown = [w for w in verdict.work if w.outcome is Outcome.FAIL]
    if grown:
        what = "; ".join(_sentence(w, conf) for w in grown)
        note = {
            Outcome.PASS: " (reported though the step time did not grow beyond it)",
            Outcome.INCONCLUSIVE: " (the step time alone cannot tell)",
        }.get(step.outcome, "")
        return Outcome.FAIL.value, f"host-bound steps, their work grew: {what}, beyond {limit}{note}"
    slower = [g for g in verdict.generation if g.outcome is Outcome.FAIL]
    if slower:
        what = "; ".join(_sentence(g, conf) for g in slower)
        return Outcome.FAIL.value, f"generation slower: {what}, beyond {_as_share(limit)}"
    if verdict.generation and step.outcome is Outcome.INCONCLUSIVE and step.low is None:
        return _by_phase(verdict.generation, step, limit, conf, verdict.confidence)
    same_work = verdict.work and all(w.outcome is Outcome.PASS for w in verdict.work)
    if verdict.host_bound and same_work and step.outcome is not Outcome.PASS:
        work = ", ".join(f"{w.quantity} {_signed_share(w, w.estimate)}" for w in verdict.work)
        return Outcome.INCONCLUSIVE.value, (
            f"host-bound, device work unchanged ({work} per step): {_sentence(step, conf)} is the host side or "
            "the environment, not the code"
        )
    if step.outcome is Outcome.INCONCLUSIVE:
        return Outcome.INCONCLUSIVE.value, _inconclusive(step, limit, conf, verdict.confidence)
    if step.outcome is Outcome.FAIL:
        return Outcome.FAIL.value, f"{_sentence(step, conf)}, all of it beyond {limit}"
    if step.low is None:
        return Outcome.PASS.value, f"step time unchanged (the same step times in both runs), within {limit}"
    return Outcome.PASS.value, f"{_sentence(step, conf)}, all of it within {limit}"


def _by_phase(phases: list[Change], step: Change, limit: str, conf: str, confidence: float) -> tuple[str, str]:
    """The outcome of generation runs with too few steps to judge the step time: from their phases."""
    steps = f"step time: {step.steps[0]} vs {step.steps[1]} steps, too few to judge"
    open_ = [g for g in phases if g.outcome is not Outcome.PASS]
    if not open_:
        within = "; ".join(_sentence(g, conf) if g.low is not None else f"{g.quantity} unchanged" for g in phases)
        return Outcome.PASS.value, f"generation: {within}, all of it within {_as_share(limit)} ({steps})"
    why = "; ".join(_phase_open(g, _as_share(limit), conf, confidence) for g in open_)
    return Outcome.INCONCLUSIVE.value, f"generation: {why} ({steps})"


def _as_share(limit: str) -> str:
    """The threshold as the generation quantities are judged against it."""
    return f"{limit} (as a share of the step, applied to each baseline median)"


def _phase_open(phase: Change, limit: str, conf: str, confidence: float) -> str:
    """Why one phase's change cannot be told from noise."""
    samples = f"{phase.steps[0]} vs {phase.steps[1]} {PHASE_SAMPLES.get(phase.quantity, 'samples')}"
    if phase.low is None:
        return f"{phase.quantity} cannot be told from noise with {samples} (it takes {min_samples(confidence)})"
    return f"{_sentence(phase, conf)} reaches both sides of {limit} with {samples}"


def _inconclusive(step: Change, limit: str, conf: str, confidence: float) -> str:
    steps = f"{step.steps[0]} vs {step.steps[1]} steps"
    if step.low is None:
        return (
            f"with {steps} changes of any size cannot be told from noise at {conf} confidence "
            f"(it takes {min_samples(confidence)} steps a run); profile more steps"
        )
    return (
        f"with {steps} changes below {_share_or_ns(step, step.detectable)} cannot be told from noise; "
        f"profile more steps ({_sentence(step, conf)} reaches both sides of {limit})"
    )


def _sentence(change: Change, conf: str) -> str:
    """E.g. 'step time +15.2% (99% interval +14.8% … +15.6%)'."""
    interval = ""
    if change.low is not None:
        interval = f" ({conf} interval {_signed_share(change, change.low)} … {_signed_share(change, change.high)})"
    return f"{change.quantity} {_signed_share(change, change.estimate)}{interval}"


def _signed_share(change: Change, value: float) -> str:
    text = _share_or_ns(change, value)
    return text if text.startswith("-") else "+" + text


def _share_or_ns(change: Change, value: float) -> str:
    share = change.share(value)
    if share is not None:
        return humanize.share(share)
    return humanize.duration(value) if change.unit == "ns" else f"{value:g}"


def _plain(value: object) -> object:
    """numpy scalars to Python; NaN to None."""
    if isinstance(value, float) and value != value:
        return None
    return value.item() if hasattr(value, "item") else value
