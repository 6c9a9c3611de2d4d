"""Launch-bound loops: places full of tiny kernels whose launches take longer than the work, and their finding."""

from __future__ import annotations

import numpy as np
import pandas as pd

from traceanalyzer import findings as fnd
from traceanalyzer import humanize
from traceanalyzer.analyzers import advice
from traceanalyzer.analyzers.attribution import (
    accelerator,
    in_step_rows,
    kind_rows,
    linked,
    locate,
    place_text,
    rank_busy,
)
from traceanalyzer.analyzers.health.causes import LAUNCH_BOUND
from traceanalyzer.analyzers.health.gaps import LARGE_GAP_NS
from traceanalyzer.analyzers.health.idle import PER_STEP, profiled_note, unprofiled_evidence
from traceanalyzer.analyzers.health.part import Context, Part
from traceanalyzer.findings import Finding
from traceanalyzer.groups import Groups
from traceanalyzer.memo import per_trace
from traceanalyzer.schema import NO_ROW, Kind
from traceanalyzer.tables import stack
from traceanalyzer.tracedata import TraceData
from traceanalyzer.vocabulary import LAUNCH_CALLS

ANALYZER = "health"

TINY_KERNEL_NS = 10_000
"""A kernel shorter than this (10 µs) is tiny: its launch costs about as much as the work."""

LAUNCH_BOUND_BUSY_SHARE = 0.5
"""A place full of tiny kernels is launch-bound when the device is busy less than this share of its span."""

LAUNCH_BOUND_MIN_KERNELS = 100
"""Fewest tiny kernels per step from one place before it is reported as a launch-bound loop."""

FIX = {
    advice.CUDA: 'capture it in a CUDA graph (torch.compile(mode="reduce-overhead"))',
    advice.ASCEND: "run it in graph mode (torch.compile with the torchair backend)",
}
"""The one fix a launch-bound finding's title names, per platform."""


@per_trace
def launch_bound(trace: TraceData) -> pd.DataFrame:
    """Per rank and place (annotation, Python frame): tiny kernels, their launches, and the device idle just before.

    ``idle_before_ns`` sums the gap (under 100 µs) that ends where each tiny kernel starts; larger gaps are left to
    the idle-gap and sync findings. ``busy_share`` is kernel time over kernel time plus that idle.
    """
    frame = _tiny_kernels(trace)
    g = Groups([frame[key].array for key in ("rank", "annotation", "frame")])
    kernel_ns, launch_ns = frame["kernel_ns"].to_numpy(), frame["launch_ns"].to_numpy()
    table = pd.DataFrame(
        {
            **{key: frame[key].array.take(g.first) for key in ("rank", "annotation", "frame")},
            "tiny_kernels": g.sizes,
            "kernel_ns": g.sum(kernel_ns),
            "launch_ns": g.sum(launch_ns),
            "launch_calls": g.sum(frame["launch_calls"].to_numpy().astype(np.int64)),
            "median_kernel_ns": g.median(kernel_ns),
            "median_launch_ns": g.median(launch_ns),
            "idle_before_ns": g.sum(frame["idle_before_ns"].to_numpy()),
            "top_ops": pd.array(g.each(frame["top_op"], _most_common), dtype="str"),
        }
    )
    table["busy_share"] = table["kernel_ns"] / (table["kernel_ns"] + table["idle_before_ns"]).clip(lower=1)
    return merged_launches([table])


def merged_launches(tables: list[pd.DataFrame]) -> pd.DataFrame:
    """``launch_bound`` of several parts' ranks: the places with the most idle before their tiny kernels first."""
    return stack(tables).sort_values("idle_before_ns", ascending=False, kind="stable").reset_index(drop=True)


def _tiny_kernels(trace: TraceData) -> pd.DataFrame:
    """In-step kernels shorter than their launch call and than ``TINY_KERNEL_NS``, with their place."""
    events = trace.events
    kernels = in_step_rows(trace, kind_rows(events, [Kind.KERNEL.value]))
    kernels = kernels[events["launch"].to_numpy()[kernels] != NO_ROW]
    dur = events["dur"].to_numpy()
    launch = events["launch"].to_numpy()[kernels]
    kernels, launch = (
        rows[(dur[kernels] < TINY_KERNEL_NS) & (dur[launch] > dur[kernels])] for rows in (kernels, launch)
    )
    rank, place = events["rank"].to_numpy()[kernels], locate(trace, launch)
    frame = pd.DataFrame(
        {
            "rank": rank,
            "annotation": place["annotation"].array,
            "frame": place["frame"].array,
            "kernel_ns": dur[kernels],
            "launch_ns": dur[launch],
            "launch_call": linked(events, launch, "name"),
            "idle_before_ns": _idle_before(trace, rank, events["ts"].to_numpy()[kernels]),
            "top_op": linked(events, events["top_op"].to_numpy()[kernels], "name"),
        }
    )
    return frame.assign(launch_calls=frame["launch_call"].isin(LAUNCH_CALLS))


