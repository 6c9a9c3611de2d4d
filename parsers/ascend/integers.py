"""The integer columns the database reader reads (ids, devices, sizes, memory times and totals) that hold values it
reads as unknown: SQLite stores any type in any column, so a damaged or hand-edited database may hold text, blobs,
fractions or numbers beyond int64 there. Counted per column in one scan per table, before anything is read, so
each is a ledger line and a warning instead of a silent NO_ROW."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from traceanalyzer.parsers.ascend import common as c

COLUMNS = {
    "STRING_IDS": ("id",),
    "TASK": ("deviceId", "connectionId", "streamId", "globalTaskId", "taskType"),
    "COMPUTE_TASK_INFO": ("globalTaskId", "name", "taskType", "inputShapes", "inputDataTypes"),
    "COMMUNICATION_TASK_INFO": ("globalTaskId", "taskType", "size", "opId", "planeId"),
    "COMMUNICATION_OP": ("opName", "connectionId", "groupName", "dataType", "count", "algType", "deviceId", "opId"),
    "CANN_API": ("type", "globalTid", "connectionId", "name"),
    "PYTORCH_API": ("globalTid", "connectionId", "name", "inputDtypes", "inputShapes", "type"),
    "CONNECTION_IDS": ("id", "connectionId"),
    "OVERLAP_ANALYSIS": ("deviceId", "type"),
    "TASK_PMU_INFO": ("globalTaskId", "name"),
    "MEMORY_RECORD": ("component", "timestamp", "totalAllocated", "totalReserved", "deviceId"),
    "OP_MEMORY": (
        "name",
        "size",
        "allocationTime",
        "releaseTime",
        "deviceId",
        "allocationTotalAllocated",
        "allocationTotalReserved",
        "releaseTotalAllocated",
        "releaseTotalReserved",
    ),
    "NPU_MODULE_MEM": ("moduleId", "timestampNs", "totalReserved", "deviceId"),
}
"""Table → the integer columns read from it (event start and end times are counted by ``common.sanitize``)."""
REASON = "database values that are not integers (text, blob, fraction, beyond int64) read as unknown"

_NOT_INTEGER = (
    "typeof({0}) = 'blob'"
    " or (typeof({0}) = 'real' and ({0} != cast({0} as integer) or abs({0}) >= 9.2e18))"
    " or (typeof({0}) = 'text' and (trim({0}) = '' or ltrim(trim({0}), '-0123456789') != ''"
    " or abs(cast({0} as real)) >= 9.2e18))"
)
"""A value ``db._ints`` reads as NO_ROW although it is not NULL (integer text, such as PYTORCH_API's ns, is fine)."""


def count(path: Path, con: sqlite3.Connection, tables: set[str], notes: c.Notes) -> None:
    """Count, per column of COLUMNS the database has, the values that are not integers (a ledger line each)."""
    for table, wanted in COLUMNS.items():
        if table not in tables:
            continue
        present = {r[1] for r in con.execute(f'pragma table_info("{table}")')}
        columns = [col for col in wanted if col in present]
        if not columns:
            continue
        sums = ", ".join("sum(" + _NOT_INTEGER.format(f'"{col}"') + ")" for col in columns)
        try:
            found = con.execute(f'select {sums} from "{table}"').fetchone()
        except sqlite3.DatabaseError:
            continue  # the table's own reader says it cannot be read
        for col, n in zip(columns, found, strict=True):
            notes.adjust(f"{path}: {table}.{col}", REASON, int(n or 0))
