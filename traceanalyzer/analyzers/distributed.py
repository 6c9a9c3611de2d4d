"""Communication/compute overlap per rank and step, collective calls across ranks, stragglers, and their findings.

Overlap breakdown, per rank and step. The step span is the step model's (``analyzers.summary``): from the start
of the step's device work to the start of the next step's (the whole device span when there are no steps), so
device work outside every step is in no span. Over the step span, with C = union of compute kernels,
M = union of communication, and X = union of memory copies and sets:

* ``compute_only`` = |C \\ M|, ``comm_hidden`` = |C ∩ M|, ``comm_exposed`` = |M \\ C|,
* ``memory_exposed`` = |X \\ (C ∪ M)|, ``idle`` = span − |C ∪ M ∪ X|; the five sum to the span.
* ``hidden_comm_share`` = |C ∩ M| / |M| (HTA's overlap %); ``comm_exposed`` is TraceLens's exposed communication
  and msprof's Communication(Not Overlapped).
* Beside the parts: ``preparing`` = first compute or communication − step start, and ``device_free`` = the gaps
  of C ∪ M between its first start and last end (msprof's Preparing and Free).
* A rank the step model measures by its profiler's figures (``summary.profiler_steps``: no kernels recorded) takes
  its parts from them: compute only = Computing − Overlapped, hidden = Overlapped, exposed = Communication(Not
  Overlapped), idle = Free (the rest of the Stage: msprof's figures miss it by its µs rounding), over the Stage;
  ``basis`` says so.

A job analysed rank by rank gives the same section and findings from its ranks' parts (``rank_part``): each rank's
overlap rows and collective calls on their own (``collective_calls.rank_calls``) and what it did
(``collective_calls.RankActivity``); matching, offsets, waits, late arrivals and the pipeline bubble are then
computed over all ranks' rows by the same code as for the joined trace (``JobView`` is what either path gathers).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from traceanalyzer import devices, humanize, intervals
from traceanalyzer.analyzers import attribution, collective_calls, pipeline, summary
from traceanalyzer.analyzers.advice import DATA_LOADING_ADVICE
from traceanalyzer.analyzers.summary import step_spans, step_time
from traceanalyzer.findings import Basis, Finding, StepTime, make
from traceanalyzer.jobdata import JobData
from traceanalyzer.memo import per_trace, remember
from traceanalyzer.options import DEFAULT, Options
from traceanalyzer.schema import MEMORY_OPS, NO_ROW, Kind
from traceanalyzer.section import Fact, Per, Section, Table, Unit
from traceanalyzer.tracedata import Scope, TraceData

PARTS = ("compute_only", "comm_hidden", "comm_exposed", "memory_exposed", "idle")
"""The exclusive parts of a step span, in priority order."""

LANES = {
    "Computing": "lane_computing_ns",
    "Communication": "lane_communication_ns",
    "Communication(Not Overlapped)": "lane_comm_not_overlapped_ns",
    "Free": "lane_free_ns",
}
"""Ascend ``Overlap Analysis`` lanes (the trace's own breakdown) and the columns they are reported in."""

_COMPUTE = (Kind.KERNEL.value,)
_COMM = (Kind.COMMUNICATION.value,)
_READ = ("rank", "ts", "dur", "kind", "name")
"""The event-table columns the overlap breakdown reads."""


@per_trace
def overlap(trace: TraceData) -> pd.DataFrame:
    """Per rank and step: compute only, hidden and exposed communication, exposed copies, idle (ns and shares)."""
    return overlap_of(overlap_rows(trace))


def overlap_rows(trace: TraceData) -> list[dict]:
    """The overlap breakdown of each rank and step of the trace's scope, as rows before their shares (a rank's rows
    alone are its share of the job's: ``overlap_of`` of the ranks' rows in rank order is the job's table)."""
    spans = step_spans(trace)
    rows = window_rows(trace, lambda events, rank: _windows(events, spans, rank))
    return _profiled(rows, summary.profiler_steps(trace))


def _profiled(rows: list[dict], figures: pd.DataFrame) -> list[dict]:
    """The breakdown rows, those of ranks measured by their profiler's per-step figures set from them."""
    theirs = {(int(f.rank), int(f.step)): f for f in figures.itertuples(index=False)}
    for row in rows:
        f = theirs.get((row["rank"], row["step"]))
        row["basis"] = summary.BASIS_EVENTS if f is None else summary.BASIS_PROFILER
        if f is not None:
            idle = max(f.stage_ns - f.computing_ns - f.communication_not_overlapped_ns, 0)  # Free, to msprof's rounding
            parts = (f.computing_ns - f.overlapped_ns, f.overlapped_ns, f.communication_not_overlapped_ns, 0, idle)
            row.update({f"{name}_ns": int(v) for name, v in zip(PARTS, parts, strict=True)})
            row.update(span_ns=int(f.stage_ns), compute_ns=int(f.computing_ns), comm_ns=int(f.communication_ns))
            row.update(device_free_ns=int(f.free_ns))
    return rows


def overlap_of(rows: list[dict]) -> pd.DataFrame:
    """The overlap table of breakdown rows (``overlap_rows``), with each part's share of the span."""
    return _with_shares(pd.DataFrame(rows))


def window_overlap(trace: TraceData, windows) -> pd.DataFrame:
    """The breakdown of the windows ``windows(device_events, rank)`` gives (``window_rows``), as a table."""
    return pd.DataFrame(window_rows(trace, windows))


def window_rows(trace: TraceData, windows) -> list[dict]:
    """The one overlap computation: per (rank, step, start, end) that ``windows(device_events, rank)`` gives, the
    breakdown of the window's device time (compute, communication hidden and exposed, copies, idle; first and last
    device work) and the trace's own overlap lanes summed over it (ns); ranks in order."""
    rows = []
    ev = trace.events
    device = ev.loc[ev["kind"].isin((*_COMPUTE, *_COMM, *MEMORY_OPS, Kind.OVERLAP_LANE.value)), list(_READ)]
    by_rank = dict(list(device.groupby("rank", sort=True)))
    for rank in np.unique(ev["rank"].to_numpy()):
        events = by_rank.get(rank, device.iloc[:0])
        sets = {name: _union(events, kinds) for name, kinds in (("c", _COMPUTE), ("m", _COMM), ("x", MEMORY_OPS))}
        lanes = events[events["kind"] == Kind.OVERLAP_LANE.value]
        for step, start, end in windows(events, rank):
            row = {"rank": int(rank), "step": step, "start_ns": start, "span_ns": end - start}
            row.update(_breakdown(sets, start, end))
            row.update(_lanes(lanes, start, end))
            rows.append(row)
    return rows


def _union(events: pd.DataFrame, kinds: tuple[str, ...]) -> intervals.Intervals:
    """The union of the intervals of the events of these kinds."""
    rows = events[events["kind"].isin(kinds)]
    return intervals.union(rows["ts"].to_numpy(), (rows["ts"] + rows["dur"]).to_numpy())


def _windows(events: pd.DataFrame, spans: pd.DataFrame, rank: int) -> list[tuple[int, int, int]]:
    """(step, start, end) of each step span of one rank; without steps, the whole device span."""
    spans = spans[spans["rank"] == rank]
    if not len(spans):
        device = events[events["kind"].isin((*_COMPUTE, *_COMM, *MEMORY_OPS))]
        if not len(device):
            return []
        return [(NO_ROW, int(device["ts"].min()), int((device["ts"] + device["dur"]).max()))]
    return [(int(r.step), int(r.start_ns), int(r.end_ns)) for r in spans.itertuples(index=False)]


def _breakdown(sets: dict, start: int, end: int) -> dict:
    """The breakdown of [start, end) from the rank's compute, communication and copy unions (``sets`` c, m, x):
    the exclusive parts (ns), compute and communication time, preparing, the work span and the device free time."""
    c, m, x = (intervals.clip(sets[k], start, end) for k in ("c", "m", "x"))
    compute, comm = intervals.length(c), intervals.length(m)
    hidden = intervals.overlap_length(c, m)
    work = _merged(c, m)
    c_or_m = intervals.length(work)
    busy = intervals.length(_merged(work, x))
    parts = (compute - hidden, hidden, comm - hidden, busy - c_or_m, end - start - busy)
    out = {f"{name}_ns": int(v) for name, v in zip(PARTS, parts, strict=True)}
    first, last = (int(work[0][0]), int(work[1][-1])) if len(work[0]) else (end, end)
    out.update(
        {
            "compute_ns": compute,
            "comm_ns": comm,
            "preparing_ns": first - start,
            "work_span_ns": last - first,
            "device_free_ns": last - first - c_or_m,
        }
    )
    return out


def _merged(a: intervals.Intervals, b: intervals.Intervals) -> intervals.Intervals:
    """The union of two interval sets."""
    return intervals.union(np.concatenate((a[0], b[0])), np.concatenate((a[1], b[1])))


def _lanes(lanes: pd.DataFrame, start: int, end: int) -> dict:
    """The trace's own overlap lanes summed over the window (Ascend); nothing when the trace has none."""
    if not len(lanes):
        return {}
    names = lanes["name"].astype(str)
    out = {}
    for lane, column in LANES.items():
        mine = lanes[names == lane]
        ts = mine["ts"].to_numpy()
        out[column] = int(np.clip(np.minimum(ts + mine["dur"].to_numpy(), end) - np.maximum(ts, start), 0, None).sum())
    return out


def _with_shares(table: pd.DataFrame) -> pd.DataFrame:
    """The breakdown table with each part's share of the span and the share of communication hidden (NaN where
    the span or the communication is 0); an empty table with the breakdown's columns when there are no rows."""
    if not len(table):
        return pd.DataFrame(columns=["rank", "step", "start_ns", "span_ns", *[f"{p}_ns" for p in PARTS]])
    span = table["span_ns"].where(table["span_ns"] > 0)
    for part in PARTS:
        table[f"{part}_share"] = table[f"{part}_ns"] / span
    table["hidden_comm_share"] = table["comm_hidden_ns"] / table["comm_ns"].where(table["comm_ns"] > 0)
    return table


@dataclass
class JobView:
    """A job seen in a scope: what the section and the findings read, gathered from a joined trace
    (``_view_of_trace``) or from the parts of a job analysed rank by rank (``merge``): the scope, the job's
    calls matched across ranks, the overlap tables of the scope and of the whole job, the job's late arrivals, the
    nominal link bandwidth, whether several ranks have events, the ranks whose compute is in the scope, and each
    rank's step time in the scope and in the whole job."""

    scope: Scope
    job_calls: pd.DataFrame
    overlap: Callable[[], pd.DataFrame]
    job_overlap: Callable[[], pd.DataFrame]
    job_late: Callable[[], pd.DataFrame]
    link_gbps: float
    several_ranks: bool
    computing: set[int]
    step_time: Callable[[int], StepTime]
    job_step_time: Callable[[int], StepTime]
    activity: Callable[[int], collective_calls.RankActivity]


def _trace_view(trace: TraceData) -> JobView:
    """The ``JobView`` of a (scoped) trace, gathered once per trace view."""
    return remember(trace, "distributed.view", lambda: _view_of_trace(trace))


def _view_of_trace(trace: TraceData) -> JobView:
    """The ``JobView`` of a trace's scope, its job being its base: the joined path."""
    base = trace.base
    return JobView(
        scope=trace.scope,
        job_calls=_job_calls(base),
        overlap=lambda: overlap(trace),
        job_overlap=lambda: overlap(base),
        job_late=lambda: _job_late(base),
        link_gbps=devices.link_gbps(trace.meta),
        several_ranks=base.events["rank"].nunique() > 1,
        computing=attribution.computing_ranks(trace),
        step_time=lambda rank: step_time(trace, rank),
        job_step_time=lambda rank: step_time(base, rank),
        activity=lambda rank: _activity(base, rank),
    )


@per_trace
def _job_calls(trace: TraceData) -> pd.DataFrame:
    """The calls of a whole trace, matched across its ranks (computed once per trace)."""
    return collective_calls.calls(trace)


@per_trace
def _job_late(trace: TraceData) -> pd.DataFrame:
    """The job's late arrivals (each asks what the late rank was doing: computed once per trace)."""
    return collective_calls.late_arrivals(_job_calls(trace), lambda rank: _activity(trace, rank))


def _activity(trace: TraceData, rank: int) -> collective_calls.RankActivity:
    """What one rank of a whole trace did (``RankActivity``), computed once per trace and rank."""
    return remember(trace, f"distributed.activity.{rank}", lambda: _rank_activity(trace, rank))


def _rank_activity(trace: TraceData, rank: int) -> collective_calls.RankActivity:
    events, calls = trace.events, _job_calls(trace)
    return collective_calls.rank_activity(events[events["rank"] == rank], calls[calls["rank"] == rank])


@dataclass(frozen=True)
class DistributedPart:
    """The part of a rank (or of a joined trace's ranks): its collective calls on their own (the per-rank stage, of
    the whole run, as matching needs every call; ``collective_calls.packed``), its overlap rows of the scope and of
    the whole run (the same rows unless the scope is a step), what each rank did (``RankActivity``: its device busy
    union and the host ranges a late arrival's window can pick), the ranks with events and with compute in the
    scope, and whether it has HCCL tasks."""

    calls: pd.DataFrame
    overlap: list[dict]
    job_overlap: list[dict]
    activity: dict[int, collective_calls.RankActivity]
    with_events: set[int]
    tasks: bool
    computing: set[int]


def rank_part(trace: TraceData, options: Options = DEFAULT) -> DistributedPart:
    """The part of a rank (or of a joined trace's ranks)."""
    base = trace.base
    calls = collective_calls.rank_calls(base)
    rows = overlap_rows(trace)
    kinds = base.events["kind"]
    ranks = base.events["rank"]
    return DistributedPart(
        calls=collective_calls.packed(calls),
        overlap=rows,
        job_overlap=overlap_rows(base) if trace.scope.step is not None else rows,
        activity={
            int(rank): collective_calls.rank_activity(_events_of(base.events, rank), calls[calls["rank"] == rank])
            for rank in base.meta.ranks
        },
        with_events={int(r) for r in ranks.unique()},
        tasks=bool((kinds == Kind.COMM_TASK.value).any()),
        computing=attribution.computing_ranks(trace),
    )


def _events_of(events: pd.DataFrame, rank: int) -> pd.DataFrame:
    """The events of one rank: the table itself when it holds that rank alone (a copy of big's took 24 MiB)."""
    mine = events["rank"].to_numpy() == rank
    return events if mine.all() else events[mine]


def merge(parts: list[DistributedPart], job: JobData) -> JobView:
    """The analyzer's merge rule: the ``JobView`` of a job from its ranks' parts: the per-rank call rows through the
    same cross-rank stage, the overlap rows put together, each late rank's activity from its part."""
    rows = collective_calls.unpacked([p.calls for p in parts])
    job_calls = collective_calls.cross_rank(rows, job.meta, any(p.tasks for p in parts))
    activity = {rank: activity for p in parts for rank, activity in p.activity.items()}
    whole = [p.job_overlap for p in parts]
    return JobView(
        scope=job.scope,
        job_calls=job_calls,
        overlap=functools.cache(lambda: overlap_of([row for p in parts for row in p.overlap])),
        job_overlap=functools.cache(lambda: overlap_of([row for rank_rows in whole for row in rank_rows])),
        job_late=functools.cache(lambda: collective_calls.late_arrivals(job_calls, activity.__getitem__)),
        link_gbps=devices.link_gbps(job.meta),
        several_ranks=len(set().union(*(p.with_events for p in parts))) > 1,
        computing=set().union(*(p.computing for p in parts)),
        step_time=lambda rank: summary.job_step_time(job, rank),
        job_step_time=lambda rank: summary.job_step_time(job, rank, whole=True),
        activity=activity.__getitem__,
    )


def collectives(trace: TraceData) -> pd.DataFrame:
    """One row per collective call per rank of the scope: exposure, phase, and across ranks (matched over the whole
    job, so a scoped view keeps its waits and transfers) wait, transfer, late rank, bandwidth."""
    return _collectives(_trace_view(trace))


def _collectives(view: JobView) -> pd.DataFrame:
    """The job's matched calls of the view's scope (its rank, its step)."""
    calls = view.job_calls
    if view.scope.rank is not None:
        calls = calls[calls["rank"] == view.scope.rank]
    if view.scope.step is not None:
        calls = calls[calls["step"] == view.scope.step]
    return calls


def clock_offsets(trace: TraceData) -> pd.DataFrame:
    """Per rank of the job: estimated clock offset against the lowest rank (ns), its spread, the calls it rests on."""
    return collective_calls.clock_offsets_of(_trace_view(trace).job_calls)


def late_arrivals(trace: TraceData) -> pd.DataFrame:
    """Calls that peers waited for: the last-arriving rank, the wait it caused, and what it was doing (of the job;
    in a view of one rank, the calls that rank was late for)."""
    return _late_arrivals(_trace_view(trace))


def _late_arrivals(view: JobView) -> pd.DataFrame:
    """The job's late arrivals in the view's scope: those its rank (if any) was late for, in its step (if any)."""
    late = view.job_late()
    if view.scope.rank is not None and len(late):
        late = late[late["late_rank"] == view.scope.rank]
    if view.scope.step is not None and len(late) and "step" in late:
        late = late[late["step"] == view.scope.step]
    return late


def _per_rank(view: JobView) -> pd.DataFrame:
    """Per rank of the scope: the overlap breakdown summed, the share of communication hidden, its calls and the
    time they waited for peers (an empty table without overlap rows)."""
    table = view.overlap()
    if not len(table):
        return pd.DataFrame()
    sums = table.groupby("rank")[["span_ns", "compute_ns", "comm_ns", *[f"{p}_ns" for p in PARTS]]].sum()
    sums["hidden_comm_share"] = sums["comm_hidden_ns"] / sums["comm_ns"].where(sums["comm_ns"] > 0)
    calls = _collectives(view)
    sums["calls"] = calls.groupby("rank").size().reindex(sums.index).fillna(0).astype(int)
    sums["wait_ns"] = calls.groupby("rank")["wait_ns"].sum(min_count=1).reindex(sums.index)
    return sums.reset_index()


SMALL_MESSAGE_BYTES = 1 << 20
"""Collectives below this size are latency-bound."""
SMALL_MESSAGES_PER_STEP = 50
"""More small collectives than this per step are worth coalescing."""
LARGE_MESSAGE_BYTES = 16 << 20
"""Only collectives at least this large are judged for bandwidth."""
LOW_BUS_SHARE = 0.3
"""Bus bandwidth below this fraction of the link's nominal bandwidth is low."""
REACHABLE_BUS_SHARE = 0.8
"""The fraction of nominal link bandwidth a large collective can reach (the basis of the saving estimate)."""
LATE_RANK_MIN_SHARE = 0.05
"""A rank is called the late rank only when its peers wait for it at least this share of their step time."""
MIN_COST_SHARE = 0.01
"""Findings worth less than this fraction of step time are not reported."""
GRADIENT_PHASES = ("backward", "after_backward")
PREFETCH_PHASES = ("forward", "backward")
ANALYZER = "distributed"

_ADVICE_AFTER_BACKWARD = (
    "These all-reduces start only after backward has finished, so no compute is left to hide them. Use "
    "DistributedDataParallel (its bucketed all-reduce runs while backward still computes) or all-reduce from "
    "gradient hooks in buckets; if this is DDP under no_sync(), only the accumulation micro-steps belong under "
    "no_sync(), not the last one."
)
_ADVICE_IN_BACKWARD = (
    "The last gradient buckets finish after backward compute ends. Lower DDP bucket_cap_mb (default 25) so buckets "
    "start earlier, set gradient_as_bucket_view=True, and keep find_unused_parameters=False (static_graph=True if "
    "the graph does not change)."
)
_ADVICE_PREFETCH = (
    "Parameter all-gathers wait in the open instead of running ahead of the layer that needs them. FSDP: "
    "forward_prefetch=True and backward_prefetch=BackwardPrefetch.BACKWARD_PRE (FSDP2: "
    "set_modules_to_forward_prefetch / set_modules_to_backward_prefetch), and keep limit_all_gathers on."
)
_ADVICE_SMALL = (
    "Each collective pays a fixed launch and latency cost whatever its size. Coalesce small tensors into one "
    "buffer (DDP buckets do this; otherwise flatten them, e.g. torch._utils._flatten_dense_tensors, and all-reduce "
    "once), or raise the bucket size."
)
_ADVICE_BANDWIDTH = (
    "Large collectives move data well below what the link can carry. Check the NCCL algorithm/protocol "
    "(NCCL_DEBUG=INFO; the kernel name shows e.g. RING_LL), that NVLink/NVLS is used (not PCIe or sockets), "
    "and that the collective is not sharing the link with other traffic."
)
_ADVICE_EXPOSED = (
    "These collectives run while the device has no compute to hide them under. Issue them earlier and wait later "
    "(async_op=True, or a separate stream, waiting only where the result is needed), overlap them with independent "
    "compute (FSDP backward_prefetch / forward_prefetch, MoE all-to-all overlapped with expert compute), or send "
    "fewer, larger messages."
)
_ADVICE_ABSENT = (
    "The collectives wait for a peer after every rank in the trace arrived (their own waiting tasks, such as HCCL "
    "Notify Wait): a rank whose trace was not loaded, or a peer whose device was still busy. Load the traces of "
    "every rank of the group (their folder) to see which rank is late and why; the wait goes when it arrives with "
    "the others."
)
_ADVICE_LATE = {
    "compute": "It has more device work before the collective than its peers: balance the work per rank "
    "(uneven batch or sequence lengths, uneven pipeline or expert partitions) or check that GPU for throttling.",
    "data_loading": "It is loading data while the others wait: " + DATA_LOADING_ADVICE,
    "host": "It is busy on the host in '{detail}' while the others wait: take that work out of the training loop, "
    "make it asynchronous, or run it on every rank at the same point.",
    "idle": "Its device is idle and no host range explains it (maybe outside the traced window): profile that "
    "rank with with_stack=True.",
}


def job_findings(view: JobView, job: JobData) -> list[Finding]:
    """Of a job's merged part: exposed gradient all-reduce, exposed all-gathers, a straggler rank, the pipeline
    bubble, many small messages, low bandwidth."""
    return _findings(view)


def _findings(view: JobView) -> list[Finding]:
    """The findings of the view, in their fixed order, those worth at least ``MIN_COST_SHARE`` of step time."""
    calls = _collectives(view)
    if not len(calls):
        return []
    found = [
        _exposed(view, calls, "allreduce", GRADIENT_PHASES),
        _exposed(view, calls, "allgather", PREFETCH_PHASES),
        _exposed_rest(view, calls),
        _straggler(view),
        _waiting_for_absent(view, calls),
        pipeline.finding_of(_pipeline_bubble(view), calls, view.computing, view.step_time),
        _small_messages(view, calls),
        _low_bandwidth(view, calls),
    ]
    return [f for f in found if f is not None and f.step_share >= MIN_COST_SHARE]


def _exposed_transfer(calls: pd.DataFrame) -> pd.Series:
    """Exposed time of each call beyond what it spent waiting for peers (across ranks, or in its waiting tasks)."""
    wait = np.fmax(calls["wait_ns"].to_numpy(dtype=float), calls["task_wait_ns"].to_numpy(dtype=float))
    return (calls["exposed_ns"] - np.nan_to_num(wait)).clip(lower=0)


def _exposed(view: JobView, calls: pd.DataFrame, collective: str, phases: tuple[str, ...]) -> Finding | None:
    """The exposed ``collective`` of these phases on the rank where its transfer is most exposed (waits left out),
    worded for gradient all-reduce (after or at the end of backward) or parameter all-gather; None without one."""
    mine = calls[(calls["collective"] == collective) & calls["phase"].isin(phases)]
    if not len(mine):
        return None
    exposed = _exposed_transfer(mine).groupby(mine["rank"]).sum()
    rank = int(exposed.idxmax())
    ours = mine[mine["rank"] == rank]
    after = (ours["phase"] == "after_backward").mean() > 0.5
    steps = max(ours["step"].nunique(), 1)
    if collective == "allgather":
        title, advice = f"All-gathers exposed on rank {rank}", _ADVICE_PREFETCH
    elif after:
        title, advice = f"Gradient all-reduce after backward, exposed on rank {rank}", _ADVICE_AFTER_BACKWARD
    else:
        title, advice = f"Gradient all-reduce exposed at the end of backward on rank {rank}", _ADVICE_IN_BACKWARD
    evidence = {
        "calls_per_step": len(ours) / steps,
        "exposed_ns_per_step": int(exposed[rank] / steps),
        "hidden_share": float(ours["compute_beside_ns"].sum() / max(ours["dur_ns"].sum(), 1)),
        "wait_excluded_ns": int((ours["exposed_ns"] - _exposed_transfer(ours)).sum()),
        "phases": ours["phase"].value_counts().to_dict(),
    }
    return make(
        ANALYZER, f"exposed_{collective}", title, advice, view.step_time(rank),
        concerns_ns=int(ours["exposed_ns"].sum()), saving_ns=int(exposed[rank]), basis=Basis.MEASURED,
        model="the exposed transfer time (waiting for peers left out) would be hidden under compute",
        where={"rank": rank, "collective": collective}, evidence=evidence,
    )  # fmt: skip


def _exposed_rest(view: JobView, calls: pd.DataFrame) -> Finding | None:
    """The exposed transfer of the collectives the gradient all-reduce and all-gather findings leave out (other
    collectives, other phases; send/recv is the pipeline bubble's), on the rank where it is most exposed; None
    without any."""
    named = (calls["collective"] == "allreduce") & calls["phase"].isin(GRADIENT_PHASES)
    named |= (calls["collective"] == "allgather") & calls["phase"].isin(PREFETCH_PHASES)
    rest = calls[~named.to_numpy() & ~pipeline.is_p2p(calls)]
    exposed = _exposed_transfer(rest).groupby(rest["rank"]).sum()
    if not len(exposed) or not exposed.max() > 0:
        return None
    rank = int(exposed.idxmax())
    ours = rest[rest["rank"] == rank]
    label = ours["collective"].astype(str).where(ours["collective"].astype(str) != "", ours["name"].astype(str))
    by_label = _exposed_transfer(ours).groupby(label.to_numpy()).sum().sort_values(ascending=False)
    step = view.step_time(rank)
    steps = max(step.steps, 1)
    title = (
        f"Communication exposed on rank {rank}: {humanize.duration(exposed[rank] / steps)} per step of "
        f"{', '.join(by_label.index[:3])} not hidden under compute"
    )
    return make(
        ANALYZER, "exposed_communication", title, _ADVICE_EXPOSED, step,
        concerns_ns=int(ours["exposed_ns"].sum()), saving_ns=int(exposed[rank]), basis=Basis.MEASURED,
        model="the exposed transfer time (waiting for peers left out) would be hidden under compute",
        where={"rank": rank}, evidence={"exposed_ns_per_step": {str(k): int(v / steps) for k, v in by_label.items()}},
    )  # fmt: skip


def _absent_wait(calls: pd.DataFrame) -> pd.Series:
    """Per call: exposed time spent waiting inside the collective beyond its wait for the loaded peers (a wait for
    ranks the trace does not hold: the collective's own waiting tasks, HCCL Notify Wait, say)."""
    beyond = calls["task_wait_ns"].fillna(0) - calls["wait_ns"].fillna(0)
    return np.fmin(beyond.clip(lower=0), calls["exposed_ns"].astype(float))


def _waiting_for_absent(view: JobView, calls: pd.DataFrame) -> Finding | None:
    """Exposed communication that waits for ranks not in the trace, on the rank that waits most: measured, its
    saving the wait (it goes when the late rank arrives with the others); None without such waiting."""
    wait = _absent_wait(calls)
    if not wait.sum():
        return None
    by_rank = wait.groupby(calls["rank"]).sum()
    rank = int(by_rank.idxmax())
    ours = calls[calls["rank"] == rank]
    step = view.step_time(rank)
    steps = max(step.steps, 1)
    per_step = by_rank[rank] / steps
    title = (
        f"Exposed communication on rank {rank}: {humanize.duration(per_step)} per step "
        f"({humanize.share(per_step / max(step.per_step_ns, 1), 0)} of the step) waiting inside its collectives "
        "after every loaded rank arrived"
    )
    return make(
        ANALYZER, "absent_wait", title, _ADVICE_ABSENT, step,
        concerns_ns=int(ours["exposed_ns"].sum()), saving_ns=int(by_rank[rank]), basis=Basis.MEASURED,
        model="the exposed wait inside the collectives beyond the loaded peers' arrival would go if every rank "
        "arrived together", where={"rank": rank},
        evidence={"exposed_ns_per_step": int(ours["exposed_ns"].sum() / steps), "calls": len(ours)},
    )  # fmt: skip


def _explained_late(view: JobView) -> pd.DataFrame:
    """Late arrivals on ranks whose work is recorded (a rank loaded from its communication alone cannot be judged),
    of a rank that makes its peers wait at least ``LATE_RANK_MIN_SHARE`` of their step time (less is jitter)."""
    late = _late_arrivals(view)
    late = late[late["cause"] != collective_calls.NOT_RECORDED]
    if not len(late):
        return late
    calls = view.job_calls
    keep = []
    for rank, ours in late.groupby("late_rank"):
        waits = calls[calls["match"].isin(ours["match"]) & (calls["rank"] != rank)].groupby("rank")["wait_ns"].sum()
        victim = int(waits.idxmax()) if len(waits) else int(rank)
        if ours["caused_wait_ns"].sum() >= LATE_RANK_MIN_SHARE * view.job_step_time(victim).total_ns:
            keep.append(rank)
    return late[late["late_rank"].isin(keep)]


def _straggler(view: JobView) -> Finding | None:
    """The late rank: the one whose explained late arrivals made its peers wait longest, with the main cause and
    host range, weighed against the step time of the rank that waited most (of the whole job where that rank is out
    of the view's scope, which the advice says); it claims the late rank's own device idle in its late windows, so
    that idle's cause is one finding with it; None without one."""
    late = _explained_late(view)
    if not len(late):
        return None
    caused = late.groupby("late_rank")["caused_wait_ns"].sum()
    rank = int(caused.idxmax())
    ours = late[late["late_rank"] == rank]
    by_cause = ours.groupby("cause")["caused_wait_ns"].sum()
    cause = str(by_cause.idxmax())
    detail = str(ours[ours["cause"] == cause].groupby("detail")["caused_wait_ns"].sum().idxmax())
    waited = view.job_calls[view.job_calls["match"].isin(ours["match"]) & (view.job_calls["rank"] != rank)]
    waits = waited.groupby("rank")["wait_ns"].sum()
    victim = int(waits.idxmax()) if len(waits) else rank
    outside = view.scope.rank is not None and victim != view.scope.rank
    advice = f"Rank {rank} arrives last at its collectives; the others wait. " + _ADVICE_LATE[cause].format(
        detail=detail
    )
    if outside:
        advice += (
            f" (Rank {victim}, which waits for it, is outside this report's --rank scope; its wait is the saving.)"
        )
    return make(
        ANALYZER, "late_rank", f"Rank {rank} is the late rank ({cause}{': ' + detail if detail else ''})", advice,
        view.job_step_time(victim) if outside else view.step_time(victim), concerns_ns=int(caused[rank]),
        saving_ns=int(caused[rank]), basis=Basis.MEASURED,
        model="the peers' waiting for the late rank would go if it arrived with them",
        claims={rank: _idle_in_windows(view.activity(rank), ours)},
        where={"rank": rank},
        evidence={"cause": cause, "detail": detail, "calls_waited_for": len(ours), "most_waiting_rank": victim},
    )  # fmt: skip


def _idle_in_windows(activity: collective_calls.RankActivity, late: pd.DataFrame) -> intervals.Intervals:
    """The late rank's device idle in the windows it arrived late by (from the first peer's arrival to its own)."""
    ends = late["late_start_ns"].to_numpy(dtype=np.int64)
    windows = intervals.union(ends - late["window_ns"].to_numpy(dtype=np.int64), ends)
    return intervals.subtract(windows, activity.busy)


def _small_messages(view: JobView, calls: pd.DataFrame) -> Finding | None:
    """Many collectives under ``SMALL_MESSAGE_BYTES`` per step on the rank with the most (at least
    ``SMALL_MESSAGES_PER_STEP``), costing their exposed transfer; None otherwise."""
    small = calls[(calls["bytes"] > 0) & (calls["bytes"] < SMALL_MESSAGE_BYTES)]
    if not len(small):
        return None
    per_step = small.groupby("rank").size() / calls.groupby("rank")["step"].nunique().clip(lower=1)
    rank = int(per_step.idxmax())
    if per_step[rank] < SMALL_MESSAGES_PER_STEP:
        return None
    ours = small[small["rank"] == rank]
    cost = int(_exposed_transfer(ours).sum())
    return make(
        ANALYZER, "small_messages", f"{per_step[rank]:.0f} small collectives per step on rank {rank} "
        f"(< {humanize.size(SMALL_MESSAGE_BYTES, 0)} each)",
        _ADVICE_SMALL, view.step_time(rank), concerns_ns=cost, saving_ns=cost, basis=Basis.MODELLED,
        model="the exposed transfer of the small collectives would go if they were coalesced into one",
        where={"rank": rank},
        evidence={"calls": len(ours), "median_bytes": int(ours["bytes"].median())},
    )  # fmt: skip


def _low_bandwidth(view: JobView, calls: pd.DataFrame) -> Finding | None:
    """Large collectives below ``LOW_BUS_SHARE`` of the nominal link bandwidth, on the rank that would save most at
    ``REACHABLE_BUS_SHARE`` of it; None without any (or without a known link)."""
    large = calls[(calls["bytes"] >= LARGE_MESSAGE_BYTES) & calls["transfer_ns"].notna() & calls["link_gbps"].notna()]
    slow = large[large["busbw_gbps"] < LOW_BUS_SHARE * large["link_gbps"]]
    if not len(slow):
        return None
    reachable = slow["transfer_ns"] * slow["busbw_gbps"] / (REACHABLE_BUS_SHARE * slow["link_gbps"])
    saving = (slow["transfer_ns"] - reachable).groupby(slow["rank"]).sum()
    rank = int(saving.idxmax())
    ours = slow[slow["rank"] == rank]
    return make(
        ANALYZER, "low_bandwidth",
        f"Low bus bandwidth: {humanize.bandwidth(ours['busbw_gbps'].median() * 1e9)} of "
        f"{humanize.bandwidth(ours['link_gbps'].iloc[0] * 1e9)}",
        _ADVICE_BANDWIDTH, view.step_time(rank), concerns_ns=int(ours["transfer_ns"].sum()),
        saving_ns=int(saving[rank]), basis=Basis.MODELLED,
        model=f"large collectives at {humanize.share(REACHABLE_BUS_SHARE, 0)} of the link's nominal bandwidth",
        where={"rank": rank},
        evidence={"calls": len(ours), "median_busbw_gbps": float(ours["busbw_gbps"].median())},
    )  # fmt: skip


TOP_COLUMNS = [
    "rank", "step", "collective", "group", "phase", "bytes", "dur_ns", "exposed_ns", "wait_ns", "task_wait_ns",
    "transfer_ns", "transfer_basis", "busbw_gbps", "link_bw_gbps", "late_rank",
]  # fmt: skip
STEP_COLUMNS = ["rank", "step", "span_ns", *[f"{p}_share" for p in PARTS], "hidden_comm_share", "basis"]


def job_section(view: JobView, job: JobData, options: Options) -> Section | None:
    """Of a job's merged part: overlap per rank and step, the most exposed collectives, the late rank and clock
    offsets."""
    return _section(view, options)


def _section(view: JobView, options: Options) -> Section | None:
    """The section of the view (None without calls or overlap rows): per-rank, per-step and most exposed tables,
    their facts, and across several ranks the clock offsets, pipeline bubble and late arrivals."""
    calls = _collectives(view)
    table = view.overlap()
    if not len(calls) or not len(table):
        return None
    ranks = _per_rank(view)
    by_rank = ranks[["rank", "span_ns", "comm_ns", "comm_exposed_ns", "hidden_comm_share", "calls", "wait_ns"]]
    exposed = _top(calls, options.top)[TOP_COLUMNS].dropna(axis=1, how="all")
    tables = [
        Table("by_rank", "Communication by rank", by_rank, Per.TOTAL),
        Table("overlap", "Overlap per rank and step", table[[c for c in STEP_COLUMNS if c in table]], Per.STEP),
        Table("most_exposed", "Most exposed collectives", exposed),
    ]
    matched = int((calls["match"] != NO_ROW).sum())
    hidden = float(ranks["comm_hidden_ns"].sum() / max(ranks["comm_ns"].sum(), 1))
    facts = [
        Fact("ranks", "ranks", len(ranks), Unit.COUNT),
        Fact("collective_calls", "collective calls", len(calls), Unit.COUNT, Per.TOTAL),
        Fact("matched_across_ranks", "calls matched across ranks", matched, Unit.COUNT, Per.TOTAL),
        Fact("hidden_comm_share", "communication hidden under compute", hidden, Unit.SHARE),
        Fact("comm_exposed_ns", "exposed communication", int(table["comm_exposed_ns"].median()), Unit.NS, Per.STEP),
    ]
    if not np.isnan(view.link_gbps):
        facts.append(Fact("link_gbps_nominal", "link bandwidth (nominal)", view.link_gbps, Unit.GBPS))
        facts.append(
            Fact(
                "busbw_gbps_median_large",
                "bus bandwidth of large collectives (median)",
                _median_large_busbw(calls),
                Unit.GBPS,
            )
        )
    if view.several_ranks:
        facts += _cross_rank(view, tables, options.top)
    return Section("distributed", "Distributed: communication and overlap", facts=facts, tables=tables)


def _median_large_busbw(calls: pd.DataFrame) -> float | None:
    """The median bus bandwidth of collectives of at least ``LARGE_MESSAGE_BYTES`` (None without any)."""
    large = calls.loc[calls["bytes"] >= LARGE_MESSAGE_BYTES, "busbw_gbps"].dropna()
    return float(large.median()) if len(large) else None


def _top(calls: pd.DataFrame, top: int) -> pd.DataFrame:
    """The ``top`` calls by exposed time, with unknown bytes and late rank as None."""
    top_calls = calls.nlargest(top, "exposed_ns").copy()
    for col in ("bytes", "late_rank"):
        top_calls[col] = top_calls[col].astype(object).where(top_calls[col] != NO_ROW, None)
    return top_calls


def _cross_rank(view: JobView, tables: list[Table], top: int) -> list[Fact]:
    """Clock offsets and late arrivals (tables appended), and the facts they give."""
    offsets = collective_calls.clock_offsets_of(view.job_calls)
    tables.append(Table("clock_offsets", "Clock offsets", offsets))
    late = _late_arrivals(view)
    facts = [Fact("max_clock_offset_ns", "largest clock offset", int(offsets["offset_ns"].abs().max()), Unit.NS)]
    calls = _collectives(view)
    table = _pipeline_bubble(view)
    if len(table):
        tables.append(Table("pipeline_bubble", "Pipeline bubble per rank and step", table, Per.STEP))
        facts += [_pipeline_fact(k, v) for k, v in pipeline.facts(table, calls, view.computing).items()]
    if len(late):
        shown = late.head(top).drop(columns=["match", "late_start_ns"])
        tables.append(Table("late_arrivals", "Late arrivals", shown))
    explained = _explained_late(view)
    if len(explained):
        caused = explained.groupby("late_rank")["caused_wait_ns"].sum()
        facts.append(Fact("late_rank", "late rank", int(caused.idxmax()), Unit.NUMBER))
        facts.append(
            Fact("late_rank_caused_wait_ns", "wait the late rank caused", int(caused.max()), Unit.NS, Per.TOTAL)
        )
    return facts


_PIPELINE_FACTS = {
    "pipeline_stage_pairs": ("pipeline stage pairs", Unit.TEXT, Per.NONE),
    "pipeline_bubble_ns_per_step": ("pipeline bubble (largest rank, median)", Unit.NS, Per.STEP),
    "pipeline_bubble_share": ("pipeline bubble share of the step", Unit.SHARE, Per.NONE),
}


def _pipeline_fact(key: str, value: object) -> Fact:
    """The section fact of one of ``pipeline.facts``' values."""
    title, unit, per = _PIPELINE_FACTS[key]
    return Fact(key.replace("_ns_per_step", "_ns"), title, value, unit, per)


def pipeline_bubble(trace: TraceData) -> pd.DataFrame:
    """The pipeline bubble per rank and step of the scope (stages matched over the whole job)."""
    return _pipeline_bubble(_trace_view(trace))


def _pipeline_bubble(view: JobView) -> pd.DataFrame:
    """The pipeline bubble per rank and step of the view's scope, its stages matched over the whole job."""
    return _in_scope(pipeline.bubble(view.job_calls, view.job_overlap()), view.scope)


def _in_scope(table: pd.DataFrame, scope: Scope) -> pd.DataFrame:
    """Rows of a per rank and step table within a scope."""
    keep = np.ones(len(table), dtype=bool)
    for column, value in (("rank", scope.rank), ("step", scope.step)):
        if value is not None:
            keep &= (table[column] == value).to_numpy()
    return table[keep]
