"""The step model, defined once, and the report's ``summary`` section of it: for each rank and step, the host span,
the device span and the step time.

- **host span**: the step marker (``ProfilerStep#N``) from its start to its end.
- **device span**: from the first to the last device work launched in the step (work launched before the recorded
  window, or outside every step, belongs to no step).
- **step time** (``step_ns``): the step as the device experiences it (what a CUDA event recorded at the top of the
  loop body measures), from where the device reaches the step to where it reaches the next one. Edges are read on
  the rank's **primary stream** (the one with the most compute and copy time: where such events are recorded; a
  side stream's prefetch or a collective's stream does not move them). The device reaches a step at its host start
  (the marker's start: a stall before the first launch, such as loading the batch, is this step's), or later where
  the primary stream is still busy with earlier work (the previous step's work there, or work of no step launched
  before this one): then at that work's end, or at the step's first work there if that comes first. For the first
  recorded step the earlier work may be unrecorded: where none is recorded and its first work waited in the queue
  (``QUEUED_NS`` after its launch call returned), the stream was busy until then. The last step of a rank, and a
  step whose next iteration was not recorded (a profiler schedule that skips steps), ends where its own work on
  the primary stream ends or where its host work ends, whichever is later; its host work runs until its thread's
  next call after the marker begins (the loop's next code, the profiler's exit), else to the marker's end, or to
  the end of the last host event the marker holds where that comes first (a step never extends past what the trace
  recorded).
- **bound**: ``device`` when the device is the limit (its work ends well after the host has finished the step, or
  it is busy nearly all the step), else ``host`` (the device waits for the host to launch work); empty when the run
  recorded no device work at all (a memory snapshot, a CPU-only trace): nothing says which side waited.

- **profiler's figures**: a rank whose compute the trace does not hold (no kernels: torch_npu kept only its
  summaries, step_trace_time.csv and communication.json) but whose profiler wrote its own per-step figures takes
  them (``profiler_steps``): step time msprof's Stage, device busy Stage − Free, idle Free, kernel time Computing,
  communication Communication (``basis`` says so); its marker and device span stay those of its communication ops.

Every share of step time in the product is a share of ``step_ns``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from traceanalyzer.findings import StepTime
from traceanalyzer.jobdata import JobData
from traceanalyzer.memo import per_trace
from traceanalyzer.options import DEFAULT, Options
from traceanalyzer.schema import (
    BUSY,
    CORE_WORK,
    DEVICE,
    HOST_WORK,
    NO_ROW,
    STEP_TRACE,
    Kind,
    TraceMeta,
    category_text,
)
from traceanalyzer.section import Fact, Per, Section, Table, Unit
from traceanalyzer.tracedata import Scope, TraceData

DEVICE_BOUND_LAG = 0.05
"""A step is device-bound when its device work ends more than this share of the step after its marker ends..."""
DEVICE_BOUND_BUSY = 0.9
"""... or its device is busy at least this share of the step."""
QUEUED_NS = 100_000
"""A step's first device work that starts this long after its launch call returned waited for earlier work."""
NOT_RECORDED = ""
"""The bound of a step of a run that recorded no device work."""
BASIS_EVENTS = "events"
BASIS_PROFILER = "profiler's step figures (step_trace_time; no kernels recorded)"
BOUND_UNKNOWN = "not known (no host events)"
"""The bound of a step measured by its profiler's figures alone: without host events, host- or device-bound is not
known."""
UNKNOWN_WITHOUT_EVENTS = ("host_ns", "kernels")
"""Step columns a rank measured by its profiler's figures alone does not know: it recorded no host events (its
host span) and no kernels (their count); left empty rather than taken from its communication ops."""
"""Where a step row's figures come from: the rank's events, or its profiler's own per-step figures."""
PROFILER_FIGURES = (
    "stage_ns", "computing_ns", "communication_ns", "communication_not_overlapped_ns", "overlapped_ns", "free_ns",
)  # fmt: skip
"""The profiler's per-step figures a rank without recorded compute is measured by (msprof's StepTraceTime)."""

STEP_COLUMNS = (
    "rank", "step", "start_ns", "step_ns", "bound", "host_start_ns", "host_ns", "device_start_ns", "device_ns",
    "device_busy_ns", "busy_clipped_ns", "device_idle_ns", "kernels", *(f"{k}_ns" for k in DEVICE), "basis",
)  # fmt: skip
"""``device_busy_ns`` is the busy time inside the step's window ``[start_ns, start_ns + step_ns)``; busy time of the
step's work beyond it (work running past where the next step starts, or a duration far longer than the trace) is
``busy_clipped_ns``, which the ledger sums."""


