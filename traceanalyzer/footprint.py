"""How much memory loading a trace will take, estimated before it starts, and whether this machine has it.

The model is measured (bench/RESULTS.md, "Memory estimate"): a rank's finished tables take about TABLE_PER_JSON of
its JSON bytes and the parse of one rank peaks at about PARSE_PER_JSON of them (the tables plus the columns being
built), so a load needs the tables of every rank plus the parses running at once, on top of the interpreter.
"""

from __future__ import annotations

import contextlib
import os
import re
from dataclasses import dataclass
from pathlib import Path

from traceanalyzer import humanize

TABLE_PER_JSON = 0.4
PARSE_PER_JSON = 1.1
BASE_BYTES = 150 << 20
"""Python with pandas, numpy and pyarrow imported."""
MIN_GZIP_RATIO = 4
"""Kineto JSON compresses at least this well; a gzip size field (uncompressed size mod 4 GiB) that implies less
is taken to have wrapped, for files large enough to hold 4 GiB of JSON at all."""
WRAP_FROM_BYTES = 64 << 20
MAX_GZIP_RATIO = 1032
"""Deflate never compresses better than this; a size field that implies more is no gzip trailer (the file was cut
or damaged), and the estimate takes MIN_GZIP_RATIO instead."""
_GIB = 1 << 30
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


@dataclass(frozen=True)
class Estimate:
    """Bytes of JSON to read (all ranks) and of memory the load is estimated to need."""

    json_bytes: int
    need_bytes: int

    def describe(self, available: int | None) -> str:
        """E.g. '1.1 GiB of JSON: needs about 1.4 GiB of memory (estimated), 20.3 GiB available'."""
        text = f"{humanize.size(self.json_bytes, 1)} of JSON: needs about {humanize.size(self.need_bytes, 1)} of memory"
        return text + (f" (estimated), {humanize.size(available, 1)} available" if available else " (estimated)")


def json_size(path: Path) -> int:
    """The JSON bytes a file or folder holds: a gzip file's uncompressed size, else the file sizes."""
    if path.is_dir():
        return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    size = path.stat().st_size
    with open(path, "rb") as f:
        if f.read(2) != b"\x1f\x8b" or size < 8:
            return size
        f.seek(-4, os.SEEK_END)
        inflated = int.from_bytes(f.read(4), "little")
    if inflated > size * MAX_GZIP_RATIO:
        return size * MIN_GZIP_RATIO
    while size >= WRAP_FROM_BYTES and inflated < size * MIN_GZIP_RATIO:
        inflated += 4 * _GIB
    return inflated


def estimate(rank_json_bytes: list[int], workers: int, kept: bool = True) -> Estimate:
    """The memory a load of ranks of these JSON sizes needs here with ``workers`` parsing at once here (0: all are
    parsed elsewhere, on a cluster); ``kept``: the ranks' tables are joined here (else only their parts come
    back, and the parses running at once are what it needs)."""
    total = sum(rank_json_bytes)
    largest = sorted(rank_json_bytes, reverse=True)[:workers]
    if not kept:
        return Estimate(total, int(BASE_BYTES + PARSE_PER_JSON * sum(largest)))
    need = BASE_BYTES + TABLE_PER_JSON * total + (PARSE_PER_JSON - TABLE_PER_JSON) * sum(largest)
    return Estimate(total, int(need))


def available() -> int | None:
    """Memory a load may take, in bytes: MemAvailable (psutil where there is no /proc), within the cgroup's limit
    (a container's), within TRACEANALYZER_MEMORY_LIMIT (e.g. 8G) when set; None if unknown."""
    found = [n for n in (_meminfo(), _cgroup_room(), _limit()) if n is not None]
    return min(found) if found else None


def _meminfo() -> int | None:
    with contextlib.suppress(OSError, ValueError), open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    try:
        import psutil  # optional: only where /proc/meminfo is missing
    except ImportError:
        return None
    return int(psutil.virtual_memory().available)


def _cgroup_room() -> int | None:
    """cgroup v2: the limit less what the group uses now (None without a limit)."""
    with contextlib.suppress(OSError, ValueError):
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        if limit != "max":
            return int(limit) - int(Path("/sys/fs/cgroup/memory.current").read_text())
    return None


def _limit() -> int | None:
    return parse_bytes(os.environ.get("TRACEANALYZER_MEMORY_LIMIT", ""))


def parse_bytes(text: str) -> int | None:
    """A size as people write it (5G, 500M, 64k, 5GiB, 123456) in bytes, binary units; None if it is not one."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([kmgt]?)i?b?", text.strip().lower())
    return int(float(m.group(1)) * _UNITS[m.group(2)]) if m else None
