"""Host syncs: every blocking sync call with the device idle right after it, grouped by place, and device-to-host
copies (pageable ones flagged); the sync finding."""

from __future__ import annotations

import numpy as np
import pandas as pd

from traceanalyzer import findings as fnd
from traceanalyzer import humanize, intervals
from traceanalyzer.analyzers import advice
from traceanalyzer.analyzers.attribution import (
    accelerator,
    in_steps,
    is_one_of,
    kind_rows,
    linked,
    locate,
    name_hits,
    place_text,
    rank_busy,
    rank_spans,
)
from traceanalyzer.analyzers.health.gaps import LARGEST_GAPS
from traceanalyzer.analyzers.health.idle import PER_STEP, cause_row, profiled_note, unprofiled_evidence
from traceanalyzer.analyzers.health.part import Context, Part
from traceanalyzer.findings import Finding
from traceanalyzer.groups import Groups
from traceanalyzer.memo import per_trace
from traceanalyzer.schema import HOST, Kind, category_text
from traceanalyzer.tables import stack
from traceanalyzer.tracedata import TraceData
from traceanalyzer.vocabulary import DATA_LOADING, DTOH_COPY, PAGEABLE_COPY, SYNC_CALLS

ANALYZER = "health"

SCALER_FIX = "GradScaler's inf check syncs every step: drop GradScaler under bf16, else check found_inf every N steps"
"""The one fix of a sync finding whose syncs GradScaler makes."""

PLACE = ["rank", "annotation", "frame"]
"""The keys of a place of syncs."""


@per_trace
def sync_stalls(trace: TraceData) -> pd.DataFrame:
    """Every blocking host sync call: where it was, how long the host waited, and the device idle right after it."""
    events = trace.events
    calls = events[(events["kind"] == Kind.RUNTIME.value).to_numpy() & is_one_of(events["name"], SYNC_CALLS)]
    place = locate(trace, calls.index.to_numpy())
    table = pd.DataFrame(
        {
            "rank": calls["rank"].to_numpy(),
            "step": calls["step"].to_numpy(),
            "name": calls["name"].astype(str).to_numpy(),
            "ts": calls["ts"].to_numpy(),
            "sync_ns": calls["dur"].to_numpy(),
            "annotation": place["annotation"].to_numpy(),
            "frame": place["frame"].to_numpy(),
            "op": linked(events, calls["op"].to_numpy(), "name"),
        },
        index=calls.index,
    )
    table["idle_after_ns"] = _idle_after(trace, table)
    return table


def _idle_after(trace: TraceData, calls: pd.DataFrame) -> np.ndarray:
    """Device idle of the gap each call ends in, charged to the first call ending in it (0 if the device is busy
    then), less the time the host spends loading data in that gap (the device would wait for the input anyway)."""
    out = np.zeros(len(calls), dtype=np.int64)
    done = (calls["ts"] + calls["sync_ns"]).to_numpy()
    busy, loading = rank_busy(trace), _data_loading(trace.events)
    for rank in calls["rank"].unique():
        starts, ends = busy.get(int(rank), intervals.EMPTY)
        if len(starts) < 2:
            continue
        mine = np.flatnonzero((calls["rank"] == rank).to_numpy())
        mine = mine[np.argsort(done[mine], kind="stable")]
        nxt = np.clip(np.searchsorted(starts, done[mine], side="right"), 1, len(starts) - 1)
        inside = (ends[nxt - 1] <= done[mine]) & (starts[nxt] > done[mine])
        first = inside & ~pd.Series(np.where(inside, nxt, -1)).duplicated().to_numpy()
        gap_start, gap_end = ends[nxt - 1][first], starts[nxt][first]
        covered = intervals.covered_within(loading.get(int(rank), intervals.EMPTY), gap_start, gap_end)
        out[mine[first]] = gap_end - gap_start - covered
    return out


def _data_loading(events: pd.DataFrame) -> dict[int, intervals.Intervals]:
    """Per rank: when the host loads data (DataLoader ranges and frames), as disjoint intervals."""
    host = is_one_of(events["kind"], HOST)
    return rank_spans(events, np.flatnonzero(host & name_hits(events["name"], DATA_LOADING)))


def dtoh_copies(trace: TraceData) -> pd.DataFrame:
    """Device-to-host copies per rank and name (pageable ones flagged), the most copy time first."""
    events = trace.events
    memcpy = kind_rows(events, [Kind.MEMCPY.value])
    rows = memcpy[name_hits(events["name"].iloc[memcpy], DTOH_COPY)]
    rank, name = events["rank"].to_numpy()[rows], events["name"].array.codes[rows]
    g = Groups([rank, name])
    table = pd.DataFrame(
        {
            "rank": rank[g.first],
            "name": pd.array(category_text(events["name"])[name[g.first]], dtype="str"),
            "count": g.sizes,
            "total_ns": g.sum(events["dur"].to_numpy()[rows]),
        }
    )
    table["pageable"] = table["name"].str.contains(PAGEABLE_COPY)
    return merged_copies([table])


