"""Per-trace data the pages show, computed once by the analyzers and cached (the UI never recomputes a finding)."""

from __future__ import annotations

import threading
import warnings
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import NamedTuple, TypeVar

import numpy as np
import pandas as pd
from traceanalyzer.dashboards import slices, timeline

from traceanalyzer import reportcache
from traceanalyzer.analyzers import fusion, health
from traceanalyzer.analyzers.hotspots import Level
from traceanalyzer.findings import Finding
from traceanalyzer.report import Report
from traceanalyzer.schema import DEVICE, NO_ROW, Kind
from traceanalyzer.section import Fact, Section, Table
from traceanalyzer.trace import Trace

OPTIONAL = {
    "overlap": lambda trace: trace.overlap(),
    "collectives": lambda trace: trace.collectives(),
    "memory": lambda trace: trace.memory(),
    "idle_gaps": health.idle_gaps,
    "sync_stalls": health.sync_stalls,
    "clock_offsets": lambda trace: trace.clock_offsets(),
}
"""Analyses that may find nothing in a trace (or fail on it); pages show what they return, or why there is none."""

DRAWN = 16
"""Drawings (a page's figure for one set of picks) a view keeps, the latest used."""
TABLE_ROWS = 500
"""Rows per section table the pages get (the CLI prints the top 15; the pages sort and filter more)."""


T = TypeVar("T")


class Place(NamedTuple):
    """Where a finding's evidence is shown: the hotspot level whose table holds its name (hotspot findings, else
    None) and its place on the Timeline (rank, step, ``at``; None when it claims no device time)."""

    level: str | None
    timeline: dict | None


@dataclass
class Optional:
    """An optional analysis: its data, or why there is none."""

    data: object = None
    reason: str = ""


