"""Compare two runs (baseline → candidate): step time, device busy, communication, idle, time by kind, kernels,
CPU ops and launching ops, findings and peak memory, per step, each change set against the step-to-step noise;
and the regression gate a CI job acts on.

This package sits above the analyzers: it reads both traces through them and no analyzer imports it.

- Times are per step, so runs that profiled different numbers of steps compare: the summary metrics are medians
  over each run's (rank, step) pairs, the tables are totals over them divided by their number. When either run has
  no ProfilerStep markers, both are compared over their whole window per rank (``per_step`` False; ``notes``).
- Kernels are matched across the runs by name: exactly, then normalised, then by launching op (``matching``); CPU
  ops and launching ops exactly. Every row says which rule matched it.
- Every change carries its noise verdict (``noise``): beyond or within the step-to-step variation, or too few steps.
- Busy, idle and communication are measured inside the step windows, so they add up to the step time; the step
  delta is decomposed into what changed (``contributions``).
- Each run's devices (name, data-sheet peaks) and platform are in its facts; a warning says when they differ.
- ``Comparison.gate(threshold, confidence)`` is the verdict of the regression gate (``gate``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from traceanalyzer import devices, notebook
from traceanalyzer.analyzers.health.causes import idle_causes
from traceanalyzer.analyzers.hotspots import Level
from traceanalyzer.analyzers.inference import InferenceAnalysis
from traceanalyzer.comparison import contributions, diff, findings, inference, matching, memory, platforms, samples
from traceanalyzer.comparison.diff import DIFF_COLUMNS, SUMMARY_COLUMNS, Status
from traceanalyzer.comparison.gate import DEFAULT_CONFIDENCE, GateVerdict, Outcome, Threshold, judge
from traceanalyzer.comparison.noise import ALPHA, MIN_STEPS, TEST
from traceanalyzer.comparison.platforms import CrossPlatform
from traceanalyzer.comparison.samples import Compared
from traceanalyzer.records import records
from traceanalyzer.report import SCHEMA_VERSION, trace_facts
from traceanalyzer.trace import Trace

__all__ = [
    "DEFAULT_CONFIDENCE",
    "DIFF_COLUMNS",
    "SUMMARY_COLUMNS",
    "Comparison",
    "Outcome",
    "Compared",
    "Status",
    "Threshold",
    "compare",
]

LEVELS = (Level.KERNEL, Level.CPU_OP, Level.OP_DEVICE)
"""Hotspot levels compared by name: device kernels, CPU ops (self host time), device time per launching op."""


@dataclass
class Comparison:
    """Baseline → candidate: summary, device time by kind, one diff table per level, findings and peak memory."""

    baseline: Compared
    candidate: Compared
    per_step: bool
    summary: pd.DataFrame
    by_kind: pd.DataFrame
    levels: dict[str, pd.DataFrame]
    findings: pd.DataFrame
    memory: dict
    samples: tuple[pd.DataFrame, pd.DataFrame]  # per unit of each run: ``samples.metrics``
    contributions: pd.DataFrame  # the step delta decomposed: ``contributions.decompose``
    platforms: CrossPlatform | None = None  # when one run is on a GPU and the other on an Ascend NPU
    inference: pd.DataFrame | None = None  # TTFT and TPOT per phase, when both runs are generation: ``inference``
    phase_samples: dict = field(default_factory=dict)  # what the gate judges per phase: ``inference.samples``
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # the runs' devices or platforms differ

    def __repr__(self) -> str:
        return notebook.comparison_repr(self)

    def _repr_html_(self) -> str:
        return notebook.comparison_html(self)

    def metric(self, name: str) -> pd.Series:
        """One summary row (``step_ns``, ``device_busy_ns``, ``comm_exposed_ns``, ``comm_hidden_ns``, ``idle_ns``)."""
        return self.summary.set_index("metric").loc[name]

    def gate(self, threshold: Threshold, confidence: float = DEFAULT_CONFIDENCE) -> GateVerdict:
        """The regression gate's verdict for a threshold at a confidence (see ``gate``)."""
        return judge(self.samples, self.contributions, threshold, confidence, self.phase_samples)

    def to_dict(
        self, top: int | None = None, threshold: Threshold | None = None, confidence: float = DEFAULT_CONFIDENCE
    ) -> dict:
        """Plain-data form (the JSON ``traceanalyze compare`` writes); ``top`` keeps that many rows per table;
        ``gate`` is the verdict for ``threshold`` at ``confidence`` (None without a threshold)."""
        return {
            "schema_version": SCHEMA_VERSION,
            "baseline": _facts(self.baseline),
            "candidate": _facts(self.candidate),
            "rank": self.baseline.rank,
            "per_step": self.per_step,
            "notes": self.notes,
            "warnings": self.warnings,
            "noise": {"test": TEST, "alpha": ALPHA, "min_steps": MIN_STEPS},
            "gate": self.gate(threshold, confidence).to_dict() if threshold else None,
            "summary": records(self.summary),
            "contributions": records(self.contributions),
            "time_by_kind": records(self.by_kind),
            "levels": {level: records(table.head(top) if top else table) for level, table in self.levels.items()},
            "changes": {level: changes(table) for level, table in self.levels.items()},
            "findings": records(self.findings.head(top) if top else self.findings),
            "memory": self.memory,
            "platforms": _platforms(self.platforms, top),
            "inference": records(self.inference) if self.inference is not None else [],
        }


