"""An annotated trace for ui.perfetto.dev and chrome://tracing: the trace's events plus a findings track.

Chrome-trace JSON (``X`` slices, times in µs with three decimals, so every ns digit survives) relative to the
trace's start. The "traceanalyzer findings" process has one thread per finding and rank, with one slice per
interval the finding claims (else one per step it concerns), named with the finding and carrying its saving and
advice in ``args``. Each event keeps what the event table holds of it in ``args`` (shapes, dtypes, correlation id,
bytes, collective, ...), and each launch joins the device work it launched by a flow (``s``/``f``). Traces of
more than ``MAX_EVENTS`` events keep all device work and the host events of the shallowest call levels that fit,
and say so.
"""

from __future__ import annotations

import gzip
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import orjson
import pandas as pd

from traceanalyzer import outputs
from traceanalyzer.findings import Finding
from traceanalyzer.schema import DEVICE, NO_ROW, Kind, TraceMeta, category_text

MAX_EVENTS = 1_000_000
"""Events written at most; a bigger trace is written as a subset (device work whole, host by call depth)."""
FINDINGS_PID = 0
FINDINGS_PROCESS = "traceanalyzer findings"
ARG_COLUMNS = ("correlation", "external_id", "device", "stream", "step", "bytes")
"""Integer columns written to an event's args where it has a value (not NO_ROW)."""
TEXT_ARG_COLUMNS = ("input_dims", "input_types", "collective", "group", "core", "cat")
"""Text columns written to an event's args where they are not empty."""
SHAPE_ARG_COLUMNS = ("grid", "block")
"""Launch dimensions (``x,y,z`` in the table) written to an event's args as the source writes them: ``[x, y, z]``."""
FLOW = {"name": "launch", "cat": "launch → device"}
"""Name and category of the launch → device work flows."""


@dataclass(frozen=True)
class Annotated:
    """What the annotated trace is written from (the facade builds it: ``Trace.annotated()``): the event table, the
    trace's meta (window, sources), its step table and its ranked findings."""

    events: pd.DataFrame
    meta: TraceMeta
    steps: pd.DataFrame
    findings: list[Finding]


def write(annotated: Annotated, out: Path) -> str:
    """Write the annotated trace to ``out`` (.json or .json.gz); returns what was written."""
    doc = document(annotated)
    data = orjson.dumps(doc, option=orjson.OPT_SERIALIZE_NUMPY)
    with outputs.replacing(out) as f:
        if out.name.endswith(".gz"):
            with gzip.GzipFile(filename="", fileobj=f, mode="wb", compresslevel=6, mtime=0) as z:
                z.write(data)
        else:
            f.write(data)
    meta = doc["otherData"]
    return f"{meta['events_written']:,} events and {meta['finding_slices']:,} finding slices to {out}"


def document(annotated: Annotated) -> dict:
    """The Chrome-trace document: event slices, the findings track, and what was left out (``otherData``)."""
    t0 = int(annotated.meta.start_ns)
    events, note = subset(annotated.events)
    if note:
        warnings.warn(note, stacklevel=2)
    lanes = _lanes(events)
    findings = finding_slices(annotated, t0)
    slices = _event_slices(events, lanes, t0)
    flows = launch_flows(events, lanes, t0)
    meta = _metadata(lanes) + _finding_threads(findings)
    other = {
        "source": "; ".join(annotated.meta.paths),
        "start_ns": t0,
        "times": "µs relative to start_ns (three decimals: ns)",
        "events_in_trace": len(annotated.events),
        "events_written": len(events),
        "finding_slices": len(findings),
        "launch_flows": len(flows) // 2,
        "subset": note,
    }
    return {
        outputs.EXPORT_KEY: "perfetto",
        "traceEvents": meta + slices + flows + [s for s, _ in findings],
        "displayTimeUnit": "ns",
        "otherData": other,
    }


def subset(events: pd.DataFrame, limit: int = MAX_EVENTS) -> tuple[pd.DataFrame, str]:
    """The events to write and, when some are left out, a sentence saying which."""
    if len(events) <= limit:
        return events, ""
    device = events["kind"].isin(DEVICE).to_numpy()
    depth = events["depth"].to_numpy()
    kept_depth = -1
    for d in range(int(depth.max()) + 1):
        if int(device.sum() + (~device & (depth <= d)).sum()) > limit:
            break
        kept_depth = d
    keep = device | (depth <= kept_depth)
    note = (
        f"the trace has {len(events):,} events, more than {limit:,}: written are all device work and the host "
        f"events at call depth 0–{kept_depth} ({int(keep.sum()):,} events)"
    )
    return events[keep], note


