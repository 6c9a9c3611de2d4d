"""Tables put together: the partial tables of several ranks (or parts) as one."""

from __future__ import annotations

import pandas as pd


def stack(tables: list[pd.DataFrame]) -> pd.DataFrame:
    """Tables of the same columns one after another, with a fresh index (empty ones left out, so no column changes
    its type); of empty tables alone, the one with the most typed columns (a rank that had rows to type it, as the
    joined table), the first of those on a tie. ``tables`` must not be empty."""
    full = [t for t in tables if len(t)]
    if not full:
        return max(tables, key=lambda t: int((t.dtypes != "object").sum()))
    return pd.concat(full, ignore_index=True)
