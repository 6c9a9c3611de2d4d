"""The per-trace memo: a table of the trace alone is computed once per (scoped) trace, however many ask for it."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Protocol, TypeVar

import pandas as pd

T = TypeVar("T")


class Memoized(Protocol):
    """Anything with a memo dict (TraceData)."""

    memo: dict[str, object]


def remember(holder: Memoized, key: str, compute: Callable[[], T]) -> T:
    """The value under key in the holder's memo, computed on first use."""
    if key not in holder.memo:
        holder.memo[key] = compute()
    return holder.memo[key]  # type: ignore[return-value]


def per_trace(table: Callable[[Memoized], pd.DataFrame]) -> Callable[[Memoized], pd.DataFrame]:
    """Decorator for an analyzer table of the trace alone: computed once per trace (a report asks for some tables
    from both its findings and its section); each call gets its own copy-on-write copy to change."""
    key = f"{table.__module__}.{table.__qualname__}"

    @functools.wraps(table)
    def once(trace: Memoized) -> pd.DataFrame:
        return remember(trace, key, lambda: table(trace)).copy(deep=False)

    return once
