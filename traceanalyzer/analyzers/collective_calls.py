"""Collective calls: one row per communication call on each rank, matched across ranks.

Calls are matched by process group and sequence number within the group (order on the device), with a
small shift search where a rank's window cut a call off; an HCCL op without a recorded group takes it from its
name (``hcom_allReduce__170_1_1``: the last three digits of the group's hash, then the op's index in the group).
Clock offsets between ranks come only from the ends of matched calls that finish together everywhere
(all-reduce, all-gather, ...: not a broadcast, whose root may finish before the others start) and of matched
send/recv pairs; an estimate under which a matched send/recv pair no longer overlaps (one side ends before the other
started) is rejected. Offsets are applied here, never written back into the event table. Wait is the part of a call
beyond the shortest duration across ranks (time spent waiting for peers); transfer is the time data moves: from the
HCCL task lanes where the trace records them (``hccl``), else that shortest duration.

Two stages, so that a job analysed rank by rank gives what its joined trace gives: ``rank_calls`` makes each call's
row from its own rank's events alone (a worker runs it on its rank), and ``cross_rank`` matches the rows of all
ranks and derives what needs them together; ``calls`` of a joined trace is the one over the other. What a late rank
did while its peers waited (``late_arrivals``) is asked of its ``RankActivity``, which keeps what any such window
can need (``rank_activity``).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable

import numpy as np
import pandas as pd

from traceanalyzer import intervals
from traceanalyzer.analyzers import callpath, hccl, pipeline
from traceanalyzer.classify import collective_from_name
from traceanalyzer.devices import link_gbps
from traceanalyzer.schema import DEVICE_WORK, HCCL_LINKS, HOST_WORK, NO_ROW, Kind, TraceMeta
from traceanalyzer.tables import stack
from traceanalyzer.tracedata import TraceData
from traceanalyzer.vocabulary import DATA_LOADING

BUS_FACTORS = {
    "allreduce": lambda n: 2 * (n - 1) / n,
    "allgather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "alltoall": lambda n: (n - 1) / n,
}
"""NCCL-tests bus-bandwidth factors by collective (others, e.g. broadcast and send/recv, use 1)."""

OPTIMIZER_OP = re.compile(r"^Optimizer\.step")
"""The optimizer's step annotation: collectives inside it are in the optimizer phase."""
BACKWARD_OP = re.compile(r"^autograd::engine::evaluate_function")
"""Autograd engine ops: collectives launched inside them, or between the first and last, are in backward."""
DTYPE_IN_NAME = re.compile(
    r"_(bf16|f16|f32|f64|f8e4m3|f8e5m2|i8|u8|i32|u32|i64|u64|half|float|double|bfloat16|int8_t|uint8_t|int32_t|"
    r"int64_t|uint64_t)(?=[_(]|$)"
)
GENERIC_P2P = ("", "send_recv", "send", "recv")
"""Collective names that may stand for a bigger collective built from point-to-point transfers."""
ALL_TO_ALL = re.compile(r"all2all", re.I)
COLLECTIVE_IN_OPS = re.compile(r"all_?to_?all|all_?gather|reduce_?scatter|all_?reduce|broadcast", re.I)
"""Enclosing op names that say which collective a generic send/recv kernel implements (c10d::alltoall_base_)."""

_ID_SPAN = 1 << 32
"""Match ids of one group lie within ±_ID_SPAN of their own base, so groups never collide."""

ENDS_TOGETHER = frozenset({"allreduce", "allgather", "reduce_scatter", "alltoall", "barrier"})
"""Collectives in which every rank receives from every other, so they end together on all ranks; a broadcast's root
can finish before its peers have even started, so it does not say how the clocks differ. Matched send/recv pairs
(``pipeline.is_p2p``) end together too: the transfer finishes on both sides."""
HCCL_OP = re.compile(r"^hcom_[A-Za-z]+__(\d+)_\d+_\d+$")
"""An HCCL op name: ``hcom_<op>__<last 3 digits of the group hash>_<index in the group>_<n>``."""

WAIT_TASK = re.compile(r"Notify[_ ]?Wait", re.I)
"""Tasks inside a collective that wait for peers (HCCL Notify_Wait; Notify Wait on the device stream)."""

LATE_MIN_NS = 100_000
"""A call whose peers waited less than this is not worth naming a late rank for."""
LATE_EXPLAINED = 50
"""How many of the costliest late arrivals get their cause looked up."""