def step_table(trace: TraceData) -> pd.DataFrame:
    """One row per (rank, step) of the trace's scope, in the columns of ``STEP_COLUMNS`` (times in ns)."""
    table = _whole_run_steps(trace.base)
    if trace.scope.rank is not None:
        table = table[table["rank"] == trace.scope.rank]
    if trace.scope.step is not None:
        table = table[table["step"] == trace.scope.step]
    return table.reset_index(drop=True)


SHOWN_STEP_COLUMNS = (
    "rank", "step", "step_ns", "bound", "host_ns", "device_ns", "device_busy_ns", "device_idle_ns", "kernels",
    "kernel_ns", "communication_ns", "memcpy_ns", "basis",
)  # fmt: skip
"""The step-table columns the report shows (absolute start times stay in ``step_table``)."""


@per_trace
def _whole_run_steps(trace: TraceData) -> pd.DataFrame:
    """The step table of the whole run (a step's period needs the next step)."""
    events = trace.events
    markers = events.loc[
        (events["kind"] == Kind.STEP.value) & (events["step"] != NO_ROW), ["rank", "step", "ts", "dur"]
    ]
    if not len(markers):
        return pd.DataFrame({c: pd.Series(dtype=object if c in _TEXT else "int64") for c in STEP_COLUMNS})
    device = events.loc[
        events["kind"].isin(DEVICE) & (events["step"] != NO_ROW), ["rank", "step", "kind", "ts", "dur", "stream"]
    ]
    markers = markers.assign(end=markers["ts"] + markers["dur"])
    host = markers.groupby(["rank", "step"], sort=True).agg(host_start_ns=("ts", "min"), host_end_ns=("end", "max"))
    table = pd.concat([host.reset_index(), _device_columns(device, host.index)], axis=1)
    primary = _primary_streams(events)
    table = pd.concat([table, _primary_spans(device, host.index, primary)], axis=1)
    table["before_ns"] = _work_before(events, table, primary)
    table["queued_ns"] = _first_queue_delay(events, device, host.index, primary)
    table["held_end_ns"] = _host_work_ends(events, host.index)
    table["next_call_ns"] = _next_calls(events, host.index)
    return _profiled(_periods(table, _busy_work(device, host.index)), profiler_steps(trace))


_TEXT = ("bound", "basis")
"""The step table's text columns."""


@per_trace
def profiler_steps(trace: TraceData) -> pd.DataFrame:
    """Per (rank, step) of the ranks whose events hold no kernels but whose profiler wrote its own per-step figures
    (msprof's step_trace_time.csv / analysis.db): those figures (``PROFILER_FIGURES``, ns), by which the step model,
    the overlap breakdown and device busy measure such a rank; empty when no rank is one."""
    figures = trace.meta.side_table(STEP_TRACE)
    if not len(figures) or not set(PROFILER_FIGURES) <= set(figures.columns):
        return pd.DataFrame(columns=["rank", "step", *PROFILER_FIGURES])
    events = trace.events
    computing = events.loc[events["kind"] == Kind.KERNEL.value, "rank"].unique()
    ranks = set(np.unique(events["rank"].to_numpy()).tolist()) - set(computing.tolist())
    figures = figures[figures["rank"].isin(ranks)]
    complete = (figures[list(PROFILER_FIGURES)] != NO_ROW).all(axis=1)
    return figures.loc[complete, ["rank", "step", *PROFILER_FIGURES]].astype(np.int64).reset_index(drop=True)