def _most_common(names: pd.Series, n: int = 3) -> str:
    """The n most frequent non-empty names, comma-separated."""
    return ", ".join(names[names != ""].value_counts().head(n).index)


def _idle_before(trace: TraceData, ranks: np.ndarray, ts: np.ndarray) -> np.ndarray:
    """Per kernel (its rank and start): the device idle gap (under 100 µs) that ends where it starts, 0 if it starts
    while busy."""
    out = np.zeros(len(ts), dtype=np.int64)
    busy = rank_busy(trace)
    for rank in np.unique(ranks).tolist():
        mine = np.flatnonzero(ranks == rank)
        starts, ends = busy[int(rank)]
        j = np.searchsorted(starts, ts[mine], side="right") - 1
        opens = (j > 0) & (starts[np.maximum(j, 0)] == ts[mine])
        gap = np.where(opens, starts[np.maximum(j, 0)] - ends[np.maximum(j - 1, 0)], 0)
        out[mine] = np.where(gap < LARGE_GAP_NS, gap, 0)
    return out


def launch_findings(health: Part, context: Context) -> list[Finding]:
    """One finding per rank whose idle has launch-bound stretches (``causes``: short gaps the host made): the idle
    they explain, the loop with the most tiny kernels (a launch-bound loop where one qualifies), the one fix."""
    out = []
    for rank in health.computing:
        if context.median_per_step(health.cause_claims(rank, LAUNCH_BOUND)):
            out.append(_launch_finding(health, context, rank))
    return out


def _launch_finding(health: Part, context: Context, rank: int) -> Finding:
    table, steps = health.launches, context.steps
    claims = health.cause_claims(rank, LAUNCH_BOUND)
    idle = context.median_per_step(claims)
    cause = health.causes[(health.causes["rank"] == rank) & (health.causes["cause"] == LAUNCH_BOUND)].iloc[0]
    mine = table[table["rank"] == rank]
    here = mine["annotation"].combine(mine["frame"], place_text) == cause["where"]
    hit = mine[
        here
        & (mine["tiny_kernels"] >= LAUNCH_BOUND_MIN_KERNELS * steps)
        & (mine["busy_share"] < LAUNCH_BOUND_BUSY_SHARE)
    ]
    per_step = humanize.duration(idle)
    fix = FIX[advice.platform(context.meta)]
    gpu = accelerator(context)
    if len(hit):
        row = hit.iloc[0]
        place = (
            place_text(row["annotation"], row["frame"])
            if row["annotation"] or row["frame"]
            else f"ops {row['top_ops']}"
        )
        title = (
            f"Launch-bound loop at {place}: {row['tiny_kernels'] / steps:,.0f} tiny kernels per step, {gpu} busy "
            f"{humanize.share(row['busy_share'], 0)} there, idle {per_step}/step waiting for launches: {fix}"
        )
        text = (
            f"Each kernel runs ~{humanize.duration(row['median_kernel_ns'], 1)} but its launch takes "
            f"~{humanize.duration(row['median_launch_ns'], 1)}, so the device waits for the CPU. "
        )
        where = {"rank": rank, "annotation": row["annotation"], "frame": row["frame"], "ops": row["top_ops"]}
    else:
        where = f" (most at {cause['where']})" if cause["where"] and not cause["where"].startswith("(") else ""
        title = f"Kernel launches lag behind the {gpu}: idle {per_step}/step in short gaps the host made{where}: {fix}"
        text = "The device runs each kernel faster than the host launches the next, so it idles between them. "
        where = {"rank": rank, "ops": cause["ops"]}
    return fnd.make(
        ANALYZER,
        "launch_bound",
        title,
        text + advice.CAPTURE_LOOP[advice.platform(context.meta)] + profiled_note(cause, idle),
        context.step_of(rank),
        concerns_ns=context.as_total(rank, idle),
        saving_ns=context.as_total(rank, idle),
        basis=fnd.Basis.MEASURED,
        model=f"the idle of the short gaps (under {humanize.duration(LARGE_GAP_NS, 0)}) the launching thread made "
        "would go if the stretch were one captured graph (the host time of the launches leaves the step)" + PER_STEP,
        claims=claims,
        where=where,
        evidence={
            "launch_places": mine.head(3).to_dict(orient="records"),
        }
        | unprofiled_evidence(cause, idle),
    )
