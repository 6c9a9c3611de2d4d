"""The memory analysis: timeline, peak per device and what holds it, per-op allocation, step levels and the leak
trend, from ``trace.memory_events`` only (either platform).

Where the source records no running totals (2021 Kineto traces: ``Bytes`` only) the totals are rebuilt from a
running sum, relative to an unknown baseline; where it records no block addresses, allocations cannot be paired
with frees, so the blocks live at the peak and the unfreed blocks are unknown.

Two stages: ``rank_part`` reduces a trace (one rank alone, or every rank of a joined trace) to a ``MemoryPart``
per pool (peaks, every block live at a peak, per-op sums, step levels, unfreed blocks grouped); ``combine`` merges
parts into the ``MemoryJobPart`` the section and the findings read. ``analyze`` is ``combine`` of the trace's own
part plus the per-event tables (timeline, blocks); a job analysed rank by rank combines its ranks' parts.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from traceanalyzer import notebook
from traceanalyzer.analyzers import callpath
from traceanalyzer.groups import Groups
from traceanalyzer.jobdata import JobData
from traceanalyzer.linking import step_markers
from traceanalyzer.memo import remember
from traceanalyzer.options import DEFAULT, Options
from traceanalyzer.schema import MODULE_MEMORY, NO_ROW, Kind, TraceMeta, category_text, codes_at
from traceanalyzer.tables import stack
from traceanalyzer.tracedata import TraceData
from traceanalyzer.vocabulary import dtype_key

GROUP = ["rank", "device"]
"""One memory pool: a device (or the host, device -1) of one rank."""

TIMELINE_MAX_POINTS = 20_000
"""Above this many events per pool the timeline keeps each bucket's lowest and highest point (the peak stays)."""

LEAK_MIN_STEPS = 3
LEAK_MIN_BYTES_PER_STEP = 1 << 20
"""Growth below 1 MiB per step is allocator drift, not a leak (gpt_train drifts 512 B/step)."""
LEAK_MIN_R2 = 0.9
LEAK_MIN_GROWING_SHARE = 0.8
"""Share of step-to-step changes that must grow by at least half the fitted slope: steady, not one jump."""

OUTSIDE_OP = "(outside any op)"

FULL_PRECISION = frozenset({"fp32", "fp64"})
"""Dtype keys of full-precision inputs (a temporary of these could halve in bf16)."""
TRAINING_MARKERS = re.compile(r"backward|autograd::engine", re.IGNORECASE)
"""Event names that show the trace holds a backward pass."""
NO_TOTALS_NOTE = (
    "memory events carry no running totals (only Bytes): allocated memory is rebuilt from a running sum "
    "starting at the lowest level seen; the baseline (memory allocated before the trace) is unknown"
)
NO_ADDRESSES_NOTE = "no block addresses recorded: allocations cannot be paired with frees"
OP_COLUMNS = ["op_name", "allocations", "allocated_bytes", "largest_bytes", "live_at_peak_bytes", "unfreed_bytes"]
CONTEXT_COLUMNS = ["op_name", "path", "module", "stack"]
"""Text columns of a block's context: few distinct values, repeated over the blocks (a part codes them)."""
UNFREED_COLUMNS = GROUP + ["op_name", "path", "module", "stack", "blocks", "steps", "unfreed_bytes", "per_step_bytes"]


@dataclass
class MemoryPart:
    """The memory of one rank alone (or of every rank of a joined trace), per pool, as ``combine`` needs it: no
    per-event table. Row labels (``op``, ``*_pos``) are those of the trace it was made from."""

    peaks: pd.DataFrame  # one row per (rank, device), capacity left to ``combine``
    live_at_peak: pd.DataFrame  # every block live at each pool's peak, context coded, largest first
    op_sums: pd.DataFrame  # per (rank, op name), first seen first: additive allocation statistics
    step_memory: pd.DataFrame  # allocated at each step's start and end, per pool
    unfreed: pd.DataFrame  # per (rank, device, op, path), first seen first: blocks allocated in a step, never freed
    rows: int  # memory events
    totals_known: bool  # every memory event records running totals
    addressed: bool  # some memory event records a block address
    training: bool  # the trace holds a backward pass


