"""Vocabulary and helpers shared by the Ascend text and database readers.

Format facts (lane names, task types, units, sentinels) are from ``../shared/docs/anchors-ascend.md``.
"""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
from traceanalyzer.parsers.ascend.job import Job

from traceanalyzer.classify import collective_from_name
from traceanalyzer.errors import TraceError
from traceanalyzer.schema import NO_ROW, PROFILER_LEVEL, Device, Kind, Platform, TraceMeta

PYTHON_LANE = "Python"
GC_LANE = "Python GC"
HOST_API_LANES = frozenset({"CANN", "AscendCL", "Runtime", "GE", "Node", "Hccl"})
DEVICE_LANES = frozenset({"Ascend Hardware", "Task Scheduler"})
COMM_LANES = frozenset({"HCCL", "Communication"})
OVERLAP_LANE = "Overlap Analysis"
OVERLAP_NAMES = ("Computing", "Communication", "Communication(Not Overlapped)", "Free")
"""Overlap Analysis lane names, in the order of the database's ``OVERLAP_ANALYSIS.type`` codes."""

COMM_OP_THREAD = re.compile(r"^Group (.+) Communication$")
"""HCCL lane thread holding whole collectives; other HCCL threads (``Plane k``) hold their tasks."""

COMPUTE_CORES = frozenset({"AI_CORE", "AI_VECTOR_CORE", "AI_CPU", "MIX_AIC", "MIX_AIV", "FFTS_PLUS", "DSA_SQE"})
"""Task types of compute work (kernel_details ``Accelerator Core`` / trace ``Task Type``)."""

HCCL_CORE = "HCCL"
"""``core`` of collectives and their tasks."""

COMM_CORES = frozenset({HCCL_CORE, "COMMUNICATION", "communication"})
"""``Accelerator Core`` values of collectives in kernel_details / op_summary."""

COMM_TASK_TYPES = frozenset({"Notify Wait", "Notify Record", "Write Value", "SDMA", "RDMA", "Reduce Inline", "Memcpy"})
"""Device-lane task types that are the tasks of a collective (their HCCL-lane twins carry the details)."""

TASK_KIND = {
    "MEMCPY_ASYNC": Kind.MEMCPY,
    "SDMA_SQE": Kind.MEMCPY,
    "PCIE_DMA_SQE": Kind.MEMCPY,
    "EVENT_RECORD_SQE": Kind.SYNC,
    "EVENT_WAIT_SQE": Kind.SYNC,
    "EVENT_RECORD": Kind.SYNC,
    "EVENT_WAIT": Kind.SYNC,
    "PLACE_HOLDER_SQE": Kind.OTHER,
    "PROFILING_ENABLE": Kind.OTHER,
    "PROFILING_DISABLE": Kind.OTHER,
    "STARS_COMMON": Kind.OTHER,
}
"""Kind of device tasks that are neither compute nor communication, by task type (trace or DB)."""

DEQUEUE_CAT = "dequeue"
"""Category of ``Dequeue@<op>``: the task-queue thread running an op's CANN calls, a RUNTIME row (not a CPU op, so
the op table keeps the ops the user called); its ``caller`` is the op's ``Enqueue``, so device work gets that op."""
DEQUEUE_PREFIX = "Dequeue@"

STEP_PREFIX = "ProfilerStep#"
MISSING = frozenset({"", "N/A", "NA", "nan", "None", "4294967295", "18446744073709551615"})
"""Values that mean 'not recorded' in Ascend CSVs and args."""

HCCL_DTYPE_BYTES = {"FP32": 4, "FP16": 2, "BFP16": 2, "BF16": 2, "INT8": 1, "INT16": 2, "INT32": 4, "INT64": 8}
HCCL_DTYPE_BYTES |= {"UINT8": 1, "UINT16": 2, "UINT32": 4, "UINT64": 8, "FP64": 8}

KERNEL_DETAILS_RENAME = {
    "Op Name": "Name",
    "OP Type": "Type",
    "Task Type": "Accelerator Core",
    "Task Start Time(us)": "Start Time(us)",
    "Task Duration(us)": "Duration(us)",
    "Task Wait Time(us)": "Wait Time(us)",
    "Block Dim": "Block Num",
}
"""msprof op_summary header → torch_npu kernel_details header (torch_npu renames them when copying)."""

_UNIT = re.compile(r"\((MB|KB|B|Byte|Bytes)\)\s*$")
_UNIT_BYTES = {"MB": 1 << 20, "KB": 1 << 10, "B": 1, "Byte": 1, "Bytes": 1}


