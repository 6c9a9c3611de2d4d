"""Device idle: busy share per device, the largest idle gaps with what the host did, and the idle inside steps
(its causes and findings: ``causes``, ``idle``).

A rank the step model measures by its profiler's per-step figures (``summary.profiler_steps``: its compute was not
recorded, only its communication ops) is busy and idle as those figures say (Stage − Free, Free); where its gaps
lie is not known, so it has no gap counts, no gaps listed and no idle claims (nothing to find a cause for)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from traceanalyzer import intervals
from traceanalyzer.analyzers.attribution import describe, host_activity, kind_rows, rank_busy
from traceanalyzer.analyzers.summary import BASIS_EVENTS, BASIS_PROFILER, profiler_steps, step_spans
from traceanalyzer.findings import Claims
from traceanalyzer.memo import per_trace, remember
from traceanalyzer.options import Options
from traceanalyzer.schema import BUSY, NO_ROW
from traceanalyzer.tables import stack
from traceanalyzer.tracedata import TraceData

ANALYZER = "health"

LARGE_GAP_NS = 100_000
"""Idle gaps longer than this (100 µs) are counted and shown one by one; shorter ones are launch latency."""

LARGEST_GAPS = 10
"""How many of the largest gaps the section lists, with what the host was doing."""

GAPS_KEPT = Options().top
"""How many of the largest gaps of each device a part keeps, described: as many as a default report lists
(``Options.top`` is not known where a rank is analysed; describing a gap costs a pass over the rank's host
events)."""


@per_trace
def device_busy(trace: TraceData) -> pd.DataFrame:
    """Per rank and device: span, busy, busy share, idle, gap counts, large gaps (> 100 µs) and the largest."""
    figures = profiler_steps(trace).groupby("rank")[["stage_ns", "free_ns"]].sum()
    rows = [
        _busy_row(device.rank, device.device, device.busy)
        if device.rank not in figures.index
        else _profiled_row(device.rank, device.device, figures.loc[device.rank])
        for device in _devices(trace)
    ]
    columns = ["rank", "device", "span_ns", "busy_ns", "busy_share", "idle_ns", "gaps", "large_gaps"]
    return pd.DataFrame(rows, columns=columns + ["large_gap_ns", "largest_gap_ns", "basis"])


def _profiled_row(rank: int, device: int, figures: pd.Series) -> dict:
    """The busy row of a rank measured by its profiler's figures: busy Stage − Free, idle Free; gaps not known."""
    span, free = int(figures["stage_ns"]), int(figures["free_ns"])
    unknown = {column: np.nan for column in ("gaps", "large_gaps", "large_gap_ns", "largest_gap_ns")}
    return {"rank": rank, "device": device, "span_ns": span, "busy_ns": span - free,
            "busy_share": (span - free) / span if span else 0.0, "idle_ns": free, **unknown,
            "basis": BASIS_PROFILER}  # fmt: skip


def merged_busy(tables: list[pd.DataFrame]) -> pd.DataFrame:
    """``device_busy`` of several parts' ranks, by rank and device."""
    return stack(tables).sort_values(["rank", "device"], kind="stable").reset_index(drop=True)


@dataclass(frozen=True)
class _Device:
    """One device of one rank: the start and launching call of its busy work (in table order), and their union."""

    rank: int
    device: int
    ts: np.ndarray
    launch: np.ndarray
    busy: intervals.Intervals


def _devices(trace: TraceData) -> list[_Device]:
    """Every device's busy work, by rank and device (once per trace: the busy table and the gaps read it)."""
    return remember(trace, "health.devices", lambda: _devices_of(trace.events))


def _devices_of(events: pd.DataFrame) -> list[_Device]:
    rows = kind_rows(events, BUSY)
    rank, device = events["rank"].to_numpy()[rows], events["device"].to_numpy()[rows]
    order = np.lexsort((device, rank))  # stable: each device's work stays in table order
    rows, rank, device = rows[order], rank[order], device[order]
    cuts = np.flatnonzero((rank[1:] != rank[:-1]) | (device[1:] != device[:-1])) + 1
    ts, dur, launch = (events[c].to_numpy()[rows] for c in ("ts", "dur", "launch"))
    bounds = zip(np.r_[0, cuts].tolist(), np.r_[cuts, len(rows)].tolist(), strict=True)
    mine = [slice(lo, hi) for lo, hi in bounds if hi > lo]
    return [
        _Device(
            int(rank[at.start]), int(device[at.start]), ts[at], launch[at], intervals.union(ts[at], ts[at] + dur[at])
        )
        for at in mine
    ]


