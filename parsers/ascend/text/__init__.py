"""torch_npu text output (trace_view.json + CSVs) and msprof text export (msprof_*.json + op_summary_*.csv).

Contract: ``parse(path)`` takes one rank's output folder (or its trace / kernel CSV file) and returns
``(events, memory events, meta)`` without links, reading every file by its header or lane names and only reading:

- ``layout`` — which files a folder holds (torch_npu's names, else the msprof export's);
- ``trace_view`` — the trace JSON, a bare Chrome-trace array whose lanes are named by ``process_name`` metadata:
  Python (framework ops), CANN (runtime calls), Ascend Hardware (device tasks), HCCL (collectives and their tasks),
  Overlap Analysis (the profiler's own compute/communication intervals); built from ``trace_json`` (bytes →
  columns), ``lanes`` (columns → rows) and ``flows`` (flow events → links);
- ``kernels`` — kernel_details.csv (≡ op_summary): each kernel's core type and input shapes; where the trace is
  missing, the CSV alone gives the device work; ``pmu``: its PMU columns as counter rows;
- ``memory`` — memory_record, operator_memory and npu_module_mem CSVs;
- ``summaries`` — the profiler's own per-step and communication figures (step_trace_time.csv, communication.json).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from traceanalyzer.parsers import counters as samples
from traceanalyzer.parsers.ascend import common as c
from traceanalyzer.parsers.ascend import communication, job, pmu, summaries
from traceanalyzer.parsers.ascend.text import kernels, layout, memory, trace_view

from traceanalyzer.errors import TraceError
from traceanalyzer.schema import MODULE_MEMORY, Kind


def parse(path: Path) -> tuple[pd.DataFrame, pd.DataFrame, c.TraceMeta]:
    """Parse one rank's text output (an output folder, or a trace / kernel CSV file) without links."""
    folder = path if path.is_dir() else path.parent
    trace = (
        path
        if path.is_file() and path.suffix == ".json"
        else layout.first(folder, layout.TRACE_NAMES, layout.TRACE_GLOB)
    )
    kernels_csv = (
        path
        if path.is_file() and path.suffix == ".csv"
        else layout.first(folder, layout.KERNEL_NAMES, layout.KERNEL_GLOB)
    )
    warnings = c.Notes()
    kernel_table = c.kernel_details(kernels_csv, warnings) if kernels_csv else None
    events = _events(path, folder, trace, kernels_csv, kernel_table, warnings)
    events = _with_groups(c.sanitize(events, str(trace or kernels_csv), warnings), folder)
    blocks = c.block_memory(events, memory.blocks(folder, warnings), memory.snapshots(folder, warnings))
    blocks = c.near_events(blocks, events, str(folder), warnings, "memory rows")
    fmt = "torch_npu-text" if (trace or kernels_csv).name in layout.TORCH_NPU_NAMES else "msprof-text"
    modules = c.near_events(memory.modules(folder, warnings), events, str(folder), warnings, "module memory rows")
    found = summaries.read(folder, warnings)
    meta = c.make_meta(path, events, fmt, job.describe(layout.run_dir(folder), path, warnings), warnings)
    meta.keep(MODULE_MEMORY, modules)
    summaries.keep(meta, found)
    if kernel_table is not None:
        found = pd.concat([pmu.counters(kernel_table), pmu.l2_cache(folder, kernel_table, warnings)], ignore_index=True)
        events = samples.with_samples(events, found)  # after the linked rows
    return events, blocks, meta


def _with_groups(events: pd.DataFrame, folder: Path) -> pd.DataFrame:
    """Communication ops without a group (read from kernel_details) take their group from communication.json."""
    named = communication.groups(folder)
    group = events["group"].astype(str).to_numpy() if "group" in events else np.full(len(events), "", dtype=object)
    blank = (events["kind"] == Kind.COMMUNICATION.value) & (group == "")
    if not named or not blank.any():
        return events
    group = group.astype(object)
    group[blank.to_numpy()] = [named.get(n, "") for n in events.loc[blank, "name"].astype(str)]
    events["group"] = pd.Categorical(group)
    return events


def _events(
    path: Path, folder: Path, trace: Path | None, kernels_csv: Path | None, kernel_table, warnings: c.Notes
) -> pd.DataFrame:
    """The event rows: from the trace (kernel_details joined), else from kernel_details alone, with a warning."""
    if trace is not None:
        events = trace_view.events(trace, kernel_table, warnings)
        if kernel_table is None and trace.name in layout.TRACE_NAMES:
            warnings.append(f"{folder}: no kernel_details.csv; core types come from the trace's task types")
        return events
    if kernel_table is None:
        raise TraceError(path, "holds no Ascend trace (trace_view.json, msprof_*.json, kernel_details.csv, op_summary)")
    warnings.append(f"{folder}: no trace_view.json / msprof_*.json; device work and steps come from {kernels_csv.name}")
    return kernels.csv_events(kernel_table)
