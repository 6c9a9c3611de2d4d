"""Host<->device copies inside steps: per rank, direction and host memory kind (pinned or pageable), their time,
bytes and the part no other device work overlaps; the pageable-copy finding, costed against the pinned bandwidth
of the device (``devices.host_link``), and the serial-copy finding: pinned copies that run alone on the device,
which a copy prefetched on a side stream would hide under the step's other work."""

from __future__ import annotations

import numpy as np
import pandas as pd

from traceanalyzer import devices, humanize, intervals
from traceanalyzer import findings as fnd
from traceanalyzer.analyzers import advice
from traceanalyzer.analyzers.attribution import accelerator, in_step_rows, kind_rows, name_hits
from traceanalyzer.analyzers.health.idle import cause_row, profiled_note, unprofiled_evidence
from traceanalyzer.analyzers.health.part import Context, Part
from traceanalyzer.findings import Claims, Finding
from traceanalyzer.groups import Groups
from traceanalyzer.intervals import Packed
from traceanalyzer.memo import remember
from traceanalyzer.schema import NO_ROW, NON_COPY_WORK, Kind
from traceanalyzer.tables import stack
from traceanalyzer.tracedata import TraceData
from traceanalyzer.vocabulary import DTOH_COPY, HTOD_COPY, PAGEABLE_COPY

ANALYZER = "health"

COLUMNS = ["rank", "direction", "pageable", "count", "bytes", "unknown_bytes", "total_ns", "exposed_ns"]


def host_copies(trace: TraceData) -> tuple[pd.DataFrame, dict[int, Packed]]:
    """Per rank, direction (HtoD/DtoH) and memory kind: in-step copies, bytes (of those that say), time and the time
    no other device work of the rank overlaps; and per rank the pageable copies' device intervals (once per
    trace)."""
    return remember(trace, "health.host_copies", lambda: _host_copies(trace))


def merged_host_copies(tables: list[pd.DataFrame]) -> pd.DataFrame:
    """``host_copies`` tables of several parts' ranks, the most copy time first (ties by rank)."""
    table = stack(tables) if tables else pd.DataFrame(columns=COLUMNS)
    order = ["total_ns", "rank", "direction"]
    return table.sort_values(order, ascending=[False, True, True], kind="stable").reset_index(drop=True)


def _host_copies(trace: TraceData) -> tuple[pd.DataFrame, dict[int, Packed]]:
    events = trace.events
    rows = in_step_rows(trace, kind_rows(events, [Kind.MEMCPY.value]))
    htod, dtoh = (name_hits(events["name"], p)[rows] for p in (HTOD_COPY, DTOH_COPY))
    rows, direction = rows[htod | dtoh], np.where(htod, "HtoD", "DtoH")[htod | dtoh]
    rank, ts, dur, size = (events[c].to_numpy()[rows] for c in ("rank", "ts", "dur", "bytes"))
    pageable = name_hits(events["name"], PAGEABLE_COPY)[rows]
    exposed = _exposed(trace, rank, ts, dur)
    order = np.lexsort((pageable, direction, rank))  # the groups sorted by their keys
    g = Groups([rank[order], direction[order], pageable[order]])
    table = pd.DataFrame(
        {
            "rank": rank[order][g.first],
            "direction": direction[order][g.first],
            "pageable": pageable[order][g.first],
            "count": g.sizes,
            "bytes": g.sum(np.where(size != NO_ROW, size, 0)[order]),
            "unknown_bytes": g.sum((size == NO_ROW)[order].astype(np.int64)),
            "total_ns": g.sum(dur[order]),
            "exposed_ns": g.sum(exposed[order]),
        }
    )
    spans = {
        int(r): intervals.pack(*intervals.union(ts[mine], ts[mine] + dur[mine]))
        for r in np.unique(rank[pageable]).tolist()
        if (mine := pageable & (rank == r)).any()
    }
    return merged_host_copies([table]), spans


def serial_copies(trace: TraceData) -> dict[int, tuple[Packed, Packed]]:
    """Per rank with in-step pinned host<->device copies: their time no other device work of the rank overlaps, and
    that other work's time no such copy overlaps (what a prefetched copy could run beside), packed (once per
    trace)."""
    return remember(trace, "health.serial_copies", lambda: _serial_copies(trace))