class View:
    """A loaded trace plus everything the pages need from it, cached per argument set."""

    NOTHING_FOUND = "the analyzer found nothing in this trace"

    def __init__(self, trace: Trace, label: str, content: str | None = None) -> None:
        self.trace = trace
        self.label = label
        # the report is kept in the trace cache under the sources' contents (content: their SHA-1), when given
        self.kept = reportcache.key(trace.meta.paths, content, f"top={TABLE_ROWS}") if content else None
        self._built = False
        self._places: list[Place] | None = None
        self.hotspots = lru_cache(maxsize=256)(self._hotspots)
        self.segments = lru_cache(maxsize=64)(self._segments)
        self.lanes = lru_cache(maxsize=16)(self._lanes)
        self.marks = lru_cache(maxsize=16)(self._marks)
        self.details = lru_cache(maxsize=256)(self._details)
        self.optional = lru_cache(maxsize=None)(self._optional)
        self._drawn: OrderedDict[Hashable, object] = OrderedDict()
        self._drawing = threading.Lock()
        self._report: Report | None = None
        self.notes: list[str] = []
        # analyzer failures met while building the report (the rest of it still shows)

    def warm(self) -> None:
        """Precompute what the first visit of each page needs."""
        self.report()
        for level in Level:
            self.hotspots(level.value)
        for name in OPTIONAL:
            self.optional(name)
        if self.steps():
            self.marks(self.ranks()[0], self.steps()[0], timeline.LEVEL_CHOICES[0], False)  # and its segments

    def drawn(self, key: Hashable, draw: Callable[[], T]) -> T:
        """What a page drew from this view for key (its picks): drawn on first ask, the latest DRAWN kept; a
        drawing asked for while it is being drawn waits for it."""
        with self._drawing:
            if key not in self._drawn:
                self._drawn[key] = draw()
            self._drawn.move_to_end(key)
            while len(self._drawn) > DRAWN:
                self._drawn.popitem(last=False)
            return self._drawn[key]  # type: ignore[return-value]

    def report(self) -> Report:
        """The analyzers' report (sections and ranked findings, tables to TABLE_ROWS rows), with analyzer warnings
        kept as notes: the one kept in the trace cache for these contents, else built."""
        if self._report is None:
            found = reportcache.read(self.kept) if self.kept else None
            if found is not None:
                self._report, self.notes = found.report, found.notes
                places = found.derived.get("places")
                self._places = places if isinstance(places, list) else None
                return self._report
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                self._report = self.trace.build_report(top=TABLE_ROWS)
            self.notes = list(dict.fromkeys(str(w.message) for w in caught if "analyzer" in str(w.message)))
            self._built = True
        return self._report

    def keep(self) -> None:
        """Keep the report in the trace cache, if it was built here (not read from there) and has a key."""
        if self._built and self.kept is not None:
            derived: dict[str, object] = {"places": self.places()}
            reportcache.write(self.kept, reportcache.Kept(self.report(), self.notes, derived), self.label)
            self._built = False

    def places(self) -> list[Place]:
        """Where each of the report's findings is shown, in its order (kept with the report)."""
        if self._places is None or len(self._places) != len(self.report().findings):
            self._places = [self._place(f) for f in self.report().findings]
        return self._places

    def place(self, finding: Finding) -> Place:
        """Where a finding is shown: the report's own from places(), another one's worked out now."""
        for found, place in zip(self.report().findings, self.places(), strict=True):
            if found is finding:
                return place
        return self._place(finding)

    def _place(self, finding: Finding) -> Place:
        """A finding's hotspot level (the op level when its name is an op's, else the kernel level) and Timeline
        place."""
        level = None
        if finding.analyzer == "hotspots":
            ops = set(self.hotspots(Level.OP_DEVICE.value)["name"].astype(str))
            level = Level.OP_DEVICE.value if str(finding.where.get("name")) in ops else Level.KERNEL.value
        return Place(level, self._timeline_place(finding))

    def _timeline_place(self, finding: Finding) -> dict | None:
        """Where a finding shows on the Timeline: the longest device interval it claims (on its rank, else the first
        rank it claims time on), as rank, the step it starts in and ``at`` (start_ns-end_ns, absolute); None when it
        claims none."""
        if not finding.claims:
            return None
        rank = finding.where.get("rank")
        rank = int(rank) if rank is not None and int(rank) in finding.claims else next(iter(finding.claims))
        starts, ends = (np.asarray(a) for a in finding.claims[rank])
        if not len(starts):
            return None
        longest = int(np.argmax(ends - starts))
        start, end = int(starts[longest]), int(ends[longest])
        steps = self.trace.steps()
        inside = steps[
            (steps["rank"] == rank) & (steps["start_ns"] <= start) & (start < steps["start_ns"] + steps["step_ns"])
        ]
        place = {"rank": int(rank), "at": f"{start}-{end}"}
        return {**place, "step": int(inside["step"].iloc[0])} if len(inside) else place

    def section(self, section_id: str) -> Section | None:
        """The report's section with this id, or None when the analyzer had nothing to say."""
        try:
            return self.report().section(section_id)
        except KeyError:
            return None

    def fact(self, section_id: str, fact_id: str) -> Fact | None:
        """One fact of a section by id, or None."""
        section = self.section(section_id)
        return next((f for f in section.facts if f.id == fact_id), None) if section else None

    def table(self, section_id: str, table_id: str) -> Table | None:
        """One table of a section by id, or None."""
        section = self.section(section_id)
        return next((t for t in section.tables if t.id == table_id), None) if section else None

    def ranks(self) -> list[int]:
        """Ranks of the trace."""
        return list(self.trace.meta.ranks)

    def steps(self) -> list[int]:
        """Profiled step numbers."""
        table = self.trace.steps()
        return sorted(int(s) for s in table["step"].unique()) if len(table) else []

    def kinds(self) -> list[str]:
        """Device kinds present in the trace (hotspot kind filter)."""
        present = set(self.trace.events["kind"].astype(str).unique())
        return [k for k in DEVICE if k in present]

    def _hotspots(self, level: str, step: int | None = None, rank: int | None = None, kind: str | None = None):
        return self.trace.hotspots(level, step=step, rank=rank, kind=kind)

    @cached_property
    def host_levels(self) -> np.ndarray:
        """Per event: its host level from its step marker, Python frames collapsed (see dashboards.timeline)."""
        return timeline.host_levels(self.trace.events)

    @cached_property
    def python_levels(self) -> np.ndarray:
        """Per event: its host level from its step marker, Python frames counted."""
        return timeline.host_levels(self.trace.events, python=True)

    @cached_property
    def around_steps(self) -> np.ndarray:
        """Per event: whether it lasts around a step marker (timeline.around_steps)."""
        return timeline.around_steps(self.trace.events)

    def _marks(self, rank: int | None, step: timeline.Steps, levels: int, python: bool) -> pd.DataFrame:
        """The findings' evidence inside one rank's step as drawn (ns from its segments' origin, with its rank):
        idle gaps, host syncs, exposed collectives, fusion chains and the memory peak, as the analyzers found them
        (every rank's inside its own step, clock offset applied and labelled with the rank, for all ranks: rank
        None)."""
        segments = self.segments(rank, step, levels, python)
        if not len(segments):
            return pd.DataFrame(columns=[*timeline.MARK_COLUMNS, "rank"])
        origin, span = segments.attrs["origin_ns"], int(segments["end_ns"].max())
        if rank is not None:
            return timeline.marks(self._found(rank, step), origin, span).assign(rank=rank)
        shown = timeline.all_ranks_levels(levels, len(self.ranks()))
        per_rank = {
            r: (self.marks(r, step, shown, python), self.segments(r, step, shown, python).attrs.get("origin_ns", 0))
            for r in self.ranks()
        }
        return timeline.ranks_marks(per_rank, origin, self.offsets())

    def _found(self, rank: int, step: timeline.Steps) -> list[tuple]:
        """The analyzers' evidence on one rank (absolute ns; fusion chains of this step only)."""
        found = []
        gaps, stalls, calls, memory = (
            self.optional(n).data for n in ("idle_gaps", "sync_stalls", "collectives", "memory")
        )
        if gaps is not None:
            found += timeline.gap_marks(gaps, rank)
        if stalls is not None:
            found += timeline.sync_marks(stalls, rank)
        if calls is not None:
            found += timeline.collective_marks(calls, rank)
        if memory is not None and len(memory.peaks):
            found += timeline.peak_marks(memory.peaks, rank)
        if self.fusion_occurrences is not None:
            found += timeline.fusion_marks(self.fusion_occurrences, self.trace.events, rank, step)
        return found

    @cached_property
    def fusion_occurrences(self) -> pd.DataFrame | None:
        """The fusion analyzer's chain occurrences (memoised with the trace), or None when it fails on this trace."""
        try:
            return fusion.occurrences(self.trace)
        except Exception:  # an analyzer failure leaves the other marks on the timeline
            return None

    def boundaries(self, rank: int | None, step: timeline.Steps, levels: int, python: bool) -> pd.DataFrame:
        """The step's start and end from the step model (the ledger's steps), in ns from its segments' origin (each
        rank's, clock offset applied, for all ranks: rank None)."""
        segments = self.segments(rank, step, levels, python)
        if not len(segments):
            return pd.DataFrame(columns=timeline.BOUNDARY_COLUMNS)
        origin = segments.attrs["origin_ns"]
        if rank is None:
            return timeline.ranks_boundaries(self.trace.steps(), self.ranks(), step, origin, self.offsets())
        return timeline.boundaries(self.trace.steps(), rank, step, origin)

    def has_python_frames(self) -> bool:
        """Whether the trace was recorded with_stack (it has Python frame events)."""
        return bool((self.trace.events["kind"] == Kind.PYTHON.value).any())

    def _lanes(self, rank: int | None, step: timeline.Steps, levels: int, python: bool) -> pd.DataFrame:
        """Lane rows of one rank's step, or (rank None) of every rank's, stacked on the lowest rank's clock (the clock
        offsets applied) with host levels limited per rank (timeline.all_ranks_levels)."""
        if rank is not None:
            levels_of = self.python_levels if python else self.host_levels
            return timeline.step_lanes(self.trace.events, levels_of, rank, step, levels, python, self.around_steps)
        shown = timeline.all_ranks_levels(levels, len(self.ranks()))
        per_rank = {r: self.lanes(r, step, shown, python) for r in self.ranks()}
        return timeline.ranks_lanes(per_rank, self.offsets())

    def offsets(self) -> pd.Series:
        """Each rank's clock offset against the lowest rank (ns, to subtract) as the distributed analyzer estimates
        it; empty when it has none."""
        table = self.optional("clock_offsets").data
        if table is None:
            return pd.Series(dtype="int64")
        return table.set_index("rank")["offset_ns"].astype("int64")

    def _segments(
        self, rank: int | None, step: timeline.Steps, levels: int, python: bool, window: tuple[int, int] | None = None
    ) -> pd.DataFrame:
        return timeline.segments(self.lanes(rank, step, levels, python), window)

    def _optional(self, name: str) -> Optional:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                data = OPTIONAL[name](self.trace)
        except Exception as e:  # an analyzer that is missing or fails on this trace: say so, keep the page
            return Optional(reason=f"{type(e).__name__}: {e}")
        if data is None or (isinstance(data, pd.DataFrame) and data.empty):
            return Optional(reason=self.NOTHING_FOUND)
        return Optional(data=data)

    def _details(self, level: str, name: str, step: int | None = None, rank: int | None = None) -> dict:
        ev = self.trace.events
        mine = self.trace.select(step, rank)
        named = mine[mine["name"] == name]
        if level == Level.KERNEL.value:
            kernels = named[named["kind"].isin(DEVICE)]
            ops = ev.reindex(kernels.loc[kernels["op"] != NO_ROW, "op"].unique())
        else:
            ops = named[named["kind"] == Kind.CPU_OP.value]
            kernels = mine[mine["kind"].isin(DEVICE) & mine["op"].isin(ops.index)]
        slowest = kernels["dur"].idxmax() if len(kernels) else (ops["dur"].idxmax() if len(ops) else None)
        return {
            "name": name,
            "kernels": _counted(kernels, "name"),
            "ops": _counted(ops, "name"),
            "shapes": _counted(ops[ops["input_dims"].astype(str) != ""], "input_dims"),
            "stack": self._stack(slowest),
        }

    def _stack(self, row: int | None) -> list[dict]:
        """Host frames enclosing an event (its launching op for device work) up to its step marker, outermost
        first."""
        return [] if row is None else slices.stack(self.trace.events, row)


def _counted(rows: pd.DataFrame, col: str, top: int = 15) -> list[dict]:
    """Distinct values of a column with count and total time, longest first."""
    if not len(rows):
        return []
    g = rows.groupby(rows[col].astype(str), sort=False)["dur"].agg(["size", "sum"])
    g = g.sort_values("sum", ascending=False).head(top)
    return [{col: k, "count": int(r["size"]), "total_ns": int(r["sum"])} for k, r in g.iterrows()]
