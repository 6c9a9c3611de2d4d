"""Ascend (CANN / torch_npu) profiler output → the common tables: detection of what a path holds.

Recognised: torch_npu run folders ``*_ascend_pt`` (text: ``ASCEND_PROFILER_OUTPUT/trace_view.json`` + CSVs;
database: ``ascend_pytorch_profiler_{rank}.db``), plain msprof exports (``PROF_*/mindstudio_profiler_output/``
with ``msprof_*.json`` / ``op_summary_*.csv``, and ``PROF_*/msprof_*.db``), the files themselves, and parents of
several ranks; a rank folder that holds only the profiler's summaries (communication.json, step_trace_time.csv:
torch_npu wrote no trace or kernel table for it) is read from those. Anything else returns [] quickly (names only;
no file is opened, no reader imported: a reader's module is imported by name, ``_PARSERS``, for what it reads).
"""

from __future__ import annotations

import re
from pathlib import Path

from traceanalyzer.parsers.ascend.outputs import OUTPUT_DIRS, TEXT_FILES, output
from traceanalyzer.parsers.unit import Parse, Unit

from traceanalyzer import lazy

ANY_DB = re.compile(r"\.db$")
_RUN_DIR = re.compile(r"(_ascend_pt|_ascend_ms)$|^PROF_")
_SEARCH_DEPTH = 4


_PARSERS = {
    "text": f"{__name__}.text.parse",
    "db": f"{__name__}.db.parse",
    "communication": f"{__name__}.summaries.parse",
}
"""The parse function of each kind of rank output (``outputs.output``), its module imported when a path holds one."""


def units(path: Path) -> list[Unit]:
    """The Ascend rank outputs under path ([] when the path holds none)."""
    found = _file(path) if path.is_file() else _folder(path)
    return [Unit(_parser(module), p) for module, p in found]


def _parser(reader: str) -> Parse:
    """The parse function of a reader (``_PARSERS``), its module imported now (``lazy.resolve``)."""
    parse: Parse = lazy.resolve(_PARSERS[reader])
    return parse


def _file(path: Path) -> list[tuple[str, Path]]:
    if ANY_DB.search(path.name):
        return [("db", path)]
    if TEXT_FILES.match(path.name):
        return [("text", path)]
    return []


def _folder(path: Path) -> list[tuple[str, Path]]:
    own = output(path)
    if own:
        return [own]
    ranks = []
    for depth in range(1, _SEARCH_DEPTH + 1):
        for child in sorted(path.glob("/".join(["*"] * depth))):
            if (child.name in OUTPUT_DIRS or _RUN_DIR.search(child.name)) and child.is_dir():
                found = output(child)
                if found and found not in ranks:
                    ranks.append(found)
        if ranks:
            return _outermost(ranks)
    return []


def _outermost(ranks: list[tuple[str, Path]]) -> list[tuple[str, Path]]:
    """One unit per rank folder: a run folder's output folder is found twice (as itself and inside it)."""
    seen: dict[Path, tuple[str, Path]] = {}
    for module, p in ranks:
        seen.setdefault(p, (module, p))
    return list(seen.values())
