"""The per-kernel PMU columns of kernel_details.csv / op_summary_*.csv and the per-task L2 hit and victim rates of
l2_cache.csv → counter samples (``parsers.counters``); the database's TASK_PMU_INFO holds the same metrics by name
(``db``), its times in ns.

Which columns a table has depends on the profiler level and ``aic_metrics`` (anchors-ascend.md §4): PipeUtilization
gives ``aic_/aiv_`` + ``mac/vec/scalar/mte1/mte2/mte3/fixpipe`` ``_time(us)`` and ``_ratio``, ``*_icache_miss_rate``,
``cube_utilization(%)``, ``aicore_time(us)``, ``*_total_cycles``; ArithmeticUtilization, Memory and L2Cache give
other ``aic_/aiv_`` ratios. Every value covers its kernel's interval (the row's start and duration). Columns are
read by header name; a cell that is not a number (N/A) is no sample.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
from traceanalyzer.parsers import counters as samples
from traceanalyzer.parsers.ascend import common as c

from traceanalyzer.errors import TraceError
from traceanalyzer.schema import NO_ROW

PMU_COLUMN = re.compile(r"^(aic|aiv)_\w+(\(us\))?$|^aicore_time\(us\)$|^cube_utilization\(%\)$|^memory_bound$")
"""kernel_details headers that hold a PMU value of the kernel."""
SOURCE = "kernel_details PMU"
L2_FILE = "l2_cache.csv"
L2_RATES = {"Hit Rate": "l2_hit_rate", "Victim Rate": "l2_victim_rate"}
"""l2_cache.csv's per-task rates (0..1) and the counter names they are read under."""
_TASK_KEYS = {"Stream Id": "Stream ID", "Task Id": "Task ID", "Op Name": "Name"}
"""l2_cache.csv's key columns under kernel_details' names: a task is its stream, task id and op name."""
DB_SOURCE = "TASK_PMU_INFO PMU"


def unit_of(header: str) -> tuple[str, str, float]:
    """A PMU header's counter name, unit and the factor that turns its cells into that unit."""
    if header.endswith("(us)"):
        return header.removesuffix("(us)"), "ns", 1000.0
    if header.endswith("(%)"):
        return header.removesuffix("(%)"), "percent", 1.0
    if header.endswith("_cycles"):
        return header, "cycles", 1.0
    if header.endswith(("_ratio", "_rate")) or header == "memory_bound":
        return header, "ratio", 1.0
    return header, "", 1.0


def counters(kernels: pd.DataFrame) -> pd.DataFrame:
    """One counter sample per kernel and PMU column with a numeric cell (ts, dur and kernel: the kernel's; device:
    its Device_id, NO_ROW where not recorded)."""
    headers = [h for h in kernels.columns if PMU_COLUMN.match(str(h))]
    device = np.array([c.device_of(v) for v in kernels["Device_id"]]) if "Device_id" in kernels else NO_ROW
    parts = []
    for header in headers:
        values = pd.to_numeric(kernels[header], errors="coerce").to_numpy(dtype=float)
        found = ~np.isnan(values)
        name, unit, factor = unit_of(header)
        parts.append(
            pd.DataFrame(
                {
                    "ts": kernels["ts"].to_numpy()[found],
                    "dur": kernels["dur"].to_numpy()[found],
                    "device": np.broadcast_to(device, len(kernels))[found],
                    "name": name,
                    "value": values[found] * factor,
                    "unit": unit,
                    "source": SOURCE,
                    "kernel": kernels["Name"].to_numpy()[found],
                }
            )
        )
    return samples.samples(pd.concat(parts, ignore_index=True) if parts else samples.no_samples())


def l2_cache(folder: Path, kernels: pd.DataFrame, notes: c.Notes) -> pd.DataFrame:
    """The folder's l2_cache.csv rates as counter samples over their task's kernel (the n-th row of a stream, task id
    and op name is the n-th kernel of them: task ids wrap); a cell that is not a number (N/A) is no sample, a row
    without its kernel is dropped and counted; no samples without the file or the key columns."""
    file = folder / L2_FILE
    if not file.is_file() or not set(_TASK_KEYS.values()) <= set(kernels.columns):
        return samples.samples(samples.no_samples())
    try:
        table = c.read_csv(file, notes).rename(columns=_TASK_KEYS)
        table = table.loc[:, ~table.columns.duplicated()]  # a file with both 'Op Name' and 'Name': the first
    except TraceError as e:
        notes.append(f"{e}; its L2 rates not read")
        return samples.samples(samples.no_samples())
    keys = list(_TASK_KEYS.values())
    if not set(keys) <= set(table.columns):
        notes.append(f"{file}: no Stream Id / Task Id / Op Name columns; its L2 rates not read")
        return samples.samples(samples.no_samples())
    ours = kernels[[*keys, "ts", "dur"]].astype({k: str for k in keys})
    ours = ours.assign(nth=ours.groupby(keys).cumcount())
    rows = len(table)
    table = table.assign(nth=table.groupby(keys).cumcount()).merge(ours, on=[*keys, "nth"])  # ts stays int64
    notes.adjust(str(file), "l2_cache rows without their kernel in kernel_details dropped", rows - len(table))
    parts = [_rates(table, header, name) for header, name in L2_RATES.items() if header in table]
    return samples.samples(pd.concat(parts, ignore_index=True) if parts else samples.no_samples())


def _rates(table: pd.DataFrame, header: str, name: str) -> pd.DataFrame:
    """One l2_cache.csv column's numeric cells as samples (``parsers.counters``) over their kernels."""
    values = pd.to_numeric(table[header], errors="coerce").to_numpy(float)
    found = ~np.isnan(values)
    return pd.DataFrame(
        {
            "ts": table["ts"].to_numpy(np.int64)[found],
            "dur": table["dur"].to_numpy(np.int64)[found],
            "device": NO_ROW,
            "name": name,
            "value": values[found],
            "unit": "ratio",
            "source": L2_FILE,
            "kernel": table["Name"].to_numpy()[found],
        }
    )
