"""Find what a path holds, parse it with the right parser (or take it from the cache), and join ranks into one
TraceData."""

from __future__ import annotations

import collections
import contextlib
import functools
import multiprocessing
import os
import re
import sys
import warnings
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from pandas.api.types import union_categoricals

from traceanalyzer import allocator, cache, classify, cluster, footprint, linking, outputs, schema
from traceanalyzer.classify import Rule
from traceanalyzer.errors import TraceError
from traceanalyzer.parsers import detect, sizes
from traceanalyzer.parsers.columns import Reader
from traceanalyzer.parsers.jsonstream import fork_is_safe, hashing
from traceanalyzer.progress import SHOWN_FROM_BYTES, SHOWN_FROM_RANKS, Messages, Progress, bytes_read
from traceanalyzer.schema import NO_ROW, TraceMeta
from traceanalyzer.tables import stack
from traceanalyzer.tracedata import TraceData

Parsed = tuple[pd.DataFrame, pd.DataFrame, TraceMeta]
_RANK_IN_NAME = re.compile(r"(?:rank|worker)[-_]?(\d{1,6})(?!\d)", re.IGNORECASE)  # below schema.MAX_RANKS
_DIGITS = re.compile(r"\d+")
_LINKS = ("parent", "launch", "op", "top_op", "caller")
APART_NS = 3600 * 10**9
"""Traces loaded as one job whose windows are further apart than this (an hour) are refused: not one job."""


def load(
    path: str | os.PathLike | Sequence[str | os.PathLike],
    rules: Sequence[Rule] = (),
    progress: Callable[[str], None] | Progress | None = None,
    cache: bool | None = None,
    scheduler: Any = None,
) -> TraceData:
    """Load a trace file, a run folder, or several of them, into one TraceData (ranks side by side). ``cache``: keep
    and reuse the parsed tables in the user's cache folder (None: unless ``TRACEANALYZER_CACHE=0``); ``progress``:
    a callback for messages, or a traceanalyzer.progress.Progress; ``scheduler``: a Dask scheduler address
    (tcp://HOST:PORT) or distributed.Client to parse the ranks on (None: ``TRACEANALYZER_SCHEDULER``, else here)."""
    return TraceData(*load_tables(path, rules, progress, cache, scheduler))


def load_tables(
    path: str | os.PathLike | Sequence[str | os.PathLike],
    rules: Sequence[Rule] = (),
    progress: Callable[[str], None] | Progress | None = None,
    use_cache: bool | None = None,
    scheduler: Any = None,
) -> Parsed:
    """The event table, memory table and meta of a trace file, a run folder, or several (see ``load``)."""
    found, units, plan = _plan_load(path, rules, progress, use_cache, scheduler)
    results = _parse_all(units, plan)
    if plan.cached:
        cache.evict()
    parsed = [(i, r) for i, r in enumerate(results) if not isinstance(r, Skipped)]
    skipped = [r for r in results if isinstance(r, Skipped)]
    del results  # _join releases each rank's tables as it joins them: nothing else may hold them
    skipped += [s for p, of_path in found if p.is_dir() for s in _unread_rank_files(of_path)]
    if not parsed:
        raise TraceError(skipped[0].path, skipped[0].problem)
    if len(units) > 1:
        for index, (_, _, meta) in parsed:
            meta.with_rank(_rank_of(meta, index))
    apart = _check_unique([meta for _, (_, _, meta) in parsed], strict=len(found) == 1)
    parsed = [tables for _, tables in sorted(parsed, key=lambda p: p[1][2].ranks[0])]
    analysed = len(parsed)
    events, memory, meta = _join(parsed)
    meta.warnings += apart
    _note_skipped(meta, skipped, analysed)
    return events, memory, meta