BAD_NS = np.iinfo(np.int64).min
"""A duration or time that is not a number of µs int64 ns can hold (text, inf, 1e308): dropped by ``sanitize``."""
_MAX_US = 9.2e15
"""µs values at or beyond this overflow int64 ns."""
_DECIMAL = re.compile(r"^-?\d{1,16}(\.\d*)?$")


class Notes(list):
    """A parser's warnings (a list of lines) and what it dropped or clipped by reason (TraceMeta.adjustments)."""

    def __init__(self) -> None:
        super().__init__()
        self.adjustments: dict[str, int] = {}

    def adjust(self, where: str, reason: str, count: int) -> None:
        """Count ``count`` rows dropped or clipped for ``reason``, with a warning naming ``where`` (nothing when 0)."""
        if count:
            self.adjustments[reason] = self.adjustments.get(reason, 0) + int(count)
            self.append(f"{where}: {count:,} {reason}")


def us_text_to_ns(values) -> np.ndarray:
    """µs decimal strings (epoch, ns digits, maybe a trailing tab) → int64 ns, exactly; missing → NO_ROW; text that
    is not such a number (abc, inf, 1e308) → BAD_NS."""
    out = np.full(len(values), NO_ROW, dtype=np.int64)
    for i, v in enumerate(values):
        text = str(v).strip()
        if text in MISSING:
            continue
        if not _DECIMAL.match(text):
            out[i] = _float_text_ns(text)
            continue
        whole, _, frac = text.partition(".")
        sign = -1 if whole.startswith("-") else 1
        out[i] = int(whole) * 1000 + sign * int((frac + "000")[:3])
    return out


def _float_text_ns(text: str) -> int:
    """A µs number in another spelling (1.5e3) as ns; BAD_NS where it is not a finite number int64 ns can hold."""
    try:
        value = float(text)
    except ValueError:
        return BAD_NS
    return round(value * 1000) if abs(value) < _MAX_US else BAD_NS


def us_float_to_ns(values) -> np.ndarray:
    """µs durations (numbers or strings, small) → int64 ns, rounded; missing → 0; not a finite number that int64 ns
    can hold (abc, inf, 1e308) → BAD_NS."""
    text = pd.Series(values, dtype=object).astype(str).str.strip()
    arr = pd.to_numeric(text, errors="coerce").to_numpy(float)
    missing = text.isin(MISSING).to_numpy()
    bad = ~missing & (np.isnan(arr) | ~(np.abs(np.nan_to_num(arr, nan=0.0)) < _MAX_US))
    ns = np.rint(np.where(np.isnan(arr) | bad, 0, arr) * 1000).astype(np.int64)
    return np.where(bad, BAD_NS, ns)


MAX_DURATION_NS = 86_400 * 10**9
"""Longer than a day is not an event's duration but a broken value."""
WINDOW_SLACK_NS = 86_400 * 10**9
"""An event starting this far from the median start is a stray value, not part of the recording."""


def sanitize(events: pd.DataFrame, where: str, notes: Notes) -> pd.DataFrame:
    """Rows no analysis can use dropped (no valid start, a broken or day-long duration, a start far outside the
    recording) and negative durations clipped to 0, each counted in ``notes``."""
    ts, dur = events["ts"].to_numpy(), events["dur"].to_numpy()
    no_start = (ts == NO_ROW) | (ts == BAD_NS) | (ts < 0)
    broken = ~no_start & ((dur == BAD_NS) | (dur > MAX_DURATION_NS))
    centre = int(np.median(ts[~no_start & ~broken])) if (~no_start & ~broken).any() else 0
    stray = ~no_start & ~broken & (np.abs(ts - centre) > WINDOW_SLACK_NS)
    notes.adjust(where, "events without a valid start time dropped", int(no_start.sum()))
    notes.adjust(where, "events with a broken or longer-than-a-day duration dropped", int(broken.sum()))
    notes.adjust(where, "events starting more than a day from the rest dropped", int(stray.sum()))
    keep = ~(no_start | broken | stray)
    out = events[keep].reset_index(drop=True) if not keep.all() else events
    if not keep.all() and "caller" in out:
        out["caller"] = _kept_links(out["caller"].to_numpy(), keep)
    negative = out["dur"].to_numpy() < 0
    notes.adjust(where, "negative durations clipped to 0", int(negative.sum()))
    if negative.any():
        out["dur"] = np.maximum(out["dur"].to_numpy(), 0)
    return out


def int_or_none(value) -> int:
    """An int from an arg or CSV cell; NO_ROW for sentinels and blanks."""
    text = str(value).strip() if value is not None else ""
    if text in MISSING:
        return NO_ROW
    try:
        return int(float(text)) if "." in text else int(text)
    except ValueError:
        return NO_ROW


