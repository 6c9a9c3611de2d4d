"""Transfer time of Ascend HCCL operations from their task lanes (``Kind.COMM_TASK`` rows), as msprof computes it.

An HCCL op runs as tasks on several planes (lanes: one per peer link, plus the main stream's local copies).
``Memcpy`` / ``Reduce_Inline`` / ``RDMASend`` tasks move data (``SDMA`` / ``RDMA`` where only the device stream
records them); ``Notify_Wait`` waits for a peer and ``Notify_Record`` (``Write Value`` on the device stream) signals
one. As in msprof's
communication analysis (``communication_parser.py``, whose per-rank ``communication.json`` msprof-analyze's cluster
analysis gathers unchanged):

* ``transfer_ns`` (msprof "Transit Time") = the data-moving tasks of the op's main plane: the lowest lane that
  synchronises with peers (has Notify tasks), i.e. msprof's plane 1, or plane 0 where that plane talks to peers;
* ``link_bytes`` / ``link_transfer_ns`` (msprof "Transit Size" / per-link "Transit Time") = size and duration of the
  data-moving tasks of every lane that synchronises with peers (local-copy lanes excluded), and
  ``link_bw_gbps`` = link_bytes / link_transfer_ns (msprof "Bandwidth(GB/s)": GB/s per link while it transfers).

A lane whose tasks overlap in time holds several planes (the device stream view, or a database without plane ids):
then ``transfer_ns`` is the union of the op's data-moving tasks, and every lane counts for the link figures
(``transfer_basis`` says which).

Where a rank records no tasks (kernel_details or communication.json alone), ``msprof_times`` takes the same figures
from msprof's own per-op link table (communication.json's "Communication Bandwidth Info"): the bytes and transit
time of its SDMA and RDMA links (HCCS, PCIE and SIO transfers are SDMA's, counted there once), so the per-link
bandwidth is the file's.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from traceanalyzer.schema import Kind, category_text

TRANSFER_TASK = re.compile(r"^(?:Memcpy|Reduce[_ ]?Inline|RDMASend|SDMA|RDMA)$", re.I)
"""Tasks of an HCCL op that move data."""
NOTIFY_TASK = re.compile(r"^(?:Notify[_ ]?(?:Wait|Record)|Write Value)$", re.I)
"""Tasks of an HCCL op that synchronise with a peer."""
BASIS_PLANE = "tasks: main plane"
BASIS_UNION = "tasks: union (planes not recorded)"
BASIS_MSPROF = "communication.json: link transit time"
MOVED_LINKS = ("SDMA", "RDMA")
"""msprof's transport types that hold every byte an op moves once (HCCS, PCIE, SIO are moved by SDMA)."""
MATCH_NS = 1_000_000
"""An op of communication.json is the call of its rank and name that starts nearest to it, within 1 ms."""

COLUMNS = ["transfer_ns", "link_bytes", "link_transfer_ns", "transfer_basis"]


def task_times(events: pd.DataFrame, calls: pd.DataFrame) -> pd.DataFrame:
    """Per call (same index as ``calls``): transfer time, link bytes and link time from its tasks; NaN without tasks."""
    out = pd.DataFrame(
        {"transfer_ns": np.nan, "link_bytes": np.nan, "link_transfer_ns": np.nan, "transfer_basis": ""},
        index=calls.index,
    )
    tasks = _owned_tasks(events, calls)
    if not len(tasks):
        return out
    lanes = _lanes(tasks)
    merged = lanes.groupby("call")["overlapping"].any()
    per_call = pd.DataFrame(
        {
            "plane": _main_plane_transfer(tasks, lanes),
            "union": _union_transfer(tasks),
            "merged": merged,
        }
    )
    linked = tasks.merge(lanes[["call", "lane", "peer"]], on=["call", "lane"])
    linked = linked[linked["transfer"] & (linked["peer"] | linked["call"].map(merged))]
    link = linked.groupby("call")[["bytes", "dur"]].sum()
    link = link[link["bytes"] > 0]
    rows = per_call.index.to_numpy()
    out.loc[rows, "transfer_ns"] = np.where(per_call["merged"], per_call["union"], per_call["plane"])
    out.loc[rows, "transfer_basis"] = np.where(per_call["merged"], BASIS_UNION, BASIS_PLANE)
    out.loc[link.index, "link_bytes"] = link["bytes"].astype(float)
    out.loc[link.index, "link_transfer_ns"] = link["dur"].astype(float)
    return out


def _owned_tasks(events: pd.DataFrame, calls: pd.DataFrame) -> pd.DataFrame:
    """The comm tasks that start inside a call of their rank, with the call's label (latest-starting call wins)."""
    tasks = events.loc[events["kind"] == Kind.COMM_TASK.value, ["rank", "ts", "dur", "name", "cat", "tid", "bytes"]]
    parts = []
    for rank, mine in tasks.groupby("rank"):
        ours = calls[calls["rank"] == rank].sort_values("start_ns", kind="stable")
        if not len(ours):
            continue
        starts = ours["start_ns"].to_numpy()
        ts = mine["ts"].to_numpy()
        at = np.searchsorted(starts, ts, side="right") - 1
        inside = (at >= 0) & (ts < (starts + ours["dur_ns"].to_numpy())[np.maximum(at, 0)])
        parts.append(_task_frame(mine[inside], ours.index.to_numpy()[at[inside]]))
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()


