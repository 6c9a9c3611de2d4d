"""Findings of two runs side by side: which appeared, which are gone, and how the worth of the others changed.

A finding is recognised across runs by its analyzer and its title with the numbers taken out (``aten::mm: # of
device time in # calls``), so a finding whose cost changed is the same finding."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from traceanalyzer.comparison.diff import Status, statuses
from traceanalyzer.findings import Finding

FINDING_COLUMNS = [
    "status",
    "analyzer",
    "title",
    "baseline_ns",
    "candidate_ns",
    "delta_ns",
    "baseline_step_share",
    "candidate_step_share",
]
"""Columns of the findings table: cost per step in each run (ns, estimated as the analyzers estimate it)."""

_NUMBER = re.compile(r"-?\d[\d,.]*\s*(?:ms|µs|us|ns|s|GiB|MiB|KiB|GB|MB|KB|B|%)?")


def identity(finding: Finding) -> str:
    """What a finding is, whatever its numbers: its analyzer and its title with every number (and unit) as '#'."""
    return f"{finding.analyzer}: {_NUMBER.sub('#', finding.title)}"


def diff(baseline: list[Finding], candidate: list[Finding], units: tuple[int, int]) -> pd.DataFrame:
    """One row per finding of either run (new, gone, or in both: slower / faster / same), the new ones first, then
    by the change of their cost per step."""
    sides = [_by_identity(f, n) for f, n in zip((baseline, candidate), units, strict=True)]
    index = sides[0].index.union(sides[1].index, sort=False)
    b, c = (s.reindex(index) for s in sides)
    b_ns, c_ns = b["cost_ns"].fillna(0.0), c["cost_ns"].fillna(0.0)
    delta = c_ns - b_ns
    table = pd.DataFrame(
        {
            "status": statuses(b["title"].isna(), c["title"].isna(), delta),
            "analyzer": c["analyzer"].fillna(b["analyzer"]).to_numpy(),
            "title": c["title"].fillna(b["title"]).to_numpy(),
            "baseline_ns": b_ns.to_numpy(),
            "candidate_ns": c_ns.to_numpy(),
            "delta_ns": delta.to_numpy(),
            "baseline_step_share": b["step_share"].to_numpy(),
            "candidate_step_share": c["step_share"].to_numpy(),
        }
    )
    order = np.lexsort((-table["delta_ns"].abs().to_numpy(), (table["status"] != Status.NEW.value).to_numpy()))
    return table.iloc[order].reset_index(drop=True)[FINDING_COLUMNS]


def _by_identity(findings: list[Finding], units: int) -> pd.DataFrame:
    """Findings of one run keyed by identity (the costliest where several share one): the time each concerns per
    step."""
    rows = [
        {
            "id": identity(f),
            "analyzer": f.analyzer,
            "title": f.title,
            "cost_ns": f.concerns_ns,  # already per step
            "step_share": f.step_share,
        }
        for f in findings
    ]
    table = pd.DataFrame(rows, columns=["id", "analyzer", "title", "cost_ns", "step_share"])
    return table.sort_values("cost_ns", ascending=False).drop_duplicates("id").set_index("id")