@dataclass
class MemoryJobPart:
    """What the memory section and findings read (``combine`` of parts); bytes in bytes, times in ns on the trace's
    time base."""

    peaks: pd.DataFrame  # one row per (rank, device)
    live_at_peak: pd.DataFrame  # blocks live at each pool's peak, largest first
    per_op: pd.DataFrame  # allocation statistics per op name
    step_memory: pd.DataFrame  # allocated at each step's start and end, per pool
    leak: pd.DataFrame  # per pool: linear fit of step-end allocation, verdict
    unfreed: pd.DataFrame  # blocks allocated in a step and never freed, grouped by op and path
    notes: list[str]
    modules: pd.DataFrame  # Ascend: peak reserved per CANN module
    training: bool  # the trace holds a backward pass

    @property
    def device_peaks(self) -> pd.DataFrame:
        """Peaks of accelerator pools (host memory left out)."""
        return self.peaks[self.peaks["device"] >= 0]

    @property
    def leaking(self) -> pd.DataFrame:
        """Pools whose allocation grows steadily and significantly step after step."""
        return self.leak[self.leak["leak"]]


@dataclass
class MemoryAnalysis(MemoryJobPart):
    """Everything the memory analysis finds: the job part, and the per-event tables."""

    timeline: pd.DataFrame  # ts, rank, device, allocated, reserved (reserved NaN where not recorded)
    blocks: pd.DataFrame  # every allocation, paired with its free by address

    def __repr__(self) -> str:
        return notebook.memory_repr(self)

    def _repr_html_(self) -> str:
        return notebook.memory_html(self)


def analyze(trace: TraceData) -> MemoryAnalysis:
    """The memory analysis of a trace: timeline, peaks, live blocks at the peaks, per-op stats, leak trend."""
    return remember(trace, "memory.analyze", lambda: _analyze(trace))


def _analyze(trace: TraceData) -> MemoryAnalysis:
    mem = _prepared(trace.memory_events)
    blocks = _blocks(mem)
    part = remember(trace, "memory.part", lambda: _part(trace, mem, blocks))
    merged = combine([part], trace.meta)
    return MemoryAnalysis(**vars(merged), timeline=_timeline(mem), blocks=blocks)


def rank_part(trace: TraceData, options: Options = DEFAULT) -> MemoryPart:
    """The trace's memory part (a rank's, for a job analysed rank by rank)."""
    return remember(trace, "memory.part", lambda: _part_of(trace))


def _part_of(trace: TraceData) -> MemoryPart:
    """The part of a trace whose memory analysis was not asked for (no timeline, no blocks kept)."""
    mem = _prepared(trace.memory_events)
    return _part(trace, mem, _blocks(mem))


def merge(parts: list[MemoryPart], job: JobData) -> MemoryJobPart:
    """The analyzer's merge rule: the memory of a job, its ranks' parts combined (``combine``)."""
    return combine(parts, job.meta)


def _part(trace: TraceData, mem: pd.DataFrame, blocks: pd.DataFrame) -> MemoryPart:
    """The per-pool stage: peaks, live blocks at them, per-op sums, step levels, unfreed blocks, flags."""
    at = _at_peaks(trace, mem)
    live = _live_at_peaks(blocks, at)
    unfreed = _unfreed_blocks(blocks)
    rows = np.concatenate([at["op"], live["op"], unfreed["op"]])
    where = callpath.walk(trace).where_many(rows).set_index("row")  # the trace's shared walk: no second walk's arrays
    live = _with_context(trace, live, where)
    live["fp32_inputs"] = _full_precision(trace, live["op"])
    return MemoryPart(
        peaks=_with_live_totals(_peaks(trace, mem, at, where), live),
        live_at_peak=live.astype(dict.fromkeys(CONTEXT_COLUMNS, "category")),
        op_sums=_op_sums(trace, blocks, live),
        step_memory=_step_memory(trace, mem),
        unfreed=_unfreed_groups(_with_context(trace, unfreed, where)),
        rows=len(mem),
        totals_known=bool(mem["baseline_known"].all()),
        addressed=bool((mem["addr"] != NO_ROW).any()),
        training=bool(trace.events["name"].cat.categories.str.contains(TRAINING_MARKERS).any()),
    )


