"""What an expert checks next, one module per check: device idle gaps and busy share (``gaps``), launch-bound loops
(``launch``), host syncs (``syncs``), fp32 matrix work (``precision``) and dynamic shapes (``shapes``).

Contract: each check is a function of a ``TraceData`` returning a DataFrame (memoised per trace), plus a
``*_findings(trace, step_time)`` that turns it into findings with a per-step concern and saving. This package's
``findings`` runs every check; ``section`` is the report's health section. The public names of the checks are
reachable from here (``health.device_busy``, ``health.sync_places``, …).
"""

from __future__ import annotations

from traceanalyzer.analyzers.attribution import in_steps, steps_count
from traceanalyzer.analyzers.health.gaps import (
    LARGE_GAP_NS,
    LARGEST_GAPS,
    device_busy,
    gap_findings,
    idle_claims,
    idle_gaps,
    idle_in_steps,
)
from traceanalyzer.analyzers.health.launch import TINY_KERNEL_NS, launch_bound, launch_findings
from traceanalyzer.analyzers.health.precision import TF32_SPEEDUP, fp32_findings, fp32_gemms
from traceanalyzer.analyzers.health.shapes import DYNAMIC_SHAPE_MIN, dynamic_shapes, shape_changes, shape_findings
from traceanalyzer.analyzers.health.syncs import dtoh_copies, sync_findings, sync_places, sync_stalls
from traceanalyzer.analyzers.steps import step_time
from traceanalyzer.findings import Finding
from traceanalyzer.options import Options
from traceanalyzer.section import Fact, Per, Section, Table, Unit
from traceanalyzer.tracedata import TraceData

__all__ = [
    "DYNAMIC_SHAPE_MIN",
    "LARGE_GAP_NS",
    "LARGEST_GAPS",
    "TF32_SPEEDUP",
    "TINY_KERNEL_NS",
    "device_busy",
    "dtoh_copies",
    "dynamic_shapes",
    "findings",
    "fp32_gemms",
    "idle_gaps",
    "idle_in_steps",
    "launch_bound",
    "section",
    "shape_changes",
    "sync_places",
    "sync_stalls",
]


def findings(trace: TraceData) -> list[Finding]:
    """Idle-gap, launch-bound, sync-stall, fp32-GEMM and dynamic-shape findings, cost against total step time."""
    step = step_time(trace)
    after_sync = in_steps(trace, sync_stalls(trace)).groupby("rank")["idle_after_ns"].sum()
    return (
        gap_findings(trace, step, after_sync)
        + launch_findings(trace, step)
        + sync_findings(trace, step)
        + fp32_findings(trace, step)
        + shape_findings(trace, step)
    )


def _shapes_note(trace: TraceData) -> str:
    """Why the dynamic-shape table can be empty: one step cannot tell changing shapes from layers of other sizes."""
    steps = steps_count(trace)
    return "" if steps > 1 else f"no verdict: needs at least 2 steps, this scope has {steps}"


def section(trace: TraceData, options: Options) -> Section | None:
    """The health section: device busy per rank, the largest idle gaps, syncs, launch-bound places, fp32 GEMMs and
    every op whose shapes change."""
    busy = device_busy(trace)
    if not len(busy):
        return None
    syncs = sync_places(trace)
    gemms = fp32_gemms(trace)
    idle = sum(idle_in_steps(c) for c in idle_claims(trace).values())
    top = options.top
    return Section(
        "health",
        "Device idle, launch overhead, syncs, precision and shapes",
        facts=[
            Fact(
                "device_busy_share",
                "device busy (active span)",
                float(busy["busy_ns"].sum() / max(busy["span_ns"].sum(), 1)),
                Unit.SHARE,
            ),
            Fact("idle_in_steps_ns", "device idle inside steps", idle, Unit.NS, Per.TOTAL),
            Fact("large_gaps", "idle gaps over 100 µs", int(busy["large_gaps"].sum()), Unit.COUNT, Per.TOTAL),
            Fact("large_gap_ns", "time in gaps over 100 µs", int(busy["large_gap_ns"].sum()), Unit.NS, Per.TOTAL),
            Fact("largest_gap_ns", "largest gap", int(busy["largest_gap_ns"].max()), Unit.NS),
            Fact("host_syncs", "host syncs", int(syncs["syncs"].sum()), Unit.COUNT, Per.TOTAL),
            Fact("fp32_gemm_ns", "fp32 GEMM time", int(gemms["total_ns"].sum()), Unit.NS, Per.TOTAL),
        ],
        tables=[
            Table("device_busy", "Device busy per rank and device (active span)", busy, Per.TOTAL),
            Table("largest_gaps", "Largest idle gaps", idle_gaps(trace, top=top).head(top)),
            Table("sync_places", "Host syncs by place", syncs.head(top), Per.TOTAL),
            Table("dtoh_copies", "Device-to-host copies", dtoh_copies(trace).head(top), Per.TOTAL),
            Table("launch_places", "Launch-bound places", launch_bound(trace).head(top), Per.TOTAL),
            Table("fp32_gemms", "fp32 GEMM kernels", gemms.head(top), Per.TOTAL),
            Table(
                "dynamic_shapes",
                "Ops whose input shapes change (all of them)",
                dynamic_shapes(trace),
                Per.TOTAL,
                note=_shapes_note(trace),
            ),
        ],
    )
