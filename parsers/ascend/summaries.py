"""The profiler's own summaries of one rank: msprof's per-step figures and its per-op and per-link communication
figures, read from the rank's output folder whatever else the rank has (kept as its side tables); and a rank that has
nothing else (no trace, kernel table or database) read from them alone.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from traceanalyzer.parsers.ascend import common as c
from traceanalyzer.parsers.ascend import communication, job, step_trace
from traceanalyzer.parsers.ascend.outputs import COMMUNICATION_FILE

from traceanalyzer.errors import TraceError
from traceanalyzer.schema import HCCL_LINKS, HCCL_MATRIX, HCCL_OPS, NO_ROW, STEP_TRACE, SideTable, TraceMeta


def read(folder: Path, notes: c.Notes) -> dict[SideTable, pd.DataFrame]:
    """The summaries the output folder holds, by side table (one the folder has no file for is left out)."""
    found = {
        STEP_TRACE: step_trace.read(folder, notes),
        HCCL_OPS: communication.op_stats(folder, notes),
        HCCL_LINKS: communication.link_stats(folder, notes),
        HCCL_MATRIX: communication.matrix_links(folder, notes),
    }
    return {key: table for key, table in found.items() if table is not None}


def parse(path: Path) -> tuple[pd.DataFrame, pd.DataFrame, c.TraceMeta]:
    """Parse a rank folder that holds only the profiler's summaries: its communication ops (communication.json)
    are the events; its per-step figures (step_trace_time.csv) give what the rank's compute and free time were."""
    folder = path if path.is_dir() else path.parent
    warnings = c.Notes()
    ops = communication.ops(folder / COMMUNICATION_FILE, warnings)
    if not len(ops):
        raise TraceError(folder / COMMUNICATION_FILE, "has no communication ops with a start time and duration")
    found = read(folder, warnings)
    figures = found.get(STEP_TRACE)
    warnings.append(_what_is_missing(folder, figures is not None))
    events = communication.table(ops, _device(figures))
    described = job.describe(folder.parent, path, warnings)
    meta = c.make_meta(path, events, "torch_npu-communication", described, warnings)
    keep(meta, found)
    return events, c.empty_memory(), meta


def keep(meta: TraceMeta, found: dict[SideTable, pd.DataFrame]) -> None:
    """Keep the summaries ``read`` found as the rank's side tables."""
    for declared, table in found.items():
        meta.keep(declared, table)


def _what_is_missing(folder: Path, stepped: bool) -> str:
    """The warning of a rank read from its summaries: what it lacks, and where its step figures come from."""
    lacks = f"{folder}: no trace, kernel table or profiler database; its communication ops ({COMMUNICATION_FILE}) "
    if stepped:
        return lacks + (
            f"are its events, and its compute, communication and free time per step are msprof's "
            f"({step_trace.CSV_FILE}): no kernels, host or memory data for this rank (its host span, kernel count "
            "and step bound are left unknown)"
        )
    return lacks + "are loaded: no compute, host or memory data for this rank"


def _device(figures: pd.DataFrame | None) -> int:
    """The rank's device as its step figures record it (NO_ROW when not recorded)."""
    if figures is None or "device" not in figures or not len(figures):
        return NO_ROW
    return int(figures["device"].iloc[0])