CALL_COLUMNS = [
    "rank", "step", "group", "seq", "collective", "p2p", "name", "dtype", "bytes", "group_size", "phase",
    "start_ns", "dur_ns", "exposed_ns", "compute_beside_ns", "task_wait_ns", "match", "ranks_matched", "transfer_ns",
    "transfer_basis", "wait_ns", "arrival_skew_ns", "aligned_start_ns", "late_rank", "algbw_gbps", "busbw_gbps",
    "link_bytes", "link_transfer_ns", "link_bw_gbps", "link_gbps", "row",
]  # fmt: skip
RANK_COLUMNS = [
    "rank", "step", "group", "seq", "collective", "p2p", "name", "dtype", "bytes", "phase", "start_ns", "dur_ns",
    "exposed_ns", "compute_beside_ns", "task_wait_ns", "row", *(f"task_{c}" for c in hccl.COLUMNS),
]  # fmt: skip
"""The columns of the per-rank stage (``rank_calls``): a call's row on its rank, before matching."""
TEXT_COLUMNS = ("group", "collective", "name", "dtype", "phase", "task_transfer_basis")
"""The per-rank stage's text columns."""


def calls(trace) -> pd.DataFrame:
    """One row per communication call per rank, with exposure, phase and (when matched) wait and transfer."""
    tasks = bool((trace.events["kind"] == Kind.COMM_TASK.value).any())
    return cross_rank(rank_calls(trace), trace.meta, tasks)


def rank_calls(trace) -> pd.DataFrame:
    """The per-rank stage: one row per communication call, in (rank, group, start) order, from each rank's own
    events: times, exposure, phase, group and its sequence in it, bytes, and what its HCCL tasks say (peer waits,
    transfer time, link bytes and time), else what msprof's communication.json says of its links (NaN where the
    rank records neither)."""
    ev = trace.events
    comm = ev[ev["kind"] == Kind.COMMUNICATION.value]
    if not len(comm):
        return pd.DataFrame(columns=RANK_COLUMNS)
    table = _base(trace, comm)
    tasks = hccl.task_times(trace.events, table)
    msprof = hccl.msprof_times(table, trace.meta.side_table(HCCL_LINKS))
    untasked = tasks["transfer_ns"].isna()
    for column in hccl.COLUMNS:
        table[f"task_{column}"] = tasks[column].where(~untasked, msprof[column])
    return table[RANK_COLUMNS]


def packed(table: pd.DataFrame) -> pd.DataFrame:
    """Per-rank rows as a rank's part carries them: the text columns as categories (each name once)."""
    return table.astype({c: "category" for c in TEXT_COLUMNS})


def unpacked(tables: list[pd.DataFrame]) -> pd.DataFrame:
    """The per-rank rows of a job's ranks (``packed``, in rank order) as ``rank_calls`` gives them on the joined
    trace."""
    return stack(tables).astype({c: str for c in TEXT_COLUMNS})


def cross_rank(table: pd.DataFrame, meta: TraceMeta, tasks: bool) -> pd.DataFrame:
    """The cross-rank stage over the per-rank rows of every rank of a job (``rank_calls``, ranks in order): calls
    matched across ranks, clock offsets applied, wait, transfer, late rank and bandwidth (``meta``: the job's process
    groups, world size and devices; ``tasks``: whether any rank records HCCL tasks, so a call without waiting tasks
    waited 0 ns in them)."""
    if not len(table):
        return pd.DataFrame(columns=CALL_COLUMNS)
    table = table.reset_index(drop=True)
    if tasks:
        table["task_wait_ns"] = table["task_wait_ns"].fillna(0.0)
    table = _match(table)
    table = _cross_rank(table, clock_offsets_of(table))
    table = _task_transfer(table)
    return _bandwidth(table, meta)[CALL_COLUMNS]