def _platforms(view: CrossPlatform | None, top: int | None) -> dict | None:
    if view is None:
        return None
    tables = {"categories": view.categories, "ops": view.ops.head(top) if top else view.ops}
    tables["modules"] = view.modules.head(top) if top else view.modules
    return {**{key: records(table) for key, table in tables.items()}, "mapped": view.mapped}


def changes(table: pd.DataFrame) -> dict:
    """Entries per status at one level, the time per step of the new and gone ones, and entries per match rule."""
    counts = table["status"].value_counts()
    out = {status.value: int(counts.get(status.value, 0)) for status in Status}
    out["new_ns"] = float(table.loc[table["status"] == Status.NEW.value, "candidate_ns"].sum())
    out["gone_ns"] = float(table.loc[table["status"] == Status.GONE.value, "baseline_ns"].sum())
    rules = table["match"].value_counts()
    out["matched"] = {rule.value: int(rules.get(rule.value, 0)) for rule in matching.Rule}
    return out


def _facts(scope: Compared) -> dict:
    return {
        **trace_facts(scope.trace),
        "compared_steps": scope.steps,
        "units": scope.units,
        "hardware": _hardware(scope),
    }


def _hardware(scope: Compared) -> list[dict]:
    """The run's distinct devices: name, family and data-sheet peaks (dense TFLOP/s per dtype, bytes/s)."""
    out = []
    for name in dict.fromkeys(d.name for d in scope.trace.meta.devices):
        family = devices.lookup(name)
        out.append(
            {
                "name": name,
                "family": family.family if family else None,
                "peak_tflops": dict(family.peak_tflops) if family else {},
                "bandwidth_bytes_per_s": family.bandwidth if family else None,
            }
        )
    return out


def _warnings(scopes: list[Compared]) -> list[str]:
    """A warning when the runs' platforms or devices differ: their times compare hardware as well as code."""
    sides = [(s.trace.meta.platform.value, sorted({d.name for d in s.trace.meta.devices})) for s in scopes]
    if sides[0] == sides[1]:
        return []
    b, c = (f"{platform} ({', '.join(names) or 'device not recorded'})" for platform, names in sides)
    return [f"the runs ran on different hardware: baseline on {b}, candidate on {c}; times compare both"]