def _task_frame(tasks: pd.DataFrame, call: np.ndarray) -> pd.DataFrame:
    """The tasks of calls, by lane and time; a task's type is its name, or its device task type (``cat``) where the
    name is not recorded (``N/A`` in level-0 databases)."""
    return pd.DataFrame(
        {
            "call": call,
            "lane": _lane_order(tasks["tid"]),
            "ts": tasks["ts"].to_numpy(),
            "end": (tasks["ts"] + tasks["dur"]).to_numpy(),
            "dur": tasks["dur"].to_numpy(),
            "bytes": tasks["bytes"].clip(lower=0).to_numpy(),
            "transfer": _of_type(tasks, TRANSFER_TASK),
            "notify": _of_type(tasks, NOTIFY_TASK),
        }
    ).sort_values(["call", "lane", "ts"], kind="stable")


def _of_type(tasks: pd.DataFrame, pattern: re.Pattern) -> np.ndarray:
    """Per task: does its type (name, or ``cat`` where the name is '' or N/A) match the pattern at its start? Each
    distinct name and cat is matched once."""
    name, cat = tasks["name"].array.codes, tasks["cat"].array.codes
    recorded = ~np.isin(category_text(tasks["name"]), ["", "N/A"])[name]
    return np.where(recorded, _matching(tasks["name"], pattern)[name], _matching(tasks["cat"], pattern)[cat])


def _matching(column: pd.Series, pattern: re.Pattern) -> np.ndarray:
    """Per code of a category column (and -1 last): does its text match the pattern at its start?"""
    return np.array([bool(pattern.match(t)) for t in category_text(column)], dtype=bool)


def _lane_order(tid: pd.Series) -> np.ndarray:
    """Lanes as sortable numbers: the thread id where it is numeric (plane order), else its position by name (each
    distinct id read once)."""
    codes, text = tid.array.codes, category_text(tid)
    numeric = pd.to_numeric(pd.Series(text, dtype=object), errors="coerce").to_numpy(dtype=float)
    if not np.isnan(numeric[codes]).any():
        return numeric[codes]
    names = np.unique(text[np.unique(codes)])
    return np.searchsorted(names, text).astype(float)[codes]


def _lanes(tasks: pd.DataFrame) -> pd.DataFrame:
    """Per (call, lane): does it synchronise with peers, and do its tasks overlap (several planes on one lane)?"""
    g = tasks.groupby(["call", "lane"], sort=True)
    previous_end = g["end"].cummax().groupby([tasks["call"], tasks["lane"]]).shift()
    tasks = tasks.assign(overlaps=tasks["ts"] < previous_end)
    lanes = tasks.groupby(["call", "lane"], as_index=False).agg(peer=("notify", "any"), overlapping=("overlaps", "any"))
    return lanes


def _main_plane_transfer(tasks: pd.DataFrame, lanes: pd.DataFrame) -> pd.Series:
    """Per call: data-moving time on its main plane (the lowest lane with Notify tasks, else the lowest lane)."""
    ranked = lanes.assign(key=np.where(lanes["peer"], 0, 1)).sort_values(["call", "key", "lane"])
    main = ranked.drop_duplicates("call").set_index("call")["lane"]
    on_main = tasks["lane"].to_numpy() == main.reindex(tasks["call"]).to_numpy()
    moving = tasks[on_main & tasks["transfer"].to_numpy()]
    return moving.groupby("call")["dur"].sum().reindex(main.index).fillna(0)


def _union_transfer(tasks: pd.DataFrame) -> pd.Series:
    """Per call: the length of the union of its data-moving tasks over all lanes, in integer ns (epoch ns are beyond
    2**53: a float64 would move them by up to 256 ns)."""
    moving = tasks[tasks["transfer"]].sort_values(["call", "ts"], kind="stable")
    reach = moving.groupby("call")["end"].cummax().groupby(moving["call"]).shift(fill_value=np.iinfo(np.int64).min)
    start = np.maximum(moving["ts"].to_numpy(np.int64), reach.to_numpy(np.int64))
    length = np.clip(moving["end"].to_numpy(np.int64) - start, 0, None)
    return pd.Series(length, index=moving.index).groupby(moving["call"]).sum()


def msprof_times(calls: pd.DataFrame, links: pd.DataFrame) -> pd.DataFrame:
    """Per call (same index as ``calls``: rank, name, start_ns): transfer time, link bytes and link time from
    msprof's per-op link table (``links``: rank, name, ts, transport, bytes, transit_ns); NaN where it has no op."""
    out = pd.DataFrame(
        {"transfer_ns": np.nan, "link_bytes": np.nan, "link_transfer_ns": np.nan, "transfer_basis": ""},
        index=calls.index,
    )
    moved = links[links["transport"].isin(MOVED_LINKS) & (links["transit_ns"] >= 0)] if len(links) else links
    if not len(moved) or not len(calls):
        return out
    ops = moved.groupby(["rank", "name", "ts"], as_index=False)[["bytes", "transit_ns"]].sum()
    wanted = calls[["rank", "name", "start_ns"]].assign(call=calls.index.to_numpy(), name=calls["name"].astype(str))
    found = pd.merge_asof(
        wanted.astype({"rank": np.int64}).sort_values("start_ns"),
        ops.astype({"rank": np.int64, "name": str}).rename(columns={"ts": "start_ns"}).sort_values("start_ns"),
        on="start_ns", by=["rank", "name"], direction="nearest", tolerance=MATCH_NS,
    ).dropna(subset=["bytes"]).set_index("call")  # fmt: skip
    out.loc[found.index, "link_bytes"] = found["bytes"].astype(float)
    out.loc[found.index, "link_transfer_ns"] = found["transit_ns"].astype(float)
    out.loc[found.index, "transfer_ns"] = found["transit_ns"].astype(float)
    out.loc[found.index, "transfer_basis"] = BASIS_MSPROF
    return out