def _base(trace, comm: pd.DataFrame) -> pd.DataFrame:
    """The per-rank rows of the communication events ``comm`` before their HCCL task columns, in (rank, group,
    start) order: group, collective, phase, times, bytes, compute beside, peer-waiting tasks, exposure, sequence."""
    names = comm["name"].astype(str)
    collectives = _collectives(trace.events, comm)
    table = pd.DataFrame(
        {
            "rank": comm["rank"].to_numpy(),
            "step": comm["step"].to_numpy(),
            "group": _groups(comm["group"].astype(str), names),
            "collective": collectives,
            "p2p": pipeline.p2p_rows(trace.events, comm, collectives),
            "name": names.to_numpy(),
            "dtype": names.str.extract(DTYPE_IN_NAME, expand=False).fillna("").to_numpy(),
            "bytes": comm["bytes"].to_numpy(),
            "phase": phases(trace, comm),
            "start_ns": comm["ts"].to_numpy(),
            "dur_ns": comm["dur"].to_numpy(),
            "row": comm.index.to_numpy(),
        }
    )
    table["compute_beside_ns"] = _covered(trace.events, table, trace.events["kind"] == Kind.KERNEL.value)
    table["task_wait_ns"] = _task_wait(trace.events, table)
    table["exposed_ns"] = table["dur_ns"] - table["compute_beside_ns"]
    table = table.sort_values(["rank", "group", "start_ns"], kind="stable").reset_index(drop=True)
    table["seq"] = table.groupby(["rank", "group"]).cumcount()
    return table


def _groups(groups: pd.Series, names: pd.Series) -> np.ndarray:
    """The process group of each call; an HCCL op without one takes the group its name encodes."""
    encoded = names.str.extract(HCCL_OP, expand=False)
    fallback = "hccl group *" + encoded
    return groups.where((groups != "") | encoded.isna(), fallback).to_numpy()


def _collectives(events: pd.DataFrame, comm: pd.DataFrame) -> np.ndarray:
    """The collective of each call in canonical spelling (``_allgather_base`` → allgather); a generic send/recv
    kernel takes the collective its enclosing op names."""
    out = np.array([collective_from_name(c) or c for c in comm["collective"].astype(str)], dtype=object)
    generic = np.isin(out, GENERIC_P2P) & (comm["top_op"] != NO_ROW).to_numpy()
    top_names = events["name"].reindex(comm["top_op"].to_numpy()[generic]).astype(str).to_numpy()
    implied = np.array([_collective_in_op(n) for n in top_names], dtype=object)
    picked = out[generic]
    picked[implied != ""] = implied[implied != ""]
    out[generic] = picked
    return out


def _collective_in_op(name: str) -> str:
    """The collective an enclosing op's name says it implements (``c10d::alltoall_base_`` → alltoall); '' if none."""
    spelled = ALL_TO_ALL.sub("alltoall", name)
    return collective_from_name(spelled) if COLLECTIVE_IN_OPS.search(spelled) else ""


def _covered(events: pd.DataFrame, table: pd.DataFrame, selected: pd.Series) -> np.ndarray:
    """For each call, how much of it the selected events of the same rank cover."""
    out = np.zeros(len(table), dtype=np.int64)
    picked = events[selected]
    for rank, idx in table.groupby("rank").indices.items():
        mine = picked[picked["rank"] == rank]
        busy = intervals.union(mine["ts"].to_numpy(), (mine["ts"] + mine["dur"]).to_numpy())
        start = table["start_ns"].to_numpy()[idx]
        out[idx] = intervals.covered_within(busy, start, start + table["dur_ns"].to_numpy()[idx])
    return out


def _task_wait(events: pd.DataFrame, table: pd.DataFrame) -> np.ndarray:
    """Time inside each call spent in its peer-waiting tasks (Ascend Notify_Wait); NaN where tasks are not recorded."""
    tasks = events["kind"] == Kind.COMM_TASK.value
    if not tasks.any():
        return np.full(len(table), np.nan)
    waits = tasks & name_matches(events, WAIT_TASK)
    return _covered(events, table, waits).astype(float)


def phases(trace: TraceData, rows: pd.DataFrame) -> np.ndarray:
    """Phase of device rows (forward, backward, after_backward, optimizer) from what launched them: the innermost
    optimizer step or autograd op around the launch (``callpath``), else where the launch falls against its step's
    backward window; '' if unknown."""
    events = trace.events
    is_optimizer = name_matches(events, OPTIMIZER_OP)
    is_backward = name_matches(events, BACKWARD_OP)
    launch = rows["launch"].to_numpy()
    inside = callpath.walk(trace).innermost(is_optimizer | is_backward)[launch]
    phase = np.where(is_optimizer[inside], "optimizer", "backward")
    phase = np.where(inside == NO_ROW, _phase_by_time(events, launch, is_backward), phase)
    return np.where(launch != NO_ROW, phase, "").astype(object)