def combine(parts: list[MemoryPart], meta: TraceMeta) -> MemoryJobPart:
    """The combining stage: the parts' pools one after another (in the parts' order), per-op statistics added up
    and ranked, capacities from ``meta``, leak fits, notes and CANN module memory."""
    peaks = _with_capacity(stack([p.peaks for p in parts]), meta)
    step_memory = stack([p.step_memory for p in parts])
    return MemoryJobPart(
        peaks=peaks,
        live_at_peak=stack([p.live_at_peak for p in parts]).astype(dict.fromkeys(CONTEXT_COLUMNS, "str")),
        per_op=_per_op(stack([p.op_sums for p in parts])),
        step_memory=step_memory,
        leak=_leak(step_memory, peaks),
        unfreed=_ranked_unfreed(stack([p.unfreed for p in parts])),
        notes=_notes(parts),
        modules=module_memory(meta),
        training=any(p.training for p in parts),
    )


def _notes(parts: list[MemoryPart]) -> list[str]:
    """What the sources did not record: running totals, block addresses."""
    if not sum(p.rows for p in parts):
        return []
    notes = [] if all(p.totals_known for p in parts) else [NO_TOTALS_NOTE]
    return notes + ([] if any(p.addressed for p in parts) else [NO_ADDRESSES_NOTE])


def compact_module_memory(meta: TraceMeta) -> None:
    """Keep of a rank's npu_module_mem samples (its side table ``MODULE_MEMORY``) only what ``module_memory``
    reads: per device and module its largest sample and its last, in their order; so a rank's part carries a few
    rows, not every sample."""
    samples = meta.side_tables.get(MODULE_MEMORY.name)
    if samples is None or not len(samples):
        return
    g = samples.sort_values("ts", kind="stable").groupby(["device", "component"], sort=False)["reserved_bytes"]
    keep = np.union1d(g.idxmax().to_numpy(), g.tail(1).index.to_numpy())
    meta.side_tables[MODULE_MEMORY.name] = samples.loc[samples.index.isin(keep)].reset_index(drop=True)


def module_memory(meta: TraceMeta) -> pd.DataFrame:
    """Per rank, device and CANN module: peak and last reserved bytes (modules that never reserve anything left out),
    from the ranks' facts."""
    samples = meta.side_table(MODULE_MEMORY)
    columns = GROUP + ["component", "peak_reserved_bytes", "last_reserved_bytes"]
    if not len(samples):
        return pd.DataFrame(columns=columns)
    g = samples.sort_values("ts", kind="stable").groupby(GROUP + ["component"])
    table = g["reserved_bytes"].agg(peak_reserved_bytes="max", last_reserved_bytes="last").reset_index()
    table = table[table["peak_reserved_bytes"] > 0]
    return table.sort_values(GROUP + ["peak_reserved_bytes"], ascending=[True, True, False]).reset_index(drop=True)


def _prepared(memory: pd.DataFrame) -> pd.DataFrame:
    """Events sorted per pool with ``allocated``/``reserved`` columns and a ``baseline_known`` flag per row."""
    mem = memory.sort_values(GROUP + ["ts"], kind="stable").reset_index(drop=True)
    mem["pos"] = np.arange(len(mem))
    pools = _pools(mem)
    known = _spread(np.logical_and.reduceat((mem["total_allocated"] != NO_ROW).to_numpy(), pools), pools, len(mem))
    size = mem["bytes"].to_numpy()
    running = np.cumsum(size)
    running -= _spread(running[pools] - size[pools], pools, len(mem))  # each pool's own running sum
    floor = np.minimum(_spread(np.minimum.reduceat(running, pools), pools, len(mem)), 0)
    mem["allocated"] = np.where(known, mem["total_allocated"].to_numpy(), running - floor).astype(np.int64)
    reserved = mem["total_reserved"].where(mem["total_reserved"] != NO_ROW).astype(float).to_numpy()
    mem["reserved"] = np.where(_spread(np.fmax.reduceat(reserved, pools), pools, len(mem)) > 0, reserved, np.nan)
    mem["baseline_known"] = known.astype(bool)
    return mem


def _pools(mem: pd.DataFrame) -> np.ndarray:
    """The first row of each pool of events sorted by pool."""
    return _firsts(mem["rank"].to_numpy(), mem["device"].to_numpy())


