"""The one record every analyzer emits, and the ranking that decides which findings the report pushes.

A finding states, **per step**, the time it concerns and the **estimated saving** of its fix, and how that saving
was obtained (``Basis``: measured in the trace, or modelled with the model named). It may claim device intervals
(per rank) that the saving comes from. ``rank`` orders findings by saving and pushes them so that one device
interval is pushed by at most one finding (a later finding whose claims are mostly taken points to the earlier
one instead) and the pushed savings together never exceed the step time (of each rank); a finding whose saving was
cut says why in ``cut``, naming the findings that took it by their place in the ranking (``#1``). Every share is of
the median step (``StepTime``), the summary's step figure; savings are per step (total over the steps / steps). A
finding that costs no time but states a risk (memory running out) carries that risk's severity (``risk``) and is
pushed when it is high or medium. A saving that makes device work faster with the host's work unchanged
(``Finding.device_time``) counts only down to where the step turns host-bound: the device-time savings pushed on a
rank together never exceed its ``headroom`` (the time per step the host waits for the device).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from traceanalyzer import humanize, intervals, notebook
from traceanalyzer.intervals import Intervals

PUSH_THRESHOLD = 0.05
"""Rule of thumb: a finding whose saving is under ~5 % of step time is reported but not pushed."""
HIGH_THRESHOLD = 0.20
"""A saving of at least this share of step time is high severity."""
COVERED = 0.5
"""A finding whose claimed time is at least this much another pushed finding's points to that one instead."""

Claims = dict[int, Intervals]
"""Device intervals per rank that a finding's saving comes from."""


class Severity(str, Enum):
    """How hard the report pushes a finding."""

    HIGH = "high"  # saving ≥ 20 % of step time
    MEDIUM = "medium"  # saving ≥ 5 %
    LOW = "low"  # reported, not pushed
    INFO = "info"  # a fact worth knowing, no saving estimated


class Basis(str, Enum):
    """Where a saving comes from."""

    MEASURED = "measured"  # time the trace shows would go (idle, exposed communication, waiting)
    MODELLED = "modelled"  # an estimate from a model, named in ``Finding.model``
    NONE = "not estimated"


@dataclass(frozen=True)
class StepTime:
    """The step time findings are weighed against: the total over the steps analysed, how many there were, and
    their median step (the summary's step figure; 0 where unknown)."""

    total_ns: int
    steps: int
    median_ns: int = 0

    @property
    def per_step_ns(self) -> int:
        """The step a finding is a share of: the median step time (ns), the mean where no median is known."""
        return self.median_ns or self.total_ns // max(self.steps, 1)


@dataclass
class Finding:
    """One finding: what, where, evidence, the time it concerns and its fix would save per step, what to do."""

    id: str
    analyzer: str
    title: str
    advice: str
    concerns_ns: int = 0
    saving_ns: int = 0
    basis: Basis = Basis.NONE
    model: str = ""
    step_ns: int = 0
    steps: int = 0
    where: dict = field(default_factory=dict)
    evidence: dict = field(default_factory=dict)
    severity: Severity = Severity.INFO
    pushed: bool = False
    covered_by: str = ""
    cut: str = ""
    risk: Severity = Severity.INFO
    claims: Claims = field(default_factory=dict, repr=False, compare=False)
    device_time: bool = False
    """The saving makes device work faster while the host's work stays (faster kernels: precision, a GEMM nearer
    its roofline), so it stops where the host becomes the limit; a fix that also removes host work (fusion: fewer
    launches) is not bounded so."""

    def __repr__(self) -> str:
        return notebook.finding_repr(self)

    def _repr_html_(self) -> str:
        return notebook.finding_html(self)

    @property
    def step_share(self) -> float:
        """The saving as a share of the step time."""
        return self.saving_ns / self.step_ns if self.step_ns > 0 else 0.0

    def worth(self, model: bool = True) -> str:
        """What the finding is worth per step, in the words every presenter uses: what covers its time, or the time
        it concerns (saving not estimated), or its saving as a share of the median step with its basis (and its
        model, unless ``model`` is False) and what cut it."""
        if self.covered_by:
            return f"its time is {self.cut or 'counted under another finding'}: {self.covered_by}"
        if self.basis is Basis.NONE:
            return f"concerns {humanize.duration(self.concerns_ns)}/step; saving not estimated"
        how = f"{self.basis.value}: {self.model}" if model and self.model else self.basis.value
        cut = f"; cut: {self.cut}" if self.cut else ""
        return (
            f"saves ~{humanize.duration(self.saving_ns)}/step ({humanize.share(self.step_share)} of the "
            f"{humanize.duration(self.step_ns)} median step; {how}{cut})"
        )

    def to_dict(self) -> dict:
        """Plain-data form, as the JSON report writes it (times in ns per step)."""
        return {
            "id": self.id,
            "analyzer": self.analyzer,
            "title": self.title,
            "advice": self.advice,
            "severity": self.severity.value,
            "pushed": self.pushed,
            "concerns_ns_per_step": int(self.concerns_ns),
            "saving_ns_per_step": int(self.saving_ns),
            "step_ns": int(self.step_ns),
            "step_share": float(self.step_share),
            "steps": int(self.steps),
            "basis": self.basis.value,
            "model": self.model,
            "covered_by": self.covered_by,
            "cut": self.cut,
            "where": self.where,
            "evidence": self.evidence,
        }


