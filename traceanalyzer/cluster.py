"""Ranks parsed on a Dask distributed cluster (``--scheduler tcp://HOST:PORT``, ``TRACEANALYZER_SCHEDULER`` or
``ta.load(paths, scheduler=...)``). Each worker reads its rank's files itself, so every worker needs traceanalyzer
installed and the traces at the same path (shared storage); what each worker makes of its rank (the rank's tables,
or only its summary for a report analysed rank by rank) comes back to the caller.

Dask is optional (the dask extra: ``pip install '.[dask]'``) and imported only when a scheduler is given.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

from traceanalyzer.errors import TraceError

INSTALL = (
    "pip install 'traceanalyzer-hotspots[dask]' (the distribution's name; in the repository: pip install '.[dask]')"
)


def scheduler_from(asked: Any) -> Any:
    """The scheduler to use: as asked (an address or a distributed.Client), else TRACEANALYZER_SCHEDULER, else None
    (parse here)."""
    if asked is not None:
        return asked
    return os.environ.get("TRACEANALYZER_SCHEDULER") or None


def run(
    scheduler: Any,
    fn: Callable,
    items: Sequence,
    args: tuple,
    done: Callable[[int], None],
) -> list:
    """``fn(item, i, *args)`` for every item (i: its place) on the cluster, results in item order; ``done(n)`` as
    the first n are in."""
    distributed = _distributed(scheduler)
    if isinstance(scheduler, distributed.Client):
        return _gather(scheduler, fn, items, args, done)
    try:
        client = distributed.Client(scheduler, set_as_default=False)
    except (OSError, TimeoutError, ValueError) as e:
        raise TraceError(f"--scheduler {scheduler}", f"cannot reach the Dask scheduler ({e})") from None
    with client:
        return _gather(client, fn, items, args, done)


def _distributed(scheduler: Any):
    try:
        import distributed  # optional: only with a scheduler
    except ImportError:
        raise TraceError(f"--scheduler {scheduler}", f"needs Dask distributed, not installed: {INSTALL}") from None
    return distributed


def _gather(client, fn: Callable, items: Sequence, args: tuple, done: Callable[[int], None]) -> list:
    futures = [client.submit(fn, item, i, *args, pure=False) for i, item in enumerate(items)]
    results = []
    for future in futures:
        results.append(future.result())
        done(len(results))
    return results
