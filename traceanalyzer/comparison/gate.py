"""The regression gate: does the candidate's step time regress past a threshold, beyond the step-to-step noise?

The candidate fails when its median step time is longer than the baseline's by more than every threshold given
(a percentage of the baseline's, and/or milliseconds per step) and the change is beyond noise (``noise``). With
too few steps to tell, the thresholds alone decide and the verdict says the noise was not assessed. A run compared
with itself never fails. A failing verdict lists what got slower first: kernels, launching ops, exposed
communication, device idle and findings that appeared, by their change per step.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import pandas as pd

from traceanalyzer.comparison.diff import Status
from traceanalyzer.comparison.noise import Verdict

CULPRITS_PER_SOURCE = 3
"""How many of the kernels, launching ops and new findings are named, each."""

_METRIC_CULPRITS = {"comm_exposed_ns": "exposed communication", "idle_ns": "device idle"}


@dataclass(frozen=True)
class Threshold:
    """How much slower the candidate may be: a share of the baseline's step time and/or ns per step."""

    share: float | None = None
    ns: float | None = None

    def describe(self) -> str:
        """E.g. '+10.0% and +1.00 ms per step'."""
        parts = ([f"+{self.share:.1%}"] if self.share is not None else []) + (
            [f"+{self.ns / 1e6:.2f} ms"] if self.ns is not None else []
        )
        return " and ".join(parts) + " per step"


@dataclass
class GateVerdict:
    """The gate's verdict on one comparison."""

    failed: bool
    reason: str
    threshold: Threshold
    delta_ns: float
    delta_share: float | None
    noise: str
    culprits: list[dict] = field(default_factory=list)

    def to_dict(self) -> dict:
        """Plain-data form (the JSON's ``gate``)."""
        return {**asdict(self), "threshold": asdict(self.threshold)}


def judge(
    summary: pd.DataFrame, levels: dict[str, pd.DataFrame], findings: pd.DataFrame, threshold: Threshold
) -> GateVerdict:
    """The verdict from a comparison's summary, level tables and findings table."""
    step = summary.set_index("metric").loc["step_ns"]
    delta, share = float(step["delta_ns"]), _none(step["delta_share"])
    over = _over(delta, share, threshold)
    noisy = step["noise"] in (Verdict.WITHIN.value, Verdict.UNCHANGED.value)
    failed = over and not noisy
    reason = _reason(over, noisy, step["noise"], threshold)
    culprits = _culprits(summary, levels, findings) if delta > 0 else []
    return GateVerdict(failed, reason, threshold, delta, share, step["noise"], culprits)


def _over(delta: float, share: float | None, threshold: Threshold) -> bool:
    """Slower by more than every threshold given."""
    if delta <= 0:
        return False
    by_share = threshold.share is None or (share is not None and share > threshold.share)
    return by_share and (threshold.ns is None or delta > threshold.ns)


def _reason(over: bool, noisy: bool, noise: str, threshold: Threshold) -> str:
    limit = threshold.describe()
    if not over:
        return f"step time within {limit}"
    if noisy:
        return f"step time over {limit}, but within the step-to-step noise"
    if noise == Verdict.FEW_STEPS.value:
        return f"step time over {limit} (too few steps to assess the noise: the threshold decides)"
    return f"step time over {limit}, beyond the step-to-step noise"


def _culprits(summary: pd.DataFrame, levels: dict[str, pd.DataFrame], findings: pd.DataFrame) -> list[dict]:
    """What got slower, per step: the launching ops and kernels that slowed most, exposed communication and device
    idle where they grew, and the findings that appeared (their estimated cost)."""
    out = []
    for level, what in (("op_device", "op"), ("kernel", "kernel")):
        slower = levels[level][levels[level]["delta_ns"] > 0].head(CULPRITS_PER_SOURCE)
        out += [
            _culprit(what, row["label"], row["delta_ns"], row["status"], row["noise"]) for _, row in slower.iterrows()
        ]
    metrics = summary.set_index("metric")
    for metric, what in _METRIC_CULPRITS.items():
        row = metrics.loc[metric]
        if row["delta_ns"] > 0:
            out.append(_culprit(what, what, row["delta_ns"], Status.SLOWER.value, row["noise"]))
    new = findings[findings["status"] == Status.NEW.value].head(CULPRITS_PER_SOURCE)
    out += [_culprit("finding", row["title"], row["candidate_ns"], Status.NEW.value, "") for _, row in new.iterrows()]
    return out


def _culprit(what: str, name: str, delta_ns: float, status: str, noise: str) -> dict:
    return {"what": what, "name": str(name), "delta_ns": float(delta_ns), "status": status, "noise": noise}


def _none(value: float) -> float | None:
    return None if pd.isna(value) else float(value)
