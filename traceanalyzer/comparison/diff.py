"""Diff tables: per entry (a name, or names matched across the runs), time and count per step in each run, the
change, its status, the rule that matched it, and whether it is beyond the step-to-step variation."""

from __future__ import annotations

from enum import Enum

import numpy as np
import pandas as pd

from traceanalyzer.comparison.matching import Rule, label
from traceanalyzer.comparison.noise import assess

DIFF_COLUMNS = [
    "name",
    "label",
    "kind",
    "status",
    "match",
    "baseline_ns",
    "candidate_ns",
    "delta_ns",
    "delta_share",
    "baseline_count",
    "candidate_count",
    "noise",
    "p_value",
    "baseline_names",
    "candidate_names",
]
"""Columns of a level table (time by kind: ``kind`` for ``name``): time and count per step in each run, delta."""

SUMMARY_COLUMNS = ["metric", "baseline_ns", "candidate_ns", "delta_ns", "delta_share", "noise", "p_value"]
"""Columns of the summary table: one row per metric (a median per step)."""


class Status(str, Enum):
    """How an entry changed from baseline to candidate."""

    NEW = "new"  # only in the candidate
    GONE = "gone"  # only in the baseline
    SLOWER = "slower"
    FASTER = "faster"
    SAME = "same"


def exact(samples: pd.DataFrame, other: pd.DataFrame) -> pd.DataFrame:
    """Names matched by exact name only (CPU ops and launching ops): per name of ``samples``, its key and rule."""
    names = pd.Index(samples["name"].unique())
    shared = names.isin(other["name"].unique())
    return pd.DataFrame({"key": names, "rule": np.where(shared, Rule.EXACT.value, Rule.NONE.value)}, index=names)


def level_diff(
    samples: tuple[pd.DataFrame, pd.DataFrame], keys: tuple[pd.DataFrame, pd.DataFrame], units: tuple[int, int]
) -> pd.DataFrame:
    """The diff of one level from each run's per-unit samples (``samples.level``) and name → key/rule tables."""
    sides = [_grouped(s, k, n) for s, k, n in zip(samples, keys, units, strict=True)]
    index = sides[0]["totals"].index.union(sides[1]["totals"].index, sort=False)
    b, c = (s["totals"].reindex(index) for s in sides)
    b_ns, c_ns = b["total_ns"].fillna(0.0), c["total_ns"].fillna(0.0)
    delta = c_ns - b_ns
    table = pd.DataFrame(
        {
            "name": index.get_level_values("key").astype(str),
            "label": [label(str(k)) for k in index.get_level_values("key")],
            "kind": c["kind"].fillna(b["kind"]).astype(str).to_numpy(),
            "status": statuses(b["count"].isna(), c["count"].isna(), delta),
            "match": index.get_level_values("rule"),
            "baseline_ns": b_ns.to_numpy(),
            "candidate_ns": c_ns.to_numpy(),
            "delta_ns": delta.to_numpy(),
            "delta_share": relative(delta, b_ns).to_numpy(),
            "baseline_count": b["count"].fillna(0.0).to_numpy(),
            "candidate_count": c["count"].fillna(0.0).to_numpy(),
            "baseline_names": _names(b["names"]),
            "candidate_names": _names(c["names"]),
        }
    )
    matrices = [s["per_unit"].reindex(index, fill_value=0.0).to_numpy() for s in sides]
    noise = [assess(b_unit, c_unit) for b_unit, c_unit in zip(*matrices, strict=True)]
    table["noise"] = [n.verdict.value for n in noise]
    table["p_value"] = [n.p_value for n in noise]
    order = np.argsort(-table["delta_ns"].abs().to_numpy(), kind="stable")
    return table.iloc[order].reset_index(drop=True)[DIFF_COLUMNS]


def _grouped(samples: pd.DataFrame, keys: pd.DataFrame, units: int) -> dict:
    """Per (key, rule): kind, time and count per unit on average, member names; and the per-unit matrix."""
    frame = samples.join(keys, on="name")
    g = frame.groupby(["key", "rule"], sort=False)
    totals = pd.DataFrame(
        {
            "kind": g["kind"].first(),
            "total_ns": g["total_ns"].sum() / max(units, 1),
            "count": g["count"].sum() / max(units, 1),
            "names": g["name"].agg(lambda names: sorted(set(map(str, names)))),
        }
    )
    per_unit = frame.pivot_table(index=["key", "rule"], columns="unit", values="total_ns", aggfunc="sum")
    per_unit = per_unit.reindex(columns=range(units), fill_value=0.0).fillna(0.0)
    return {"totals": totals, "per_unit": per_unit}


def _names(names: pd.Series) -> list:
    return [n if isinstance(n, list) else [] for n in names]


def statuses(new: pd.Series, gone: pd.Series, delta: pd.Series) -> np.ndarray:
    """Each entry's ``Status``: ``new`` is True where the baseline lacks it, ``gone`` where the candidate does."""
    conditions = [new.to_numpy(), gone.to_numpy(), delta.to_numpy() > 0, delta.to_numpy() < 0]
    choices = [Status.NEW.value, Status.GONE.value, Status.SLOWER.value, Status.FASTER.value]
    return np.select(conditions, choices, default=Status.SAME.value)


def relative(delta: pd.Series, base: pd.Series) -> pd.Series:
    """delta / base, NaN where the base is zero."""
    return delta / base.where(base != 0)


def summary(baseline: pd.DataFrame, candidate: pd.DataFrame) -> pd.DataFrame:
    """One row per metric (columns of ``samples.metrics``): medians per unit, the change and its noise verdict."""
    rows = []
    for metric in baseline.columns:
        b, c = baseline[metric].to_numpy(dtype=float), candidate[metric].to_numpy(dtype=float)
        noise = assess(b, c)
        b_med, c_med = (float(np.median(v)) if len(v) else 0.0 for v in (b, c))
        rows.append((metric, b_med, c_med, c_med - b_med, np.nan, noise.verdict.value, noise.p_value))
    table = pd.DataFrame(rows, columns=SUMMARY_COLUMNS)
    table["delta_share"] = relative(table["delta_ns"], table["baseline_ns"])
    return table