def load_per_rank(
    path: str | os.PathLike | Sequence[str | os.PathLike],
    work: Callable[[pd.DataFrame, pd.DataFrame, TraceMeta], Any],
    rules: Sequence[Rule] = (),
    progress: Callable[[str], None] | Progress | None = None,
    use_cache: bool | None = None,
    scheduler: Any = None,
) -> tuple[list[tuple[TraceMeta, Any]], TraceMeta]:
    """Each rank loaded alone where it is parsed (a worker process or a Dask worker: its tables from the cache or
    parsed, its rank assigned as a joined load would) and handed to ``work(events, memory, meta)`` there, so that
    only work's results come back: each rank's meta and work's result, in rank order, and the job's merged meta
    (skipped ranks in its warnings)."""
    found, units, plan = _plan_load(path, rules, progress, use_cache, scheduler, work)
    _check_memory(units, [], plan)
    results = _parse_many(units, plan)
    if plan.cached:
        cache.evict()
    done = [r for r in results if not isinstance(r, Skipped)]
    skipped = [r for r in results if isinstance(r, Skipped)]
    skipped += [s for p, of_path in found if p.is_dir() for s in _unread_rank_files(of_path)]
    if not done:
        raise TraceError(skipped[0].path, skipped[0].problem)
    apart = _check_unique([meta for meta, _ in done], strict=len(found) == 1)
    meta = _merge_meta(sorted((meta for meta, _ in done), key=lambda m: m.ranks[0]))
    meta.warnings += apart
    _note_skipped(meta, skipped, len(done))
    return sorted(done, key=lambda d: d[0].ranks[0]), meta


def read_from(paths: Sequence[str | os.PathLike]) -> list[outputs.Protected]:
    """What a load of the paths reads, for the output guard: each path given, and the folder each Ascend rank is
    read with (a path that cannot be read is left to the load to refuse)."""
    found = outputs.protected(paths)
    for path in paths:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # the load says them
                units = detect.units(Path(path))
        except TraceError:
            continue
        found += _rank_folders(units)
    return found


def _rank_folders(units: list) -> list[outputs.Protected]:
    """The folders the units are read with (an Ascend rank's), each with its tree."""
    sources = {detect.source_of(u)[0] for u in units}
    return [outputs.Protected(outputs.real(s), True) for s in sorted(sources) if s.is_dir()]


def _plan_load(path, rules, progress, use_cache, scheduler, work=None) -> tuple[list, list, _Plan]:
    """The paths given with the units each holds, all units, and the plan of their load."""
    paths = [path] if isinstance(path, str | os.PathLike) else list(path)
    if not paths:
        raise TraceError("(no path)", "nothing to load")
    found = [(Path(p), detect.units(Path(p))) for p in paths]
    units = [unit for _, of_path in found for unit in of_path]
    meter = progress if isinstance(progress, Progress) else Messages(progress) if progress else Progress()
    meter.status(f"reading {len(units)} trace file{'s' if len(units) != 1 else ''}")
    named = ", ".join(map(str, paths))
    cached = cache.enabled(use_cache) and _cache_usable(paths, units)
    plan = _Plan(tuple(rules), cached, meter, named, cluster.scheduler_from(scheduler), work)
    return found, units, plan


def _cache_usable(paths: list, units: list) -> bool:
    """Can the cache folder hold entries (not a file, writable, not inside an input)? If not, one warning."""
    inputs = outputs.protected(paths) + _rank_folders(units)
    problem = outputs.intrusion(cache.folder(), inputs, folder=True) or cache.unusable()
    if problem:
        warnings.warn(f"{cache.folder()}: the cache folder {problem}: traces are parsed without it", stacklevel=3)
    return not problem


def _note_skipped(meta: TraceMeta, skipped: list[Skipped], analysed: int) -> None:
    """A warning per rank left out, with how many were analysed."""
    total = analysed + len(skipped)
    meta.warnings += [f"{s.path}: {s.problem}; left out: {analysed} of {total} ranks analysed" for s in skipped]


@dataclass(frozen=True)
class _Plan:
    """How the ranks of one load are read: classification rules, whether through the cache, where progress goes,
    the paths as the user gave them (for messages), the Dask scheduler that parses them (None: here), and what is
    done with each rank where it is loaded."""

    rules: tuple[Rule, ...]
    cached: bool
    progress: Progress
    named: str
    scheduler: Any = None
    work: Callable | None = None
    """Applied to each rank where it is loaded (``load_per_rank``); None: the tables come back."""

    @property
    def done_what(self) -> str:
        """What the progress counts: ranks parsed, or analysed where they are loaded."""
        return "ranks parsed" if self.work is None else "ranks analysed"

    def task(self, count: int) -> tuple[Callable, tuple]:
        """The function each unit goes to, and its arguments after the unit and its index among ``count``."""
        if self.work is None:
            return _parse_indexed, (self.rules, self.cached)
        return _work_on_rank, (self.rules, self.cached, count == 1, self.work)