def _busy_row(rank: int, device: int, busy: intervals.Intervals) -> dict:
    starts, ends = busy
    gaps = starts[1:] - ends[:-1]
    large = gaps[gaps > LARGE_GAP_NS]
    span = int(ends.max() - starts.min())
    length = intervals.length(busy)
    return {
        "rank": rank,
        "device": device,
        "span_ns": span,
        "busy_ns": length,
        "busy_share": length / span if span else 0.0,
        "idle_ns": span - length,
        "gaps": len(gaps),
        "large_gaps": len(large),
        "large_gap_ns": int(large.sum()),
        "largest_gap_ns": int(gaps.max()) if len(gaps) else 0,
        "basis": BASIS_EVENTS,
    }


def idle_gaps(trace: TraceData, top: int = LARGEST_GAPS) -> pd.DataFrame:
    """The largest idle gaps per rank and device (``start_ns`` an instant on the trace's clock), with what the host
    was doing during each (once per trace and ``top``: the section and the dashboard ask for the same table)."""
    return remember(trace, f"health.idle_gaps.{top}", lambda: _idle_gaps(trace, top)).copy(deep=False)


def _idle_gaps(trace: TraceData, top: int) -> pd.DataFrame:
    frames = []
    profiled = set(profiler_steps(trace)["rank"].tolist())
    for device in _devices(trace):
        if device.rank in profiled:
            continue
        starts, ends = device.busy
        gap_start, gap_end = ends[:-1], starts[1:]
        order = np.argsort(gap_start - gap_end, kind="stable")[:top]
        table = pd.DataFrame(
            {
                "rank": device.rank,
                "device": device.device,
                "start_ns": gap_start[order],
                "dur_ns": (gap_end - gap_start)[order],
            }
        )
        table["resumed_by"] = describe(trace, _launch_at(device, gap_end[order]))
        activity = host_activity(trace, device.rank, gap_start[order], gap_end[order])
        frames.append(pd.concat([table, activity], axis=1))
    if not frames:
        return pd.DataFrame(columns=["rank", "device", "start_ns", "dur_ns"])
    return largest_gaps(frames)


def largest_gaps(tables: list[pd.DataFrame]) -> pd.DataFrame:
    """Idle gaps of several devices (each device's longest first), longest first (ties in rank and device order)."""
    return stack(tables).sort_values("dur_ns", ascending=False, kind="stable")


def _launch_at(device: _Device, times: np.ndarray) -> np.ndarray:
    """The launching runtime call of the device's first work (in table order) that starts at each time (NO_ROW if
    none)."""
    order = np.argsort(device.ts, kind="stable")
    ts, launch = device.ts[order], device.launch[order]
    first = np.r_[True, ts[1:] != ts[:-1]]
    ts, launch = ts[first], launch[first]
    at = np.minimum(np.searchsorted(ts, times), len(ts) - 1)  # a device has work: ``ts`` is not empty
    return np.where(ts[at] == times, launch[at], NO_ROW)


def idle_claims(trace: TraceData) -> Claims:
    """Per rank: the device-idle intervals inside steps (the step spans minus all busy device work)."""
    return remember(trace, "health.idle_claims", lambda: _idle_in_spans(trace))


def _idle_in_spans(trace: TraceData) -> Claims:
    busy = rank_busy(trace)
    out: Claims = {}
    spans = step_spans(trace)
    for rank, mine in spans[~spans["rank"].isin(profiler_steps(trace)["rank"])].groupby("rank"):
        span = intervals.union(mine["start_ns"].to_numpy(), mine["end_ns"].to_numpy())
        out[int(rank)] = intervals.subtract(span, busy.get(int(rank), intervals.EMPTY))
    return out
