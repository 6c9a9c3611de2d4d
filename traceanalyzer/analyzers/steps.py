"""Per-step and whole-trace time accounting: step wall time, device busy, time by kind."""

from __future__ import annotations

import numpy as np
import pandas as pd

from traceanalyzer import intervals
from traceanalyzer.schema import BUSY_KINDS as _BUSY
from traceanalyzer.schema import DEVICE_KINDS, NO_ROW, Kind

DEVICE = [k.value for k in DEVICE_KINDS]
BUSY_KINDS = tuple(k.value for k in _BUSY)


def step_table(events: pd.DataFrame) -> pd.DataFrame:
    """One row per (rank, step): wall time, device busy, kernel count and time by device kind (ns)."""
    markers = events[events["kind"] == Kind.STEP.value]
    device = events[events["kind"].isin(DEVICE) & (events["step"] != NO_ROW)]
    rows = []
    for (rank, step), marker in markers.groupby(["rank", "step"], sort=True):
        mine = device[(device["rank"] == rank) & (device["step"] == step)]
        rows.append(_step_row(int(rank), int(step), marker, mine))
    columns = ["rank", "step", "start_ns", "wall_ns", "device_busy_ns", "kernels"] + [f"{k}_ns" for k in DEVICE]
    return pd.DataFrame(rows, columns=columns)


def _step_row(rank: int, step: int, marker: pd.DataFrame, device: pd.DataFrame) -> dict:
    start = int(marker["ts"].min())
    wall = int((marker["ts"] + marker["dur"]).max()) - start
    work = device[device["kind"].isin(BUSY_KINDS)]
    busy = intervals.length(intervals.union(work["ts"].to_numpy(), (work["ts"] + work["dur"]).to_numpy()))
    by_kind = device.groupby("kind", observed=True)["dur"].sum()
    row = {
        "rank": rank,
        "step": step,
        "start_ns": start,
        "wall_ns": wall,
        "device_busy_ns": busy,
        "kernels": int(
            (device["kind"] == Kind.KERNEL.value).sum() + (device["kind"] == Kind.COMMUNICATION.value).sum()
        ),
    }
    row.update({f"{k}_ns": int(by_kind.get(k, 0)) for k in DEVICE})
    return row


def device_busy(events: pd.DataFrame) -> pd.DataFrame:
    """Per rank: busy and idle device time over the span from the first to the last device event."""
    rows = []
    for rank, group in events[events["kind"].isin(BUSY_KINDS)].groupby("rank", sort=True):
        ts = group["ts"].to_numpy()
        end = ts + group["dur"].to_numpy()
        busy = intervals.length(intervals.union(ts, end))
        span = int(end.max() - ts.min()) if len(ts) else 0
        rows.append({"rank": int(rank), "span_ns": span, "busy_ns": busy, "busy_share": busy / span if span else 0.0})
    return pd.DataFrame(rows, columns=["rank", "span_ns", "busy_ns", "busy_share"])


def time_by_kind(events: pd.DataFrame) -> pd.DataFrame:
    """Summed time per event kind (device kinds: summed durations; host kinds: top-level time)."""
    host_top = events["kind"].isin([Kind.CPU_OP.value, Kind.RUNTIME.value]) & (events["depth"] == 0)
    picked = events[events["kind"].isin(DEVICE) | host_top]
    table = picked.groupby("kind", observed=True)["dur"].agg(["size", "sum"]).reset_index()
    table.columns = ["kind", "count", "total_ns"]
    table["kind"] = table["kind"].astype(str)
    device_total = table.loc[table["kind"].isin(DEVICE), "total_ns"].sum()
    table["device_share"] = np.where(table["kind"].isin(DEVICE), table["total_ns"] / max(device_total, 1), np.nan)
    return table.sort_values("total_ns", ascending=False).reset_index(drop=True)


def step_time_ns(trace, rank: int | None = None) -> int:
    """Total step time of one rank (or all): each step from its start to its marker's end or its last device work,
    whichever is later; without step markers, the recorded window of each rank. Findings are costed against it."""
    table = trace.steps()
    if rank is not None:
        table = table[table["rank"] == rank]
    if not len(table):
        return int(trace.meta.span_ns) * (1 if rank is not None else max(len(trace.meta.ranks), 1))
    events = trace.events
    work = events[events["kind"].isin(BUSY_KINDS) & (events["step"] != NO_ROW)]
    device_end = (work["ts"] + work["dur"]).groupby([work["rank"], work["step"]]).max()
    key = pd.MultiIndex.from_arrays([table["rank"], table["step"]])
    end = np.maximum(table["start_ns"] + table["wall_ns"], device_end.reindex(key).fillna(0).to_numpy())
    return int((end - table["start_ns"]).sum())
