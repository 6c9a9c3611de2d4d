"""The two stages of every health check: ``rank_part`` gives the health data of a trace's ranks (a part: one rank
alone where a job's rank is loaded, or all ranks of a joined trace), ``merge_parts`` combines parts into the data
of all their ranks, which the section and the findings read. The joined path is the merge of its own single part.
"""

from __future__ import annotations

import pandas as pd

from traceanalyzer import intervals
from traceanalyzer.analyzers import attribution
from traceanalyzer.analyzers.health.causes import idle_causes, merged_causes
from traceanalyzer.analyzers.health.critical import blocked, merged_blocked
from traceanalyzer.analyzers.health.gaps import (
    GAPS_KEPT,
    device_busy,
    idle_claims,
    idle_gaps,
    largest_gaps,
    merged_busy,
)
from traceanalyzer.analyzers.health.launch import launch_bound, merged_launches
from traceanalyzer.analyzers.health.part import Part
from traceanalyzer.analyzers.health.precision import device_in_steps_ns, fp32_gemms, fp32_spans, merged_gemms
from traceanalyzer.analyzers.health.shapes import compile_ns, merged_shapes, shape_rows
from traceanalyzer.analyzers.health.syncs import dtoh_copies, merged_copies, merged_places, sync_places
from traceanalyzer.analyzers.health.transfers import host_copies, merged_host_copies, serial_copies
from traceanalyzer.analyzers.summary import step_table
from traceanalyzer.options import DEFAULT, Options
from traceanalyzer.tracedata import TraceData


def rank_part(trace: TraceData, options: Options = DEFAULT) -> Part:
    """The health data of a trace's ranks: per-rank tables, the largest gaps of each device (as many as a report of
    ``options.top`` rows shows, at least ``GAPS_KEPT``), idle claims, sums."""
    return Part(
        busy=device_busy(trace),
        gaps=idle_gaps(trace, top=max(GAPS_KEPT, options.top)),
        idle={rank: intervals.pack(*idle) for rank, idle in idle_claims(trace).items()},
        idle_ns={rank: intervals.length(idle) for rank, idle in idle_claims(trace).items()},
        computing=sorted(attribution.computing_ranks(trace)),
        syncs=sync_places(trace),
        copies=dtoh_copies(trace),
        launches=launch_bound(trace),
        gemms=fp32_gemms(trace),
        fp32_spans=fp32_spans(trace),
        device_ns=device_in_steps_ns(trace),
        shapes=shape_rows(trace.events),
        compile_ns=compile_ns(trace.events),
        causes=idle_causes(trace)[0],
        cause_idle=idle_causes(trace)[1],
        host_copies=host_copies(trace)[0],
        pageable=host_copies(trace)[1],
        serial=serial_copies(trace),
        blocked=blocked(trace),
        stepped=[int(rank) for rank in step_table(trace)["rank"].unique()],
    )


def merge_parts(parts: list[Part]) -> Part:
    """The health data of all the parts' ranks (parts in rank order), each table ordered as its check orders it."""
    stepped = [rank for p in parts for rank in p.stepped]
    return Part(
        busy=merged_busy([p.busy for p in parts]),
        gaps=largest_gaps([p.gaps for p in parts]),
        idle={rank: idle for p in parts for rank, idle in p.idle.items()},
        idle_ns={rank: ns for p in parts for rank, ns in p.idle_ns.items()},
        computing=[rank for p in parts for rank in p.computing],
        syncs=merged_places([_of(p.syncs, stepped) for p in parts]),
        copies=merged_copies([p.copies for p in parts]),
        launches=merged_launches([_of(p.launches, stepped) for p in parts]),
        gemms=merged_gemms([_of(p.gemms, stepped) for p in parts]),
        fp32_spans={r: spans for p in parts for r, spans in p.fp32_spans.items() if not stepped or r in stepped},
        device_ns={rank: ns for p in parts for rank, ns in p.device_ns.items() if not stepped or rank in stepped},
        shapes=merged_shapes([p.shapes for p in parts]),
        compile_ns=sum(p.compile_ns for p in parts),
        causes=merged_causes([p.causes for p in parts]),
        cause_idle={key: idle for p in parts for key, idle in p.cause_idle.items()},
        host_copies=merged_host_copies([p.host_copies for p in parts]),
        pageable={rank: spans for p in parts for rank, spans in p.pageable.items()},
        serial={rank: spans for p in parts for rank, spans in p.serial.items()},
        blocked=merged_blocked([p.blocked for p in parts]),
        stepped=stepped,
    )


def _of(table: pd.DataFrame, ranks: list[int]) -> pd.DataFrame:
    """The rows of some ranks (all rows for none): a rank without steps has no in-step rows where others have."""
    return table[table["rank"].isin(ranks)] if ranks else table
