"""What the Timeline tells about what the user picks: one slice (its args, duration, self time, its launch or the
device work it launched, its call stack cut at its step) or a time range (time inside it by kind and by name).

Rows are event-table labels; times are integer ns on the rank's clock.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from traceanalyzer import calltree
from traceanalyzer.renderers.perfetto import event_args
from traceanalyzer.schema import NO_ROW, TIMELINE_DEVICE, Kind

STACK_DEPTH = 256
"""Most call-stack frames listed for one event (a with_stack trace nests a few dozen; the step ends the walk)."""
LINKED = 64
"""Device events listed at most for one launch."""
TOP_NAMES = 25
"""Names listed at most in a range's totals by name."""


def stack_rows(events: pd.DataFrame, row: int) -> list[int]:
    """The host frames enclosing an event (device work: those of its launch), innermost first, up to and with the
    step marker it runs in (the walk never crosses into an enclosing step or the frames around the step)."""
    launch = int(events.at[row, "launch"])
    at = launch if launch != NO_ROW else row
    is_step = (events["kind"] == Kind.STEP.value).to_numpy()
    if is_step[at]:
        return [at]
    _, up = calltree.ancestors(events["parent"].to_numpy(), np.array([at]), stop=is_step)
    return [at, *up[: STACK_DEPTH - 1].tolist()]


def stack(events: pd.DataFrame, row: int) -> list[dict]:
    """The frames of stack_rows, outermost first: kind, name and duration (ns) of each."""
    return [
        {"kind": str(events.at[r, "kind"]), "name": str(events.at[r, "name"]), "dur_ns": int(events.at[r, "dur"])}
        for r in stack_rows(events, row)[::-1]
    ]


def self_ns(events: pd.DataFrame, row: int) -> int:
    """An event's own time: its duration less its direct host children's (device work has none)."""
    children = events["parent"].to_numpy() == row
    return int(events.at[row, "dur"]) - int(events["dur"].to_numpy()[children].sum())


def linked(events: pd.DataFrame, row: int) -> tuple[str, pd.DataFrame]:
    """The other end of an event's launch link: for device work, its runtime launch ('launched by'); for a launch,
    the device work it launched ('launched', at most LINKED rows); else nothing. Rows: row, name, kind, ts, dur."""
    columns = ["name", "kind", "ts", "dur"]
    launch = int(events.at[row, "launch"])
    if launch != NO_ROW and launch in events.index:
        return "launched by", events.loc[[launch], columns].rename_axis("row").reset_index()
    mine = events.index[events["launch"].to_numpy() == row]
    if len(mine):
        return "launched", events.loc[mine[:LINKED], columns].rename_axis("row").reset_index()
    return "", pd.DataFrame(columns=["row", *columns])


def details(events: pd.DataFrame, row: int) -> dict:
    """Everything the details panel shows of one event: name, kind, place, duration, self time, the event table's
    values it has (args), its launch link and its call stack (outermost first)."""
    ev = events.loc[row]
    device = str(ev["kind"]) in TIMELINE_DEVICE
    link, other = linked(events, row)
    return {
        "row": int(row),
        "name": str(ev["name"]),
        "kind": str(ev["kind"]),
        "rank": int(ev["rank"]),
        "where": f"device {ev['device']} · stream {ev['stream']}" if device else f"thread {ev['tid']}",
        "step": int(ev["step"]),
        "ts": int(ev["ts"]),
        "dur_ns": int(ev["dur"]),
        "self_ns": int(ev["dur"]) if device else self_ns(events, row),
        "args": event_args(events.loc[[row]])[0],
        "link": link,
        "linked": other,
        "stack": stack(events, row),
    }


def in_range(events: pd.DataFrame, rows: np.ndarray, shift: np.ndarray, lo: int, hi: int) -> pd.DataFrame:
    """The events (rows, each drawn shift ns earlier than its clock) overlapping [lo, hi) on the drawn clock, with
    the time of each inside it: row, name, kind, inside_ns."""
    mine = events.loc[rows, ["name", "kind", "ts", "dur"]]
    start = mine["ts"].to_numpy() - shift
    end = start + mine["dur"].to_numpy()
    hit = (end > lo) & (start < hi) | ((mine["dur"].to_numpy() == 0) & (start >= lo) & (start < hi))
    inside = np.minimum(end, hi) - np.maximum(start, lo)
    return pd.DataFrame(
        {
            "row": rows[hit],
            "name": mine["name"].astype(str).to_numpy()[hit],
            "kind": mine["kind"].astype(str).to_numpy()[hit],
            "inside_ns": np.maximum(inside[hit], 0),
        }
    )


def by_kind(hits: pd.DataFrame) -> pd.DataFrame:
    """A range's events per kind: how many and their summed time inside it (device kinds first, then host)."""
    g = hits.groupby("kind", sort=False)["inside_ns"].agg(["size", "sum"])
    out = pd.DataFrame({"kind": g.index, "events": g["size"].to_numpy(), "time_ns": g["sum"].to_numpy()})
    out["device"] = out["kind"].isin(TIMELINE_DEVICE)
    return out.sort_values(["device", "time_ns"], ascending=False).drop(columns="device").reset_index(drop=True)


def by_name(hits: pd.DataFrame, top: int = TOP_NAMES) -> pd.DataFrame:
    """A range's events per name and kind, the most time inside it first (at most top)."""
    g = hits.groupby(["name", "kind"], sort=False)["inside_ns"].agg(["size", "sum"]).reset_index()
    out = g.rename(columns={"size": "events", "sum": "time_ns"}).sort_values("time_ns", ascending=False)
    return out.head(top).reset_index(drop=True)
