"""The step delta decomposed into what changed, biggest first, adding up to the change of the mean step time.

Inside each unit's window (the step model's step span) the step time is exactly compute (the union of the compute
kernels) + exposed communication + exposed copies and sets + device idle (``distributed.overlap``). The compute
part is split further by the kernels' device time per step, matched across the runs as the kernel table matches
them (``matching``); what their sum does not explain is its own row: kernels running at once (on several streams)
or past their step's window. Device idle is split by its cause as the health analyzer finds it from the launching
thread (``health.causes``: host syncs, allocator calls, input loading, launch-bound stretches, host code, ...); the
idle it does not cover is its own row. The deltas of the means per unit add up to the change of the mean step time;
what is left (step time outside the device breakdown: a whole window's host-only start or end) is the residual.
The gate's change is a median-based shift, so it may differ from this mean by the step-to-step variation.
"""

from __future__ import annotations

import pandas as pd

from traceanalyzer.schema import Kind

KERNEL_ROWS = 8
"""Kernels named one by one; the others are one row."""
CONTRIBUTION_COLUMNS = ["what", "name", "baseline_ns", "candidate_ns", "delta_ns", "change_share"]
"""Columns of the decomposition: means per unit in each run (ns), their change, its share of the step's."""

_PARTS = (
    ("communication", "exposed communication", "comm_exposed_ns"),
    ("copies", "exposed memory copies and sets", "memory_exposed_ns"),
)
IDLE_REST = "device idle the causes do not cover"
"""The idle row left when the causes' idle is taken out (their steps and the step windows differ slightly)."""


def decompose(
    kernels: pd.DataFrame, sides: tuple[pd.DataFrame, pd.DataFrame], idle: tuple[pd.Series, pd.Series]
) -> pd.DataFrame:
    """The rows of the decomposition from the kernel diff table, both runs' per-unit samples and their idle per
    unit by cause (cause → ns), biggest first."""
    b, c = (s.mean(numeric_only=True) if len(s) else pd.Series(dtype=float) for s in sides)
    compute = kernels[kernels["kind"] == Kind.KERNEL.value]
    named, others = compute.iloc[:KERNEL_ROWS], compute.iloc[KERNEL_ROWS:]
    rows = [("kernel", r["label"], r["baseline_ns"], r["candidate_ns"]) for _, r in named.iterrows()]
    if len(others):
        rows.append(("kernel", f"other kernels ({len(others)})", *others[["baseline_ns", "candidate_ns"]].sum()))
    listed = [sum(r[i] for r in rows) for i in (2, 3)]
    rows.append(
        (
            "kernel overlap",
            "kernels at once or outside their step",
            b.get("compute_ns", 0.0) - listed[0],
            c.get("compute_ns", 0.0) - listed[1],
        )
    )
    rows += [(what, name, b.get(col, 0.0), c.get(col, 0.0)) for what, name, col in _PARTS]
    causes = idle[0].index.union(idle[1].index, sort=False)
    by_cause = [s.reindex(causes, fill_value=0.0) for s in idle]
    rows += [
        ("idle", f"device idle: {cause.replace('_', ' ')}", by_cause[0][cause], by_cause[1][cause]) for cause in causes
    ]
    rows.append(
        ("idle", IDLE_REST, b.get("idle_ns", 0.0) - by_cause[0].sum(), c.get("idle_ns", 0.0) - by_cause[1].sum())
    )
    parts = ["compute_ns", "idle_ns", *(col for *_, col in _PARTS)]
    rows.append(
        (
            "residual",
            "step time outside the device breakdown",
            *(s.get("step_ns", 0.0) - sum(s.get(p, 0.0) for p in parts) for s in (b, c)),
        )
    )
    table = pd.DataFrame(rows, columns=CONTRIBUTION_COLUMNS[:4]).astype({"baseline_ns": float, "candidate_ns": float})
    table[["baseline_ns", "candidate_ns"]] = table[["baseline_ns", "candidate_ns"]].round(1)  # float noise off
    table["delta_ns"] = table["candidate_ns"] - table["baseline_ns"]
    total = c.get("step_ns", 0.0) - b.get("step_ns", 0.0)
    table["change_share"] = table["delta_ns"] / total if total else float("nan")
    order = table["delta_ns"].abs().sort_values(ascending=False, kind="stable").index
    return table.loc[order].reset_index(drop=True)[CONTRIBUTION_COLUMNS]
