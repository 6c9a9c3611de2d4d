"""What an expert checks next, one module per check: device idle gaps and busy share (``gaps``), launch-bound loops
(``launch``), host syncs (``syncs``), fp32 matrix work (``precision``) and dynamic shapes (``shapes``).

Contract: each check is a function of a ``TraceData`` returning a DataFrame keyed by rank (memoised per trace), a
``merged_*`` that combines such tables of several ranks, and a ``*_findings(health, context)`` that turns the
merged data (``part.Part``) into findings with a per-step concern and saving. ``rank_part`` is a trace's part (a
job's rank alone, where it is loaded), ``merge`` combines parts (``job.merge_parts``); ``job_section``/``job_findings``
read the merged parts (a joined trace is the job of its one part, ``analyzers.as_job``), so both paths run the same
code. The public names of the checks are reachable from here (``health.device_busy``, …).
"""

from __future__ import annotations

import pandas as pd

from traceanalyzer import humanize
from traceanalyzer.analyzers import summary
from traceanalyzer.analyzers.attribution import steps_in
from traceanalyzer.analyzers.health.causes import idle_causes
from traceanalyzer.analyzers.health.critical import headroom
from traceanalyzer.analyzers.health.gaps import (
    GAPS_KEPT,
    LARGE_GAP_NS,
    LARGEST_GAPS,
    device_busy,
    idle_claims,
    idle_gaps,
)
from traceanalyzer.analyzers.health.idle import explained_share, idle_findings
from traceanalyzer.analyzers.health.job import merge_parts, rank_part
from traceanalyzer.analyzers.health.launch import TINY_KERNEL_NS, launch_bound, launch_findings
from traceanalyzer.analyzers.health.part import Context, Part
from traceanalyzer.analyzers.health.precision import TF32_SPEEDUP, fp32_findings, fp32_gemms
from traceanalyzer.analyzers.health.shapes import DYNAMIC_SHAPE_MIN, dynamic_shapes, shape_changes, shape_findings
from traceanalyzer.analyzers.health.syncs import dtoh_copies, sync_findings, sync_places, sync_stalls
from traceanalyzer.analyzers.health.transfers import pageable_findings, serial_copy_findings
from traceanalyzer.findings import Finding
from traceanalyzer.jobdata import JobData
from traceanalyzer.options import Options
from traceanalyzer.section import Fact, Per, Section, Table, Unit

__all__ = [
    "DYNAMIC_SHAPE_MIN",
    "GAPS_KEPT",
    "LARGE_GAP_NS",
    "LARGEST_GAPS",
    "TF32_SPEEDUP",
    "TINY_KERNEL_NS",
    "device_busy",
    "dtoh_copies",
    "dynamic_shapes",
    "fp32_gemms",
    "idle_causes",
    "idle_claims",
    "idle_gaps",
    "job_device_headroom",
    "job_findings",
    "job_section",
    "merge",
    "rank_part",
    "launch_bound",
    "shape_changes",
    "sync_places",
    "sync_stalls",
]


def merge(parts: list[Part], job: JobData) -> Part:
    """The analyzer's merge rule: ``merge_parts`` (it needs none of the job's facts)."""
    return merge_parts(parts)


def _job_context(job: JobData) -> Context:
    """A job's facts, step time and number of distinct steps (1 without step markers, ``steps_in``)."""
    by_rank = {rank: summary.job_step_time(job, rank) for rank in job.meta.ranks}
    table = summary.job_step_table(job)
    return Context(job.meta, summary.job_step_time(job), steps_in(table), by_rank, _spans(table))


def _spans(table: pd.DataFrame) -> pd.DataFrame:
    """Each rank's steps as ``[start_ns, end_ns)`` from a step table."""
    return table.assign(end_ns=table["start_ns"] + table["step_ns"])[["rank", "step", "start_ns", "end_ns"]]


def job_device_headroom(job: JobData) -> dict[int, int]:
    """Per rank of a job, from its merged health part: how far its device time per step can shrink before its steps
    turn host-bound (``critical``)."""
    merged: Part = job.merged("health")
    return headroom(summary.job_step_table(job), merged.blocked)


def job_findings(part: Part, job: JobData) -> list[Finding]:
    """Idle-gap, launch-bound, sync-stall, fp32-GEMM and dynamic-shape findings of a job's merged part, cost
    against total step time."""
    return _findings(part, _job_context(job))


