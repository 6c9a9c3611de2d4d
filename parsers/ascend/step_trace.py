"""step_trace_time.csv (else analysis.db's StepTraceTime) → msprof's own per-step figures of one rank, in ns.

torch_npu writes them per rank (µs): Computing, Communication(Not Overlapped), Overlapped, Communication, Free,
Stage, Bubble, Communication(Not Overlapped and Exclude Receive), Preparing (anchors-ascend.md §5, §13); older
files lack Device_id and Preparing. Columns are read by header name; a column the file lacks is left out.
"""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path

import numpy as np
import pandas as pd
from traceanalyzer.parsers.ascend import common as c
from traceanalyzer.parsers.ascend.sqlite import uri

from traceanalyzer.errors import TraceError
from traceanalyzer.schema import NO_ROW

CSV_FILE = "step_trace_time.csv"
ANALYSIS_DB = "analysis.db"
FIGURES = {
    "Computing": "computing_ns",
    "Communication(Not Overlapped)": "communication_not_overlapped_ns",
    "Overlapped": "overlapped_ns",
    "Communication": "communication_ns",
    "Free": "free_ns",
    "Stage": "stage_ns",
    "Bubble": "bubble_ns",
    "Communication(Not Overlapped and Exclude Receive)": "communication_not_overlapped_exclude_receive_ns",
    "Preparing": "preparing_ns",
}
"""step_trace_time.csv header → column (ns); analysis.db names them in snake case."""
_DB_NAMES = {
    "computing": "Computing",
    "communication_not_overlapped": "Communication(Not Overlapped)",
    "overlapped": "Overlapped",
    "communication": "Communication",
    "free": "Free",
    "stage": "Stage",
    "bubble": "Bubble",
    "communication_not_overlapped_and_exclude_receive": "Communication(Not Overlapped and Exclude Receive)",
    "preparing": "Preparing",
    "step": "Step",
    "deviceId": "Device_id",
}


def read(folder: Path, notes: c.Notes) -> pd.DataFrame | None:
    """The folder's per-step msprof figures (step: the step number, an id; figures in ns); None when it has
    neither file or the file is not readable (a warning then)."""
    try:
        if (folder / CSV_FILE).is_file():
            return figures(c.read_csv(folder / CSV_FILE, notes), str(folder / CSV_FILE), notes)
        if (folder / ANALYSIS_DB).is_file():
            return figures(_db_rows(folder / ANALYSIS_DB), str(folder / ANALYSIS_DB), notes)
    except TraceError as e:
        notes.append(f"{e}; msprof's per-step figures not read")
    return None


def figures(table: pd.DataFrame, where: str, notes: c.Notes) -> pd.DataFrame | None:
    """The per-step figures of a StepTraceTime table (torch_npu's header names, µs values): one row per step, with
    its device where the file records it."""
    if "Step" not in table or not len(table):
        notes.append(f"{where}: no Step column or no rows; msprof's per-step figures not read")
        return None
    out = pd.DataFrame({"step": [c.int_or_none(v) for v in table["Step"]]})
    if "Device_id" in table:
        out["device"] = [c.int_or_none(v) for v in table["Device_id"]]
    for header, column in FIGURES.items():
        if header in table:
            ns = c.us_float_to_ns(table[header].astype(str).to_numpy())
            out[column] = np.where(ns == c.BAD_NS, NO_ROW, ns)
    bad = out["step"] == NO_ROW
    notes.adjust(where, "step_trace rows without a step number dropped", int(bad.sum()))
    return out[~bad].reset_index(drop=True)


def _db_rows(path: Path) -> pd.DataFrame:
    """analysis.db's StepTraceTime rows under step_trace_time.csv's header names (values as text)."""
    try:
        with contextlib.closing(sqlite3.connect(uri(path), uri=True)) as con:
            frame = pd.read_sql_query("select * from StepTraceTime", con)
    except (sqlite3.DatabaseError, pd.errors.DatabaseError) as e:
        raise TraceError(path, f"has no readable StepTraceTime table ({e})") from None
    return frame.rename(columns=_DB_NAMES).astype(str)
