"""The job a rank belongs to, from the run's metadata: world size, the rank, and the job's ranks that cannot be read."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from traceanalyzer.parsers.ascend.outputs import READABLE, output

from traceanalyzer import humanize

METADATA_FILE = "profiler_metadata.json"
_INFO_RANK = re.compile(r"^profiler_info_(\d{1,6})\.json$")  # below schema.MAX_RANKS
_RUN_DIRS = ("*_ascend_pt", "*_ascend_ms")
_DB_RANK = re.compile(r"_(\d{1,6})\.db$")  # below schema.MAX_RANKS
_MISSING_RANK = frozenset({"", "N/A", "NA", "None", "4294967295"})


@dataclass
class Job:
    """What the run's metadata says of one rank: its profiler_info, its rank (None if unknown) and the world size."""

    info: dict
    rank: int | None
    world_size: int
    recorded_world_size: int | None = None
    """The world size the run's metadata records (None: ``world_size`` is inferred from the rank)."""


def describe(run_dir: Path | None, path: Path, warnings: list[str], extra: dict | None = None) -> Job:
    """The Job of the rank at ``path`` (a run's output folder, file or database), from the run folder's
    profiler_info*.json and profiler_metadata.json; ``extra``: metadata the database holds (its META_DATA)."""
    info = profiler_info(run_dir, warnings)
    meta = metadata(run_dir, warnings) or (extra or {})
    found = _info_rank(info)
    if found is None:
        found = rank(meta)
    if found is None:
        m = _DB_RANK.search(path.name)
        found = int(m.group(1)) if m else None
    recorded = world_size(meta)
    size = recorded or 1
    warnings.extend(missing_ranks(run_dir, found, size))
    return Job(info, found, max(size, (found or 0) + 1), recorded)


def profiler_info(run_dir: Path | None, warnings: list[str]) -> dict:
    """The run's profiler_info[_rank].json (config, rank); {} when absent, with a warning when not a JSON object."""
    for f in sorted(run_dir.glob("profiler_info*.json")) if run_dir is not None else []:
        return _json_object(f, "rank and profiler config not read", warnings)
    return {}


def _json_object(path: Path, unread: str, warnings: list[str]) -> dict:
    """A JSON object file's contents; {} with a warning (ending in ``unread``) when it is not a readable one."""
    try:
        found = json.loads(path.read_bytes())
    except (OSError, ValueError, RecursionError) as e:
        warnings.append(f"{path}: not readable JSON ({type(e).__name__}); {unread}")
        return {}
    if not isinstance(found, dict):
        warnings.append(f"{path}: not a JSON object; {unread}")
        return {}
    return found


def _info_rank(info: dict) -> int | None:
    """profiler_info's ``rank_id``: an int, or a string of one (torch_npu 2.7.1); None when absent or a sentinel."""
    value = info.get("rank_id")
    text = str(value).strip() if isinstance(value, int | str) and not isinstance(value, bool) else ""
    return int(text) if text.isdigit() and text not in _MISSING_RANK and len(text) < 8 else None


def metadata(run_dir: Path | None, warnings: list[str]) -> dict:
    """The run's profiler_metadata.json ({} when absent; a warning when it is not a readable JSON object)."""
    path = run_dir / METADATA_FILE if run_dir is not None else None
    if path is None or not path.is_file():
        return {}
    return _json_object(path, "world size and groups not read", warnings)


def world_size(meta: dict) -> int | None:
    """``distributed_args.world_size``, else one more than the largest rank of any parallel group; None if neither."""
    args = meta.get("distributed_args")
    size = args.get("world_size") if isinstance(args, dict) else None
    if isinstance(size, int) and not isinstance(size, bool) and 0 < size < 1 << 20:
        return size
    ranks = [r for g in _groups(meta) for r in g.get("global_ranks") or [] if isinstance(r, int) and 0 <= r < 1 << 20]
    return max(ranks) + 1 if ranks else None


def rank(meta: dict) -> int | None:
    """``distributed_args.rank`` (None when absent or not a rank)."""
    args = meta.get("distributed_args")
    value = args.get("rank") if isinstance(args, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _groups(meta: dict) -> list[dict]:
    groups = meta.get("parallel_group_info")
    if not isinstance(groups, dict):
        return []
    return [g for g in groups.values() if isinstance(g, dict) and isinstance(g.get("global_ranks"), list)]


def missing_ranks(run_dir: Path | None, own_rank: int | None, size: int) -> list[str]:
    """Warnings naming the job's ranks that have no rank folder beside ``run_dir``, or one with nothing readable.

    Said once per job: by the rank folder of the lowest rank that can be read.
    """
    if run_dir is None or size < 2 or own_rank is None:
        return []
    found = _sibling_ranks(run_dir.parent)
    readable = [r for r, folder in found.items() if output(folder) is not None]
    if not readable or own_rank != min(readable):
        return []
    out = []
    absent = humanize.missing_runs(size, list(found))
    if absent:
        shown = humanize.ranges(absent)
        out.append(f"{run_dir.parent}: the job has {size} ranks, but ranks {shown} have no rank folder here")
    for r in sorted(set(found) - set(readable)):
        out.append(f"{found[r]}: rank {r} has no readable output (looked for {READABLE}); not loaded")
    return out


def _sibling_ranks(job_dir: Path) -> dict[int, Path]:
    """The rank folders of a job folder by their rank (from their ``profiler_info_{rank}.json`` names)."""
    out: dict[int, Path] = {}
    for pattern in _RUN_DIRS:
        for folder in sorted(job_dir.glob(pattern)):
            names = [m.group(1) for f in folder.glob("profiler_info_*.json") if (m := _INFO_RANK.match(f.name))]
            if names and folder.is_dir():
                out.setdefault(int(names[0]), folder)
    return out