def _lanes(events: pd.DataFrame) -> pd.DataFrame:
    """One integer pid per (rank, pid) and tid per (rank, pid, tid), with the names Perfetto shows."""
    lanes = events[["rank", "pid", "tid"]].drop_duplicates().astype({"pid": str, "tid": str}).reset_index(drop=True)
    lanes["pid_no"] = lanes.groupby(["rank", "pid"], sort=True).ngroup() + FINDINGS_PID + 1
    lanes["tid_no"] = np.arange(1, len(lanes) + 1)
    return lanes


def _metadata(lanes: pd.DataFrame) -> list[dict]:
    procs = lanes.drop_duplicates("pid_no")
    out = [_meta("process_name", r.pid_no, 0, f"rank {r.rank} · {r.pid}") for r in procs.itertuples()]
    out += [_meta("thread_name", r.pid_no, r.tid_no, str(r.tid)) for r in lanes.itertuples()]
    out.append(_meta("process_name", FINDINGS_PID, 0, FINDINGS_PROCESS))
    out.append({"ph": "M", "name": "process_sort_index", "pid": FINDINGS_PID, "tid": 0, "args": {"sort_index": -1}})
    return out


def _meta(kind: str, pid: int, tid: int, name: str) -> dict:
    return {"ph": "M", "name": kind, "pid": int(pid), "tid": int(tid), "args": {"name": name}}


def _placed(events: pd.DataFrame, lanes: pd.DataFrame) -> pd.DataFrame:
    """Each event's pid_no and tid_no (in the events' order)."""
    keys = events[["rank", "pid", "tid"]].astype({"pid": str, "tid": str})
    return keys.merge(lanes, on=["rank", "pid", "tid"], how="left")[["pid_no", "tid_no"]]


def _event_slices(events: pd.DataFrame, lanes: pd.DataFrame, t0: int) -> list[dict]:
    """Each event as a slice on its lane, a counter sample as a counter event (``COUNTER``)."""
    placed = _placed(events, lanes)
    ts = micros(events["ts"].to_numpy() - t0)
    dur = micros(events["dur"].to_numpy())
    columns = zip(
        events["name"].astype(str),
        events["kind"].astype(str),
        placed["pid_no"],
        placed["tid_no"],
        ts,
        dur,
        event_args(events),
        events["value"].to_numpy() if "value" in events else np.full(len(events), np.nan),
        strict=True,
    )
    return [
        {"ph": "X", "name": n, "cat": k, "pid": int(p), "tid": int(t), "ts": s, "dur": d, "args": a}
        if k != COUNTER
        else {"ph": "C", "name": n, "cat": a.get("cat", k), "pid": int(p), "ts": s, "args": {n: float(v)}}
        for n, k, p, t, s, d, a, v in columns
    ]


COUNTER = Kind.COUNTER.value
"""A counter sample is written as a counter event (``ph: C``: a track per process and counter), not a slice."""


def event_args(events: pd.DataFrame) -> list[dict]:
    """Per event, the event table's values it has (integer columns not NO_ROW, text columns not empty, launch
    dimensions as ``[x, y, z]``)."""
    present = [c for c in ARG_COLUMNS if c in events]
    texts = [c for c in TEXT_ARG_COLUMNS if c in events]
    shapes = [c for c in SHAPE_ARG_COLUMNS if c in events]
    ints = [events[c].to_numpy().tolist() for c in present]
    strs = [events[c].astype(str).fillna("").to_numpy().tolist() for c in texts]
    dims = [_shape_values(events[c]) for c in shapes]
    out = []
    for i in range(len(events)):
        args = {c: v[i] for c, v in zip(present, ints, strict=True) if v[i] != NO_ROW}
        args.update({c: v[i] for c, v in zip(texts, strs, strict=True) if v[i] and v[i] != "nan"})
        args.update({c: v[i] for c, v in zip(shapes, dims, strict=True) if v[i] != ""})
        out.append(args)
    return out


def _shape_values(column: pd.Series) -> list:
    """Per row, an ``x,y,z`` category as a list of ints (other text as it is, '' where none)."""
    per_code = [_ints_or_text(t) for t in category_text(column)]
    return [per_code[c] for c in column.array.codes.tolist()]


