"""Find what a path holds, parse it with the right parser, and join ranks into one Trace."""

from __future__ import annotations

import multiprocessing
import os
import re
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pandas as pd
from pandas.api.types import union_categoricals

from traceanalyzer import schema
from traceanalyzer.classify import Rule, classify
from traceanalyzer.errors import TraceError
from traceanalyzer.linking import link
from traceanalyzer.parsers import detect
from traceanalyzer.parsers.jsonstream import fork_is_safe
from traceanalyzer.schema import NO_ROW, TraceMeta
from traceanalyzer.tracedata import TraceData

Parsed = tuple[pd.DataFrame, pd.DataFrame, TraceMeta]
_RANK_IN_NAME = re.compile(r"(?:rank|worker)[-_]?(\d+)", re.IGNORECASE)
_LINKS = ("parent", "launch", "op", "top_op", "caller")


def load(
    path: str | os.PathLike | Sequence[str | os.PathLike],
    rules: Sequence[Rule] = (),
    progress: Callable[[str], None] | None = None,
) -> TraceData:
    """Load a trace file, a run folder, or several of them, into one TraceData (ranks side by side)."""
    paths = [path] if isinstance(path, str | os.PathLike) else list(path)
    if not paths:
        raise TraceError("(no path)", "nothing to load")
    units = [unit for p in paths for unit in detect.units(Path(p))]
    if progress:
        progress(f"reading {len(units)} trace file{'s' if len(units) != 1 else ''}")
    parsed = _parse_all(units, tuple(rules))
    return _join(_assign_ranks(parsed))


def _parse_all(units: list, rules: tuple[Rule, ...]) -> list[Parsed]:
    """Ranks in forked processes where that is safe (e.g. not from the dashboard's loader threads), else in turn."""
    if len(units) == 1 or (os.cpu_count() or 1) < 2 or not fork_is_safe():
        return [_parse_one(u, rules) for u in units]
    workers = min(len(units), os.cpu_count() or 1)
    with ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("fork")) as pool:
        return list(pool.map(_parse_one, units, [rules] * len(units)))


def _parse_one(unit, rules: tuple[Rule, ...]) -> Parsed:
    """Parse, link and classify one rank's trace."""
    events, memory, meta = unit.parse()
    events = schema.conform(events, _RAW_COLUMNS)
    events, memory = link(events, memory)
    events = classify(events, rules)
    events = schema.conform(events, schema.EVENT_COLUMNS)
    return events, memory, meta


_DERIVED = {"rank", "parent", "depth", "launch", "op", "top_op", "step"}
_RAW_COLUMNS = tuple(c for c in schema.EVENT_COLUMNS if c.name not in _DERIVED)


def _assign_ranks(parsed: list[Parsed]) -> list[Parsed]:
    """Ranks from the traces; where they do not say, from the file name, else by order."""
    if len(parsed) == 1:
        return parsed
    seen: set[int] = set()
    out = []
    for i, (events, memory, meta) in enumerate(parsed):
        rank = meta.ranks[0]
        if not meta.rank_known:
            m = _RANK_IN_NAME.search(Path(meta.paths[0]).name)
            rank = int(m.group(1)) if m else i
        if rank in seen:
            raise TraceError(meta.paths[0], f"has rank {rank}, which another loaded trace also has")
        seen.add(rank)
        meta.ranks = [rank]
        out.append((events, memory, meta))
    return out


def _join(parsed: list[Parsed]) -> TraceData:
    frames, memories, metas = [], [], []
    offset = 0
    for events, memory, meta in parsed:
        rank = meta.ranks[0]
        events = events.copy(deep=False)  # only whole columns and the index are replaced below
        events["rank"] = rank
        memory = memory.copy(deep=False)
        memory["rank"] = rank
        if offset:
            for col in _LINKS:
                events[col] = events[col].where(events[col] == NO_ROW, events[col] + offset)
            memory["op"] = memory["op"].where(memory["op"] == NO_ROW, memory["op"] + offset)
        events.index = pd.RangeIndex(offset, offset + len(events))
        offset += len(events)
        frames.append(events)
        memories.append(schema.conform(memory, schema.MEMORY_COLUMNS))
        metas.append(meta)
    events = _concat(frames)
    memory = pd.concat(memories, ignore_index=True) if len(memories) > 1 else memories[0]
    return TraceData(schema.conform(events, schema.EVENT_COLUMNS), memory, _merge_meta(metas))


def _concat(frames: list[pd.DataFrame]) -> pd.DataFrame:
    if len(frames) == 1:
        return frames[0]
    out = {}
    for col in frames[0].columns:
        if isinstance(frames[0][col].dtype, pd.CategoricalDtype):
            out[col] = union_categoricals([f[col] for f in frames], ignore_order=True)
        else:
            out[col] = pd.concat([f[col] for f in frames]).to_numpy()
    index = pd.RangeIndex(frames[0].index.start, frames[-1].index.stop)
    return pd.DataFrame(out, index=index)


def _merge_meta(metas: list[TraceMeta]) -> TraceMeta:
    first = metas[0]
    if len(metas) == 1:
        return first
    ranks = sorted(r for m in metas for r in m.ranks)
    return TraceMeta(
        platform=first.platform,
        source_format=first.source_format,
        format_version=first.format_version,
        paths=[p for m in metas for p in m.paths],
        ranks=ranks,
        world_size=max([m.world_size for m in metas] + [len(ranks)]),
        rank_known=all(m.rank_known for m in metas),
        devices=first.devices,
        base_time_ns=first.base_time_ns,
        start_ns=min(m.start_ns for m in metas),
        end_ns=max(m.end_ns for m in metas),
        process_groups=first.process_groups,
        warnings=[w for m in metas for w in m.warnings],
        adjustments=_summed([m.adjustments for m in metas]),
        extra={
            "per_rank": {
                m.ranks[0]: {"path": m.paths[0], "start_ns": m.start_ns, "end_ns": m.end_ns, "extra": m.extra}
                for m in metas
            }
        }
        | first.extra,
    )


def _summed(counts: list[dict[str, int]]) -> dict[str, int]:
    """Counts by reason, added up over ranks."""
    out: dict[str, int] = {}
    for c in counts:
        for reason, n in c.items():
            out[reason] = out.get(reason, 0) + n
    return out