def _profiled(table: pd.DataFrame, figures: pd.DataFrame) -> pd.DataFrame:
    """The step rows of ranks measured by their profiler's figures (``profiler_steps``) set from them."""
    table["basis"] = BASIS_EVENTS
    if not len(figures) or not len(table):
        return table
    key = pd.MultiIndex.from_frame(table[["rank", "step"]])
    theirs = figures.set_index(["rank", "step"]).reindex(key)
    use = theirs["stage_ns"].notna().to_numpy()
    theirs = theirs[use].astype(np.int64)
    table.loc[use, "step_ns"] = theirs["stage_ns"].to_numpy()
    table.loc[use, "device_busy_ns"] = (theirs["stage_ns"] - theirs["free_ns"]).to_numpy()
    table.loc[use, "busy_clipped_ns"] = 0
    table.loc[use, "device_idle_ns"] = theirs["free_ns"].to_numpy()
    table.loc[use, "kernel_ns"] = theirs["computing_ns"].to_numpy()
    table.loc[use, "communication_ns"] = theirs["communication_ns"].to_numpy()
    table.loc[use, "basis"] = BASIS_PROFILER
    for column in UNKNOWN_WITHOUT_EVENTS if use.any() else ():  # unknown, not its communication ops' span or count
        table[column] = table[column].astype(float).mask(use)
    table.loc[use, "bound"] = BOUND_UNKNOWN
    return table


def _primary_streams(events: pd.DataFrame) -> pd.Series:
    """Per rank: its primary stream, the one with the most busy time of compute and copies (the compute stream,
    where a loop's CUDA events are recorded; a collective's stream can be busier, waiting for a peer), else of any
    busy work; the rank's step edges are where that stream reaches them."""
    work = events.loc[events["kind"].isin(BUSY), ["rank", "kind", "stream", "dur"]]
    if not len(work):
        return pd.Series(dtype="int64")
    own = work["kind"] != Kind.COMMUNICATION.value
    ranks_with = set(work.loc[own, "rank"].tolist())
    work = work[own | ~work["rank"].isin(ranks_with)]
    totals = work.groupby(["rank", "stream"], observed=True)["dur"].sum().reset_index()
    totals = totals.sort_values(["rank", "dur", "stream"], ascending=[True, False, True], kind="stable")
    return totals.drop_duplicates("rank").set_index("rank")["stream"].astype("int64")


def _on_primary(work: pd.DataFrame, primary: pd.Series) -> pd.DataFrame:
    """The rows of some device work that run on their rank's primary stream."""
    return work[work["stream"].to_numpy() == work["rank"].map(primary).fillna(NO_ROW).to_numpy()]


def _primary_spans(device: pd.DataFrame, steps: pd.MultiIndex, primary: pd.Series) -> pd.DataFrame:
    """Per (rank, step) of ``steps``, in its order: the first start and last end of its busy work on the rank's
    primary stream (NO_ROW where it has none there)."""
    work = _on_primary(device[device["kind"].isin(BUSY)], primary)
    at = _positions(steps, work["rank"].to_numpy(), work["step"].to_numpy())
    ts = work["ts"].to_numpy().astype(np.int64)
    end = ts + work["dur"].to_numpy().astype(np.int64)
    start_ns = _extreme(np.minimum, at, ts, len(steps))
    return pd.DataFrame({"primary_start_ns": start_ns, "primary_end_ns": _extreme(np.maximum, at, end, len(steps))})


def _positions(steps: pd.MultiIndex, rank: np.ndarray, step: np.ndarray) -> np.ndarray:
    """The position in ``steps`` (distinct (rank, step) pairs) of each (rank, step) pair, -1 where it is not one."""
    keys = _pair_keys(steps.get_level_values(0).to_numpy(), steps.get_level_values(1).to_numpy())
    order = np.argsort(keys, kind="stable")
    wanted = _pair_keys(rank, step)
    at = np.minimum(np.searchsorted(keys[order], wanted), max(len(keys) - 1, 0))
    found = keys[order][at] == wanted if len(keys) else np.zeros(len(wanted), dtype=bool)
    return np.where(found, order[at] if len(keys) else 0, -1)


def _pair_keys(rank: np.ndarray, step: np.ndarray) -> np.ndarray:
    """One int64 per (rank, step) pair of 32-bit values."""
    return (np.asarray(rank, dtype=np.int64) << 32) | (np.asarray(step, dtype=np.int64) & 0xFFFFFFFF)


def _extreme(ufunc: np.ufunc, at: np.ndarray, values: np.ndarray, n: int) -> np.ndarray:
    """Per position 0..n-1: ``ufunc`` (minimum, maximum) of the values at it (``at``: -1 is none), NO_ROW where
    none is."""
    mine = at >= 0
    out = np.zeros(n, dtype=np.int64)
    seen = np.bincount(at[mine], minlength=n) > 0
    out[seen] = values[mine][np.unique(at[mine], return_index=True)[1]]  # a first value of each, then the rest
    ufunc.at(out, at[mine], values[mine])
    out[~seen] = NO_ROW
    return out


