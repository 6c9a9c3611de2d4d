"""The Health page: device busy, idle gaps (each linked to its place on the Timeline), host syncs, device-to-host
copies, launch-bound loops, fp32 GEMMs and GEMM throughput, dynamic shapes: the analyzers' own tables (the ones the
report's sections print), each under what its numbers are. Nothing here computes a finding."""

from __future__ import annotations

from functools import partial

import pandas as pd
from dash import html
from traceanalyzer.dashboards import state
from traceanalyzer.dashboards.blocks import Block, block_section, evidence_note
from traceanalyzer.dashboards.views import View

TITLE = "Health"

HEALTH = (
    Block(
        "health",
        "device_busy",
        "device-busy",
        "Total over the whole recorded window, per rank and device (ms); busy share = busy / window; large gaps are "
        "idle gaps over 100 µs.",
        "no device work recorded",
    ),
    Block(
        "health",
        "largest_gaps",
        "idle-gaps",
        "Each row is one gap on one device (ms); offset from that device's first work; the host's call stack when the "
        "gap began and during it, and the call that launched the work ending it.",
        "no idle gaps between device work",
    ),
    Block(
        "health",
        "sync_places",
        "syncs",
        "Total over the profiled steps, per rank and place (annotation › Python frame): blocking sync calls, host wait "
        "(ms) and GPU idle right after them (ms).",
        "no blocking host syncs inside the profiled steps",
    ),
    Block(
        "health",
        "dtoh_copies",
        "dtoh-copies",
        "Total over the whole window, per rank and copy kind (ms); pageable copies block the host.",
        "no device-to-host copies",
    ),
    Block(
        "health",
        "launch_places",
        "launch-bound",
        "Total over the profiled steps, per rank and place: tiny kernels, their launch time (ms) and the GPU idle just "
        "before them (ms); medians are per kernel.",
        "no place where kernels wait on their launches",
    ),
    Block(
        "health",
        "fp32_gemms",
        "fp32-gemms",
        "Total over the profiled steps, per rank, kernel and op (ms).",
        "no fp32 GEMM kernels (matrix work runs on tensor cores or in lower precision)",
    ),
    Block(
        "gemm",
        "gemm_throughput",
        "gemm-throughput",
        "Per GEMM op and dtype, over the whole window: FLOPs from the recorded shapes, device time they caused (ms, "
        "total), achieved TFLOP/s and share of the device's dense data-sheet peak; the roofline limit (memory or "
        "compute) that binds them and the share of it reached.",
        "no GEMM op with recorded input shapes (record_shapes=True gives them)",
    ),
    Block(
        "health",
        "dynamic_shapes",
        "dynamic-shapes",
        "Total over the profiled steps, per rank and op: calls, distinct input shapes, shapes first seen after the "
        "first step, device time (ms).",
        "no op whose input shapes keep changing across steps",
    ),
)
"""The Health page, in reading order."""

GAPS_TABLE = "largest_gaps"
"""The Health table whose rows link to their place on the Timeline."""


def layout(view: View, query: dict[str, str]) -> list:
    """Idle gaps, syncs, launch-bound loops, fp32 GEMMs and throughput, dynamic shapes: one table each."""
    rank = state.choice(query, "rank", view.ranks(), None)
    shown = (
        [
            html.P(
                f"Rows of rank {rank} (from the link; clear the rank filter in a table's header for all).",
                className="note",
                id="rank-filter",
            )
        ]
        if rank is not None
        else []
    )
    key = state.evidence(query)
    links = partial(gap_links, view, query=query)
    blocks = (block_section(view, b, rank, key, links if b.table == GAPS_TABLE else None) for b in HEALTH)
    return [*shown, *evidence_note(key), *blocks]


def gap_links(view: View, gaps: pd.DataFrame, query: dict[str, str]) -> list[str]:
    """Per idle gap (rank, ``start_ns``, ``dur_ns``), a link to its place on the Timeline: its rank, the step it
    begins in and the gap as ``at`` (absolute ns); text where it lies outside every step."""
    steps, search = view.trace.steps(), state.encode(query)
    out = []
    for gap in gaps.itertuples():
        start = int(gap.start_ns)
        mine = steps[(steps["rank"] == gap.rank) & (steps["start_ns"] <= start)]
        inside = mine[start < mine["start_ns"] + mine["step_ns"]]
        if not len(inside):
            out.append("outside the steps")
            continue
        place = {"rank": gap.rank, "step": int(inside["step"].iloc[0]), "at": f"{start}-{start + int(gap.dur_ns)}"}
        href = "/timeline" + state.updated(search, **place, row=None, zoom=None, sel=None)
        out.append(f"[step {place['step']} →]({href})")
    return out