def merged_copies(tables: list[pd.DataFrame]) -> pd.DataFrame:
    """``dtoh_copies`` of several parts' ranks: the most copy time first (ties by rank and name)."""
    order = ["total_ns", "rank", "name"]
    return stack(tables).sort_values(order, ascending=[False, True, True], kind="stable").reset_index(drop=True)


def sync_places(trace: TraceData) -> pd.DataFrame:
    """In-step syncs grouped by rank and place: count, host wait, device idle after, and the ops that synced."""
    stalls = in_steps(trace, sync_stalls(trace))  # a sync outside every step is the profiler's own flush
    g = Groups([stalls[key].array for key in PLACE])
    table = pd.DataFrame(
        {
            **{key: stalls[key].array.take(g.first) for key in PLACE},
            "syncs": g.sizes,
            "sync_ns": g.sum(stalls["sync_ns"].to_numpy()),
            "idle_after_ns": g.sum(stalls["idle_after_ns"].to_numpy()),
            "calls": pd.array(g.each(stalls["name"], _joined), dtype="str"),
            "ops": pd.array(g.each(stalls["op"], _joined), dtype="str"),
        }
    )
    return merged_places([table])


def merged_places(tables: list[pd.DataFrame]) -> pd.DataFrame:
    """``sync_places`` of several parts' ranks: the places with the most device idle after them first."""
    table = stack(tables)
    return table.sort_values(["idle_after_ns", "sync_ns"], ascending=False, kind="stable").reset_index(drop=True)


def _joined(names: pd.Series) -> str:
    """The distinct non-empty names, sorted and comma-separated."""
    return ", ".join(sorted(set(names) - {""}))


def sync_findings(health: Part, context: Context) -> list[Finding]:
    """One finding for all in-step host syncs: the idle they explain on the rank with the most (``causes``: the
    gaps a sync drained), where most are, and the one fix."""
    places, copies = health.syncs, health.copies
    if not len(places):
        return []
    steps = context.steps * max(len(context.meta.ranks), 1)
    top = places.iloc[0]
    rank = int(top["rank"])
    total = int(places["syncs"].sum())
    claims = health.cause_claims(rank, "host_sync")
    idle = context.median_per_step(claims)
    row = cause_row(health, rank, "host_sync")
    scaler = bool(health.causes.loc[health.causes["cause"] == "host_sync", "grad_scaler"].any())
    per_rank = " per rank" if len(context.meta.ranks) > 1 else ""
    on_rank = f" of rank {rank}" if len(context.meta.ranks) > 1 else ""
    where = place_text(top["annotation"], top["frame"])
    fix = SCALER_FIX if scaler else "keep values on the device"
    return [
        fnd.make(
            ANALYZER,
            "sync",
            f"{total / steps:g} host syncs per step{per_rank} leave the {accelerator(context)}{on_rank} idle "
            f"{humanize.duration(idle)}/step (most at {where}): {fix}",
            _sync_advice(context, top, where, int(copies.loc[copies["pageable"], "count"].sum()), scaler)
            + profiled_note(row, idle),
            context.step_of(rank),
            concerns_ns=int(places.loc[places["rank"] == rank, "sync_ns"].sum()),
            saving_ns=context.as_total(rank, idle),
            basis=fnd.Basis.MEASURED,
            model="the device idle of the gaps a host sync drained (from the sync to the next launch) and of the "
            "few launches just before it would go without the sync" + PER_STEP,
            claims=claims,
            where={"rank": rank, "annotation": top["annotation"], "frame": top["frame"]},
            evidence={
                "syncs": total,
                "syncs_per_step": total / steps,
                "sync_ns": int(places["sync_ns"].sum()),
                "idle_after_ns": int(places["idle_after_ns"].sum()),
                "grad_scaler": scaler,
                "dtoh_copies": {name: int(n) for name, n in copies.groupby("name", sort=False)["count"].sum().items()},
                "places": places.head(LARGEST_GAPS).to_dict(orient="records"),
            }
            | unprofiled_evidence(row, idle),
        )
    ]


def _sync_advice(context: Context, top: pd.Series, where: str, pageable: int, scaler: bool) -> str:
    text = (
        "torch.amp.GradScaler reads found_inf on the host in step() (an .item()), so the device drains every step; "
        "on bf16 drop the GradScaler, else skip its check on most steps. "
        if scaler
        else ""
    ) + (
        f"Each sync drains the device queue; the device then idles until the host launches again. Most are at "
        f"{where} ({top['syncs']} syncs, from {top['ops'] or top['calls']}). Keep values on the device (accumulate "
        "norms/losses in a tensor and call .item() once per step or every N steps), use "
        "torch.nn.utils.clip_grad_norm_/foreach norms instead of per-parameter .item(), and "
        f"{advice.PINNED_COPY[advice.platform(context.meta)]}."
    )
    if pageable:
        text += f" {pageable} device-to-host copies go to pageable memory, which is synchronous: pin the buffer."
    return text