def name_matches(events: pd.DataFrame, pattern: re.Pattern) -> np.ndarray:
    """Per row: does the event name match (searched once per distinct name)?"""
    names = events["name"].cat.categories
    hit = np.fromiter((bool(pattern.search(str(n))) for n in names), bool, len(names))
    codes = events["name"].cat.codes.to_numpy()
    return hit[codes] & (codes >= 0)


def _phase_by_time(events: pd.DataFrame, launch: np.ndarray, is_backward: np.ndarray) -> np.ndarray:
    """Per launch row: forward before its (rank, step)'s first autograd op (or without one), backward until the
    last one ends, after_backward from then on."""
    step = events["step"].to_numpy().astype(np.int64)
    key = events["rank"].to_numpy().astype(np.int64) * (int(step.max(initial=0)) + 2) + step + 1  # one per (rank, step)
    ts, dur = events["ts"].to_numpy().astype(np.int64), events["dur"].to_numpy().astype(np.int64)
    bwd = np.flatnonzero(is_backward)
    spans, slot = np.unique(key[bwd], return_inverse=True)
    none = np.iinfo(np.int64).max  # the window of a (rank, step) without autograd ops: all forward
    start, end = np.full(len(spans) + 1, none), np.full(len(spans) + 1, np.iinfo(np.int64).min)
    np.minimum.at(start, slot, ts[bwd])
    np.maximum.at(end, slot, ts[bwd] + dur[bwd])
    end[-1] = none
    at = np.maximum(launch, 0)
    pos = np.minimum(np.searchsorted(spans, key[at]), len(spans))
    window = np.where(np.append(spans, 0)[pos] == key[at], pos, len(spans))
    ts = ts[at]
    return np.where(ts < start[window], "forward", np.where(ts >= end[window], "after_backward", "backward"))


def _match(table: pd.DataFrame) -> pd.DataFrame:
    """Give calls that are the same collective on several ranks a common ``match`` id (-1 if unmatched)."""
    table["match"] = NO_ROW
    for number, (_group, calls_in_group) in enumerate(table.groupby("group", sort=False)):
        per_rank = {r: g for r, g in calls_in_group.groupby("rank")}
        if len(per_rank) < 2:
            continue
        ref_rank = max(per_rank, key=lambda r: (len(per_rank[r]), -r))
        ref_sig = _signature(per_rank[ref_rank])
        for frame in per_rank.values():
            shift = _best_shift(ref_sig, _signature(frame))
            table.loc[frame.index, "match"] = (2 * number + 1) * _ID_SPAN + frame["seq"].to_numpy() + shift
    counts = table.loc[table["match"] != NO_ROW].groupby("match")["rank"].transform("nunique")
    table["ranks_matched"] = 1
    table.loc[counts.index, "ranks_matched"] = counts
    table.loc[table["ranks_matched"] < 2, "match"] = NO_ROW
    return table


def _signature(frame: pd.DataFrame) -> np.ndarray:
    """What a call looks like on every rank: its collective (a send matches its recv) and size."""
    collective = frame["collective"].astype(str).where(~pipeline.is_p2p(frame), "p2p")
    return (collective + ":" + frame["bytes"].astype(str)).to_numpy()


def _best_shift(ref: np.ndarray, other: np.ndarray) -> int:
    """Offset k such that other[i] is ref[i + k] for the most i (nearest to 0 on ties)."""
    slack = abs(len(ref) - len(other)) + 2
    best, best_score = 0, -1
    for k in sorted(range(-slack, slack + 1), key=abs):
        lo, hi = max(0, -k), min(len(other), len(ref) - k)
        score = int((other[lo:hi] == ref[lo + k : hi + k]).sum()) if hi > lo else 0
        if score > best_score:
            best, best_score = k, score
    return best


def clock_offsets_of(table: pd.DataFrame) -> pd.DataFrame:
    """Per rank: clock offset against the lowest rank (ns, to subtract), its spread, how many calls it rests on and
    how it was found: from the ends of matched calls that end together (collectives and send/recv pairs), else from
    the send/recv pairs alone, taking the first estimate that keeps every matched send/recv pair overlapping."""
    ranks = sorted(table["rank"].unique())
    matched = table[table["match"] != NO_ROW]
    p2p = pipeline.is_p2p(matched)
    pairs = matched[p2p]
    candidates = (matched[matched["collective"].isin(ENDS_TOGETHER).to_numpy() | p2p], pairs)
    rejected = ""
    for rows in candidates:
        if not len(rows):
            continue
        estimate = _offsets_from_ends(rows, ranks)
        if _keeps_order(pairs, estimate):
            estimate["method"] = np.where(estimate["calls"] > 0, _method(rows) + rejected, "none")
            return estimate
        rejected = " (the estimate from all calls was rejected: it put a send/recv pair out of order)"
    return pd.DataFrame(
        {"rank": ranks, "offset_ns": 0, "spread_ns": 0, "calls": 0, "method": "none" + rejected}
    ).astype({"offset_ns": np.int64, "spread_ns": np.int64, "calls": np.int64})


