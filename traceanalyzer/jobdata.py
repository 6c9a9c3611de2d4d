"""A job analysed rank by rank: what a worker sends back for one rank and what the parent builds the report from.

A worker loads one rank's trace alone, and every analyzer's ``rank_part`` makes its part: small, picklable data
(aggregates per rank and key, rows per step or per collective call, top-k lists, interval unions), never the
event table or a column per event. A ``RankParts`` carries the parts of one rank; a ``JobData`` holds the ranks'
parts and the job's merged facts, and merges each analyzer's parts by that analyzer's rule (``merged``: its job
part, once per job), which its ``section`` and ``findings`` read. So the parent's memory grows with the parts, not
with the sum of the traces, and the report equals the one of the joined trace.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from traceanalyzer.memo import remember
from traceanalyzer.options import DEFAULT, Options
from traceanalyzer.schema import TraceMeta
from traceanalyzer.tracedata import Scope


@dataclass(frozen=True)
class Failed:
    """The part of an analyzer that failed, where (``"rank 1"``, ``"ranks 0, 1"``) and what went wrong there
    (reported, not raised, so that one analyzer's bug does not lose the rank)."""

    problem: str
    where: str = ""


class PartFailed(Exception):
    """The job part of ``analyzer`` cannot be made: its part failed ``where`` (a rank's worker caught ``problem``)."""

    def __init__(self, analyzer: str, where: str, problem: str) -> None:
        super().__init__(f"{analyzer} failed on {where}: {problem}")
        self.analyzer, self.where, self.problem = analyzer, where, problem


class MergeRule(Protocol):
    """What a job needs of an analyzer to merge its parts: its name and its rule (``Analyzer`` is one)."""

    @property
    def name(self) -> str: ...

    @property
    def merge(self) -> Callable[[list[Any], JobData], Any]: ...


@dataclass
class RankParts:
    """One rank of a job: its facts (``meta`` with ``ranks == [rank]``), the steps it recorded, its table sizes (of
    the scope analysed), and each analyzer's part by analyzer name (``"hotspots"``...)."""

    rank: int
    meta: TraceMeta
    steps: list[int]
    events: int
    memory_events: int
    parts: dict[str, object] = field(default_factory=dict, repr=False)


@dataclass
class JobData:
    """A job of several ranks as their parts: the merged facts of the job (as the joined trace's meta), the ranks'
    parts in rank order, the scope and options each rank was analysed with (a part keeps the rows a report of
    ``options.top`` rows needs), the analyzers whose parts these are (their merge rules), and a memo for values
    derived from them."""

    meta: TraceMeta
    ranks: list[RankParts]
    scope: Scope = Scope()
    options: Options = DEFAULT
    registry: Sequence[MergeRule] = ()
    memo: dict[str, object] = field(default_factory=dict)

    def parts(self, analyzer: str) -> list[Any]:
        """Every rank's part of one analyzer, in rank order; ``PartFailed`` naming where when a rank's part failed
        (or a rank lacks it)."""
        parts = [rank.parts.get(analyzer, Failed("no part", f"rank {rank.rank}")) for rank in self.ranks]
        failed = [p for p in parts if isinstance(p, Failed)]
        if failed:
            raise PartFailed(analyzer, failed[0].where or "a rank", failed[0].problem)
        return parts

    def part(self, analyzer: str, rank: int) -> object:
        """One rank's part of one analyzer (KeyError for a rank the job lacks)."""
        for of_rank in self.ranks:
            if of_rank.rank == rank:
                return of_rank.parts[analyzer]
        raise KeyError(rank)

    def merged(self, analyzer: str) -> Any:
        """The job part of one analyzer: its ranks' parts merged by its rule, once per job (``PartFailed`` naming
        where a rank's part failed; KeyError for an analyzer not in the registry)."""
        rule = next((a for a in self.registry if a.name == analyzer), None)
        if rule is None:
            raise KeyError(f"no analyzer {analyzer} in this job")
        return remember(self, f"merged.{analyzer}", lambda: rule.merge(self.parts(analyzer), self))

    @property
    def events(self) -> int:
        """Event rows over all ranks."""
        return sum(s.events for s in self.ranks)

    @property
    def memory_events(self) -> int:
        """Memory rows over all ranks."""
        return sum(s.memory_events for s in self.ranks)