@dataclass(frozen=True)
class Skipped:
    """A rank of a job that could not be read, and why (a plain value: it comes back from a worker process)."""

    path: str
    problem: str


def _unread_rank_files(units: list) -> list[Skipped]:
    """Files beside the rank traces found in a folder, named like them, that the detector did not take (empty, or
    not a trace), so that a rank missing from the job is said, not silently dropped."""
    taken = {u.path for u in units}
    kinds = {(u.path.parent, _DIGITS.sub("#", u.path.name)) for u in units if u.path.is_file()}
    found = []
    for folder in sorted({f for f, _ in kinds}):
        for path in sorted(folder.iterdir()):
            if path not in taken and (folder, _DIGITS.sub("#", path.name)) in kinds and path.is_file():
                empty = path.stat().st_size == 0
                found.append(
                    Skipped(str(path), "is empty" if empty else "is not a trace (no traceEvents at its start)")
                )
    return found


def _parse_all(units: list, plan: _Plan) -> list[Parsed | Skipped]:
    """Every rank's tables: those the cache holds read here, the others parsed (and then kept, if cached); an
    unreadable entry is said in the warnings of the rank parsed again."""
    damaged: list[list[str]] = [[] for _ in units]
    found = [_from_cache(u, plan.rules, d) if plan.cached else None for u, d in zip(units, damaged, strict=True)]
    missing = [u for u, t in zip(units, found, strict=True) if t is None]
    _check_memory(missing, [u for u, t in zip(units, found, strict=True) if t is not None], plan)
    parsed = iter(_parse_many(missing, plan))
    out = [t if t is not None else next(parsed) for t in found]
    for result, notes in zip(out, damaged, strict=True):
        if notes and not isinstance(result, Skipped):
            result[2].warnings.extend(notes)
    return out


def _check_memory(missing: list, hits: list, plan: _Plan) -> None:
    """Say what the load will need; refuse it (one line, what to do) when this machine does not have it."""
    sizes = [footprint.json_size(u.path) for u in missing]
    need = footprint.estimate(sizes, 0 if plan.scheduler else _workers_for(missing, plan), kept=plan.work is None)
    need_hits = footprint.TABLE_PER_JSON * sum(footprint.json_size(u.path) for u in hits)
    free = footprint.available()
    if need.json_bytes >= SHOWN_FROM_BYTES:
        plan.progress.note(need.describe(free))
    if free is None or need.need_bytes + need_hits <= free or os.environ.get("TRACEANALYZER_MEMORY_CHECK") == "0":
        return
    advice = (
        "analyse it rank by rank (--per-rank, which keeps only the ranks' parts), or on a Dask cluster "
        "(--scheduler tcp://HOST:PORT), load fewer ranks, "
        if len(missing) > 1 and plan.work is None
        else "run it on a machine with more memory, "
    )
    raise TraceError(
        plan.named,
        f"{need.describe(free)}: not enough memory; {advice}or set TRACEANALYZER_MEMORY_CHECK=0 to try anyway",
    )


def _workers(units: int) -> int:
    """Ranks parsed at once."""
    if units < 2 or (os.cpu_count() or 1) < 2 or not fork_is_safe():
        return 1
    return min(units, os.cpu_count() or 1)


def _workers_for(units: list, plan: _Plan) -> int:
    """Ranks parsed at once in this load: as many as ``_workers`` says, and for a load rank by rank (nothing joined
    here) no more than the memory available holds parses of its largest rank."""
    workers = _workers(len(units))
    free = footprint.available()
    if plan.work is None or free is None or workers == 1:
        return workers
    largest = max(footprint.json_size(u.path) for u in units)
    fit = (free - footprint.BASE_BYTES) // max(footprint.PARSE_PER_JSON * largest, 1)
    return int(max(1, min(workers, fit)))


