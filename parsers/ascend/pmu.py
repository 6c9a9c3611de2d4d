"""The per-kernel PMU columns of kernel_details.csv / op_summary_*.csv → counter rows (``schema.COUNTER_COLUMNS``);
the database's TASK_PMU_INFO holds the same metrics by name (``db``), its times in ns.

Which columns a table has depends on the profiler level and ``aic_metrics`` (anchors-ascend.md §4): PipeUtilization
gives ``aic_/aiv_`` + ``mac/vec/scalar/mte1/mte2/mte3/fixpipe`` ``_time(us)`` and ``_ratio``, ``*_icache_miss_rate``,
``cube_utilization(%)``, ``aicore_time(us)``, ``*_total_cycles``; ArithmeticUtilization, Memory and L2Cache give
other ``aic_/aiv_`` ratios. Every value covers its kernel's interval (the row's start and duration). Columns are
read by header name; a cell that is not a number (N/A) is no sample.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
from traceanalyzer.parsers.ascend import common as c

from traceanalyzer.schema import COUNTER_COLUMNS, NO_ROW, conform

PMU_COLUMN = re.compile(r"^(aic|aiv)_\w+(\(us\))?$|^aicore_time\(us\)$|^cube_utilization\(%\)$|^memory_bound$")
"""kernel_details headers that hold a PMU value of the kernel."""
SOURCE = "kernel_details PMU"
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
    """One counter row per kernel and PMU column with a numeric cell (ts, dur and kernel: the kernel's; device:
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
    table = (
        pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=[col.name for col in COUNTER_COLUMNS])
    )
    return conform(table, COUNTER_COLUMNS)