def _work_before(events: pd.DataFrame, table: pd.DataFrame, primary: pd.Series) -> np.ndarray:
    """Per step of ``table``: the latest end of busy device work of no step on the rank's primary stream that
    started before the step's own first work there (its first device work, or its host start, where it has none
    there): work launched before the window or between steps, queued ahead of the step's, which that stream runs
    first. NO_ROW where there is none."""
    outside = _on_primary(
        events.loc[events["kind"].isin(BUSY) & (events["step"] == NO_ROW), ["rank", "ts", "dur", "stream"]], primary
    )
    out = np.full(len(table), NO_ROW, dtype=np.int64)
    for rank, work in outside.groupby("rank", observed=True):
        work = work.sort_values("ts", kind="stable")
        reach = np.maximum.accumulate((work["ts"] + work["dur"]).to_numpy())
        mine = (table["rank"] == rank).to_numpy()
        own = table.loc[mine, "primary_start_ns"].to_numpy()
        own = np.where(own != NO_ROW, own, table.loc[mine, "device_start_ns"].to_numpy())
        first = np.where(own != NO_ROW, own, table.loc[mine, "host_start_ns"].to_numpy())
        at = np.searchsorted(work["ts"].to_numpy(), first, side="left")
        out[mine] = np.where(at > 0, reach[np.maximum(at - 1, 0)], NO_ROW)
    return out


def _first_queue_delay(
    events: pd.DataFrame, device: pd.DataFrame, steps: pd.MultiIndex, primary: pd.Series
) -> np.ndarray:
    """Per (rank, step) of ``steps``: how long its first busy work on the rank's primary stream waited after its
    launch call returned (that stream was still busy with earlier work), 0 where it has no work there or no
    recorded launch."""
    busy = _on_primary(device[device["kind"].isin(BUSY)], primary)
    first = busy.loc[busy.groupby(["rank", "step"], observed=True)["ts"].idxmin()]
    launch = events["launch"].reindex(first.index).to_numpy()
    calls = events[["ts", "dur"]].reindex(launch)
    launched = (calls["ts"] + calls["dur"]).to_numpy(dtype="float64")
    delay = pd.Series(np.where(launch != NO_ROW, first["ts"].to_numpy() - launched, 0), dtype="float64")
    where = _positions(steps, first["rank"].to_numpy(), first["step"].to_numpy())
    out = np.zeros(len(steps), dtype=np.int64)
    out[where] = np.nan_to_num(delay.to_numpy(), nan=0.0).clip(min=0).astype(np.int64)
    return out


def _host_work_ends(events: pd.DataFrame, steps: pd.MultiIndex) -> np.ndarray:
    """Per (rank, step) of ``steps``: where its last host work (an op, frame, annotation or runtime call, not the
    marker) ends, NO_ROW where the marker holds none."""
    held = events.loc[
        events["kind"].isin(HOST_WORK) & (events["step"] != NO_ROW),
        ["rank", "step", "ts", "dur"],
    ]
    at = _positions(steps, held["rank"].to_numpy(), held["step"].to_numpy())
    return _extreme(np.maximum, at, (held["ts"] + held["dur"]).to_numpy().astype(np.int64), len(steps))


def _next_calls(events: pd.DataFrame, steps: pd.MultiIndex) -> np.ndarray:
    """Per (rank, step) of ``steps``: where the first host event of its marker's thread that starts at or after the
    marker's end begins (what the loop runs after the step: the next iteration, the profiler's exit), NO_ROW where
    the trace holds none."""
    host = events["kind"].isin(HOST_WORK)
    marker = (events["kind"] == Kind.STEP.value) & (events["step"] != NO_ROW)
    out = np.full(len(steps), NO_ROW, dtype=np.int64)
    pid, tid = (np.asarray(events[c].array.codes, dtype=np.int64) for c in ("pid", "tid"))
    lanes = (pid + 1) * (int(tid.max(initial=0)) + 2) + tid + 1
    for lane in np.unique(lanes[marker.to_numpy()]):
        on = (lanes == lane) & host.to_numpy()
        starts = np.sort(events["ts"].to_numpy()[on])
        rows = events[marker.to_numpy() & (lanes == lane)]
        ends = (rows["ts"] + rows["dur"]).to_numpy()
        at = np.searchsorted(starts, ends, side="left")
        where = _positions(steps, rows["rank"].to_numpy(), rows["step"].to_numpy())
        found = (at < len(starts)) & (where >= 0)
        out[where[found]] = starts[at[found]]
    return out