def _firsts(rank: np.ndarray, device: np.ndarray) -> np.ndarray:
    """The first row of each pool of rows sorted by pool (their ranks and devices)."""
    first = np.r_[True, (rank[1:] != rank[:-1]) | (device[1:] != device[:-1])]
    return np.flatnonzero(first) if len(rank) else np.zeros(0, dtype=np.int64)


def _bounds(pools: np.ndarray, rows: int) -> list[tuple[int, int]]:
    """Each pool's rows, [first, end) (``pools``: the first row of each)."""
    return list(zip(pools.tolist(), np.r_[pools[1:], rows][: len(pools)].tolist(), strict=True))


def _spread(per_pool: np.ndarray, pools: np.ndarray, rows: int) -> np.ndarray:
    """Each pool's value on each of its rows (``pools``: the first row of each)."""
    return np.repeat(per_pool, np.diff(np.r_[pools, rows]))


def _blocks(mem: pd.DataFrame) -> pd.DataFrame:
    """Every allocation with an address, paired with the next free of the same address in the same pool."""
    pools = _pools(mem)
    pool = _spread(np.arange(len(pools)), pools, len(mem))
    rows = np.flatnonzero((mem["addr"] != NO_ROW).to_numpy())
    order = rows[np.lexsort((mem["addr"].to_numpy()[rows], pool[rows]))]  # by pool and address, each in time order
    addr, size, pos, ts = (mem[c].to_numpy()[order] for c in ("addr", "bytes", "pos", "ts"))
    same_next = np.zeros(len(order), dtype=bool)  # the next event is of the same block (pool and address)
    same_next[:-1] = (pool[order][1:] == pool[order][:-1]) & (addr[1:] == addr[:-1])
    is_alloc = size > 0
    freed = (is_alloc & same_next & np.r_[size[1:] < 0, False])[is_alloc]
    nxt = np.minimum(np.arange(len(order)) + 1, max(len(order) - 1, 0))[is_alloc]
    allocs = order[is_alloc]
    back = np.argsort(allocs, kind="stable")  # the allocations in time order
    out = mem[GROUP + ["addr", "bytes", "ts", "op", "step", "pos"]].iloc[allocs[back]]
    out = out.rename(columns={"ts": "alloc_ts", "pos": "alloc_pos"}).reset_index(drop=True)
    out["free_ts"] = np.where(freed, ts[nxt], NO_ROW)[back]
    out["free_pos"] = np.where(freed, pos[nxt], NO_ROW)[back]
    return out


def _at_peaks(trace, mem: pd.DataFrame) -> pd.DataFrame:
    """Per pool (sorted): the memory event at which allocation first reaches its peak; its op, or in a pool whose
    events name no op, the op running then."""
    level, pools = mem["allocated"].to_numpy(), _pools(mem)
    at = mem.iloc[[lo + int(np.argmax(level[lo:hi])) for lo, hi in _bounds(pools, len(mem))]].reset_index(drop=True)
    unlinked = np.maximum.reduceat(mem["op"].to_numpy(), pools) == NO_ROW
    if unlinked.any():
        pairs = zip(at["rank"][unlinked], at["ts"][unlinked], strict=True)
        at.loc[unlinked, "op"] = [_running_op(trace.events, rank, ts) for rank, ts in pairs]
    return at