def read_csv(path: Path, notes: Notes | None = None) -> pd.DataFrame:
    """A profiler CSV as stripped strings, columns by header name (CRLF, tabs and quotes handled); rows with more
    fields than the header are skipped and counted in ``notes``; a file that is not CSV is a TraceError."""
    try:
        frame = pd.read_csv(path, dtype=str, keep_default_na=False, skipinitialspace=False)
    except pd.errors.ParserError as e:
        if "EOF inside string" in str(e):
            raise TraceError(path, f"is not a readable CSV (a quote is never closed: {e})") from None
        frame = _read_skipping(path, notes if notes is not None else Notes())
    except (pd.errors.EmptyDataError, UnicodeDecodeError, OSError) as e:
        raise TraceError(path, f"is not a readable CSV ({type(e).__name__}: {e})") from None
    frame.columns = [str(c).strip() for c in frame.columns]
    return frame.apply(lambda s: s.str.strip())


def _read_skipping(path: Path, notes: Notes) -> pd.DataFrame:
    """The CSV without its rows that have more fields than the header (the slower reader, which can skip them)."""
    skipped: list[list[str]] = []
    try:
        frame = pd.read_csv(path, dtype=str, keep_default_na=False, engine="python", on_bad_lines=skipped.append)
    except (pd.errors.ParserError, csv.Error, UnicodeDecodeError, OSError) as e:
        raise TraceError(path, f"is not a readable CSV ({type(e).__name__}: {e})") from None
    notes.adjust(str(path), "CSV rows with more fields than the header skipped", len(skipped))
    return frame


def kernel_details(path: Path, notes: Notes | None = None) -> pd.DataFrame:
    """kernel_details.csv or op_summary_*.csv with torch_npu's header names, ts/dur as int ns; rows without a valid
    start, with a broken duration or far outside the recording dropped (and negative durations clipped), counted."""
    notes = notes if notes is not None else Notes()
    frame = read_csv(path, notes).rename(columns=KERNEL_DETAILS_RENAME)
    for need in ("Name", "Start Time(us)", "Duration(us)"):
        if need not in frame:
            raise TraceError(path, f"has no '{need}' column; not a kernel_details/op_summary table")
    frame["ts"] = us_text_to_ns(frame["Start Time(us)"].to_numpy())
    frame["dur"] = us_float_to_ns(frame["Duration(us)"].to_numpy())
    core = frame.get("Accelerator Core", pd.Series("", index=frame.index))
    frame["core"] = core.where(~core.isin(MISSING), "")
    return sanitize(frame, str(path), notes)


def shapes_json(text: str) -> str:
    """An Ascend shape list (``"32,3,224,224";"64"`` or ``;\\r\\n``-joined) as JSON text, '' if empty."""
    text = (text or "").strip().strip('"')
    if text in MISSING:
        return ""
    parts = [p.strip().strip('"') for p in re.split(r";\s*", text)]
    return json.dumps([[int(x) for x in p.split(",") if x.strip().lstrip("-").isdigit()] for p in parts])


def unit_bytes(header: str) -> int:
    """Bytes per unit of a column whose header ends with (MB), (KB) or (B)."""
    m = _UNIT.search(header)
    return _UNIT_BYTES[m.group(1)] if m else 1


def device_of(text: str) -> int:
    """Device index from 'NPU:0', 'NPU 1', '0' ...; NO_ROW when none."""
    m = re.search(r"(?<![0-9])(\d{1,5})\s*$", str(text))  # below schema.MAX_DEVICE_INDEX
    return int(m.group(1)) if m else NO_ROW


def collective_and_bytes(name: str, dtype: str | None, count) -> tuple[str, int]:
    """The collective an hcom op name implies, and its message size from count × dtype."""
    size = HCCL_DTYPE_BYTES.get(str(dtype or "").upper())
    n = int_or_none(count)
    return collective_from_name(name), (n * size if size and n != NO_ROW else NO_ROW)


def memory_frame(ts, device, total_allocated, total_reserved) -> pd.DataFrame:
    """Allocator snapshots → memory rows; ``bytes`` is the change of allocated bytes since the last one."""
    alloc = np.asarray(total_allocated, dtype=np.int64)
    frame = pd.DataFrame(
        {
            "ts": np.asarray(ts, dtype=np.int64),
            "device": np.asarray(device, dtype=np.int64),
            "total_allocated": alloc,
            "total_reserved": np.asarray(total_reserved, dtype=np.int64),
        }
    ).sort_values("ts", kind="stable")
    valid = frame["total_allocated"].where(frame["total_allocated"] != NO_ROW)
    frame["bytes"] = valid.groupby(frame["device"]).diff().fillna(0).astype(np.int64).to_numpy()
    frame["addr"] = NO_ROW
    frame["pid"] = pd.Categorical([""] * len(frame))
    frame["tid"] = pd.Categorical([""] * len(frame))
    return frame.reset_index(drop=True)


