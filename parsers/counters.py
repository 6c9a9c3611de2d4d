"""Hardware counter samples as event rows (``Kind.COUNTER``, the columns of ``schema.COUNTER_COLUMNS``), for every
parser (``samples``), and those of a Kineto (torch.profiler) trace (``read``).

Two shapes are read, both Chrome trace events of the file's ``traceEvents``:

- counter tracks, ``"ph": "C"``: ``{"name", "pid", "ts", "args": {series: number, ...}}`` (the trace event format's
  counter event); one sample per numeric series at the instant ``ts``, named ``name.series`` (``name`` where the
  series is the track's only one and has its name);
- CUPTI range-profiler ranges, ``"ph": "X"`` with ``"cat": "cuda_profiler_range"`` (Kineto's
  ``CUDA_PROFILER_RANGE`` activity, as in HTA's cupti_profiler sample): one range per kernel, its metrics as args
  (``smsp__sass_thread_inst_executed_op_ffma_pred_on.sum``: a value over the range's interval).

They are read in a second pass over the file, only when the first pass counted such events (``wanted``). Times are
read as the event reader reads the file's: decimals kept as written (no float64 round trip), so a sample's µs
timestamp with ns digits is the same ns as its kernel's in a trace read exactly (epoch µs above 2**43 with a
fraction), and rounded to the ns as the float reader does otherwise; numeric strings are numbers too.
"""

from __future__ import annotations

import decimal
import math
from decimal import Decimal
from pathlib import Path

import msgspec
import numpy as np
import pandas as pd
from traceanalyzer.parsers.jsonstream import read_all

from traceanalyzer.errors import TraceError
from traceanalyzer.schema import COUNTER_COLUMNS, EVENT_COLUMNS, NO_ROW, Kind, conform

RANGE_CATEGORY = "cuda_profiler_range"
TRACK_SOURCE = "Kineto counter track"
RANGE_SOURCE = "CUPTI range profiler"
_RANGE_KEYS = frozenset({"device", "stream", "correlation", "External id", "external id"})
"""Args of a range that identify it, not metrics."""


def unit_of(metric: str) -> str:
    """The unit a CUPTI / Perfworks metric name says (``.pct``, ``pct_of_peak``: percent; ``.ratio``: ratio;
    ``bytes``: bytes; ``cycles``), '' where it says none."""
    lower = metric.lower()
    if "pct" in lower or lower.endswith("percent"):
        return "percent"
    if lower.endswith(".ratio") or lower.endswith("_ratio"):
        return "ratio"
    if "bytes" in lower:
        return "bytes"
    if "cycles" in lower:
        return "cycles"
    return ""


LANE = "counters"
"""The pid of every counter sample (its tid is its source)."""
_LANES = tuple(c for c in EVENT_COLUMNS if c.name in ("pid", "tid"))
_SAMPLE = ["ts", "dur", "device", "name", "value", "unit", "source", "kernel"]
"""What a source gives of each sample: the counter's name, value and unit, its source and the kernel it measured."""


def samples(table: pd.DataFrame) -> pd.DataFrame:
    """A source's samples (columns ``_SAMPLE``) as counter event rows: ``cat`` and ``tid`` the source, ``measured``
    the kernel, on the ``counters`` lane."""
    frame = pd.DataFrame(
        {
            **{c: table[c].to_numpy() for c in ("ts", "dur", "device", "name", "value", "unit")},
            "kind": Kind.COUNTER.value,
            "cat": table["source"].to_numpy(),
            "measured": table["kernel"].to_numpy(),
        }
    )
    return conform(frame.assign(pid=LANE, tid=frame["cat"]), (*COUNTER_COLUMNS, *_LANES))


def with_samples(events: pd.DataFrame, samples: pd.DataFrame) -> pd.DataFrame:
    """A parser's events with counter samples after them (the events keep their row labels), each given the
    columns only the other has, with their defaults (NO_ROW, NaN, False or '')."""
    if not len(samples):
        return events
    left, right = _filled(events, samples), _filled(samples, events)
    return pd.concat([left, right[list(left.columns)]], ignore_index=True)


