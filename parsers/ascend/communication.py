"""communication.json → communication ops: the rows of a rank folder torch_npu wrote no trace, kernel table or
database for (one row per op: start, elapsed time, collective, group; one step per step key spanning them), the
group names a kernel table's communication ops lack (the file's keys are ``name@group``), and msprof's own figures
per op (``op_stats``: transit, wait, synchronization and idle time) and per op and transport link (``link_stats``:
transit size, time and bandwidth), which every reader keeps as side tables (``schema.HCCL_OPS``, ``schema.HCCL_LINKS``).

Numbers are read as the file writes them (decimal text, no float round trip): µs start times stay exact to the ns.
Units: times ms (the start µs), sizes MB (10^6 bytes), bandwidth GB/s (anchors-ascend.md §6).
"""

from __future__ import annotations

import json
import re
from decimal import Decimal
from pathlib import Path

import numpy as np
import pandas as pd
from traceanalyzer.parsers.ascend import common as c
from traceanalyzer.parsers.ascend.outputs import COMMUNICATION_FILE

from traceanalyzer.errors import TraceError
from traceanalyzer.schema import NO_ROW, Kind

_TIME_INFO = "Communication Time Info"
_BANDWIDTH_INFO = "Communication Bandwidth Info"
_START = "Start Timestamp(us)"
_ELAPSED = "Elapse Time(ms)"
OP_TIMES = {
    "Elapse Time(ms)": "elapse_ns",
    "Transit Time(ms)": "transit_ns",
    "Wait Time(ms)": "wait_ns",
    "Synchronization Time(ms)": "synchronization_ns",
    "Idle Time(ms)": "idle_ns",
}
"""communication.json's per-op times (ms) → columns (ns)."""
SDMA_LINKS = frozenset({"HCCS", "PCIE", "SIO"})
"""Transport types whose transfers msprof also counts under SDMA (the DMA engine that moves them): the bytes an op
moves are its SDMA and RDMA sizes."""
MOVED_LINKS = ("SDMA", "RDMA")
_STEP = re.compile(r"^step(\d+)$")
_TOTALS = "Total Op Info"
"""The key of each kind's totals (no start time): not an op."""
_MAX_US = 9.2e15
"""Start times at or beyond this many µs overflow int64 ns."""


def _entries(data) -> list[tuple[int, str, str, dict]]:
    """(step number, op name, group, op object) of every op of every step and kind (p2p, collective)."""
    out = []
    for step, kinds in _object(data).items():
        number = _STEP.match(str(step))
        for ops in _object(kinds).values():
            for key, op in _object(ops).items():
                if key != _TOTALS:
                    name, _, group = str(key).partition("@")
                    out.append((int(number.group(1)) if number else NO_ROW, name, group, _object(op)))
    return out


def ops(file: Path, warnings: c.Notes) -> pd.DataFrame:
    """Per op of every step and kind (p2p, collective): step, name, group, start ns, duration ns; ops without a
    valid start or elapsed time dropped and counted."""
    rows = [_op(step, name, group, _object(op.get(_TIME_INFO))) for step, name, group, op in _entries(_load(file))]
    table = pd.DataFrame(rows, columns=["step", "name", "group", "ts", "dur"])
    bad = table["ts"].isna() | table["dur"].isna()
    warnings.adjust(str(file), "communication ops without a valid start time or elapsed time dropped", int(bad.sum()))
    return table[~bad].astype({"ts": np.int64, "dur": np.int64}).sort_values("ts", kind="stable")


def _op(step: int, name: str, group: str, times: dict) -> tuple:
    return step, name, group, _start_ns(times), _scaled(times.get(_ELAPSED), 10**6)


def _start_ns(times: dict) -> int | None:
    """The op's start (µs in the file) in ns, exactly as written; None when missing or out of range."""
    start = _number(times.get(_START))
    return round(start * 1000) if start is not None and 0 <= start < _MAX_US else None


def _scaled(value, factor: int) -> int | None:
    """A non-negative number of the file times ``factor``, rounded to an int; None when missing or out of range."""
    number = _number(value)
    return round(number * factor) if number is not None and 0 <= number < Decimal(_MAX_US) * 1000 / factor else None


def op_stats(folder: Path, warnings: c.Notes) -> pd.DataFrame | None:
    """msprof's figures per op of the folder's communication.json: step (an id), name, group, start (ns) and its
    elapse, transit, wait, synchronization and idle times (ns; NO_ROW where not written); None without the file."""
    entries = _readable(folder, warnings)
    if entries is None:
        return None
    rows = []
    for step, name, group, op in entries:
        times = _object(op.get(_TIME_INFO))
        row = {"step": step, "name": name, "group": group, "ts": _start_ns(times)}
        row |= {col: _scaled(times.get(key), 10**6) for key, col in OP_TIMES.items()}
        rows.append(row)
    table = pd.DataFrame(rows, columns=["step", "name", "group", "ts", *OP_TIMES.values()])
    return table.fillna(NO_ROW).astype({c_: np.int64 for c_ in ["ts", *OP_TIMES.values()]})


def link_stats(folder: Path, warnings: c.Notes) -> pd.DataFrame | None:
    """msprof's figures per op and transport link (HCCS, SDMA, RDMA, ...) that moved data: step (an id), name,
    group, start (ns), transport, transit bytes, transit time (ns) and bandwidth (GB/s, as the file writes it);
    None without the file."""
    entries = _readable(folder, warnings)
    if entries is None:
        return None
    rows = []
    for step, name, group, op in entries:
        start = _start_ns(_object(op.get(_TIME_INFO)))
        for transport, link in _object(op.get(_BANDWIDTH_INFO)).items():
            link = _object(link)
            size = _scaled(link.get("Transit Size(MB)"), 10**6)
            if size:
                bandwidth = _number(link.get("Bandwidth(GB/s)"))
                rows.append(
                    (step, name, group, start, str(transport), size, _scaled(link.get("Transit Time(ms)"), 10**6),
                     float(bandwidth) if bandwidth is not None else np.nan)
                )  # fmt: skip
    columns = ["step", "name", "group", "ts", "transport", "bytes", "transit_ns", "bandwidth_gbps"]
    table = pd.DataFrame(rows, columns=columns)
    return table.fillna({"ts": NO_ROW, "transit_ns": NO_ROW}).astype({"ts": np.int64, "transit_ns": np.int64})


