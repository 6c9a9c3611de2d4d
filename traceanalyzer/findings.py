"""The one record every analyzer emits: what was found, where, the evidence, its worth, the advice."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import Enum

import pandas as pd

PUSH_THRESHOLD = 0.05
"""Rule of thumb: a finding worth under ~5 % of step time is reported but not pushed."""


class Severity(str, Enum):
    """How hard the report pushes a finding."""

    HIGH = "high"  # worth ≥ 20 % of step time
    MEDIUM = "medium"  # worth ≥ 5 %
    LOW = "low"  # reported, not pushed
    INFO = "info"  # a fact worth knowing, no time attached


@dataclass
class Finding:
    """One finding: what, where, evidence, the time it costs or could save, and what to do."""

    analyzer: str
    title: str
    advice: str
    cost_ns: int = 0
    step_share: float = 0.0
    where: dict = field(default_factory=dict)
    evidence: dict = field(default_factory=dict)
    estimated: bool = False
    severity: Severity = Severity.INFO

    def to_dict(self) -> dict:
        """Plain-data form, as the JSON report writes it."""
        out = asdict(self)
        out["severity"] = self.severity.value
        return out


def severity_of(step_share: float) -> Severity:
    """The severity a finding of the given worth (fraction of step time) gets."""
    if step_share >= 0.20:
        return Severity.HIGH
    if step_share >= PUSH_THRESHOLD:
        return Severity.MEDIUM
    return Severity.LOW


def make(
    analyzer: str,
    title: str,
    advice: str,
    cost_ns: int,
    step_time_ns: int,
    **details: object,
) -> Finding:
    """A finding whose share and severity follow from its cost against the total step time."""
    share = cost_ns / step_time_ns if step_time_ns > 0 else 0.0
    return Finding(
        analyzer=analyzer,
        title=title,
        advice=advice,
        cost_ns=int(cost_ns),
        step_share=float(share),
        severity=severity_of(share),
        **details,
    )


def ranked(findings: list[Finding]) -> list[Finding]:
    """Findings ordered by what they are worth, pushed ones first."""
    order = {Severity.HIGH: 0, Severity.MEDIUM: 1, Severity.LOW: 2, Severity.INFO: 3}
    return sorted(findings, key=lambda f: (order[f.severity], -f.cost_ns))


def to_frame(findings: list[Finding]) -> pd.DataFrame:
    """Findings as a DataFrame, one row each."""
    columns = ["severity", "analyzer", "title", "cost_ns", "step_share", "estimated", "advice", "where", "evidence"]
    return pd.DataFrame([f.to_dict() for f in findings], columns=columns)