GE_OP_PREFIX = "cann::"
"""operator_memory rows of the CANN graph engine's (GE) own allocator; the memory table holds torch's (PTA) one."""

SAME_EVENT_NS = 5_000
"""A snapshot and a block row of the same total this close are one event: a free's PTA snapshot is written up to
2.4 µs before the block's Release Time (level1 sample), and the database's times differ from the text's by < 1 µs."""

BLOCK_COLUMNS = ("name", "size", "alloc_ts", "release_ts", "device")
BLOCK_COLUMNS += ("alloc_allocated", "alloc_reserved", "release_allocated", "release_reserved")
"""operator_memory rows as both readers hand them over: bytes (size < 0: allocated before the window), ns, NO_ROW."""


def block_memory(events: pd.DataFrame, blocks: pd.DataFrame, snapshots: pd.DataFrame) -> pd.DataFrame:
    """PTA operator_memory rows → allocation and free rows (``addr`` = block id, ``op`` = the record's op), merged
    with the allocator snapshots at the times no block row has (the same events otherwise: counted once)."""
    blocks = blocks[~blocks["name"].str.startswith(GE_OP_PREFIX)].reset_index(drop=True)
    if not len(blocks):
        return snapshots
    size = blocks["size"].abs().to_numpy()
    addr = np.arange(len(blocks), dtype=np.int64)
    op = named_ops(events, blocks["name"].to_numpy(), blocks["alloc_ts"].to_numpy())
    allocs = _block_rows(blocks, "alloc", size, addr, op)[(blocks["size"] > 0) & (blocks["alloc_ts"] != NO_ROW)]
    frees = _block_rows(blocks, "release", -size, addr, np.full(len(blocks), NO_ROW))[blocks["release_ts"] != NO_ROW]
    found = pd.concat([allocs, frees], ignore_index=True)
    rest = _unmatched(snapshots, found).assign(op=NO_ROW)
    merged = pd.concat([found, rest[found.columns]], ignore_index=True).sort_values("ts", kind="stable")
    change = merged.groupby("device")["total_allocated"].diff().fillna(0).astype(np.int64)
    merged["bytes"] = np.where(merged["addr"] == NO_ROW, change, merged["bytes"])
    merged["pid"] = pd.Categorical([""] * len(merged))
    merged["tid"] = pd.Categorical([""] * len(merged))
    return merged.reset_index(drop=True)


def _unmatched(snapshots: pd.DataFrame, found: pd.DataFrame) -> pd.DataFrame:
    """Snapshots that no block row records: none of the device's block rows within SAME_EVENT_NS has their total."""
    keys = ["device", "total_allocated"]
    snaps = snapshots.sort_values("ts", kind="stable").reset_index(drop=True)
    marks = found[["ts"] + keys].sort_values("ts").assign(seen=True)
    hit = pd.merge_asof(snaps[["ts"] + keys], marks, on="ts", by=keys, direction="nearest", tolerance=SAME_EVENT_NS)
    return snaps[hit["seen"].isna().to_numpy()]


def _block_rows(blocks: pd.DataFrame, when: str, size: np.ndarray, addr: np.ndarray, op: np.ndarray) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "ts": blocks[f"{when}_ts"].to_numpy(np.int64),
            "device": blocks["device"].to_numpy(np.int64),
            "bytes": size.astype(np.int64),
            "total_allocated": blocks[f"{when}_allocated"].to_numpy(np.int64),
            "total_reserved": blocks[f"{when}_reserved"].to_numpy(np.int64),
            "addr": addr,
            "op": op.astype(np.int64),
        }
    )


def named_ops(events: pd.DataFrame, names: np.ndarray, ts: np.ndarray) -> np.ndarray:
    """Per record, the position of the innermost CPU op of the record's name running at its time (NO_ROW if none)."""
    out = np.full(len(names), NO_ROW, dtype=np.int64)
    ops = np.flatnonzero((events["kind"].astype(str) == Kind.CPU_OP.value).to_numpy())
    start = events["ts"].to_numpy()[ops]
    end = start + events["dur"].to_numpy()[ops]
    by_name = pd.Series(ops).groupby(events["name"].astype(str).to_numpy()[ops]).indices
    for name, mine in pd.Series(np.asarray(names, dtype=str)).groupby(np.asarray(names, dtype=str)).indices.items():
        cand = by_name.get(name)
        if cand is None:
            continue
        t = ts[mine][:, None]
        inside = (start[cand] <= t) & (end[cand] >= t)
        latest = np.where(inside, start[cand], np.iinfo(np.int64).min).argmax(axis=1)
        ok = inside.any(axis=1)
        out[mine[ok]] = ops[cand[latest[ok]]]
    return out


