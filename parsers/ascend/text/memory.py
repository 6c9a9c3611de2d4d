"""memory_record.csv, operator_memory.csv and npu_module_mem.csv (torch_npu MB/KB, raw msprof KB) → memory frames."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
from traceanalyzer.parsers.ascend import common as c
from traceanalyzer.parsers.ascend.text import layout

from traceanalyzer.errors import TraceError
from traceanalyzer.schema import NO_ROW

_MEMORY_COMPONENT = "PTA"
"""memory_record rows of the framework caching allocator (the analogue of Kineto's [memory] events)."""


def _table(path: Path | None, notes: c.Notes) -> pd.DataFrame:
    """A memory CSV's table; empty when absent, and with a warning when unreadable (memory is then not read)."""
    if path is None:
        return pd.DataFrame()
    try:
        return c.read_csv(path, notes)
    except TraceError as e:
        notes.append(f"{e}; not read")
        return pd.DataFrame()


def _valid(table: pd.DataFrame, ts: np.ndarray, path: Path, notes: c.Notes) -> tuple[pd.DataFrame, np.ndarray]:
    """The rows whose timestamp is a recorded µs time (the others counted as dropped), and their ns times."""
    ok = c.valid_times(ts, str(path), notes)
    return table[ok], ts[ok]


def snapshots(folder: Path, warnings: c.Notes) -> pd.DataFrame:
    """memory_record.csv: the PTA allocator's totals over time (c.memory_frame); empty when absent."""
    path = layout.first(folder, layout.MEMORY_NAMES, layout.MEMORY_GLOB)
    table = _table(path, warnings)
    if not len(table.columns):
        return c.empty_memory()
    alloc_col = _column(table, r"^Total Allocated\(")
    reserved_col = _column(table, r"^Total Reserved\(")
    ts_col = _column(table, r"^Timestamp\(")
    if alloc_col is None or ts_col is None:
        warnings.append(f"{path.name}: no Timestamp/Total Allocated columns; memory not read")
        return c.empty_memory()
    if "Component" in table:
        table = table[table["Component"] == _MEMORY_COMPONENT]
    table, ts = _valid(table, c.us_text_to_ns(table[ts_col].to_numpy()), path, warnings)
    device_col = "Device Type" if "Device Type" in table else ("Device" if "Device" in table else None)
    device = [c.device_of(v) for v in table[device_col]] if device_col else np.zeros(len(table), dtype=np.int64)
    return c.memory_frame(
        ts,
        device,
        _scaled(table, alloc_col),
        _scaled(table, reserved_col) if reserved_col else np.full(len(table), NO_ROW),
    )


def blocks(folder: Path, warnings: c.Notes) -> pd.DataFrame:
    """operator_memory.csv (torch_npu: MB/KB; raw msprof: KB, Duration instead of Release Time) as c.BLOCK_COLUMNS."""
    path = layout.first(folder, layout.BLOCK_NAMES, layout.BLOCK_GLOB)
    table = _table(path, warnings)
    size_col, alloc_col = _column(table, r"^Size\("), _column(table, r"^Allocation Time\(")
    if path is None or size_col is None or alloc_col is None or "Name" not in table:
        if path is not None:
            warnings.append(f"{path.name}: no Name/Size/Allocation Time columns; allocations not read")
        return pd.DataFrame(columns=list(c.BLOCK_COLUMNS))
    table, alloc = _valid(table, c.us_text_to_ns(table[alloc_col].to_numpy()), path, warnings)
    out = {
        "name": table["Name"].to_numpy(),
        "size": _scaled(table, size_col),
        "alloc_ts": alloc,
        "release_ts": _release(table, alloc, path, warnings),
        "device": _devices(table),
    }
    for when, label in (("alloc", "Allocation"), ("release", "Release")):
        for total in ("Allocated", "Reserved"):
            col = _column(table, rf"^{label} Total {total}\(")
            out[f"{when}_{total.lower()}"] = _scaled(table, col) if col else np.full(len(table), NO_ROW)
    return pd.DataFrame(out)


def _release(table: pd.DataFrame, alloc: np.ndarray, path: Path, notes: c.Notes) -> np.ndarray:
    """Release times in ns: the Release Time column, else (raw msprof) allocation time + Duration; NO_ROW if never
    (or not a time: counted, the block then counts as never freed)."""
    release_col, duration_col = _column(table, r"^Release Time\("), _column(table, r"^Duration\(")
    if release_col is not None:
        release = c.us_text_to_ns(table[release_col].to_numpy())
    elif duration_col is None:
        return np.full(len(table), NO_ROW, dtype=np.int64)
    else:
        duration = c.us_float_to_ns(table[duration_col].to_numpy())
        never = table[duration_col].isin(c.MISSING).to_numpy() | (alloc == NO_ROW)
        release = np.where(never, NO_ROW, np.where(duration == c.BAD_NS, c.BAD_NS, alloc + duration))
    bad = release == c.BAD_NS
    notes.adjust(str(path), "release times that are not µs timestamps read as never released", int(bad.sum()))
    return np.where(bad, NO_ROW, release)


def modules(folder: Path, warnings: c.Notes) -> pd.DataFrame:
    """npu_module_mem.csv: reserved bytes per CANN module over time (torch_npu MB, raw msprof KB)."""
    path = layout.first(folder, layout.MODULE_NAMES, layout.MODULE_GLOB)
    table = _table(path, warnings)
    ts_col, reserved_col = _column(table, r"^Timestamp\("), _column(table, r"^Total Reserved\(")
    if ts_col is None or reserved_col is None or "Component" not in table:
        return c.module_memory([], [], [], [])
    table, ts = _valid(table, c.us_text_to_ns(table[ts_col].to_numpy()), path, warnings)
    return c.module_memory(ts, _devices(table), table["Component"], _scaled(table, reserved_col))


def _devices(table: pd.DataFrame) -> np.ndarray | list[int]:
    """Per row, the device of its ``Device`` / ``Device Type`` cell (0 where the table has no such column)."""
    device_col = _column(table, r"^Device( Type)?$")
    return [c.device_of(v) for v in table[device_col]] if device_col else np.zeros(len(table), dtype=np.int64)


def _column(table: pd.DataFrame, pattern: str) -> str | None:
    return next((col for col in table.columns if re.match(pattern, col)), None)


def _scaled(table: pd.DataFrame, col: str) -> np.ndarray:
    """A size column in bytes; NO_ROW where the cell is not a number of bytes int64 can hold."""
    values = pd.to_numeric(table[col], errors="coerce").to_numpy(float) * c.unit_bytes(col)
    ok = np.abs(np.nan_to_num(values, nan=np.inf)) < 9.2e18
    return np.where(ok, np.rint(np.where(ok, values, 0)), NO_ROW).astype(np.int64)
