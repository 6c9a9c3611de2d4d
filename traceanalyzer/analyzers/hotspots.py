"""Hotspots: ops and kernels ranked by total time, with count, mean, min, max, share and cumulative share."""

from __future__ import annotations

from enum import Enum

import numpy as np
import pandas as pd

from traceanalyzer.schema import DEVICE_KINDS, NO_ROW, Kind

DEVICE = [k.value for k in DEVICE_KINDS]


class Level(str, Enum):
    """What a hotspot table ranks."""

    KERNEL = "kernel"  # device kernels, copies, sets and collectives, by name
    CPU_OP = "cpu_op"  # CPU ops by name: self and inclusive host time, and the device time they caused
    OP_DEVICE = "op_device"  # device time per launching (innermost) CPU op


HOTSPOT_COLUMNS = ["name", "kind", "count", "total_ns", "mean_ns", "min_ns", "max_ns", "share", "cum_share"]


def hotspots(events: pd.DataFrame, level: Level | str = Level.KERNEL, top: int | None = None) -> pd.DataFrame:
    """Rank by total time at one level; ``events`` may already be filtered by step, rank or kind."""
    level = Level(level)
    table = {Level.KERNEL: _kernels, Level.CPU_OP: _cpu_ops, Level.OP_DEVICE: _op_device}[level](events)
    return table.head(top).reset_index(drop=True) if top else table.reset_index(drop=True)


def _ranked(grouped: pd.DataFrame, total_col: str = "total_ns") -> pd.DataFrame:
    grouped = grouped.sort_values(total_col, ascending=False, kind="stable")
    whole = grouped[total_col].sum()
    grouped["share"] = grouped[total_col] / whole if whole else 0.0
    grouped["cum_share"] = grouped["share"].cumsum()
    return grouped


def _stats(frame: pd.DataFrame, by: str | list[str], value: str = "dur") -> pd.DataFrame:
    g = frame.groupby(by, observed=True, sort=False)[value]
    return pd.DataFrame(
        {"count": g.size(), "total_ns": g.sum(), "mean_ns": g.mean(), "min_ns": g.min(), "max_ns": g.max()}
    )


def _kernels(events: pd.DataFrame) -> pd.DataFrame:
    device = events[events["kind"].isin(DEVICE)]
    stats = _stats(device, ["name", "kind"]).reset_index()
    stats["name"] = stats["name"].astype(str)
    stats["kind"] = stats["kind"].astype(str)
    return _ranked(stats)[HOTSPOT_COLUMNS]


def _cpu_ops(events: pd.DataFrame) -> pd.DataFrame:
    ops = events[events["kind"] == Kind.CPU_OP.value]
    self_ns = ops["dur"].to_numpy() - _child_op_time(events, ops)
    device = events[events["kind"].isin(DEVICE) & (events["op"] != NO_ROW)]
    device_by_op = device.groupby("op")["dur"].sum()
    frame = pd.DataFrame(
        {
            "name": ops["name"].astype(str).to_numpy(),
            "dur": ops["dur"].to_numpy(),
            "self": self_ns,
            "device": device_by_op.reindex(ops.index, fill_value=0).to_numpy(),
        }
    )
    g = frame.groupby("name", sort=False)
    stats = pd.DataFrame(
        {
            "kind": Kind.CPU_OP.value,
            "count": g.size(),
            "total_ns": g["self"].sum(),
            "inclusive_ns": g["dur"].sum(),
            "mean_ns": g["self"].mean(),
            "min_ns": g["self"].min(),
            "max_ns": g["self"].max(),
            "device_self_ns": g["device"].sum(),
        }
    ).reset_index()
    return _ranked(stats)[HOTSPOT_COLUMNS[:-2] + ["inclusive_ns", "device_self_ns", "share", "cum_share"]]


def _child_op_time(events: pd.DataFrame, ops: pd.DataFrame) -> np.ndarray:
    """For each op row, the summed duration of the ops directly beneath it (via any non-op frames)."""
    parent = ops["parent"].to_numpy()
    has_parent = parent != NO_ROW
    parent_op = np.full(len(ops), NO_ROW, dtype=np.int64)
    parent_op[has_parent] = events["op"].reindex(parent[has_parent]).to_numpy()
    child = pd.Series(ops["dur"].to_numpy()[parent_op != NO_ROW]).groupby(parent_op[parent_op != NO_ROW]).sum()
    return child.reindex(ops.index, fill_value=0).to_numpy()


def _op_device(events: pd.DataFrame) -> pd.DataFrame:
    device = events[events["kind"].isin(DEVICE) & (events["op"] != NO_ROW)]
    op_names = events["name"].astype(str).reindex(device["op"].to_numpy()).to_numpy()
    frame = pd.DataFrame({"name": op_names, "op": device["op"].to_numpy(), "dur": device["dur"].to_numpy()})
    per_call = frame.groupby(["name", "op"], sort=False)["dur"].sum().reset_index()
    stats = _stats(per_call, "name").reset_index()
    stats["kernels"] = frame.groupby("name", sort=False).size().reindex(stats["name"]).to_numpy()
    stats["kind"] = Kind.CPU_OP.value
    return _ranked(stats)[HOTSPOT_COLUMNS[:-2] + ["kernels", "share", "cum_share"]]
