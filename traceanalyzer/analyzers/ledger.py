"""The ledger of what was analysed: window, steps, ranks against the job's world size, device time outside steps,
how much device time is linked to an op or replayed from a graph, and what the parsers dropped or clipped.

Nothing is skipped silently: every count here that is not zero also has a warning in ``trace.meta.warnings``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from traceanalyzer import humanize
from traceanalyzer.analyzers.summary import BASIS_PROFILER, job_step_table, outside_steps, step_table
from traceanalyzer.jobdata import JobData
from traceanalyzer.options import DEFAULT, Options
from traceanalyzer.schema import BUSY, NO_ROW, Kind, TraceMeta, codes_at
from traceanalyzer.section import Fact, Per, Section, Table, Unit
from traceanalyzer.tables import stack
from traceanalyzer.tracedata import TraceData
from traceanalyzer.vocabulary import GRAPH_LAUNCH, matches


def section(trace: TraceData, options: Options) -> Section:
    """The ledger section (always present)."""
    return _section(trace.meta, trace.base.meta.ranks, str(trace.scope), step_table(trace), rank_part(trace))


def job_section(part: LedgerPart, job: JobData, options: Options) -> Section:
    """``section`` of a job's merged part."""
    return _section(job.meta, job.meta.ranks, str(job.scope), job_step_table(job), part)


@dataclass(frozen=True)
class LedgerPart:
    """A rank's part (or a job's, merged): its device time, how much of it is linked to an op or replayed from a
    graph (ns), its counter samples (count), and its device work outside steps (``outside_steps``)."""

    device_ns: int
    linked_ns: int
    replayed_ns: int
    counter_samples: int
    outside: pd.DataFrame


def rank_part(trace: TraceData, options: Options = DEFAULT) -> LedgerPart:
    """A rank's part (or a joined trace's)."""
    work = trace.events.loc[trace.events["kind"].isin(BUSY), ["dur", "op"]]
    return LedgerPart(
        device_ns=int(work["dur"].sum()),
        linked_ns=int(work.loc[work["op"] != NO_ROW, "dur"].sum()),
        replayed_ns=int(graph_replayed(trace)["dur"].sum()),
        counter_samples=int((trace.events["kind"] == Kind.COUNTER.value).sum()),
        outside=outside_steps(trace),
    )


def merge(parts: list[LedgerPart], job: JobData) -> LedgerPart:
    """The job's part: the ranks' times and samples added, their work outside steps one after another."""
    return LedgerPart(
        device_ns=sum(p.device_ns for p in parts),
        linked_ns=sum(p.linked_ns for p in parts),
        replayed_ns=sum(p.replayed_ns for p in parts),
        counter_samples=sum(p.counter_samples for p in parts),
        outside=stack([p.outside for p in parts]),
    )


def _section(meta: TraceMeta, ranks: list[int], scope: str, steps: pd.DataFrame, part: LedgerPart) -> Section:
    """The ledger from the facts of what was loaded, its steps and the part of its ranks."""
    device_ns = part.device_ns
    outside = part.outside
    missing = humanize.ranges(humanize.missing_runs(meta.world_size, ranks))
    facts = [
        Fact("scope", "scope", scope),
        Fact("window_ns", "recorded window", int(meta.span_ns), Unit.NS, Per.TOTAL),
        Fact("steps", "steps analysed", _steps_text(steps)),
        Fact("ranks", "ranks analysed (of the world size)", _ranks_text(meta)),
        Fact("missing_ranks", "ranks not in the trace", missing or "none"),
        Fact(
            "ranks_from_figures",
            "ranks without kernels or host events (their profiler's step figures)",
            _figured(steps),
        ),
        Fact("device_ns", "device time", device_ns, Unit.NS, Per.TOTAL),
        Fact(
            "outside_steps_ns",
            "device time outside steps (left out of step figures)",
            int(outside["device_ns"].sum()),
            Unit.NS,
            Per.TOTAL,
        ),
        Fact(
            "busy_clipped_ns",
            "device busy time past its step's window (left out of busy shares)",
            int(steps["busy_clipped_ns"].sum()) if len(steps) else 0,
            Unit.NS,
            Per.TOTAL,
        ),
        Fact("op_linked_share", "device time linked to an op", _share(part.linked_ns, device_ns), Unit.SHARE),
        Fact(
            "graph_replayed_share",
            "device time replayed from CUDA/HIP graphs",
            _share(part.replayed_ns, device_ns),
            Unit.SHARE,
        ),
        Fact(
            "counter_samples",
            "hardware counter samples read (see the counters section)",
            part.counter_samples,
            Unit.COUNT,
            Per.TOTAL,
        ),
        Fact("warnings", "warnings", len(meta.warnings), Unit.COUNT),
    ]
    tables = [
        Table(
            "adjustments",
            "Events dropped or values clipped by the parser",
            _adjustments(meta),
            Per.TOTAL,
            units={"events": Unit.COUNT},
        )
    ]
    if len(outside):
        tables.append(Table("outside_steps", "Device work outside steps, per rank", outside, Per.TOTAL))
    return Section("ledger", "What was analysed", facts=facts, tables=tables)


