"""One step of one rank (or of all ranks, stacked on one clock) as Gantt lanes: each device stream, and each host
thread at its own call depths.

Host levels are counted per thread from the step marker (or the thread's top where no marker is above). On
``with_stack`` traces the main thread's ops sit under dozens of Python frames; by default those frames are
collapsed (a level counts only ancestors that are not Python frames), so the annotations, ops and runtime calls of
every thread show in the first few levels; both can be expanded. Step markers have a lane of their own per thread
(however the profiler nested them), and so has what lasts around them (a training loop's frames).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from traceanalyzer.dashboards.names import middle

from traceanalyzer import calltree, humanize
from traceanalyzer.renderers.timeline import device_lanes, laid_out, lane_rows
from traceanalyzer.schema import HOST, NO_ROW, TIMELINE_DEVICE, Kind, positions

LEVEL_CHOICES = (4, 8, 16, 64)
"""Host levels per thread the page offers; the first is the default."""


Steps = int | tuple[int, ...]
"""The step(s) a timeline draws: one step, or several drawn at once (the multi-step view)."""


def steps_of(step: Steps) -> list[int]:
    """The steps of a Steps value, as a list."""
    return [int(step)] if isinstance(step, int | np.integer) else [int(s) for s in step]


def host_levels(events: pd.DataFrame, python: bool = False) -> np.ndarray:
    """Per event row: its host level counted from the step marker above it (or from its thread's top where none
    is): how many host ancestors below that marker are counted. Step markers are never counted (they have a lane
    of their own, however the steps nest); Python frames only when python (else they are collapsed)."""
    kind = events["kind"]
    host = kind.isin(HOST).to_numpy()
    is_step = (kind == Kind.STEP.value).to_numpy()
    counting = host & ~is_step & (python | (kind != Kind.PYTHON.value).to_numpy())
    counts = calltree.CallTree.of(events).accumulated(counting.astype(np.int32), reset=is_step)[:-1]
    return np.where(host, counts, 0).astype(np.int32)


def around_steps(events: pd.DataFrame) -> np.ndarray:
    """Per event row: whether it is a host ancestor of a step marker that lasts through it (a loop's frame or a
    user range around the steps, not a step's content): drawn on a lane of its own, not at a level of the step."""
    ts = events["ts"].to_numpy()
    end = ts + events["dur"].to_numpy()
    markers = np.flatnonzero((events["kind"] == Kind.STEP.value).to_numpy())
    at, up = calltree.ancestors(events["parent"].to_numpy(), markers)
    marker = markers[at]
    out = np.zeros(len(events), dtype=bool)
    out[up[(ts[up] <= ts[marker]) & (end[up] >= end[marker])]] = True
    return out


def step_lanes(
    events: pd.DataFrame,
    levels: np.ndarray,
    rank: int,
    step: Steps,
    max_level: int = LEVEL_CHOICES[0],
    python: bool = False,
    around: np.ndarray | None = None,
) -> pd.DataFrame:
    """Lane rows (absolute ns, with each event's row) of one rank's step(s): device streams, each thread's step
    markers, what lasts around them (around_steps, when given), and host threads to max_level levels (levels:
    host_levels, Python frames shown and counted when python, else collapsed)."""
    rows = np.flatnonzero((events["rank"] == rank).to_numpy() & np.isin(events["step"].to_numpy(), steps_of(step)))
    mine = events.iloc[rows]
    kinds = mine["kind"]
    device = mine[kinds.isin(TIMELINE_DEVICE).to_numpy()]
    level = levels[rows]
    host_mask = kinds.isin(HOST).to_numpy() & (python | (kinds != Kind.PYTHON.value).to_numpy())
    is_step = (kinds == Kind.STEP.value).to_numpy()
    outer = np.zeros(len(rows), dtype=bool) if around is None else around[rows] & host_mask & ~is_step
    steps = mine[host_mask & is_step]
    outside = mine[outer]
    host_mask &= ~is_step & ~outer & (level < max_level)
    host = mine[host_mask]
    return pd.concat(
        [
            lane_rows(device, device_lanes(device)),
            lane_rows(steps, "thread " + steps["tid"].astype(str) + " · Step"),
            lane_rows(outside, "thread " + outside["tid"].astype(str) + " · around the steps"),
            lane_rows(host, "thread " + host["tid"].astype(str) + " · level " + _padded(level[host_mask], host.index)),
        ],
        ignore_index=True,
    )


ALL_RANKS_LEVELS = 8
"""Host levels per thread shared out among the ranks of the all-ranks view (at least one each): with many ranks,
each shows its device streams and its top host levels only."""


def all_ranks_levels(levels: int, ranks: int) -> int:
    """Host levels per thread each rank shows in the all-ranks view: the picked levels, at most
    ALL_RANKS_LEVELS / ranks (and at least 1)."""
    return max(1, min(levels, ALL_RANKS_LEVELS // max(ranks, 1)))


def ranks_lanes(per_rank: dict[int, pd.DataFrame], offsets: pd.Series) -> pd.DataFrame:
    """Lane rows of several ranks on one clock: each rank's lanes named ``rank R · …`` and its times less its
    clock offset (ns by rank, to subtract; 0 where unknown)."""
    return pd.concat(
        [
            lanes.assign(
                lane="rank " + str(rank) + " · " + lanes["lane"],
                start_ns=lanes["start_ns"] - int(offsets.get(rank, 0)),
                end_ns=lanes["end_ns"] - int(offsets.get(rank, 0)),
            )
            for rank, lanes in per_rank.items()
        ],
        ignore_index=True,
    )


PIXELS = 1_500
"""Gaps narrower than the window / PIXELS (about a pixel of a wide screen) are closed when segments are merged."""


def segments(lanes: pd.DataFrame, window: tuple[int, int] | None = None) -> pd.DataFrame:
    """The drawn segments of a step's lane rows: ns from the first one's start, only those in window, with gaps
    below a pixel of the window closed."""
    return laid_out(lanes, window, resolution=PIXELS)


MAX_LABELS = 400
"""Bars labelled with their names at most: a window that shows more draws them unlabelled."""
CHAR_PX = 6.5
"""Width of a label character (px, at the bars' 10 px font)."""


def labels(seg: pd.DataFrame, span: int, width_px: int) -> list[str] | None:
    """Each segment's name cut in the middle to fit its bar when span ns are drawn on width_px ('' where not even
    MIN_LABEL_CHARS fit), or None when there are more than MAX_LABELS segments (labels would not be readable)."""
    if not len(seg) or len(seg) > MAX_LABELS:
        return None
    room = ((seg["end_ns"] - seg["start_ns"]) / max(span, 1) * width_px / CHAR_PX).astype(int).to_numpy()
    return [middle(name, int(r)) if r >= MIN_LABEL_CHARS else "" for name, r in zip(seg["name"], room, strict=True)]


MIN_LABEL_CHARS = 4
MAX_FLOWS = 64
"""Launch → kernel lines drawn at most for one bar or range (more are thinned evenly over time)."""
FLOW_COLUMNS = ["launch_lane", "launch_ns", "kernel_lane", "kernel_ns", "kernel"]


def bar_rows(lanes: pd.DataFrame, row: int, count: int) -> np.ndarray:
    """The event rows one drawn bar stands for: its first event's row and the count-1 events that follow it on its
    lane and colour (the order segments are merged in)."""
    first = lanes[lanes["row"] == row]
    if not len(first):
        return np.zeros(0, dtype=np.int64)
    lane, category = first["lane"].iloc[0], first["category"].iloc[0]
    mine = lanes[(lanes["lane"] == lane) & (lanes["category"] == category)].sort_values("start_ns", kind="stable")
    at = int(np.flatnonzero(mine["row"].to_numpy() == row)[0])
    return mine["row"].to_numpy()[at : at + max(count, 1)]


def flows(lanes: pd.DataFrame, events: pd.DataFrame, rows: np.ndarray) -> tuple[pd.DataFrame, int]:
    """Launch → kernel pairs of some events: a runtime launch's device work, or device work's launch; both ends as
    drawn (lane, start ns on the drawn clock), at most MAX_FLOWS spread evenly over the pairs in time order
    (``attrs["of"]``: how many could be drawn). A launch below the host levels shown starts at its own time on the
    lane of its nearest drawn ancestor. Also how many pairs have an end not drawn (another step, or no ancestor
    drawn)."""
    drawn = lanes.drop_duplicates("row").set_index("row")
    labels, launch, ts = events.index.to_numpy(), events["launch"].to_numpy(), events["ts"].to_numpy()
    at = positions(events.index, np.asarray(rows, dtype=np.int64))
    at = at[at >= 0]
    device = np.unique(np.r_[np.flatnonzero(np.isin(launch, labels[at])), at[launch[at] != NO_ROW]])
    up = drawn_ancestors(events, drawn.index, launch[device])  # each device event has one launch: one pair each
    ok = (up != NO_ROW) & np.isin(labels[device], drawn.index)
    device, up = device[ok], up[ok]
    shift = ts[positions(events.index, launch[device])] - ts[positions(events.index, up)]  # launch after its caller
    order = np.argsort(ts[device], kind="stable")
    if len(order) > MAX_FLOWS:
        order = order[np.unique(np.linspace(0, len(order) - 1, MAX_FLOWS).astype(int))]
    kernel = drawn.loc[labels[device[order]]]
    caller = drawn.loc[up[order]]
    frame = pd.DataFrame(
        {
            "launch_lane": caller["lane"].to_numpy(),
            "launch_ns": caller["start_ns"].to_numpy() + shift[order],
            "kernel_lane": kernel["lane"].to_numpy(),
            "kernel_ns": kernel["start_ns"].to_numpy(),
            "kernel": kernel["name"].to_numpy(),
        },
        columns=FLOW_COLUMNS,
    )
    frame.attrs["of"] = len(device)
    return frame, int((~ok).sum())


def drawn_ancestors(events: pd.DataFrame, drawn: pd.Index, rows: np.ndarray) -> np.ndarray:
    """Each row when it is drawn, else its nearest drawn host ancestor (NO_ROW when none is)."""
    is_drawn = np.zeros(len(events), dtype=bool)
    is_drawn[np.asarray(drawn, dtype=np.int64)] = True
    return calltree.nearest(events["parent"].to_numpy(), rows, is_drawn)


MARK_COLUMNS = ["what", "start_ns", "end_ns", "label"]
MAX_MARKS = 20
"""The most marks of one kind drawn on one step (the longest first)."""


def gap_marks(gaps: pd.DataFrame, rank: int) -> list[tuple]:
    """Marks of the largest idle gaps of one rank (health.idle_gaps), in absolute ns."""
    mine = gaps[gaps["rank"] == rank]
    return [
        ("idle gap", int(gap.start_ns), int(gap.start_ns + gap.dur_ns), f"device {gap.device} idle {_ms(gap.dur_ns)}")
        for gap in mine.itertuples()
    ]


def sync_marks(stalls: pd.DataFrame, rank: int) -> list[tuple]:
    """Marks of the blocking host syncs of one rank (health.sync_stalls)."""
    mine = stalls[stalls["rank"] == rank]
    return [
        ("host sync", int(s.ts), int(s.ts) + int(s.sync_ns), f"{s.name} ({s.annotation or s.op}) {_ms(s.sync_ns)}")
        for s in mine.itertuples()
    ]


def collective_marks(collectives: pd.DataFrame, rank: int) -> list[tuple]:
    """Marks of one rank's collectives with exposed time (distributed.collectives: not hidden behind compute)."""
    mine = collectives[(collectives["rank"] == rank) & (collectives["exposed_ns"] > 0)]
    return [
        (
            "exposed collective",
            int(c.start_ns),
            int(c.start_ns) + int(c.dur_ns),
            f"{c.collective}: {_ms(c.exposed_ns)} exposed of {_ms(c.dur_ns)}",
        )
        for c in mine.itertuples()
    ]


def fusion_marks(occurrences: pd.DataFrame, events: pd.DataFrame, rank: int, step: Steps) -> list[tuple]:
    """Marks of one rank's fusion chains in one step (fusion.occurrences): from the first to the last device work
    its ops launched (from its first op's start to its last op's end on the host where they launched none)."""
    mine = occurrences[(occurrences["rank"] == rank) & occurrences["step"].isin(steps_of(step))]
    if not len(mine):
        return []
    start, end = chain_spans(mine["entry_rows"], events, rank, step)
    return [
        (
            "fusion chain",
            int(s),
            int(e),
            f"fusion chain {o.pattern}: {o.variant} ({o.kernels} kernels, {_ms(o.current_ns)} device time)",
        )
        for o, s, e in zip(mine.itertuples(), start, end, strict=True)
    ]


def chain_spans(entry_rows: pd.Series, events: pd.DataFrame, rank: int, step: Steps) -> tuple[np.ndarray, np.ndarray]:
    """Each chain's (entry_rows: its ops' event rows) start and end (absolute ns): of the device work its ops
    launched in the rank's step(s), or where they launched none, of the ops themselves."""
    rows = np.flatnonzero(
        (events["rank"] == rank).to_numpy()
        & np.isin(events["step"].to_numpy(), steps_of(step))
        & events["kind"].isin(TIMELINE_DEVICE).to_numpy()
    )
    ts, end = events["ts"].to_numpy(), (events["ts"] + events["dur"]).to_numpy()
    ops = np.concatenate([np.asarray(r, dtype=np.int64) for r in entry_rows])
    chain = np.repeat(np.arange(len(entry_rows)), [len(r) for r in entry_rows])
    host = positions(events.index, ops)
    op_start, op_end = _spread(chain, ts[host], end[host], len(entry_rows))
    work = pd.DataFrame({"start": ts[rows], "end": end[rows]}).groupby(events["top_op"].to_numpy()[rows])
    first, last = work["start"].min(), work["end"].max()  # of each op's device work
    at = first.index.get_indexer(ops)
    on = at >= 0
    work_start, work_end = _spread(chain[on], first.to_numpy()[at[on]], last.to_numpy()[at[on]], len(entry_rows))
    some = work_end >= work_start
    return np.where(some, work_start, op_start), np.where(some, work_end, op_end)


def _spread(group: np.ndarray, start: np.ndarray, end: np.ndarray, groups: int) -> tuple[np.ndarray, np.ndarray]:
    """Per group (0 .. groups-1): its members' earliest start and latest end (start > end for a group with none)."""
    lo = np.full(groups, np.iinfo(np.int64).max)
    hi = np.full(groups, np.iinfo(np.int64).min)
    np.minimum.at(lo, group, start)
    np.maximum.at(hi, group, end)
    return lo, hi


def peak_marks(peaks: pd.DataFrame, rank: int) -> list[tuple]:
    """The memory peak of each of one rank's devices (memory analysis), an instant."""
    mine = peaks[(peaks["rank"] == rank) & (peaks["device"] >= 0)]
    return [
        (
            "memory peak",
            int(p.peak_ts),
            int(p.peak_ts),
            f"memory peak {humanize.size(p.peak_allocated_bytes)} on device {p.device}",
        )
        for p in mine.itertuples()
    ]


def marks(found: list[tuple], origin: int, span: int) -> pd.DataFrame:
    """The marks inside one step, in ns from origin (clipped to the step: a gap may begin before it), at most
    MAX_MARKS of each kind (the longest)."""
    frame = pd.DataFrame(found, columns=MARK_COLUMNS)
    frame["start_ns"] -= origin
    frame["end_ns"] -= origin
    inside = frame[(frame["end_ns"] >= 0) & (frame["start_ns"] <= span)]
    inside = inside.assign(length=inside["end_ns"] - inside["start_ns"]).sort_values("length", ascending=False)
    kept = inside.groupby("what", sort=False).head(MAX_MARKS).drop(columns="length")
    return kept.assign(start_ns=kept["start_ns"].clip(lower=0), end_ns=kept["end_ns"].clip(upper=span)).reset_index(
        drop=True
    )


def ranks_marks(per_rank: dict[int, tuple[pd.DataFrame, int]], origin: int, offsets: pd.Series) -> pd.DataFrame:
    """Each rank's marks (per rank: its one-rank marks, inside its own step, and the origin they count from) on the
    all-ranks axis: ns from origin, its times less its clock offset (as ranks_lanes), labelled with the rank."""
    out = pd.concat(
        [
            mine.assign(
                start_ns=mine["start_ns"] + (at - int(offsets.get(r, 0)) - origin),
                end_ns=mine["end_ns"] + (at - int(offsets.get(r, 0)) - origin),
            )
            for r, (mine, at) in per_rank.items()
        ],
        ignore_index=True,
    )
    return out.assign(label="rank " + out["rank"].astype(str) + " · " + out["label"])


BOUNDARY_COLUMNS = ["at_ns", "label", "rank"]


def boundaries(steps: pd.DataFrame, rank: int, step: Steps, origin: int) -> pd.DataFrame:
    """Each step's start and end as the device experiences it (the step model's window), in ns from origin."""
    mine = steps[(steps["rank"] == rank) & steps["step"].isin(steps_of(step))].sort_values("start_ns")
    rows = []
    for s in mine.itertuples():
        start = int(s.start_ns) - origin
        rows.append((start, f"step {s.step} starts (device)", rank))
        rows.append((start + int(s.step_ns), f"step {s.step} ends · {_ms(s.step_ns)}", rank))
    return pd.DataFrame(rows, columns=BOUNDARY_COLUMNS)


def ranks_boundaries(
    steps: pd.DataFrame, ranks: list[int], step: Steps, origin: int, offsets: pd.Series
) -> pd.DataFrame:
    """Each rank's step start and end on the all-ranks axis (ns from origin, its times less its clock offset, as
    ranks_lanes), labelled with the rank."""
    out = pd.concat([boundaries(steps, r, step, origin + int(offsets.get(r, 0))) for r in ranks], ignore_index=True)
    return out.assign(label="rank " + out["rank"].astype(str) + " · " + out["label"])


def _ms(ns) -> str:
    return humanize.duration(int(ns))


def _padded(levels: np.ndarray, index: pd.Index) -> pd.Series:
    """Levels as text that sorts as numbers (lanes are ordered by name)."""
    return pd.Series(levels, index=index, dtype="int64").astype(str).str.rjust(2)