def compare(baseline: Trace, candidate: Trace, rank: int | None = None) -> Comparison:
    """Compare two traces per step (or over their whole windows when either has no step markers)."""
    runs = {"baseline": baseline, "candidate": candidate}
    stepless = [role for role, trace in runs.items() if not len(samples.rank_steps(trace, rank))]
    scopes = [samples.scope(t, rank, per_step=not stepless) for t in runs.values()]
    units = (scopes[0].units, scopes[1].units)
    kernels = [samples.level(s, Level.KERNEL) for s in scopes]
    ops = [samples.level(s, Level.CPU_OP) for s in scopes]
    notes = [f"no ProfilerStep markers in the {' and '.join(stepless)}: whole windows compared (per rank)"]
    sides = tuple(samples.metrics(s, k, o) for s, k, o in zip(scopes, kernels, ops, strict=True))
    summary = diff.summary(*(side[list(samples.METRICS)] for side in sides))
    levels = {level.value: _level(scopes, level, kernels, ops, units) for level in LEVELS}
    generation = [_generation(s) for s in scopes]
    return Comparison(
        baseline=scopes[0],
        candidate=scopes[1],
        per_step=not stepless,
        summary=summary,
        by_kind=_by_kind(kernels, units),
        levels=levels,
        findings=findings.diff(baseline.findings(), candidate.findings(), units),
        memory=memory.diff(baseline, candidate, rank),
        samples=sides,
        contributions=contributions.decompose(levels[Level.KERNEL.value], sides, tuple(map(_idle_by_cause, scopes))),
        platforms=_cross_platform(scopes, summary),
        inference=inference.rows(*generation),
        phase_samples=inference.samples(*generation),
        notes=notes if stepless else [],
        warnings=_warnings(scopes),
    )


def _generation(scope: Compared) -> InferenceAnalysis:
    """The inference views of a run's compared rank (all ranks without one)."""
    return (scope.trace.scoped(rank=scope.rank) if scope.rank is not None else scope.trace).inference()


def _idle_by_cause(scope: Compared) -> pd.Series:
    """The run's device idle inside steps per unit by cause (``health.causes``), ns; empty for whole windows."""
    if scope.steps is None or not scope.units:
        return pd.Series(dtype=float)
    table = idle_causes(scope.trace)[0]
    if scope.rank is not None:
        table = table[table["rank"] == scope.rank]
    return table.groupby("cause", sort=False)["idle_ns"].sum().astype(float) / scope.units


def _cross_platform(scopes: list[Compared], summary: pd.DataFrame) -> CrossPlatform | None:
    """The GPU ↔ NPU view, when the runs' platforms differ."""
    if not platforms.differ(*(s.trace.meta.platform for s in scopes)):
        return None
    step = summary.set_index("metric").loc["step_ns"]
    return platforms.compare(scopes[0], scopes[1], (step["baseline_ns"], step["candidate_ns"]))


def _level(
    scopes: list[Compared], level: Level, kernels: list[pd.DataFrame], ops: list[pd.DataFrame], units: tuple[int, int]
) -> pd.DataFrame:
    """The diff table of one level; kernels matched by the rules of ``matching``, ops by exact name."""
    if level is Level.KERNEL:
        pairs = zip(scopes, kernels, strict=True)
        ops = [samples.launching_ops(s).reindex(k["name"].unique(), fill_value="") for s, k in pairs]
        keys = matching.match(*ops)
        return diff.level_diff((kernels[0], kernels[1]), keys, units)
    tables = ops if level is Level.CPU_OP else [samples.level(s, level) for s in scopes]
    return diff.level_diff((tables[0], tables[1]), (diff.exact(*tables), diff.exact(*tables[::-1])), units)


def _by_kind(kernels: list[pd.DataFrame], units: tuple[int, int]) -> pd.DataFrame:
    """Device time and count per step by kind (kernel, communication, memcpy, ...)."""
    tables = [k.assign(name=k["kind"]) for k in kernels]
    table = diff.level_diff((tables[0], tables[1]), (diff.exact(*tables), diff.exact(*tables[::-1])), units)
    dropped = ["kind", "label", "match", "baseline_names", "candidate_names"]
    return table.drop(columns=dropped).rename(columns={"name": "kind"})