def _serial_copies(trace: TraceData) -> dict[int, tuple[Packed, Packed]]:
    events = trace.events
    names, rank = events["name"], events["rank"].to_numpy()
    copies = in_step_rows(trace, kind_rows(events, [Kind.MEMCPY.value]))
    host = name_hits(names, HTOD_COPY) | name_hits(names, DTOH_COPY)
    copies = copies[host[copies] & ~name_hits(names, PAGEABLE_COPY)[copies]]
    work = kind_rows(events, NON_COPY_WORK)
    ts, end = events["ts"].to_numpy(), (events["ts"] + events["dur"]).to_numpy()
    out = {}
    for r in np.unique(rank[copies]).tolist():
        mine, theirs = copies[rank[copies] == r], work[rank[work] == r]
        copied, other = intervals.union(ts[mine], end[mine]), intervals.union(ts[theirs], end[theirs])
        out[int(r)] = (
            intervals.pack(*intervals.subtract(copied, other)),
            intervals.pack(*intervals.subtract(other, copied)),
        )
    return out


def _exposed(trace: TraceData, ranks: np.ndarray, ts: np.ndarray, dur: np.ndarray) -> np.ndarray:
    """Per copy (its rank, start and duration): its time with no other device work of its rank running (the other
    work: busy minus the copy)."""
    events = trace.events
    out = np.zeros(len(ts), dtype=np.int64)
    work = kind_rows(events, NON_COPY_WORK) if len(ts) else np.zeros(0, dtype=np.int64)
    work_rank, start = events["rank"].to_numpy()[work], events["ts"].to_numpy()[work]
    end = start + events["dur"].to_numpy()[work]
    for rank in pd.unique(ranks).tolist():
        mine, theirs = np.flatnonzero(ranks == rank), work_rank == rank
        other = intervals.union(start[theirs], end[theirs])
        out[mine] = dur[mine] - intervals.covered_within(other, ts[mine], ts[mine] + dur[mine])
    return out


def pageable_findings(health: Part, context: Context) -> list[Finding]:
    """One finding per rank with pageable copies inside steps: their time above the pinned bandwidth of the device,
    plus the idle after the host waited for them, and the one fix (pinned memory, non_blocking)."""
    table = health.host_copies
    bandwidth, source = devices.host_link(context.meta)
    out = []
    for rank, rows in table[table["pageable"]].groupby("rank", sort=True):
        out.append(_pageable_finding(health, context, int(rank), rows, bandwidth, source))
    return out


def _pageable_finding(
    health: Part, context: Context, rank: int, rows: pd.DataFrame, bandwidth: float, source: str
) -> Finding:
    steps = max(context.steps, 1)
    total, size, count = int(rows["total_ns"].sum()), int(rows["bytes"].sum()), int(rows["count"].sum())
    pinned = int(size / bandwidth * 1e9)
    faster = max(total - pinned, 0) if not rows["unknown_bytes"].any() else 0
    idle_per_step = context.median_per_step(health.cause_claims(rank, "pageable_copy"))
    idle = context.as_total(rank, idle_per_step)
    row = cause_row(health, rank, "pageable_copy")
    directions = "/".join(rows["direction"].drop_duplicates())
    on_rank = f" on rank {rank}" if len(context.meta.ranks) > 1 else ""
    return fnd.make(
        ANALYZER,
        "pageable_copy",
        f"Pageable {directions} copies{on_rank} take {humanize.duration(total / steps)}/step "
        f"({count / steps:g}/step, {humanize.size(size / steps)}/step) and stall the {accelerator(context)}: copy "
        "from pinned memory with non_blocking=True",
        f"A copy to or from pageable memory is staged through a driver buffer at a fraction of the link's speed and "
        f"blocks the host until it is done. Allocate the host buffer pinned (torch.empty(..., pin_memory=True), "
        f"DataLoader(pin_memory=True)) and copy with .to(device, non_blocking=True); at {source} these copies would "
        f"take {humanize.duration(pinned / steps)}/step, and a side stream can overlap them with compute."
        + profiled_note(row, idle_per_step),
        context.step_of(rank),
        concerns_ns=total + idle,
        saving_ns=faster + idle,
        basis=fnd.Basis.MODELLED,
        model=f"the copies at the pinned bandwidth ({source}) instead of their measured time, plus the device idle "
        "after the host waited for them (measured; the median over the rank's steps)",
        claims=_claims(health, rank),
        where={"rank": rank, "directions": directions},
        evidence={
            "copies": count,
            "bytes": size,
            "copy_ns": total,
            "pinned_estimate_ns": pinned,
            "idle_after_ns": idle,
            "exposed_ns": int(rows["exposed_ns"].sum()),
            "unknown_bytes": int(rows["unknown_bytes"].sum()),
        }
        | unprofiled_evidence(row, idle_per_step, faster // steps),
    )


def _claims(health: Part, rank: int) -> Claims:
    """A rank's pageable copies and the idle after them."""
    packed = (health.pageable.get(rank), health.cause_idle.get((rank, "pageable_copy")))
    parts = [p.unpacked() for p in packed if p is not None]
    if not parts:
        return {}
    return {rank: intervals.union(np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]))}