def _device_columns(device: pd.DataFrame, steps: pd.MultiIndex) -> pd.DataFrame:
    """Per (rank, step) of ``steps``, in its order: the device span and busy time of its busy work, its kernels
    (compute and collectives) and its device time per kind; NO_ROW spans and zeros where it has no device work (its
    busy time not yet clipped to the step's window: ``_periods`` does)."""
    group, kind, _, dur = _mine(device, steps)
    kinds = category_text(device["kind"]).tolist()
    n = len(steps)
    busy_group, start, end = _busy_work(device, steps)
    by_kind = np.zeros((n, len(kinds)), dtype=np.int64)
    np.add.at(by_kind, (group, np.asarray(kind, dtype=np.int64)), dur)
    out = {
        "device_start_ns": _extreme(np.minimum, busy_group, start, n),
        "device_end_ns": _extreme(np.maximum, busy_group, end, n),
        "device_busy_ns": _busy_per_group(busy_group, start, end, n),
        "kernels": np.bincount(group[np.isin(kinds, CORE_WORK)[kind]], minlength=n),
    }
    out |= {f"{k}_ns": by_kind[:, kinds.index(k)] if k in kinds else np.zeros(n, dtype=np.int64) for k in DEVICE}
    return pd.DataFrame(out).astype(np.int64)


def _mine(device: pd.DataFrame, steps: pd.MultiIndex) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The device rows of a (rank, step) of ``steps``: each one's position in ``steps``, kind code, start and
    duration (ns)."""
    group = _positions(steps, device["rank"].to_numpy(), device["step"].to_numpy())
    mine = group >= 0  # not a (rank, step) without a marker
    return group[mine], device["kind"].array.codes[mine], device["ts"].to_numpy()[mine], device["dur"].to_numpy()[mine]


def _busy_work(device: pd.DataFrame, steps: pd.MultiIndex) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The busy device work of the steps: each interval's position in ``steps``, its start and its end (ns)."""
    group, kind, ts, dur = _mine(device, steps)
    busy = np.isin(category_text(device["kind"]), BUSY)[kind]
    return group[busy], ts[busy], ts[busy] + dur[busy]


def _busy_per_group(group: np.ndarray, ts: np.ndarray, end: np.ndarray, groups: int) -> np.ndarray:
    """The length of the union of each group's intervals [ts, end), in one sort (groups 0..groups-1)."""
    order = np.lexsort((ts, group))
    group, ts, end = group[order], ts[order], end[order]
    reach = pd.Series(end).groupby(group).cummax().to_numpy()
    first = np.ones(len(ts), dtype=bool)
    first[1:] = (group[1:] != group[:-1]) | (ts[1:] > reach[:-1])  # a new merged interval starts here
    last = np.ones(len(ts), dtype=bool)
    last[:-1] = first[1:]
    length = np.zeros(groups, dtype=np.int64)
    np.add.at(length, group[first], reach[last] - ts[first])
    return length


def _periods(table: pd.DataFrame, busy: tuple[np.ndarray, np.ndarray, np.ndarray]) -> pd.DataFrame:
    """Step start, step time and bound from the host and device spans (see the module's contract), and the busy
    time of the steps' ``busy`` work (``_busy_work``) clipped to each step's window."""
    has_device = table["device_start_ns"] != NO_ROW
    start = _starts(table, has_device)
    follows = _consecutive(table, 1)  # the next iteration was recorded too
    nxt = _neighbour(table, start, 1)
    end = np.where(follows & (nxt > start), nxt, _own_ends(table, has_device))
    table["start_ns"] = start.astype(np.int64)
    table["step_ns"] = (end - start).astype(np.int64)
    table["host_ns"] = table["host_end_ns"] - table["host_start_ns"]
    table["device_ns"] = np.where(has_device, table["device_end_ns"] - table["device_start_ns"], 0)
    inside = _busy_inside(busy, start, end, len(table))
    table["busy_clipped_ns"] = table["device_busy_ns"] - inside
    table["device_busy_ns"] = inside
    table["device_idle_ns"] = np.maximum(table["step_ns"] - table["device_busy_ns"], 0)
    lag = np.where(has_device, table["device_end_ns"] - table["host_end_ns"], 0)
    busy_share = table["device_busy_ns"] / table["step_ns"].clip(lower=1)
    device_bound = (lag > DEVICE_BOUND_LAG * table["step_ns"]) | (busy_share >= DEVICE_BOUND_BUSY)
    table["bound"] = np.where(has_device & device_bound, "device", "host") if has_device.any() else NOT_RECORDED
    columns = [c for c in STEP_COLUMNS if c != "basis"]
    return table[columns].astype({c: "int64" for c in columns if c not in _TEXT})