def _peaks(trace, mem: pd.DataFrame, at: pd.DataFrame, where: pd.DataFrame) -> pd.DataFrame:
    """Per pool: peak allocated (first time reached) with its op, path, module and stack (``where``: the
    ``where_many`` of its op, by row); peak reserved (capacity: ``_with_capacity``)."""
    pools, allocated, reserved = _pools(mem), mem["allocated"].to_numpy(), mem["reserved"].to_numpy()
    ctx = where.reindex(at["op"].to_numpy())
    peaks = pd.DataFrame(
        {
            "rank": at["rank"].to_numpy(),
            "device": at["device"].to_numpy(),
            "peak_allocated_bytes": at["allocated"].to_numpy(),
            "peak_ts": at["ts"].to_numpy(),
            "peak_step": at["step"].to_numpy(),
            "peak_pos": at["pos"].to_numpy(),
            "peak_op_row": at["op"].to_numpy(),
            "op": _op_names(trace, at["op"]),
            "path": ctx["full_path"].to_numpy(),
            "module": ctx["module"].to_numpy(),
            "stack": ctx["stack"].to_numpy(),
            "alloc_bytes_at_peak": at["bytes"].to_numpy(),
            "reserved_at_peak_bytes": at["reserved"].to_numpy(),
            "peak_reserved_bytes": np.fmax.reduceat(reserved, pools),
            "start_allocated_bytes": allocated[pools] - mem["bytes"].to_numpy()[pools],
            "baseline_known": np.logical_and.reduceat(mem["baseline_known"].to_numpy(), pools),
            "events": np.diff(np.r_[pools, len(mem)]),
        }
    )
    unused = peaks["reserved_at_peak_bytes"] - peaks["peak_allocated_bytes"]
    peaks["unused_reserved_at_peak_bytes"] = unused.where(unused >= 0)
    peaks["max_unused_reserved_bytes"] = np.fmax.reduceat(_unused(mem).to_numpy(), pools)
    return peaks


def _with_capacity(peaks: pd.DataFrame, meta: TraceMeta) -> pd.DataFrame:
    """Peaks with their device's memory (NaN where unknown, and for the host) and the share the peak takes."""
    capacity = np.array([_capacity(meta, d) for d in peaks["device"]], dtype=float)
    return peaks.assign(capacity_bytes=capacity, capacity_share=peaks["peak_allocated_bytes"] / capacity)


def _running_op(events: pd.DataFrame, rank: int, ts: int) -> int:
    """Deepest CPU op of the rank running at ``ts`` on any thread: for sources whose memory records name no thread."""
    ops = events[(events["kind"] == Kind.CPU_OP.value) & (events["rank"] == rank)]
    running = ops[(ops["ts"] <= ts) & (ops["ts"] + ops["dur"] > ts)]
    return int(running["depth"].idxmax()) if len(running) else NO_ROW


def _unused(mem: pd.DataFrame) -> pd.Series:
    """Reserved but unallocated bytes after each event; NaN where the pool records no caching reserve."""
    unused = mem["reserved"] - mem["allocated"]
    return unused.where(unused >= 0)


def _capacity(meta: TraceMeta, device: int) -> float:
    sizes = [d.memory_bytes for d in meta.devices if d.index == device and d.memory_bytes]
    return float(sizes[0]) if sizes and device >= 0 else np.nan


def _op_names(trace, rows: pd.Series) -> np.ndarray:
    """Event names of op rows, OUTSIDE_OP where there is none."""
    rows = np.asarray(rows, dtype=np.int64)
    names = trace.events["name"]
    return np.where(rows != NO_ROW, category_text(names)[codes_at(names, rows)], OUTSIDE_OP)


def _live_at_peaks(blocks: pd.DataFrame, at: pd.DataFrame) -> pd.DataFrame:
    """Blocks allocated at or before each pool's peak (``at``: the peak events) and not freed before it, largest
    first."""
    if not len(blocks) or not len(at):
        return blocks.iloc[:0].assign(peak_step=pd.Series(dtype=np.int32))
    pool = _pool_at(at, blocks)
    peak_pos = at["pos"].to_numpy()[np.maximum(pool, 0)]
    alloc, free = blocks["alloc_pos"].to_numpy(), blocks["free_pos"].to_numpy()
    rows = np.flatnonzero((pool >= 0) & (alloc <= peak_pos) & ((free == NO_ROW) | (free > peak_pos)))
    rank, device, size = (blocks[c].to_numpy()[rows] for c in ("rank", "device", "bytes"))
    rows = rows[np.lexsort((alloc[rows], -size, device, rank))]  # by pool, the largest first (ties: allocated first)
    live = blocks.iloc[rows].reset_index(drop=True)
    live["peak_step"] = at["step"].to_numpy()[pool[rows]]
    return live


def _pool_at(pools: pd.DataFrame, table: pd.DataFrame) -> np.ndarray:
    """Per row of a table: the position of its pool (rank and device) in ``pools`` (one row per pool, sorted by
    pool), -1 where it has none."""
    keys, mine = _pool_key(pools), _pool_key(table)
    at = np.minimum(np.searchsorted(keys, mine), max(len(keys) - 1, 0))
    return np.where(keys[at] == mine, at, -1) if len(keys) else np.full(len(mine), -1, dtype=np.int64)


