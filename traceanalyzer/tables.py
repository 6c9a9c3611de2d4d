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


def per_rank(meta, key: str) -> pd.DataFrame:
    """The side table ``key`` of ``meta.extra`` of every rank of a trace (a joined trace keeps each rank's under
    ``per_rank``), one after another with a ``rank`` column first; empty (rank column only) when no rank has it."""
    ranks = meta.extra.get("per_rank")
    found = (
        {rank: part.get("extra", {}).get(key) for rank, part in ranks.items()}
        if isinstance(ranks, dict)
        else {meta.ranks[0] if meta.ranks else 0: meta.extra.get(key)}
    )
    tables = [t.assign(rank=int(r)) for r, t in sorted(found.items()) if isinstance(t, pd.DataFrame) and len(t)]
    if not tables:
        return pd.DataFrame(columns=["rank"])
    table = stack(tables)
    return table[["rank", *[c for c in table.columns if c != "rank"]]]