def _offsets_from_ends(rows: pd.DataFrame, ranks: list) -> pd.DataFrame:
    """Per rank: the median of its calls' end against the median end of each call across ranks, and its spread."""
    end = rows["start_ns"] + rows["dur_ns"]
    residual = end - end.groupby(rows["match"]).transform("median")
    by_rank = residual.groupby(rows["rank"])
    offset = by_rank.median().reindex(ranks)
    offset = (offset - offset.iloc[0]).fillna(0) if not np.isnan(offset.iloc[0]) else offset.fillna(0)
    spread = (residual - rows["rank"].map(by_rank.median())).abs().groupby(rows["rank"]).median()
    return pd.DataFrame(
        {
            "rank": ranks,
            "offset_ns": offset.round().astype(np.int64).to_numpy(),
            "spread_ns": spread.reindex(ranks).fillna(0).round().astype(np.int64).to_numpy(),
            "calls": by_rank.size().reindex(ranks).fillna(0).astype(np.int64).to_numpy(),
        }
    )


def _keeps_order(pairs: pd.DataFrame, offsets: pd.DataFrame) -> bool:
    """Whether, after alignment, the two sides of every matched send/recv pair overlap (no side ends before the
    other started: a recv cannot complete before its send began)."""
    if not len(pairs):
        return True
    start = pairs["start_ns"] - pairs["rank"].map(offsets.set_index("rank")["offset_ns"]).fillna(0)
    end = start + pairs["dur_ns"]
    return bool((start.groupby(pairs["match"]).max() <= end.groupby(pairs["match"]).min()).all())


def _method(rows: pd.DataFrame) -> str:
    """How an offset estimate was found: which kinds of calls it rests on."""
    p2p = pipeline.is_p2p(rows)
    if p2p.all():
        return "send/recv ends"
    return "collective and send/recv ends" if p2p.any() else "collective ends"


def _cross_rank(table: pd.DataFrame, offsets: pd.DataFrame) -> pd.DataFrame:
    """The matched calls with the clock ``offsets`` applied: aligned start, transfer (the shortest across ranks),
    wait beyond it, arrival skew against the last rank in, and which rank that was (NaN / NO_ROW if unmatched)."""
    shift = table["rank"].map(offsets.set_index("rank")["offset_ns"]).fillna(0).astype(np.int64)
    aligned = table["start_ns"] - shift
    matched = table["match"] != NO_ROW
    g = table[matched].groupby("match")
    table["transfer_ns"] = np.nan
    table["wait_ns"] = np.nan
    table["arrival_skew_ns"] = np.nan
    table["late_rank"] = NO_ROW
    table.loc[matched, "transfer_ns"] = g["dur_ns"].transform("min")
    table.loc[matched, "wait_ns"] = table.loc[matched, "dur_ns"] - table.loc[matched, "transfer_ns"]
    last = aligned[matched].groupby(table.loc[matched, "match"]).transform("max")
    table.loc[matched, "arrival_skew_ns"] = last - aligned[matched]
    late = aligned[matched].groupby(table.loc[matched, "match"]).idxmax()
    table.loc[matched, "late_rank"] = table.loc[matched, "match"].map(
        table.loc[late.to_numpy(), "rank"].set_axis(late.index)
    )
    table["aligned_start_ns"] = aligned
    return table


def _task_transfer(table: pd.DataFrame) -> pd.DataFrame:
    """Transfer time, link bytes and per-link bandwidth from the HCCL task lanes, where the trace records them."""
    known = table["task_transfer_ns"].notna()
    table["transfer_basis"] = np.where(table["match"] != NO_ROW, "shortest across ranks", "")
    table.loc[known, "transfer_ns"] = table.loc[known, "task_transfer_ns"]
    table.loc[known, "transfer_basis"] = table.loc[known, "task_transfer_basis"]
    table["link_bytes"] = table["task_link_bytes"]
    table["link_transfer_ns"] = table["task_link_transfer_ns"]
    transfer = table["link_transfer_ns"]
    table["link_bw_gbps"] = table["link_bytes"] / transfer.where(transfer > 0)
    return table


