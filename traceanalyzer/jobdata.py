"""A job analysed rank by rank: what a worker sends back for one rank and what the parent builds the report from.

A worker loads one rank's trace alone, and every analyzer's ``rank_part`` makes its part: small, picklable data
(aggregates per rank and key, rows per step or per collective call, top-k lists, interval unions), never the
event table or a column per event. A ``RankSummary`` carries the parts of one rank; a ``JobData`` holds the ranks'
summaries and the job's merged facts, and each analyzer's ``section`` and ``findings`` read it. So the
parent's memory grows with the summaries, not with the sum of the traces, and the report equals the one of the
joined trace.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from traceanalyzer.options import DEFAULT, Options
from traceanalyzer.schema import TraceMeta
from traceanalyzer.tracedata import Scope


@dataclass(frozen=True)
class Failed:
    """The part of an analyzer that failed, where (``"rank 1"``, ``"ranks 0, 1"``) and what went wrong there
    (reported, not raised, so that one analyzer's bug does not lose the rank)."""

    problem: str
    where: str = ""


@dataclass
class RankSummary:
    """One rank of a job: its facts (``meta`` with ``ranks == [rank]``), the steps it recorded, its table sizes (of
    the scope summarized), and each analyzer's part by analyzer name (the module's last name: ``"hotspots"``...)."""

    rank: int
    meta: TraceMeta
    steps: list[int]
    events: int
    memory_events: int
    parts: dict[str, object] = field(default_factory=dict, repr=False)


@dataclass
class JobData:
    """A job of several ranks as summaries: the merged facts of the job (as the joined trace's meta), the ranks'
    summaries in rank order, the scope and options each rank was summarized with (a part keeps the rows a report of
    ``options.top`` rows needs), and a memo for values derived from them."""

    meta: TraceMeta
    ranks: list[RankSummary]
    scope: Scope = Scope()
    options: Options = DEFAULT
    memo: dict[str, object] = field(default_factory=dict)

    def parts(self, analyzer: str) -> list:
        """Every rank's part of one analyzer, in rank order."""
        return [summary.parts[analyzer] for summary in self.ranks]

    def part(self, analyzer: str, rank: int) -> object:
        """One rank's part of one analyzer (KeyError for a rank the job lacks)."""
        for summary in self.ranks:
            if summary.rank == rank:
                return summary.parts[analyzer]
        raise KeyError(rank)

    @property
    def events(self) -> int:
        """Event rows over all ranks."""
        return sum(s.events for s in self.ranks)

    @property
    def memory_events(self) -> int:
        """Memory rows over all ranks."""
        return sum(s.memory_events for s in self.ranks)