def _busy_inside(busy: tuple[np.ndarray, np.ndarray, np.ndarray], start, end, groups: int) -> np.ndarray:
    """Per step: the length of the union of its busy intervals within its window ``[start, end)`` (ns)."""
    group, ts, stop = busy
    ts = np.maximum(ts, np.asarray(start, dtype=np.int64)[group])
    stop = np.minimum(stop, np.asarray(end, dtype=np.int64)[group])
    kept = stop > ts
    return _busy_per_group(group[kept], ts[kept], stop[kept], groups)


def _neighbour(table: pd.DataFrame, values, offset: int) -> np.ndarray:
    """Each row's value ``offset`` rows on (1: the next row, -1: the previous) in the table's rank and step order,
    NO_ROW where that row is of another rank or there is none; integers throughout (a pandas shift goes through
    float64, which at epoch ns loses up to 256 ns)."""
    values, rank = np.asarray(values, dtype=np.int64), table["rank"].to_numpy()
    out = np.full(len(values), NO_ROW, dtype=np.int64)
    k = abs(offset)
    if k >= len(values):
        return out
    same = rank[k:] == rank[:-k]
    if offset > 0:
        out[:-k][same] = values[k:][same]
    else:
        out[k:][same] = values[:-k][same]
    return out


def _consecutive(table: pd.DataFrame, offset: int) -> np.ndarray:
    """Per row: is the row ``offset`` rows on (1: the next, -1: the previous) in the table's rank and step order of
    the same rank and ``offset`` steps on (that iteration was recorded too)?"""
    step, rank = table["step"].to_numpy().astype(np.int64), table["rank"].to_numpy()
    out = np.zeros(len(step), dtype=bool)
    k = abs(offset)
    if k >= len(step):
        return out
    same = (rank[k:] == rank[:-k]) & (step[k:] - step[:-k] == k)
    if offset > 0:
        out[:-k] = same
    else:
        out[k:] = same
    return out