SIDE_STREAM = {
    advice.CUDA: "torch.cuda.Stream(), torch.cuda.current_stream().wait_stream(side), tensor.record_stream()",
    advice.ASCEND: "torch.npu.Stream(), torch.npu.current_stream().wait_stream(side), tensor.record_stream()",
}
"""How a platform prefetches on a side stream."""


def serial_copy_findings(health: Part, context: Context) -> list[Finding]:
    """One finding per rank whose pinned copies run alone on the device in its steps: the part of that time the
    step's other device work (running beside no copy) could hide, per step, and the one fix (prefetch on a side
    stream)."""
    out = []
    for rank, (alone, beside) in sorted(health.serial.items()):
        exposed, free = alone.unpacked(), beside.unpacked()
        hidden = context.step_lengths(rank, exposed)
        if hidden is not None:
            hidden = np.minimum(hidden, context.step_lengths(rank, free))
        per_step = int(np.median(hidden)) if hidden is not None else _mean_hideable(context, rank, exposed, free)
        if per_step:
            out.append(_serial_finding(health, context, rank, exposed, per_step))
    return out


def _mean_hideable(context: Context, rank: int, exposed: intervals.Intervals, free: intervals.Intervals) -> int:
    """Without known steps: the hideable copy time over the steps analysed."""
    return min(intervals.length(exposed), intervals.length(free)) // max(context.step_of(rank).steps, 1)


def _serial_finding(health: Part, context: Context, rank: int, exposed: intervals.Intervals, per_step: int) -> Finding:
    steps = max(context.step_of(rank).steps, 1)
    table = health.host_copies
    rows = table[(table["rank"] == rank) & ~table["pageable"].astype(bool)]
    count, size = int(rows["count"].sum()), int(rows["bytes"].sum())
    directions = "/".join(rows["direction"].drop_duplicates())
    on_rank = f" on rank {rank}" if len(context.meta.ranks) > 1 else ""
    alone = humanize.duration(intervals.length(exposed) / steps)
    stream = SIDE_STREAM[advice.platform(context.meta)]
    fix = "prefetch them on a side stream" if "HtoD" in directions else "copy them on a side stream beside compute"
    return fnd.make(
        ANALYZER,
        "serial_copy",
        f"Pinned {directions} copies{on_rank} run alone on the {accelerator(context)} {alone}/step "
        f"({count / steps:g}/step, {humanize.size(size / steps)}/step): {fix}",
        "These copies come from pinned memory and could run beside compute, but no other device work runs while "
        "they do: they are on the compute stream, or the compute waits for them at once. Copy the next step's "
        f"input (or this step's results) with non_blocking=True on a side stream while the device computes "
        f"({stream}), or let a DataLoader with pin_memory=True feed a prefetcher that does.",
        context.step_of(rank),
        concerns_ns=intervals.length(exposed),
        saving_ns=context.as_total(rank, per_step),
        basis=fnd.Basis.MODELLED,
        model="the pinned copies' time with no other device work running, up to the step's other device work "
        "that runs beside no copy (what a prefetch on a side stream hides them under), per step (the median over "
        "the rank's steps), bounded by where the step turns host-bound",
        claims={rank: exposed},
        where={"rank": rank, "directions": directions},
        evidence={"copies": count, "bytes": size, "alone_ns": intervals.length(exposed)}
        | unprofiled_evidence(None, 0, per_step),
        device_time=True,
    )
