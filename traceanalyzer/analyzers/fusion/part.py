"""A rank's fusion part: its library and optimizer occurrences summed per pattern variant, what discovery may chain
there (``discovery.Runs``), its launch-call durations and whether it ran compiled code.

Occurrences are summed per (rank, family, variant, in a step or not) (``aggregate``): counts, the additive numbers
of the saving model, the pattern of the first, the order they first appear in, their places with counts, the
launches each removes (the launch saving is priced with the median launch call of all ranks) and the union of the
device work they claim. Whether occurrences outside steps count is only known over all ranks (they do not when
any occurrence is in a step), so both kinds are kept apart. ``section.combine`` makes the opportunities from the
parts of the ranks; the joined trace's are that of its own part.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from traceanalyzer.analyzers.fusion.discovery import Runs
from traceanalyzer.analyzers.fusion.matching import launch_counts, located, matched, place_of
from traceanalyzer.analyzers.fusion.opstream import EntryWork, combinations, pieces, sums
from traceanalyzer.intervals import Packed, pack
from traceanalyzer.memo import remember
from traceanalyzer.options import DEFAULT, Options
from traceanalyzer.schema import NO_ROW
from traceanalyzer.tracedata import TraceData
from traceanalyzer.vocabulary import COMPILED_REGION

GROUP = ["rank", "family", "variant", "in_step"]
"""What occurrences are summed by."""

SUMS = ["kernels", "current_ns", "kept_ns", "saving_ns", "intermediate_bytes", "traffic_ns"]
"""The additive numbers of an occurrence (``matching.measured``)."""

GROUP_COLUMNS = [*GROUP, "pattern", "first_ts", "first_seq", "forward", "occurrences", *SUMS, "claims"]
"""Per group: the first occurrence's pattern, start and order found (``first_seq``), how many are not backward and
how many in all, the sums, and the union of the device work claimed (``intervals.Packed``)."""

PLACE_COLUMNS = [*GROUP, "place", "forward", "occurrences", "forward_ts", "forward_seq", "first_ts", "first_seq"]
"""Per group and place: how many occurrences there (not backward, and all), and where the first of each is."""

LAST = np.iinfo(np.int64).max
"""The start and order of the first forward occurrence of a place that has none."""

REMOVED_COLUMNS = [*GROUP, "removed", "count"]
"""Per group: how many occurrences remove each number of kernel launches."""


@dataclass
class Part:
    """What fusion keeps of one rank (or of every rank of a joined trace): ``groups``, ``places`` and ``removed``
    (``aggregate`` of its library and optimizer occurrences), ``runs``, ``launches`` (``matching.launch_counts``)
    and ``compiled`` (whether it ran compiled regions)."""

    groups: pd.DataFrame
    places: pd.DataFrame
    removed: pd.DataFrame
    runs: Runs
    launches: pd.DataFrame
    compiled: bool


def rank_part(trace: TraceData, options: Options = DEFAULT) -> Part:
    """The trace's part (once per trace)."""
    return remember(trace, f"{__name__}.rank_part", lambda: _part_of(trace))


def _part_of(trace: TraceData) -> Part:
    match = matched(trace)
    compiled = bool(trace.events["name"].cat.categories.str.contains(COMPILED_REGION).any())
    launches = launch_counts(trace.events)
    if match is None:
        return Part(*aggregate(pd.DataFrame(), EntryWork.empty()), Runs.empty().packed(), launches, compiled)
    table = located(trace, match.ctx, match.found) if match.found else pd.DataFrame()
    if len(table):
        table["place"] = place_of(table)
    return Part(*aggregate(table, match.work), match.runs.packed(), launches, compiled)


def aggregate(occ: pd.DataFrame, work: EntryWork) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Occurrences (``matching.located`` with a ``place``; ``entries``: positions in ``work``) summed per group:
    ``GROUP_COLUMNS``, ``PLACE_COLUMNS`` and ``REMOVED_COLUMNS`` tables, groups in the order they first appear (by
    rank, start, order found)."""
    if not len(occ):
        return tuple(pd.DataFrame(columns=c) for c in (GROUP_COLUMNS, PLACE_COLUMNS, REMOVED_COLUMNS))
    order = np.lexsort(tuple(occ[c].to_numpy() for c in ("seq", "ts", "rank")))
    names = ["rank", "family", "variant", "step", "phase", "pattern", "place", "removed", "ts", "seq", *SUMS]
    col = {c: occ[c].to_numpy()[order] for c in names}
    col["in_step"] = col["step"] != NO_ROW
    forward = col["phase"] != "backward"
    group, first = _keyed(col, GROUP)
    groups = _picked(col, [*GROUP, "pattern"], first)
    groups["first_ts"], groups["first_seq"] = col["ts"][first], col["seq"][first]
    groups["forward"], groups["occurrences"] = sums(group, forward, len(first)), sums(group, 1, len(first))
    for c in SUMS:
        groups[c] = sums(group, col[c].astype(np.int64), len(first))
    groups["claims"] = _claims(group, occ["entries"].to_numpy(dtype=object)[order].tolist(), len(first), work)
    spot, at = _keyed(col, [*GROUP, "place"])
    places = _picked(col, [*GROUP, "place"], at)
    places["forward"], places["occurrences"] = sums(spot, forward, len(at)), sums(spot, 1, len(at))
    ahead = np.full(len(at), len(order), dtype=np.int64)
    np.minimum.at(ahead, spot[forward], np.flatnonzero(forward))
    for c in ("ts", "seq"):
        values = col[c].astype(np.int64)
        places[f"forward_{c}"], places[f"first_{c}"] = np.append(values, LAST)[ahead], values[at]
    kind, one = _keyed(col, [*GROUP, "removed"])
    removed = _picked(col, [*GROUP, "removed"], one)
    removed["count"] = sums(kind, 1, len(one))
    tables = zip((groups, places, removed), (GROUP_COLUMNS, PLACE_COLUMNS, REMOVED_COLUMNS), strict=True)
    return tuple(pd.DataFrame(t, columns=c) for t, c in tables)


def _picked(col: dict[str, np.ndarray], names: list[str], rows: np.ndarray) -> dict[str, np.ndarray]:
    """Some columns at some rows (a table's columns in the making)."""
    return {c: col[c][rows] for c in names}


def _keyed(col: dict[str, np.ndarray], names: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """A code per distinct combination of the columns' values (numbered in order of first appearance) and the
    position of each one's first row."""
    codes, _ = combinations(*(col[c] for c in names))
    first = np.full(int(codes.max()) + 1, len(codes), dtype=np.int64)
    np.minimum.at(first, codes, np.arange(len(codes)))
    return codes, first


def _claims(group: np.ndarray, entries: list[np.ndarray], n: int, work: EntryWork) -> list[Packed]:
    """Per group, the union of the device work of its occurrences' entries."""
    flat = np.concatenate([np.asarray(e, dtype=np.int64) for e in entries])
    owner = np.repeat(group, [len(e) for e in entries])
    order = np.argsort(owner, kind="stable")
    return [pack(*work.union(piece)) for piece in pieces(flat[order], np.bincount(owner, minlength=n))]