def _bandwidth(table: pd.DataFrame, meta: TraceMeta) -> pd.DataFrame:
    """The calls with their group size (from ``meta``'s process groups, else the ranks matched or the world size),
    algorithm and bus bandwidth (GB/s, NaN without bytes or time) and the devices' nominal link bandwidth."""
    sizes = {str(pg.get("pg_name")): int(pg.get("pg_size") or 0) for pg in meta.process_groups}
    n = table["group"].map(sizes).fillna(0).astype(int)
    n = n.where(n > 0, np.maximum(table["ranks_matched"], meta.world_size))
    table["group_size"] = n
    total = table["bytes"].where(table["bytes"] != NO_ROW).astype(float)
    total = total.where(table["collective"] != "allgather", total * n)
    duration = table["transfer_ns"].fillna(table["dur_ns"]).astype(float)
    table["algbw_gbps"] = total / duration.where(duration > 0)
    factor = [BUS_FACTORS.get(c, lambda k: 1.0)(max(k, 1)) for c, k in zip(table["collective"], n, strict=True)]
    table["busbw_gbps"] = table["algbw_gbps"] * np.asarray(factor, dtype=float)
    table["link_gbps"] = link_gbps(meta)
    return table


NOT_RECORDED = "not_recorded"
"""The cause of a late arrival on a rank whose compute and host work are not in the trace."""
LATE_COLUMNS = [
    "match", "step", "collective", "group", "late_rank", "caused_wait_ns", "window_ns", "late_compute_ns", "cause",
    "detail", "late_start_ns",
]  # fmt: skip


def late_arrivals(table: pd.DataFrame, activity: Callable[[int], RankActivity]) -> pd.DataFrame:
    """The costliest matched calls of a job's calls table that peers waited for: who arrived last, and what it did
    meanwhile (``activity(rank)``: that rank's ``RankActivity``). Send/recv and collectives across pipeline stages are
    left out: waiting there is the pipeline bubble (``pipeline``)."""
    scheduled = pipeline.is_p2p(table) | pipeline.cross_stage(table, pipeline.peer_pairs(table))
    matched = table[(table["match"] != NO_ROW).to_numpy() & (table["late_rank"] != NO_ROW).to_numpy() & ~scheduled]
    if not len(matched):
        return pd.DataFrame(columns=LATE_COLUMNS)
    g = matched.groupby("match")
    late = matched[matched["rank"] == matched["late_rank"]].drop_duplicates("match").set_index("match")
    frame = pd.DataFrame(
        {
            "step": late["step"],
            "collective": late["collective"],
            "group": late["group"],
            "late_rank": late["late_rank"],
            "caused_wait_ns": g["wait_ns"].max().reindex(late.index),
            "first_aligned": g["aligned_start_ns"].min().reindex(late.index),
            "late_start": late["start_ns"],
            "late_aligned": late["aligned_start_ns"],
        }
    )
    frame = frame[frame["caused_wait_ns"] >= LATE_MIN_NS].nlargest(LATE_EXPLAINED, "caused_wait_ns")
    frame["window_ns"] = frame["late_aligned"] - frame["first_aligned"]
    ranks = {int(r): activity(int(r)) for r in frame["late_rank"].unique()}
    causes = [
        ranks[int(row.late_rank)].cause(int(row.late_start) - int(row.window_ns), int(row.late_start))
        for row in frame.itertuples()
    ]
    frame["late_compute_ns"] = [c[0] for c in causes]
    frame["cause"] = [c[1] for c in causes]
    frame["detail"] = [c[2] for c in causes]
    frame["late_start_ns"] = frame["late_start"]  # on the late rank's own time base: where its window ends
    return frame.reset_index()[LATE_COLUMNS]