def graph_replayed(trace: TraceData) -> pd.DataFrame:
    """The busy device rows launched by a graph replay (cudaGraphLaunch / hipGraphLaunch)."""
    ev = trace.events
    work = np.flatnonzero(ev["kind"].isin(BUSY).to_numpy())
    return ev.iloc[work[graph_launched(ev, ev["launch"].to_numpy()[work])]]


def graph_launched(table: pd.DataFrame, launch: np.ndarray) -> np.ndarray:
    """Per launch link (a row label of ``table``, or NO_ROW): is it a graph launch (cudaGraphLaunch / hipGraphLaunch)?
    Each distinct name is matched once."""
    names = table["name"]
    hit = np.append(matches(np.asarray(names.array.categories, dtype=object), GRAPH_LAUNCH), False)  # code -1: none
    return hit[codes_at(names, launch)]


def _ranks_text(meta: TraceMeta) -> str:
    """How many ranks were analysed and which (their rank ids), of the world size, and whether the ids were recorded or
    assumed: ``1 (rank 0) of 1``, ``2 (ranks 0, 1) of 8``."""
    ids = ", ".join(map(str, meta.ranks))
    text = f"{len(meta.ranks)} (rank{'s' if len(meta.ranks) != 1 else ''} {ids}) of {meta.world_size}"
    return text if meta.rank_known else text + " (not recorded; assumed)"


def _figured(steps: pd.DataFrame) -> str:
    """The ranks whose steps their profiler's figures measure (no kernels or host events were written for them), by
    id, and what is therefore not known of them; ``none`` when every rank has its events."""
    ranks = sorted(int(r) for r in steps.loc[steps["basis"] == BASIS_PROFILER, "rank"].unique()) if len(steps) else []
    if not ranks:
        return "none"
    ids = ", ".join(map(str, ranks))
    return (
        f"{len(ranks)} (rank{'s' if len(ranks) != 1 else ''} {ids}): compute, communication and free time are the "
        "profiler's step figures; host span, kernel count, step bound and idle gaps not known"
    )


def _share(part_ns: int, total: int) -> float:
    """``part_ns`` as a share of ``total`` (0 when it is 0)."""
    return float(part_ns / total) if total else 0.0


def _steps_text(steps: pd.DataFrame) -> str:
    """The steps analysed, from a step table: how many, and which by their step numbers (first–last when more than
    two), or none: ``1 (step 50)``, ``2 (steps 6, 7)``, ``9 (steps 1–9)``."""
    if not len(steps):
        return "none (no step markers: the whole window is analysed as one)"
    numbers = sorted(int(n) for n in steps["step"].unique())
    which = f"{numbers[0]}–{numbers[-1]}" if len(numbers) > 2 else ", ".join(map(str, numbers))
    return f"{len(numbers)} ({'step' if len(numbers) == 1 else 'steps'} {which})"


def _adjustments(meta: TraceMeta) -> pd.DataFrame:
    """What the parsers dropped or clipped, one row per reason (sorted) with its number of events."""
    items = sorted(meta.adjustments.items())
    return pd.DataFrame({"reason": [r for r, _ in items], "events": [n for _, n in items]})