def _ints_or_text(text: str) -> list[int] | str:
    """``2,66,1`` as ``[2, 66, 1]``; text that is not integers separated by commas as it is."""
    parts = text.split(",")
    return [int(p) for p in parts] if text and all(p.lstrip("-").isdigit() for p in parts) else text


def launch_flows(events: pd.DataFrame, lanes: pd.DataFrame, t0: int) -> list[dict]:
    """A flow from each written launch to each device event it launched: an ``s`` at the launch's start on its
    thread, an ``f`` (bound to the enclosing slice) at the device event's start; the id is the device event's row,
    the correlation id is in args."""
    launch = events["launch"].to_numpy()
    mine = np.flatnonzero((launch != NO_ROW) & np.isin(launch, events.index.to_numpy()))
    if not len(mine):
        return []
    placed = _placed(events, lanes).to_numpy()
    at = events.index.get_indexer(launch[mine])
    ts = events["ts"].to_numpy()
    corr = events["correlation"].to_numpy()
    labels = events.index.to_numpy()
    out = []
    for i, j in zip(mine.tolist(), at.tolist(), strict=True):
        flow = {**FLOW, "id": int(labels[i]), "args": {"correlation": int(corr[i])}}
        out.append(
            {**flow, "ph": "s", "pid": int(placed[j, 0]), "tid": int(placed[j, 1]), "ts": micros([ts[j] - t0])[0]}
        )
        out.append(
            {
                **flow,
                "ph": "f",
                "bp": "e",
                "pid": int(placed[i, 0]),
                "tid": int(placed[i, 1]),
                "ts": micros([ts[i] - t0])[0],
            }
        )
    return out


def micros(ns: np.ndarray) -> list[float]:
    """Integer ns as µs with three decimals (exact for any trace shorter than about 100 days)."""
    return [round(v / 1000, 3) for v in np.asarray(ns, dtype=np.int64).tolist()]


def finding_slices(annotated: Annotated, t0: int) -> list[tuple[dict, tuple[int, int]]]:
    """Per finding occurrence, its slice on the findings track and the (finding number, rank) lane it is on."""
    steps = annotated.steps
    out = []
    for number, finding in enumerate(annotated.findings, 1):
        for rank, starts, ends, how in _ranges(finding, steps, annotated.meta):
            args = _args(finding, how)
            tid = number * 1000 + rank + 1
            for start, end in zip(starts, ends, strict=True):
                ts, dur = micros(np.array([start - t0, end - start]))
                name = f"{number}. {finding.title}"
                out.append(
                    (
                        {
                            "ph": "X",
                            "name": name,
                            "cat": finding.id,
                            "pid": FINDINGS_PID,
                            "tid": tid,
                            "ts": ts,
                            "dur": dur,
                            "args": args,
                        },
                        (number, rank),
                    )
                )
    return out


def _ranges(finding: Finding, steps: pd.DataFrame, meta) -> list[tuple[int, list[int], list[int], str]]:
    """(rank, starts, ends, what they are) of a finding: its claimed device intervals, else its steps."""
    if finding.claims:
        return [
            (int(r), list(map(int, s)), list(map(int, e)), "claimed device time")
            for r, (s, e) in sorted(finding.claims.items())
        ]
    rank = finding.where.get("rank")
    mine = steps if rank is None else steps[steps["rank"] == rank]
    if not len(mine):
        return [(int(rank or 0), [int(meta.start_ns)], [int(meta.end_ns)], "the whole window (no steps)")]
    return [
        (
            int(r),
            g["start_ns"].astype(int).tolist(),
            (g["start_ns"] + g["step_ns"]).astype(int).tolist(),
            "the steps it concerns (no time range of its own)",
        )
        for r, g in mine.groupby("rank", sort=True)
    ]


def _args(f: Finding, how: str) -> dict:
    return {
        "finding": f.id,
        "severity": f.severity.value,
        "worth": f.worth(),
        "saving_ns_per_step": int(f.saving_ns),
        "concerns_ns_per_step": int(f.concerns_ns),
        "advice": f.advice,
        "slice": how,
        "where": orjson.loads(orjson.dumps(f.where, option=orjson.OPT_SERIALIZE_NUMPY, default=str)),
    }


def _finding_threads(findings: list[tuple[dict, tuple[int, int]]]) -> list[dict]:
    seen = {}
    for s, (_, rank) in findings:
        seen.setdefault(s["tid"], f"{s['name'][:80]} · rank {rank}")
    return [_meta("thread_name", FINDINGS_PID, tid, name) for tid, name in seen.items()]