def make(
    analyzer: str,
    kind: str,
    title: str,
    advice: str,
    step: StepTime,
    *,
    concerns_ns: int,
    saving_ns: int = 0,
    basis: Basis = Basis.NONE,
    model: str = "",
    claims: Claims | None = None,
    where: dict | None = None,
    evidence: dict | None = None,
    device_time: bool = False,
) -> Finding:
    """A finding from totals over the steps analysed (``concerns_ns``, ``saving_ns``), stated per step."""
    n = max(step.steps, 1)
    saving = int(saving_ns) // n if basis is not Basis.NONE else 0
    return Finding(
        id=f"{analyzer}.{kind}",
        analyzer=analyzer,
        title=title,
        advice=advice,
        concerns_ns=int(concerns_ns) // n,
        saving_ns=saving,
        basis=basis,
        model=model,
        step_ns=step.per_step_ns,
        steps=step.steps,
        where=where or {},
        evidence=evidence or {},
        claims=claims or {},
        device_time=device_time,
    )


def severity_of(step_share: float, basis: Basis = Basis.MODELLED) -> Severity:
    """The severity a finding whose saving is this share of step time gets."""
    if basis is Basis.NONE:
        return Severity.INFO
    if step_share >= HIGH_THRESHOLD:
        return Severity.HIGH
    if step_share >= PUSH_THRESHOLD:
        return Severity.MEDIUM
    return Severity.LOW


def rank(findings: list[Finding], headroom: dict[int, int] | None = None) -> list[Finding]:
    """Findings by saving, pushed ones first; overlapping claims, the step-time budget and, for device-time savings,
    the ranks' ``headroom`` (ns per step the host waits for the device; none: unbounded) applied (see module)."""
    ordered = sorted(findings, key=lambda f: (-f.saving_ns, -f.concerns_ns, f.id, f.title))
    claimed: dict[int, list[tuple[Intervals, Finding]]] = {}
    spent: dict[object, int] = {}  # per rank; None: findings of the whole job, which count against every rank
    spenders: dict[object, list[Finding]] = {}
    cuts: dict[int, tuple[str, list[Finding]]] = {}  # per finding (by id): why its saving was cut, and by whom
    steps = {f.where["rank"]: f.step_ns for f in ordered if f.where.get("rank") is not None}  # each rank's step
    device: dict[object, list[Finding]] = {}  # pushed device-time savings, per rank (None: the whole job's)
    for f in ordered:
        key = f.where.get("rank")
        taken, by = _taken(f.claims, claimed)
        if taken >= COVERED and by:
            f.covered_by = by.title
            f.evidence["saving_before_overlap_ns_per_step"] = f.saving_ns
            f.saving_ns = 0
            cuts[id(f)] = ("counted under {}", [by])
        elif taken > 0:
            f.evidence["saving_before_overlap_ns_per_step"] = f.saving_ns
            f.saving_ns = int(f.saving_ns * (1 - taken))
            cuts[id(f)] = (f"{humanize.share(taken, 0)} of its time counted under {{}}", [by])
        left = _left(f, spent, steps)
        if f.saving_ns > left:
            f.evidence["saving_before_step_budget_ns_per_step"] = f.saving_ns
            f.saving_ns = left
            cuts[id(f)] = ("the step's budget is used by {}", _users(spenders, key))
        if f.device_time and headroom is not None and _bound_by_headroom(f, key, headroom, device):
            users = _users(device, key)
            why = "the step turns host-bound first" + (" (its device headroom is used by {})" if users else "")
            cuts[id(f)] = (why, users)
        f.severity = _stronger(severity_of(f.step_share, f.basis), f.risk) if not f.covered_by else Severity.INFO
        f.pushed = f.severity in (Severity.HIGH, Severity.MEDIUM)
        if f.pushed:
            spent[key] = spent.get(key, 0) + f.saving_ns
            if f.saving_ns:
                spenders.setdefault(key, []).append(f)
                if f.device_time:
                    device.setdefault(key, []).append(f)
            for r, ivs in f.claims.items():
                claimed.setdefault(r, []).append((ivs, f))
    ranked = sorted(ordered, key=lambda f: (_ORDER[f.severity], -f.saving_ns, -f.concerns_ns))
    place = {id(f): n for n, f in enumerate(ranked, 1)}
    for f in ranked:
        if id(f) in cuts:
            why, by = cuts[id(f)]
            f.cut = why.format(_places(sorted(place[id(b)] for b in by)))
    return ranked