def _parse_many(units: list, plan: _Plan) -> list[Parsed | Skipped]:
    """Ranks in forked processes where that is safe (e.g. not from the dashboard's loader threads), else in turn."""
    workers = _workers_for(units, plan)
    counted = len(units) >= SHOWN_FROM_RANKS
    if plan.scheduler is not None and units:
        return _parse_on_cluster(units, plan, counted)
    fn, args = plan.task(len(units))
    if workers == 1:
        out = []
        for index, unit in enumerate(units):
            out.append(_parse_watched(unit, plan, fn, (index, *args)))
            if counted:
                plan.progress.count(plan.done_what, len(out), len(units), "ranks")
        return out
    with ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("fork")) as pool:
        futures = [pool.submit(fn, u, i, *args) for i, u in enumerate(units)]
        for done, _ in enumerate(as_completed(futures), 1):
            if counted:
                plan.progress.count(plan.done_what, done, len(units), "ranks")
        return [f.result() for f in futures]


def _parse_on_cluster(units: list, plan: _Plan, counted: bool) -> list[Parsed | Skipped]:
    """Ranks parsed by Dask workers, which open the files by their resolved paths; named here as the user gave
    them."""

    def done(n: int) -> None:
        if counted:
            plan.progress.count(plan.done_what, n, len(units), "ranks")

    sent = [replace(u, path=u.path.resolve()) for u in units]
    fn, args = plan.task(len(units))
    results = cluster.run(plan.scheduler, fn, sent, args, done)
    worked = plan.work is not None
    return [_named(r, str(s.path), str(u.path), worked) for r, s, u in zip(results, sent, units, strict=True)]


def _named(result, resolved: str, given: str, worked: bool):
    """A result from a Dask worker (its tables, or if ``worked`` its meta and work's result) with the paths its
    meta names as the user gave them."""
    if isinstance(result, Skipped):
        return Skipped(result.path.replace(resolved, given), result.problem)
    cache.rename(result[0] if worked else result[2], resolved, given)
    return result


def _parse_watched(unit, plan: _Plan, fn: Callable, args: tuple):
    """``fn(unit, *args)`` here; a large file reports its bytes read as it goes, where the reader reads in threads
    (the watching thread would keep the fallback reader from forking its workers)."""
    large = unit.path.is_file() and footprint.json_size(unit.path) >= SHOWN_FROM_BYTES
    if not large or not Reader(()).native:
        return fn(unit, *args)
    with bytes_read(unit.path, unit.path.stat().st_size, plan.progress):
        return fn(unit, *args)


def _parse_indexed(unit, index: int, rules: tuple[Rule, ...], cached: bool) -> Parsed | Skipped:
    """``_parse_one`` as a task of a load (its index does not matter)."""
    return _parse_one(unit, rules, cached)


def _work_on_rank(unit, index: int, rules: tuple[Rule, ...], cached: bool, alone: bool, work: Callable):
    """One rank loaded alone (from the cache, else parsed), its rank assigned, and handed to ``work``: its meta and
    work's result, or why it was skipped."""
    damaged: list[str] = []
    tables = (_from_cache(unit, rules, damaged) if cached else None) or _parse_one(unit, rules, cached)
    if isinstance(tables, Skipped):
        return tables
    tables[2].warnings.extend(damaged)
    if not alone:
        tables[2].with_rank(_rank_of(tables[2], index))
    events, memory, meta = _join([tables])
    return meta, work(events, memory, meta)


def _from_cache(unit, rules: tuple[Rule, ...], damaged: list[str] | None = None) -> Parsed | None:
    """One rank's tables from the cache, None when it does not hold them (or holds a stale or damaged entry, which
    ``damaged`` then names)."""
    return cache.read(_slot(unit, rules), damaged)


def _parse_one(unit, rules: tuple[Rule, ...], cached: bool = False) -> Parsed | Skipped:
    """One rank's linked and classified tables, parsed; kept in the cache if asked (and unchanged while read: the
    files the parser reads whole are hashed as it reads them, the others after)."""
    try:
        if not cached:
            return _build(unit, rules)
        slot = _slot(unit, rules)
        before = cache.fingerprint(slot.source, slot.deep, content=False)
        with hashing() as digests:
            tables = _build(unit, rules)
    except TraceError as e:
        return Skipped(e.path, e.problem)
    if cache.unchanged(before, slot.source, slot.deep):
        with contextlib.suppress(OSError):  # a file gone since: nothing is kept
            cache.write(slot, slot.identity(digests), tables)
    return tables