MODULE_COLUMNS = ("ts", "device", "component", "reserved_bytes")


def module_memory(ts, device, component, reserved) -> pd.DataFrame:
    """npu_module_mem rows: reserved bytes per CANN module over time; negative values (only a release seen) dropped."""
    frame = pd.DataFrame(
        {
            "ts": np.asarray(ts, dtype=np.int64),
            "device": np.asarray(device, dtype=np.int64),
            "component": np.asarray(component, dtype=str),
            "reserved_bytes": np.asarray(reserved, dtype=np.int64),
        },
        columns=list(MODULE_COLUMNS),
    )
    return frame[frame["reserved_bytes"] >= 0].sort_values("ts", kind="stable").reset_index(drop=True)


def empty_memory() -> pd.DataFrame:
    """A memory frame with no rows."""
    return memory_frame([], [], [], [])


def make_meta(path: Path, events: pd.DataFrame, source_format: str, job: Job, notes: Notes) -> TraceMeta:
    """TraceMeta of one Ascend rank."""
    ends = events["ts"].to_numpy() + events["dur"].to_numpy()
    config = _object(_object(job.info.get("config")).get("experimental_config"))
    device = events.loc[events["device"] != NO_ROW, "device"]
    index = int(device.iloc[0]) if len(device) else 0
    return TraceMeta(
        platform=Platform.ASCEND,
        source_format=source_format,
        format_version=str(job.info.get("torch_npu_version") or job.info.get("cann_version") or ""),
        paths=[str(path)],
        ranks=[job.rank if job.rank is not None else 0],
        world_size=job.world_size,
        rank_known=job.rank is not None,
        devices=[Device(index=index, name="Ascend NPU")],
        start_ns=int(events["ts"].min()) if len(events) else 0,
        end_ns=int(ends.max()) if len(events) else 0,
        warnings=list(notes),
        adjustments=dict(notes.adjustments),
        facts={PROFILER_LEVEL: config.get("_profiler_level", ""), "aic_metrics": config.get("_aic_metrics", "")},
        job_ids=_job_ids(job, config),
    )


def _job_ids(job: Job, config: dict) -> dict:
    """What every rank of the job records alike: the world size its metadata records, its profiler settings."""
    ids = {"world size": job.recorded_world_size, "profiler level": config.get("_profiler_level")}
    ids["AI Core metrics"] = config.get("_aic_metrics")
    return {k: v for k, v in ids.items() if isinstance(v, str | int) and v != ""}


def _object(value) -> dict:
    """value if it is a JSON object, else {} (a profiler_info field of another type is ignored)."""
    return value if isinstance(value, dict) else {}


def _kept_links(links: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """Row positions into a table of which only the ``keep`` rows remain, renumbered; NO_ROW where dropped."""
    position = np.where(keep, np.cumsum(keep) - 1, NO_ROW)
    return np.where(links == NO_ROW, NO_ROW, position[np.maximum(links, 0)])


def near_events(frame: pd.DataFrame, events: pd.DataFrame, where: str, notes: Notes, what: str) -> pd.DataFrame:
    """The rows of a memory frame (``ts`` in ns) within WINDOW_SLACK_NS of the events' window; the others (a cut or
    damaged timestamp, such as a truncated µs epoch that reads as 1970) dropped and counted in ``notes``."""
    if not len(frame) or not len(events):
        return frame
    ts = frame["ts"].to_numpy()
    start, end = int(events["ts"].min()), int((events["ts"] + events["dur"]).max())
    stray = (ts != NO_ROW) & ((ts < start - WINDOW_SLACK_NS) | (ts > end + WINDOW_SLACK_NS))
    notes.adjust(where, f"{what} more than a day outside the trace's window dropped", int(stray.sum()))
    return frame[~stray].reset_index(drop=True) if stray.any() else frame


def valid_times(ts: np.ndarray, where: str, notes: Notes, what: str = "rows") -> np.ndarray:
    """Per value, whether it is a recorded time (not missing, not BAD_NS); the bad ones counted in ``notes``."""
    bad = ts == BAD_NS
    notes.adjust(where, f"{what} with a time that is not a µs timestamp dropped", int(bad.sum()))
    return (ts != NO_ROW) & ~bad