def _pool_key(table: pd.DataFrame) -> np.ndarray:
    """Per row: its rank and device as one integer, in the order of (rank, device)."""
    return table["rank"].to_numpy().astype(np.int64) * 2**32 + table["device"].to_numpy().astype(np.int64) + 2**31


def _with_context(trace, blocks: pd.DataFrame, where: pd.DataFrame) -> pd.DataFrame:
    """Blocks with the name, annotation path, module path and user stack of the op that allocated them (``where``:
    the ``where_many`` of their ops, by row)."""
    ctx = where.reindex(blocks["op"].to_numpy())
    out = blocks.copy()
    out["op_name"] = _op_names(trace, blocks["op"])
    for col in ("path", "module", "stack"):
        out[col] = ctx[col].fillna("").to_numpy()
    return out


def _full_precision(trace: TraceData, ops: pd.Series) -> np.ndarray:
    """Per op row: does it record a full-precision (fp32/fp64) input? (False for no op.) Each distinct list of
    input types is read once."""
    column = trace.events["input_types"]
    codes = codes_at(column, ops.to_numpy(dtype=np.int64))
    text = category_text(column)
    distinct = np.unique(codes)
    found = np.array([_runs_in_fp32(text[code]) for code in distinct.tolist()], dtype=bool)
    return found[np.searchsorted(distinct, codes)] if len(codes) else np.zeros(0, dtype=bool)


def _runs_in_fp32(types_text: str) -> bool:
    """Does a list of input types (JSON text) hold a full-precision (fp32/fp64) type?"""
    try:
        types = json.loads(types_text or "[]")
    except ValueError:
        return False
    return isinstance(types, list) and any(dtype_key(str(t)) in FULL_PRECISION for t in types if t)


def _with_live_totals(peaks: pd.DataFrame, live: pd.DataFrame) -> pd.DataFrame:
    """Peaks with the bytes of blocks seen allocated in the trace and of those allocated in the peak's step."""
    pool, size = _pool_at(peaks, live), live["bytes"].to_numpy()
    in_step = (pool >= 0) & (live["step"].to_numpy() == live["peak_step"].to_numpy())
    total, in_peak_step = np.zeros(len(peaks), dtype=np.int64), np.zeros(len(peaks), dtype=np.int64)
    np.add.at(total, pool[pool >= 0], size[pool >= 0])
    np.add.at(in_peak_step, pool[in_step], size[in_step])
    peaks = peaks.copy()
    peaks["live_traced_bytes"] = total
    peaks["live_in_peak_step_bytes"] = in_peak_step
    peaks["allocated_before_trace_bytes"] = np.where(
        peaks["baseline_known"], peaks["peak_allocated_bytes"] - total, np.nan
    )
    return peaks


def _timeline(mem: pd.DataFrame) -> pd.DataFrame:
    """Allocated and reserved over time per pool, decimated to the lowest and highest point of each bucket."""
    cols = ["ts", "rank", "device", "allocated", "reserved"]
    if not len(mem):
        return pd.DataFrame(columns=cols)
    level = mem["allocated"].to_numpy()
    keep = np.concatenate([lo + _decimated(level[lo:hi]) for lo, hi in _bounds(_pools(mem), len(mem))])
    return mem[cols].iloc[keep].reset_index(drop=True)


