"""The step delta decomposed into what changed, biggest first, adding up to the change of the mean step time.

Inside each unit's window (the step model's step span) the step time is exactly compute (the union of the compute
kernels) + exposed communication + exposed copies and sets + device idle (``distributed.overlap``). The compute
part is split further by the kernels' device time per step, matched across the runs as the kernel table matches
them (``matching``); what their sum does not explain is its own row: kernels running at once (on several streams)
or past their step's window. The deltas of the means per unit add up to the change of the mean step time; what is
left (step time outside the device breakdown: a whole window's host-only start or end) is the named residual.
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
    ("idle", "device idle (the device waiting: host overhead, syncs, input)", "idle_ns"),
)


def decompose(kernels: pd.DataFrame, sides: tuple[pd.DataFrame, pd.DataFrame]) -> pd.DataFrame:
    """The rows of the decomposition from the kernel diff table and both runs' per-unit samples, biggest first."""
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
    parts = ["compute_ns", *(col for *_, col in _PARTS)]
    rows.append(
        (
            "residual",
            "step time outside the device breakdown",
            *(s.get("step_ns", 0.0) - sum(s.get(p, 0.0) for p in parts) for s in (b, c)),
        )
    )
    table = pd.DataFrame(rows, columns=CONTRIBUTION_COLUMNS[:4]).astype({"baseline_ns": float, "candidate_ns": float})
    table["delta_ns"] = table["candidate_ns"] - table["baseline_ns"]
    total = c.get("step_ns", 0.0) - b.get("step_ns", 0.0)
    table["change_share"] = table["delta_ns"] / total if total else float("nan")
    order = table["delta_ns"].abs().sort_values(ascending=False, kind="stable").index
    return table.loc[order].reset_index(drop=True)[CONTRIBUTION_COLUMNS]