def _filled(frame: pd.DataFrame, other: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with the columns only ``other`` has, each its default for ``other``'s dtype."""
    missing = [name for name in other.columns if name not in frame.columns]
    return frame.assign(**{name: _default(other[name].dtype, len(frame)) for name in missing})


def _default(dtype, n: int) -> np.ndarray:
    if pd.api.types.is_bool_dtype(dtype):
        return np.zeros(n, dtype=bool)
    if pd.api.types.is_integer_dtype(dtype):
        return np.full(n, NO_ROW, dtype=dtype)
    if pd.api.types.is_float_dtype(dtype):
        return np.full(n, np.nan, dtype=dtype)
    return np.full(n, "", dtype=object)


def no_samples() -> pd.DataFrame:
    """A source's samples when it has none (columns ``_SAMPLE``)."""
    return pd.DataFrame(columns=_SAMPLE)


_DECODER = msgspec.json.Decoder(float_hook=Decimal)
"""JSON with its fractions as exact Decimals (as written)."""


def read(path: Path, exact: bool = False) -> pd.DataFrame:
    """The counter samples of the trace at ``path``, in time order, as event rows (``samples``); ``exact``: the
    event reader kept every digit of the file's timestamps (truncated to the ns), else it rounded them to the ns."""
    try:
        data = _DECODER.decode(read_all(path))
    except msgspec.DecodeError as e:
        raise TraceError(path, f"is not readable JSON ({e})") from None
    events = data.get("traceEvents", []) if isinstance(data, dict) else data
    rows = [row for ev in events if isinstance(ev, dict) for row in _rows(ev, exact)]
    return samples(pd.DataFrame(rows, columns=_SAMPLE).sort_values("ts", kind="stable").reset_index(drop=True))


def _rows(ev: dict, exact: bool) -> list[tuple]:
    """The counter rows of one event (none for any other event)."""
    ph, args = ev.get("ph"), ev.get("args")
    if not isinstance(args, dict):
        return []
    if ph == "C":
        ts = _ns(ev.get("ts"), exact)
        track = str(ev.get("name", ""))
        series = [(k, v) for k, v in args.items() if _number(v)]
        return [
            (
                ts,
                0,
                NO_ROW,
                track if (k == track and len(series) == 1) else f"{track}.{k}",
                float(v),
                unit_of(k),
                TRACK_SOURCE,
                "",
            )
            for k, v in series
            if ts is not None
        ]
    if ph == "X" and ev.get("cat") == RANGE_CATEGORY:
        ts, dur = _ns(ev.get("ts"), exact), _ns(ev.get("dur"), exact)
        device = args.get("device")
        device = int(device) if isinstance(device, int) and not isinstance(device, bool) else NO_ROW
        return [
            (ts, dur or 0, device, str(k), float(v), unit_of(str(k)), RANGE_SOURCE, str(ev.get("name", "")))
            for k, v in args.items()
            if k not in _RANGE_KEYS and _number(v) and ts is not None
        ]
    return []


def _number(value) -> bool:
    """Is the value a finite JSON number (not a bool)?"""
    return isinstance(value, int | float | Decimal) and not isinstance(value, bool) and math.isfinite(value)


def _ns(value, exact: bool) -> int | None:
    """A µs number (or numeric string) as ns: integer µs exactly; a fraction truncated to its ns digit where the
    event reader read the trace ``exact``, else rounded to the ns as its float path does; None for anything else."""
    if isinstance(value, str):
        try:
            value = Decimal(value.strip())
        except decimal.InvalidOperation:
            return None
    if not _number(value) or abs(value) >= Decimal("9.2e15"):
        return None
    if isinstance(value, int):
        return value * 1000
    if exact:
        return int(Decimal(value).scaleb(3))
    value = float(value)
    whole = math.floor(value)
    return int(whole) * 1000 + int(np.rint((value - whole) * 1000))
