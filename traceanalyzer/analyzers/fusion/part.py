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
from traceanalyzer.analyzers.fusion.opstream import EntryWork, combinations, sums
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


def summarize(trace: TraceData, options: Options = DEFAULT) -> Part:
    """The trace's part (once per trace)."""
    return remember(trace, f"{__name__}.summarize", lambda: _summarize(trace))


def _summarize(trace: TraceData) -> Part:
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
    occ = occ.sort_values(["rank", "ts", "seq"], kind="stable").reset_index(drop=True)
    occ["in_step"] = occ["step"].to_numpy() != NO_ROW
    forward = (occ["phase"] != "backward").to_numpy()
    group, first = _keyed(occ, GROUP)
    groups = occ.loc[first, [*GROUP, "pattern"]].reset_index(drop=True)
    groups["first_ts"], groups["first_seq"] = occ["ts"].to_numpy()[first], occ["seq"].to_numpy()[first]
    groups["forward"], groups["occurrences"] = sums(group, forward, len(first)), sums(group, 1, len(first))
    for col in SUMS:
        groups[col] = sums(group, occ[col].to_numpy(dtype=np.int64), len(first))
    groups["claims"] = _claims(group, occ["entries"].tolist(), len(first), work)
    spot, at = _keyed(occ, [*GROUP, "place"])
    places = occ.loc[at, [*GROUP, "place"]].reset_index(drop=True)
    places["forward"], places["occurrences"] = sums(spot, forward, len(at)), sums(spot, 1, len(at))
    ahead = np.full(len(at), len(occ), dtype=np.int64)
    np.minimum.at(ahead, spot[forward], np.flatnonzero(forward))
    for col in ("ts", "seq"):
        values = occ[col].to_numpy(dtype=np.int64)
        places[f"forward_{col}"], places[f"first_{col}"] = np.append(values, LAST)[ahead], values[at]
    kind, one = _keyed(occ, [*GROUP, "removed"])
    removed = occ.loc[one, [*GROUP, "removed"]].reset_index(drop=True)
    removed["count"] = sums(kind, 1, len(one))
    return groups[GROUP_COLUMNS], places[PLACE_COLUMNS], removed[REMOVED_COLUMNS]


def _keyed(occ: pd.DataFrame, cols: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """A code per distinct combination of the columns' values (numbered in order of first appearance) and the
    position of each one's first row."""
    codes, _ = combinations(*(occ[c].to_numpy() for c in cols))
    first = np.full(int(codes.max()) + 1, len(codes), dtype=np.int64)
    np.minimum.at(first, codes, np.arange(len(codes)))
    return codes, first


def _claims(group: np.ndarray, entries: list[np.ndarray], n: int, work: EntryWork) -> list[Packed]:
    """Per group, the union of the device work of its occurrences' entries."""
    flat = np.concatenate([np.asarray(e, dtype=np.int64) for e in entries])
    owner = np.repeat(group, [len(e) for e in entries])
    order = np.argsort(owner, kind="stable")
    pieces = np.split(flat[order], np.cumsum(np.bincount(owner, minlength=n))[:-1])
    return [pack(*work.union(piece)) for piece in pieces]