def rank_activity(events: pd.DataFrame, calls: pd.DataFrame) -> RankActivity:
    """What one rank did, from its events and its rows of a calls table (per-rank or matched): enough to explain
    any window that ends where one of its calls that can be a late arrival (not a send/recv) starts."""
    starts = np.sort(calls.loc[~pipeline.is_p2p(calls), "start_ns"].to_numpy(dtype=np.int64))
    device = events["kind"].isin(DEVICE_WORK).to_numpy()
    ts, dur = events["ts"].to_numpy()[device], events["dur"].to_numpy()[device]
    busy = intervals.union(ts, ts + dur)
    host = events.loc[events["kind"].isin(HOST_WORK).to_numpy(), _HOST_RANGE]  # not every column: big's took 50 MiB
    recorded = bool(device.any() or len(host))
    busy = intervals.clip(busy, np.iinfo(np.int64).min, int(starts[-1])) if len(starts) else intervals.EMPTY
    return RankActivity(busy, host_ranges(host[_pickable(host, busy, starts)]), recorded)


def _pickable(host: pd.DataFrame, busy: intervals.Intervals, starts: np.ndarray) -> np.ndarray:
    """Per host range: can ``RankActivity.dominant_host_range`` pick it in a window [s, e) that ends at one of the
    call starts (sorted)? A range must cover at least 1 ns and half the window's device idle time. So it holds a call
    start (ts < e <= end), or the device idle time from its end to the next call start (which such a window holds) is
    at most twice its duration; no other range can ever be picked."""
    ts = host["ts"].to_numpy()
    dur = host["dur"].to_numpy()
    at = np.searchsorted(starts, ts, side="right")
    following = at < len(starts)
    after = starts[np.minimum(at, max(len(starts) - 1, 0))] if len(starts) else ts
    end = ts + dur
    idle = after - end - intervals.covered_within(busy, end, after)
    return following & (dur >= 1) & (2 * dur >= idle)


_HOST_RANGE = ["ts", "dur", "kind", "depth", "name"]
"""The event columns ``host_ranges`` reads."""


def host_ranges(host: pd.DataFrame) -> pd.DataFrame:
    """Host rows as a ``RankActivity`` holds them, in event order: what picking one reads (start, duration, whether
    it is a Python frame, depth, name)."""
    return pd.DataFrame(
        {
            "ts": host["ts"].to_numpy(),
            "dur": host["dur"].to_numpy(),
            "python": (host["kind"] == Kind.PYTHON.value).to_numpy(),
            "depth": host["depth"].to_numpy(),
            "name": host["name"].cat.remove_unused_categories().array,
        }
    )


class RankActivity:
    """One rank's device busy time and the host ranges that can explain a window ending at one of its calls (see
    ``rank_activity``), to say what it did during such a window. The busy intervals are held packed
    (``intervals.pack``) and unpacked once, when a window is first asked about (only a late rank is asked); a pickle
    carries the packed form alone."""

    def __init__(self, busy: intervals.Intervals, host: pd.DataFrame, recorded: bool) -> None:
        """Hold ``busy`` packed, the pickable ``host`` ranges (``host_ranges``) and whether the rank's work (device
        or host) is in the trace at all."""
        self.packed = intervals.pack(*busy)
        self.host = host
        self.recorded = recorded

    def __getstate__(self) -> dict:
        """What a pickle carries: the packed busy intervals, never their unpacked form."""
        return {k: v for k, v in self.__dict__.items() if k != "busy"}

    @functools.cached_property
    def busy(self) -> intervals.Intervals:
        """The device busy intervals (kernels, copies, sets) up to the rank's last call start."""
        return self.packed.unpacked()

    def cause(self, start: int, end: int) -> tuple[int, str, str]:
        """Device busy time in [start, end), the cause (compute, data_loading, host, idle; not_recorded for a rank of
        which only communication was loaded) and the host range."""
        if not self.recorded:
            return 0, NOT_RECORDED, ""
        compute = intervals.length(intervals.clip(self.busy, start, end))
        detail = self.dominant_host_range(start, end, (end - start - compute) / 2)
        if compute >= (end - start) / 2:
            return compute, "compute", detail
        if DATA_LOADING.search(detail):
            return compute, "data_loading", detail
        return compute, ("host" if detail else "idle"), detail

    def dominant_host_range(self, start: int, end: int, at_least: float) -> str:
        """The most specific host range covering at least ``at_least`` ns of [start, end); ops over Python frames."""
        ts = self.host["ts"].to_numpy()
        covered = np.minimum(ts + self.host["dur"].to_numpy(), end) - np.maximum(ts, start)
        picked = self.host[covered >= max(at_least, 1)]
        if not len(picked):
            return ""
        named = picked[~picked["python"]]
        best = (named if len(named) else picked).sort_values("depth").iloc[-1]
        return str(best["name"])