def _build(unit, rules: tuple[Rule, ...]) -> Parsed:
    """Parse, link and classify one rank's trace."""
    events, memory, meta = unit.parse()
    allocator.give_back()  # the parse's freed chunks, so that the link's arrays add to less (big: 218 -> 181 MiB)
    events = sizes.check(schema.conform(events, _RAW_COLUMNS), meta)
    with allocator.reusing():  # the transient arrays of a link reuse pages (big: 19k -> 13k minor faults)
        events, memory = linking.link(events, memory)
        events = classify.classify(events, rules)
    events = schema.conform(events, schema.EVENT_COLUMNS)
    return events, memory, meta


def _slot(unit, rules: tuple[Rule, ...]) -> cache.Slot:
    """Where the cache keeps a unit's tables: by source, parser and classification rules, built by this code."""
    parser = f"{unit.parse_with.__module__}.{unit.parse_with.__qualname__}"
    variant = (parser, *(f"{r.kind.value}:{r.pattern}" for r in rules))
    source, deep = detect.source_of(unit)
    return cache.Slot(source, variant, _code(), str(unit.path), deep)


@functools.cache
def _code() -> str:
    """The digest of the code that builds a cache entry (the parsers, linking, classification, the schema, the cache
    and this module), once per process: it reads every one of their files."""
    return cache.code_digest((sys.modules[detect.__package__], linking, classify, schema, cache, sys.modules[__name__]))


_DERIVED = {"rank", "parent", "depth", "launch", "op", "top_op", "step"}
_RAW_COLUMNS = tuple(c for c in schema.EVENT_COLUMNS if c.name not in _DERIVED)


def _rank_of(meta: TraceMeta, index: int) -> int:
    """A rank of a job: the trace's own, else the one its file name says, else its place among the files."""
    if meta.rank_known:
        return meta.ranks[0]
    m = _RANK_IN_NAME.search(Path(meta.paths[0]).name)
    return int(m.group(1)) if m else index


def _check_unique(metas: list[TraceMeta], strict: bool = True) -> list[str]:
    """A TraceError for the first trace whose rank another has too, or that cannot belong to one job with the
    others (another platform, or recorded hours away from them); traces given one by one (not ``strict``) that
    were recorded hours apart are loaded with a warning instead (the user joined them)."""
    seen: set[int] = set()
    for meta in metas:
        if meta.ranks[0] in seen:
            raise TraceError(meta.paths[0], f"has rank {meta.ranks[0]}, which another loaded trace also has")
        seen.add(meta.ranks[0])
    first = min(metas, key=lambda m: m.start_ns)
    said = []
    for meta in metas:
        if len({meta.platform, first.platform} - {schema.Platform.CPU}) > 1:  # a host-only rank may join any
            raise TraceError(
                meta.paths[0],
                f"is a {meta.platform.value} trace and {first.paths[0]} a {first.platform.value} one: they are not "
                "one job; load them separately",
            )
        problem = _other_job(meta, first)
        if problem is None:
            continue
        if strict:
            raise TraceError(meta.paths[0], f"{problem}; load them separately")
        said.append(f"{meta.paths[0]}: {problem}; joined as given, but times across them mean nothing")
    return said


def _other_job(meta: TraceMeta, first: TraceMeta) -> str | None:
    """Why ``meta`` is not of the job of ``first`` (both record one of the job's ids, TraceMeta.job_ids, with two
    values, or it starts hours after ``first`` ends), or None. (A Kineto trace_id is per rank, not per job.)"""
    for what, mine in meta.job_ids.items():
        theirs = first.job_ids.get(what)
        if theirs is not None and mine != theirs:
            return f"records {what} {str(mine)[:40]} and {first.paths[0]} {what} {str(theirs)[:40]}: not one job"
    apart = meta.start_ns - max(first.end_ns, first.start_ns)
    if apart > APART_NS:
        return f"starts {apart / 3.6e12:,.1f} h after {first.paths[0]} ends: not one job (its ranks run together)"
    return None