def _findings(health: Part, context: Context) -> list[Finding]:
    """Every check's findings from merged health data."""
    return (
        idle_findings(health, context)
        + launch_findings(health, context)
        + sync_findings(health, context)
        + pageable_findings(health, context)
        + serial_copy_findings(health, context)
        + fp32_findings(health, context)
        + shape_findings(health, context)
    )


def _busy_note(busy: pd.DataFrame) -> str:
    """What the busy table of ranks measured by their profiler's figures rests on (nothing when there are none)."""
    ranks = sorted(busy.loc[busy["basis"] == summary.BASIS_PROFILER, "rank"].astype(int).unique().tolist())
    if not ranks:
        return ""
    return (
        f"rank(s) {', '.join(map(str, ranks))}: busy and idle are msprof's Stage − Free and Free (no kernels "
        "recorded); where their gaps lie is not known, so they have no gap counts and their idle is not in the "
        "idle inside steps"
    )


def _shapes_note(steps: int) -> str:
    """Why the dynamic-shape table can be empty: one step cannot tell changing shapes from layers of other sizes."""
    return "" if steps > 1 else f"no verdict: needs at least 2 steps, this scope has {steps}"


def job_section(part: Part, job: JobData, options: Options) -> Section | None:
    """``section`` of a job's merged part (the largest gaps per device that a report of the ``top`` the ranks were
    analysed with shows: a longer gap table says so)."""
    kept = max(GAPS_KEPT, job.options.top)
    cut = f"at most {kept} gaps per device (a rank's part keeps no more)" if options.top > kept else ""
    return _section(part, _job_context(job), options, cut)


def _section(health: Part, context: Context, options: Options, gaps_note: str = "") -> Section | None:
    """The section from merged health data, its tables cut to ``options.top`` rows (None without device work)."""
    busy, syncs, gemms = health.busy, health.syncs, health.gemms
    if not len(busy):
        return None
    idle = sum(health.idle_ns.values())
    top = options.top
    return Section(
        "health",
        "Device idle, launch overhead, syncs, precision and shapes",
        facts=[
            Fact(
                "active_busy_share",
                "device busy share of its active span",
                float(busy["busy_ns"].sum() / max(busy["span_ns"].sum(), 1)),
                Unit.SHARE,
            ),
            Fact("idle_in_steps_ns", "device idle inside steps", idle, Unit.NS, Per.TOTAL),
            Fact("idle_explained_share", "idle inside steps a cause explains", explained_share(health), Unit.SHARE),
            Fact(
                "large_gaps",
                f"idle gaps over {humanize.duration(LARGE_GAP_NS, 0)}",
                int(busy["large_gaps"].sum()),
                Unit.COUNT,
                Per.TOTAL,
            ),
            Fact(
                "large_gap_ns",
                f"time in gaps over {humanize.duration(LARGE_GAP_NS, 0)}",
                int(busy["large_gap_ns"].sum()),
                Unit.NS,
                Per.TOTAL,
            ),
            Fact("largest_gap_ns", "largest gap", int(busy["largest_gap_ns"].max()), Unit.NS),
            Fact("host_syncs", "host syncs", int(syncs["syncs"].sum()), Unit.COUNT, Per.TOTAL),
            Fact("fp32_gemm_ns", "fp32 GEMM time", int(gemms["total_ns"].sum()), Unit.NS, Per.TOTAL),
        ],
        tables=[
            Table(
                "device_busy", "Device busy per rank and device (active span)", busy, Per.TOTAL, note=_busy_note(busy)
            ),
            Table(
                "largest_gaps",
                "Largest idle gaps",
                health.gaps.head(top),
                units={"start_ns": Unit.INSTANT},
                note=gaps_note,
            ),
            Table("sync_places", "Host syncs by place", syncs.head(top), Per.TOTAL),
            Table("dtoh_copies", "Device-to-host copies", health.copies.head(top), Per.TOTAL),
            Table("launch_places", "Launch-bound places", health.launches.head(top), Per.TOTAL),
            Table("fp32_gemms", "fp32 GEMM kernels", gemms.head(top), Per.TOTAL),
            Table(
                "dynamic_shapes",
                "Ops whose input shapes change (all of them)",
                health.shapes,
                Per.TOTAL,
                note=_shapes_note(context.steps),
            ),
            Table("host_copies", "Host<->device copies inside steps", health.host_copies, Per.TOTAL),
            Table(
                "idle_causes", "Idle inside steps by cause (the launching thread's activity)", health.causes, Per.TOTAL
            ),
        ],
    )
