"""Which files of an Ascend rank folder can be read, and which reader reads them (by file names; nothing is opened)."""

from __future__ import annotations

import re
from pathlib import Path

OUTPUT_DIRS = ("ASCEND_PROFILER_OUTPUT", "mindstudio_profiler_output")
TEXT_FILES = re.compile(r"^(trace_view\.json|kernel_details\.csv|msprof_\d[\w.]*\.json|op_summary_\d[\w.]*\.csv)$")
DB_FILES = re.compile(r"^(ascend_pytorch_profiler(_\d+)?|msprof_\d[\w]*)\.db$")
COMMUNICATION_FILE = "communication.json"
"""torch_npu's per-rank communication summary: read alone where a rank folder has no trace, kernel table or db."""
READABLE = "a trace (trace_view.json, msprof_*.json), a kernel table (kernel_details.csv, op_summary_*.csv), a profiler"
READABLE += f" database (ascend_pytorch_profiler_*.db, msprof_*.db) or {COMMUNICATION_FILE}"


def output(folder: Path) -> tuple[str, Path] | None:
    """(reader, path) of one rank folder (run folder, PROF_* folder or output folder), None if it has nothing to read.

    Readers: ``text`` (an output folder), ``db`` (a database file), ``communication`` (an output folder that holds
    only communication.json).
    """
    for name in OUTPUT_DIRS:
        inner = folder / name
        if inner.is_dir():
            found = output(inner)
            if found:
                return found
    files = {f.name: f for f in folder.iterdir() if f.is_file()} if folder.is_dir() else {}
    if any(TEXT_FILES.match(n) for n in files):
        return ("text", folder)
    dbs = sorted(f for n, f in files.items() if DB_FILES.match(n))
    if dbs:
        return ("db", dbs[0])
    if folder.name == OUTPUT_DIRS[0] and COMMUNICATION_FILE in files:
        return ("communication", folder)
    return None