MATRIX_FILE = "communication_matrix.json"
_MATRIX_TOTAL = "-total"
"""communication_matrix.json keeps, per op type and group, the top1/middle/bottom1-3 ops and their ``-total``."""


def matrix_links(folder: Path, warnings: c.Notes) -> pd.DataFrame | None:
    """Per step, op type, group and link (``src-dst`` ranks) of the folder's communication_matrix.json: the
    transport and the step's total transit bytes, time (ns) and bandwidth (GB/s, as written) of that op type over
    that link; None without the file."""
    file = folder / MATRIX_FILE
    if not file.is_file():
        return None
    try:
        data = _load(file)
    except TraceError as e:
        warnings.append(f"{e}; msprof's per-link communication figures not read")
        return None
    rows = []
    for step, kinds in _object(data).items():
        number = _STEP.match(str(step))
        for ops in _object(kinds).values():
            for key, links in _object(ops).items():
                kind, _, group = str(key).partition("@")
                if kind.endswith(_MATRIX_TOTAL):
                    rows += [_link(number, kind.removesuffix(_MATRIX_TOTAL), group, pair, _object(v))
                             for pair, v in _object(links).items()]  # fmt: skip
    columns = ["step", "op_type", "group", "link", "transport", "bytes", "transit_ns", "bandwidth_gbps"]
    return pd.DataFrame(rows, columns=columns).fillna({"bytes": NO_ROW, "transit_ns": NO_ROW})


def _link(step: re.Match | None, kind: str, group: str, pair: str, link: dict) -> tuple:
    bandwidth = _number(link.get("Bandwidth(GB/s)"))
    return (
        int(step.group(1)) if step else NO_ROW, kind, group, pair, str(link.get("Transport Type", "")),
        _scaled(link.get("Transit Size(MB)"), 10**6), _scaled(link.get("Transit Time(ms)"), 10**6),
        float(bandwidth) if bandwidth is not None else np.nan,
    )  # fmt: skip


def _readable(folder: Path, warnings: c.Notes) -> list | None:
    """The ops of the folder's communication.json; None (with a warning if it is there but not readable) else."""
    file = folder / COMMUNICATION_FILE
    if not file.is_file():
        return None
    try:
        return _entries(_load(file))
    except TraceError as e:
        warnings.append(f"{e}; msprof's per-op communication figures not read")
        return None


def table(ops: pd.DataFrame, device: int) -> pd.DataFrame:
    """The op rows and one step row per step number spanning its ops."""
    names = ops["name"].to_numpy(dtype=object)
    frame = pd.DataFrame(
        {
            "ts": ops["ts"].to_numpy(),
            "dur": ops["dur"].to_numpy(),
            "name": names,
            "kind": Kind.COMMUNICATION.value,
            "pid": "device",
            "tid": "communication",
            "device": device,
            "collective": [c.collective_and_bytes(n, None, None)[0] for n in names],
            "group": ops["group"].to_numpy(dtype=object),
            "core": c.HCCL_CORE,
        }
    )
    frame = pd.concat([frame, _steps(ops)], ignore_index=True)
    frame["device"] = frame["device"].fillna(NO_ROW).astype(np.int64)
    for col in ("name", "kind", "pid", "tid", "collective", "group", "core"):
        frame[col] = frame[col].fillna("").astype(str).astype("category")
    return frame


def _steps(ops: pd.DataFrame) -> pd.DataFrame:
    """One step marker per step key, spanning its ops (the file records no step times)."""
    stepped = ops[ops["step"] != NO_ROW].assign(end=ops["ts"] + ops["dur"]).groupby("step")
    start = stepped["ts"].min()
    return pd.DataFrame(
        {
            "ts": start.to_numpy(),
            "dur": (stepped["end"].max() - start).to_numpy(),
            "name": [f"{c.STEP_PREFIX}{s}" for s in start.index],
            "kind": Kind.STEP.value,
            "pid": "steps",
            "tid": f"{COMMUNICATION_FILE} steps",
        }
    )


def groups(folder: Path) -> dict[str, str]:
    """Group of each communication op name in the folder's communication.json ({} when absent or unreadable)."""
    file = folder / COMMUNICATION_FILE
    if not file.is_file():
        return {}
    try:
        data = _load(file)
    except TraceError:
        return {}
    keys = [str(k) for kinds in _object(data).values() for ops in _object(kinds).values() for k in _object(ops)]
    return dict(k.partition("@")[::2] for k in keys if "@" in k)


def _load(file: Path):
    """The file's JSON, its decimals as Decimal (exact as written)."""
    try:
        return json.loads(file.read_bytes(), parse_float=Decimal)
    except (OSError, ValueError, RecursionError) as e:
        raise TraceError(file, f"is not readable JSON ({type(e).__name__}: {e})") from None


def _object(value) -> dict:
    return value if isinstance(value, dict) else {}


def _number(value) -> Decimal | None:
    """A JSON number as an exact Decimal; None for anything else (NaN and infinities included)."""
    if isinstance(value, bool) or not isinstance(value, int | float | Decimal) or value != value:
        return None
    number = Decimal(value)
    return number if number.is_finite() else None