def _lead(table: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Per step: the first start and last end of the device work that sets its edges: its work on the rank's
    primary stream, or all its device work where it has none there."""
    on = (table["primary_start_ns"] != NO_ROW).to_numpy()
    start = np.where(on, table["primary_start_ns"], table["device_start_ns"])
    return start, np.where(on, table["primary_end_ns"], table["device_end_ns"])


def _starts(table: pd.DataFrame, has_device: pd.Series) -> np.ndarray:
    """Where the device reaches each step: its host start, or the end of earlier work its primary stream is still
    busy with (recorded earlier work first; else, where its first work there waited, that work's start)."""
    first, last = _lead(table)
    earlier = _consecutive(table, -1)
    previous_end = _neighbour(table, last, -1)
    before = table["before_ns"].to_numpy()
    queued = table["queued_ns"].to_numpy() > QUEUED_NS  # the first work waited for earlier work, maybe unrecorded
    ready = np.where(earlier, previous_end, np.where(before != NO_ROW, before, np.where(queued, first, NO_ROW)))
    reached = np.maximum(table["host_start_ns"].to_numpy(), np.maximum(ready, before))
    return np.where(has_device, np.minimum(first, reached), table["host_start_ns"])


def _own_ends(table: pd.DataFrame, has_device: pd.Series) -> np.ndarray:
    """Where each step's own work ends: its device work (on the primary stream) or its host work: up to its
    thread's next call after the marker, else the marker's end or the last host event it holds, if earlier."""
    held = table["held_end_ns"].to_numpy()
    host_end = np.where(held != NO_ROW, np.minimum(table["host_end_ns"], held), table["host_end_ns"])
    nxt = table["next_call_ns"].to_numpy()
    host_end = np.where(nxt != NO_ROW, np.maximum(host_end, nxt), host_end)
    return np.maximum(host_end, np.where(has_device, _lead(table)[1], 0))


def compute_steps(table: pd.DataFrame) -> int:
    """The (rank, step) pairs of a step table whose kernels were recorded (``with_compute``)."""
    return len(with_compute(table))


def with_compute(table: pd.DataFrame) -> pd.DataFrame:
    """The rows of a step table whose kernels were recorded (what a kernel's time or count per step is averaged
    over: a rank measured by its profiler's figures, or loaded from its communication alone, ran kernels the trace
    does not hold); every row when none recorded kernels."""
    recorded = table[(table["basis"] == BASIS_EVENTS) & (table["kernel_ns"] > 0)] if len(table) else table
    return recorded if len(recorded) else table


def job_compute_step_time(job: JobData) -> StepTime:
    """``step_time`` of a job analysed rank by rank over the steps whose kernels were recorded (``with_compute``):
    what kernel findings weigh by."""
    return _step_time(with_compute(job_step_table(job)), job.meta, None)


def step_spans(trace: TraceData) -> pd.DataFrame:
    """Per (rank, step): the step's span on the device's time line, ``[start_ns, end_ns)``."""
    table = step_table(trace)
    return pd.DataFrame(
        {
            "rank": table["rank"],
            "step": table["step"],
            "start_ns": table["start_ns"],
            "end_ns": table["start_ns"] + table["step_ns"],
        }
    )


def step_time(trace: TraceData, rank: int | None = None) -> StepTime:
    """The total step time of one rank (or all) and how many steps it covers; without step markers, the recorded
    window of each rank, counted as one step each."""
    return _step_time(step_table(trace), trace.meta, rank)


def job_step_time(job: JobData, rank: int | None = None, whole: bool = False) -> StepTime:
    """``step_time`` of a job analysed rank by rank (``whole``: of its whole run, also when it was analysed for
    one step)."""
    return _step_time(job_step_table(job, whole), job.meta, rank)


def _step_time(table: pd.DataFrame, meta: TraceMeta, rank: int | None) -> StepTime:
    """The total step time of one rank (or all) in a step table, or its recorded window without steps."""
    if rank is not None:
        table = table[table["rank"] == rank]
    if len(table):
        return StepTime(int(table["step_ns"].sum()), len(table), int(table["step_ns"].median()))
    ranks = 1 if rank is not None else max(len(meta.ranks), 1)
    return StepTime(int(meta.span_ns) * ranks, ranks)


def outside_steps(trace: TraceData) -> pd.DataFrame:
    """Per rank: device work that belongs to no step (launched before the first recorded step, after the last, or
    between steps): how many events and how much device time (ns)."""
    ev = trace.events
    work = ev.loc[ev["kind"].isin(BUSY) & (ev["step"] == NO_ROW), ["rank", "dur"]]
    table = work.groupby("rank", observed=True)["dur"].agg(["size", "sum"]).reset_index()
    table.columns = ["rank", "events", "device_ns"]
    return table


def kind_totals(events: pd.DataFrame) -> pd.DataFrame:
    """Per device kind: events and summed durations (ns), the additive half of the summary's time_by_kind table."""
    picked = events[events["kind"].isin(DEVICE)]
    table = picked.groupby("kind", observed=True)["dur"].agg(["size", "sum"]).reset_index()
    table.columns = ["kind", "count", "total_ns"]
    table["kind"] = table["kind"].astype(str)
    return table


def _added_kinds(totals: list[pd.DataFrame]) -> pd.DataFrame:
    """``kind_totals`` of several parts added up per kind (by kind)."""
    return pd.concat(totals, ignore_index=True).groupby("kind", sort=True)[["count", "total_ns"]].sum().reset_index()


def _shares_by_kind(totals: list[pd.DataFrame]) -> pd.DataFrame:
    """``kind_totals`` of several parts added up, with each kind's share, largest first (ties by kind)."""
    table = _added_kinds(totals)
    table["device_share"] = table["total_ns"] / max(int(table["total_ns"].sum()), 1)
    return table.sort_values("total_ns", ascending=False, kind="stable").reset_index(drop=True)


@dataclass(frozen=True)
class StepsPart:
    """A rank's part (or a job's, merged): its step table (``STEP_COLUMNS``), its device time per kind
    (``kind_totals``), and its whole run's step table (the same as ``steps`` unless the scope is a step or a rank)."""

    steps: pd.DataFrame
    by_kind: pd.DataFrame
    whole: pd.DataFrame


def rank_part(trace: TraceData, options: Options = DEFAULT) -> StepsPart:
    """A rank's part: its step table and its device time per kind (and its whole run's step table)."""
    table = step_table(trace)
    return StepsPart(table, kind_totals(trace.events), step_table(trace.base) if _narrowed(trace.scope) else table)


def merge(parts: list[StepsPart], job: JobData) -> StepsPart:
    """The job's steps: the ranks' step tables one after another (each rank is in one part), kinds' totals added."""
    steps, whole = (pd.concat([getattr(p, key) for p in parts], ignore_index=True) for key in ("steps", "whole"))
    return StepsPart(steps, _added_kinds([p.by_kind for p in parts]), whole)


def _narrowed(scope: Scope) -> bool:
    """Whether a scope is narrower than the whole run (a step or a rank), so the whole run's steps are kept too."""
    return scope.step is not None or scope.rank is not None


def job_step_table(job: JobData, whole: bool = False) -> pd.DataFrame:
    """``step_table`` of a job analysed rank by rank (of the analyzers that need ``steps``): the ranks' step tables
    one after another (``whole``: of their whole runs, also when analysed for one step)."""
    merged: StepsPart = job.merged("summary")
    return merged.whole if whole else merged.steps


def job_section(part: StepsPart, job: JobData, options: Options) -> Section:
    """The summary of a job's merged part: step time (device-experienced), how steps are bound, device busy, and
    time by device kind."""
    return _section(part.steps, _shares_by_kind([part.by_kind]))


def _section(table: pd.DataFrame, by_kind: pd.DataFrame) -> Section:
    """The summary section from a step table and the device time by kind."""
    kernels = by_kind[by_kind["kind"].isin(CORE_WORK)]
    comm = int(kernels.loc[kernels["kind"] == Kind.COMMUNICATION.value, "total_ns"].sum())
    device = _recorded(table)  # without device work the device figures are unknown, not zero
    facts = [
        Fact("steps", "steps analysed", int(table["step"].nunique()) if len(table) else 0, Unit.COUNT),
        Fact("step_ns", "step time (median, device-experienced)", _median(table, "step_ns"), Unit.NS, Per.STEP),
        Fact("host_step_ns", "host step span (median, ProfilerStep)", _median(table, "host_ns"), Unit.NS, Per.STEP),
        Fact("bound", "steps bound by", _bound(table)),
        Fact("device_busy_ns", "device busy (median)", _median(device, "device_busy_ns"), Unit.NS, Per.STEP),
        Fact("device_busy_share", "device busy share of step time", _busy_share(device), Unit.SHARE),
        Fact(
            "kernel_ns",
            "kernel time (median, incl. communication)",
            _median(device, "kernel_ns", "communication_ns"),
            Unit.NS,
            Per.STEP,
        ),
        Fact("kernels", "kernels (median)", _median(device, "kernels"), Unit.COUNT, Per.STEP),
        Fact(
            "communication_share",
            "communication share of kernel time",
            comm / int(kernels["total_ns"].sum()) if int(kernels["total_ns"].sum()) else None,
            Unit.SHARE,
        ),
    ]
    return Section(
        "summary",
        "Summary",
        facts=facts,
        tables=[
            Table("steps", "Steps (per rank)", table[list(SHOWN_STEP_COLUMNS)], Per.STEP),
            Table("time_by_kind", "Device time by kind", by_kind, Per.TOTAL),
        ],
    )


def _median(table: pd.DataFrame, col: str, extra: str | None = None) -> float | None:
    if not len(table):
        return None
    values = table[col] + (table[extra] if extra else 0)
    return float(values.median())


def _recorded(table: pd.DataFrame) -> pd.DataFrame:
    """The steps, or none when the run recorded no device work."""
    return table[table["bound"] != NOT_RECORDED]


def _bound(table: pd.DataFrame) -> str:
    if not len(table):
        return "– (no step markers)"
    if (table["bound"] == NOT_RECORDED).all():
        return "– (no device work recorded)"
    counts = table["bound"].value_counts()
    return ", ".join(f"{bound} ({n} of {len(table)} steps)" for bound, n in counts.items())


def _busy_share(table: pd.DataFrame) -> float | None:
    return (
        float(table["device_busy_ns"].sum() / table["step_ns"].sum()) if len(table) and table["step_ns"].sum() else None
    )