def _decimated(level: np.ndarray) -> np.ndarray:
    """The positions a pool's timeline keeps: all, or above ``TIMELINE_MAX_POINTS`` the first lowest and first
    highest of each bucket."""
    n = len(level)
    if n <= TIMELINE_MAX_POINTS:
        return np.arange(n)
    bucket = np.arange(n) * (TIMELINE_MAX_POINTS // 2) // n
    starts = np.flatnonzero(np.r_[True, bucket[1:] != bucket[:-1]])
    highest, lowest = np.maximum.reduceat(level, starts), np.minimum.reduceat(level, starts)
    return np.union1d(_first_at(level, highest, starts), _first_at(level, lowest, starts))


def _first_at(level: np.ndarray, per_bucket: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Per bucket (``starts``: each one's first position): the first position where ``level`` is its value."""
    hit = level == np.repeat(per_bucket, np.diff(np.r_[starts, len(level)]))
    return np.minimum.reduceat(np.where(hit, np.arange(len(level)), len(level)), starts)


def _op_sums(trace, blocks: pd.DataFrame, live: pd.DataFrame) -> pd.DataFrame:
    """Per (rank, op name), first seen first: allocations, bytes allocated, largest block, bytes live at the peaks,
    bytes never freed."""
    if not len(blocks):
        return pd.DataFrame(columns=["rank", *OP_COLUMNS])
    rank = np.r_[blocks["rank"].to_numpy(), live["rank"].to_numpy()]  # the live blocks: some of the blocks again
    name = np.r_[_op_names(trace, blocks["op"]), live["op_name"].to_numpy()]
    size, unfreed = blocks["bytes"].to_numpy(), np.where(blocks["free_pos"] == NO_ROW, blocks["bytes"], 0)
    of_blocks, of_live = np.zeros(len(blocks), dtype=np.int64), np.zeros(len(live), dtype=np.int64)
    g = Groups([rank, name])
    return pd.DataFrame(
        {
            "rank": rank[g.first],
            "op_name": pd.array(name[g.first], dtype="str"),
            "allocations": g.sum(np.r_[of_blocks + 1, of_live]),
            "allocated_bytes": g.sum(np.r_[size, of_live]),
            "largest_bytes": g.max(np.r_[size, of_live + np.iinfo(np.int64).min]),
            "live_at_peak_bytes": g.sum(np.r_[of_blocks, live["bytes"].to_numpy()]),
            "unfreed_bytes": g.sum(np.r_[unfreed, of_live]),
        }
    )


def _per_op(sums: pd.DataFrame) -> pd.DataFrame:
    """Per op name (``_op_sums`` of every rank added up): allocation statistics, most bytes live at the peaks
    first."""
    if not len(sums):
        return pd.DataFrame(columns=OP_COLUMNS)
    g = Groups([sums["op_name"].array])
    table = pd.DataFrame(
        {
            "op_name": sums["op_name"].array.take(g.first),
            **{column: g.sum(sums[column].to_numpy()) for column in ("allocations", "allocated_bytes")},
            "largest_bytes": g.max(sums["largest_bytes"].to_numpy()),
            **{column: g.sum(sums[column].to_numpy()) for column in ("live_at_peak_bytes", "unfreed_bytes")},
        }
    )
    return table.sort_values(["live_at_peak_bytes", "allocated_bytes"], ascending=False).reset_index(drop=True)[
        OP_COLUMNS
    ]


def _step_memory(trace, mem: pd.DataFrame) -> pd.DataFrame:
    """Per pool and step: allocated just before the step starts and when it ends."""
    columns = GROUP + ["step", "start_ts", "end_ts", "start_bytes", "end_bytes"]
    rows = []
    events = trace.events
    markers = events.loc[(events["kind"] == Kind.STEP.value).to_numpy(), ["rank", "kind", "name", "ts", "dur"]]
    per_rank = {int(rank): step_markers(markers[markers["rank"] == rank]) for rank in mem["rank"].unique()}
    rank, device, ts, allocated, size = (mem[c].to_numpy() for c in ("rank", "device", "ts", "allocated", "bytes"))
    for lo, hi in _bounds(_pools(mem), len(mem)):  # the pools in (rank, device) order, as ``_prepared`` sorts them
        steps = per_rank[int(rank[lo])]
        if not len(steps):
            continue
        level = np.concatenate(([allocated[lo] - size[lo]], allocated[lo:hi]))
        at_start = level[np.searchsorted(ts[lo:hi], steps["start"].to_numpy(), side="left")]
        at_end = level[np.searchsorted(ts[lo:hi], steps["end"].to_numpy(), side="left")]
        rows.append(
            pd.DataFrame(
                {
                    "rank": int(rank[lo]),
                    "device": int(device[lo]),
                    "step": steps["step"].to_numpy(),
                    "start_ts": steps["start"].to_numpy(),
                    "end_ts": steps["end"].to_numpy(),
                    "start_bytes": at_start,
                    "end_bytes": at_end,
                }
            )
        )
    return pd.concat(rows, ignore_index=True) if rows else pd.DataFrame(columns=columns)


def _leak(step_memory: pd.DataFrame, peaks: pd.DataFrame) -> pd.DataFrame:
    """Per pool: linear fit of allocated memory at step end against the step number, and the leak verdict (with
    the pool's ``baseline_known`` from ``peaks``)."""
    columns = GROUP + ["steps", "first_end_bytes", "last_end_bytes", "growth_per_step_bytes", "r2"]
    columns += ["growing_share", "baseline_known", "leak"]
    rows = []
    pools = zip(peaks["rank"].tolist(), peaks["device"].tolist(), strict=True)
    known = dict(zip(pools, peaks["baseline_known"].tolist(), strict=True))
    rank, device = step_memory["rank"].to_numpy(), step_memory["device"].to_numpy()
    order = np.lexsort((device, rank))  # the pools sorted, each pool's rows in their order
    rank, device = rank[order], device[order]
    step, level = step_memory["step"].to_numpy()[order], step_memory["end_bytes"].to_numpy()[order]
    for lo, hi in _bounds(_firsts(rank, device), len(order)):
        pool = (int(rank[lo]), int(device[lo]))
        fit = _fit(step[lo:hi], level[lo:hi])
        rows.append({"rank": pool[0], "device": pool[1], **fit, "baseline_known": bool(known.get(pool, False))})
    return pd.DataFrame(rows, columns=columns)


def _fit(step: np.ndarray, level: np.ndarray) -> dict:
    """Slope (bytes/step), r², share of steady growth, and whether that makes a leak."""
    fit = {"steps": len(step), "first_end_bytes": int(level[0]), "last_end_bytes": int(level[-1])}
    if len(step) < 2 or np.ptp(level) == 0 or np.ptp(step) == 0:
        return fit | {"growth_per_step_bytes": 0.0, "r2": 0.0, "growing_share": 0.0, "leak": False}
    x, y = step.astype(float), level.astype(float)
    slope = float(np.polyfit(x, y, 1)[0])  # least squares, as scipy.stats.linregress (whose import costs 1.2 s)
    r2 = float(np.corrcoef(x, y)[0, 1] ** 2)
    growing = float(np.mean(np.diff(level) >= 0.5 * slope)) if slope > 0 else 0.0
    leak = (
        len(step) >= LEAK_MIN_STEPS
        and slope >= LEAK_MIN_BYTES_PER_STEP
        and r2 >= LEAK_MIN_R2
        and growing >= LEAK_MIN_GROWING_SHARE
    )
    return fit | {"growth_per_step_bytes": slope, "r2": r2, "growing_share": growing, "leak": bool(leak)}


def _unfreed_blocks(blocks: pd.DataFrame) -> pd.DataFrame:
    """The blocks allocated inside a step and never freed."""
    return blocks[(blocks["free_pos"] == NO_ROW) & (blocks["step"] != NO_ROW)]


def _unfreed_groups(kept: pd.DataFrame) -> pd.DataFrame:
    """Unfreed blocks (with context) grouped by pool, op and annotation path, first seen first."""
    if not len(kept):
        return pd.DataFrame(columns=UNFREED_COLUMNS)
    keys = GROUP + ["op_name", "path"]
    g = Groups([kept[key].array for key in keys])
    group = np.empty(len(kept), dtype=np.int64)  # per block: its group
    group[g.order] = np.repeat(np.arange(len(g)), g.sizes)
    step = kept["step"].to_numpy()
    table = pd.DataFrame(
        {
            **{key: kept[key].array.take(g.first) for key in keys + ["module", "stack"]},
            "blocks": g.sizes,
            "steps": np.bincount(group[Groups([group, step]).first], minlength=len(g)),
            "unfreed_bytes": g.sum(kept["bytes"].to_numpy()),
        }
    )
    table["per_step_bytes"] = table["unfreed_bytes"] / table["steps"]
    return table[UNFREED_COLUMNS]


def _ranked_unfreed(groups: pd.DataFrame) -> pd.DataFrame:
    """Unfreed groups, most bytes first."""
    return groups.sort_values("unfreed_bytes", ascending=False).reset_index(drop=True)