def _left(f: Finding, spent: dict[object, int], steps: dict[object, int]) -> int:
    """What is left of the step for a finding's saving: of its rank's step, or for a finding of the whole job, of
    every rank's (``steps``: each rank's step, as its findings state it)."""
    key, job = f.where.get("rank"), spent.get(None, 0)
    if key is not None:
        return max(f.step_ns - job - spent.get(key, 0), 0)
    ranks = max((v for k, v in spent.items() if k is not None), default=0)
    own = [step - spent.get(rank, 0) for rank, step in steps.items()]
    return max(min([f.step_ns - ranks, *own]) - job, 0)


_ORDER = {Severity.HIGH: 0, Severity.MEDIUM: 1, Severity.LOW: 2, Severity.INFO: 3}


def _stronger(a: Severity, b: Severity) -> Severity:
    """The more severe of two severities."""
    return a if _ORDER[a] <= _ORDER[b] else b


def _places(numbers: list[int]) -> str:
    """Places in the ranking as words: '#1', '#1 and #2', '#1, #2 and #4'."""
    names = [f"#{n}" for n in numbers] or ["the findings above"]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def _users(spenders: dict[object, list[Finding]], key: object) -> list[Finding]:
    """The pushed findings that spent a budget a finding of ``key`` (a rank, or None: the whole job) shares."""
    return [u for k, us in spenders.items() if k is None or key is None or k == key for u in us]


def _bound_by_headroom(f: Finding, key: object, headroom: dict[int, int], device: dict[object, list[Finding]]) -> bool:
    """Cut a device-time saving to what its rank's headroom has left (a job-wide one: the smallest rank's); whether
    it was cut."""
    spent = {k: sum(u.saving_ns for u in us) for k, us in device.items()}
    if key is None:
        room = min(headroom.values(), default=f.step_ns) - max(spent.values(), default=0)
    else:
        room = headroom.get(key, f.step_ns) - spent.get(key, 0) - spent.get(None, 0)
    room = max(room, 0)
    if f.saving_ns <= room:
        return False
    f.evidence["saving_before_critical_path_ns_per_step"] = f.saving_ns
    f.saving_ns = room
    return True


def _taken(claims: Claims, claimed: dict[int, list[tuple[Intervals, Finding]]]) -> tuple[float, Finding | None]:
    """The share of a finding's claimed time that pushed findings already claim, and the one claiming most."""
    total = sum(intervals.length(ivs) for ivs in claims.values())
    if not total:
        return 0.0, None
    overlap: dict[int, int] = {}
    owners: dict[int, Finding] = {}
    for r, ivs in claims.items():
        for other, owner in claimed.get(r, []):
            overlap[id(owner)] = overlap.get(id(owner), 0) + intervals.overlap_length(ivs, other)
            owners[id(owner)] = owner
    if not overlap or not sum(overlap.values()):
        return 0.0, None
    by = max(overlap, key=overlap.get)
    return min(sum(overlap.values()) / total, 1.0), owners[by]