def _join(parsed: list[Parsed]) -> Parsed:
    """One job's tables: the ranks' rows one after another, row labels and link columns shifted by each rank's
    offset. The list is emptied and each rank's columns are released as they are joined, so that at its peak the
    parent holds about one copy of the job's tables, not two."""
    metas = [meta for _, _, meta in parsed]
    ranks = [m.ranks[0] for m in metas]
    sizes = [len(events) for events, _, _ in parsed]
    offsets = [sum(sizes[:i]) for i in range(len(sizes))]
    events = [_columns(e, schema.EVENT_COLUMNS) for e, _, _ in parsed]
    memory = [_columns(m, schema.MEMORY_COLUMNS) for _, m, _ in parsed]
    parsed.clear()
    joined = pd.DataFrame(_joined(events, ranks, offsets, _LINKS), index=pd.RangeIndex(sum(sizes)), copy=False)
    return joined, pd.DataFrame(_joined(memory, ranks, offsets, ("op",)), copy=False), _merge_meta(metas)


def _columns(frame: pd.DataFrame, columns: tuple[schema.Column, ...]) -> dict:
    """The table's columns (numpy arrays, Categoricals), in schema order, holding the data without a copy."""
    frame = schema.conform(frame, columns)
    return {c.name: frame[c.name].array if c.dtype == "category" else frame[c.name].to_numpy() for c in columns}


def _joined(parts: list[dict], ranks: list[int], offsets: list[int], links: tuple[str, ...]) -> dict:
    """Each column of the ranks' parts end to end (taken out of the parts as it goes): ``rank`` set, link columns
    shifted by the rank's row offset."""
    out = {}
    for name in list(parts[0]):
        pieces = [part.pop(name) for part in parts]
        if name == "rank":
            pieces = [np.full(len(p), r, dtype=p.dtype) for p, r in zip(pieces, ranks, strict=True)]
        elif name in links:
            pieces = [p if not o else np.where(p == NO_ROW, p, p + o) for p, o in zip(pieces, offsets, strict=True)]
        if len(pieces) == 1:
            out[name] = pieces[0]
            continue
        if isinstance(pieces[0], pd.Categorical):
            out[name] = union_categoricals(_same_text_dtype(pieces), ignore_order=True)
        else:
            out[name] = np.concatenate(pieces)
        del pieces
        allocator.give_back()  # the ranks' parts of this column, before the next is joined
    allocator.give_back()
    return out


def _same_text_dtype(columns: list[pd.Categorical]) -> list[pd.Categorical]:
    """Categoricals whose categories share one dtype (object where ranks differ: one parsed by the native reader,
    one by the fallback), as union_categoricals needs."""
    if len({str(c.categories.dtype) for c in columns}) == 1:
        return columns
    return [pd.Categorical.from_codes(c.codes, pd.Index(c.categories, dtype=object), validate=False) for c in columns]


def _mixed_devices(metas: list[TraceMeta]) -> list[str]:
    """A warning when the ranks record different device models: the job's device facts are the first rank's."""
    models = {m.ranks[0]: ", ".join(sorted({d.name for d in m.devices})) or "none recorded" for m in metas}
    if len(set(models.values())) < 2:
        return []
    listed = "; ".join(f"rank {rank}: {model}" for rank, model in models.items())
    return [
        f"the ranks record different devices ({listed}): GEMM peaks, memory capacity and the fusion model's "
        f"bandwidth are rank {metas[0].ranks[0]}'s device's (analysed rank by rank, the fusion model prices each "
        "rank at its own)"
    ]


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
        warnings=[w for m in metas for w in m.warnings] + _mixed_devices(metas),
        adjustments=dict(sum((collections.Counter(m.adjustments) for m in metas), collections.Counter())),
        side_tables=_merged_side_tables(metas),
        facts=first.facts,
        job_ids=first.job_ids,
    )


def _merged_side_tables(metas: list[TraceMeta]) -> dict[str, pd.DataFrame]:
    """The ranks' side tables (``metas`` in rank order) merged as each is declared (``schema.SIDE_TABLES``)."""
    merged = {}
    for name, declared in schema.SIDE_TABLES.items():
        found = [m.side_tables[name] for m in metas if name in m.side_tables]
        if found and declared.merge is schema.Merge.STACKED:
            merged[name] = stack(found)
    return merged
