"""The common event table: every column, unit, dtype and category, defined once.

Both platforms (torch.profiler/Kineto and Ascend/CANN) fill the same tables, so every analyzer
runs on either. Times are integer nanoseconds on one time base per rank; row labels of the event
table are stable ids, and the link columns (``parent``, ``launch``, ``op``, ``top_op``, ``caller``) hold
such labels, or ``NO_ROW`` where there is no link.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from enum import Enum

from traceanalyzer import lazy

np = lazy.Module("numpy")  # the kinds and columns are read by the command line's --help: no numpy/pandas for it
pd = lazy.Module("pandas")

NO_ROW = -1
"""The value of a link column, or of ``device``/``stream``/``step``, where there is none."""
MAX_RANKS = 1 << 20
"""A job has at most this many ranks: a world size or rank beyond it read from a file is a wrong value (warned,
not used), so nothing is sized by it."""
MAX_DEVICE_INDEX = (1 << 15) - 1
"""The largest device index kept (int32 columns); a larger one read from a file is a wrong value."""


class Kind(str, Enum):
    """What an event is, on either platform."""

    CPU_OP = "cpu_op"  # an operator dispatched on the host (aten::mm, MatMul, ...)
    PYTHON = "python"  # a Python function frame (with_stack traces)
    ANNOTATION = "annotation"  # a user annotation / record_function range on the host
    STEP = "step"  # a step marker (ProfilerStep#N)
    RUNTIME = "runtime"  # a runtime or driver call (cudaLaunchKernel, aclrtMemcpy, ...)
    KERNEL = "kernel"  # device compute work
    MEMCPY = "memcpy"  # device memory copy
    MEMSET = "memset"  # device memory set
    COMMUNICATION = "communication"  # a collective or point-to-point transfer on the device
    COMM_TASK = "comm_task"  # a task inside a collective (HCCL Notify Wait, Memcpy, ...)
    SYNC = "sync"  # device-side wait or synchronization
    GPU_ANNOTATION = "gpu_annotation"  # a user annotation projected onto a device stream
    OVERLAP_LANE = "overlap_lane"  # a profiler-computed overlap interval (Ascend Overlap Analysis)
    COUNTER = "counter"  # a hardware counter sample: ``value`` in ``unit`` over [ts, ts + dur), or at ts (dur 0)
    OTHER = "other"


DEVICE_KINDS = frozenset({Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET, Kind.COMMUNICATION, Kind.SYNC})
"""Kinds that occupy a device stream."""

BUSY_KINDS = frozenset({Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET, Kind.COMMUNICATION})
"""Device work that makes a device busy: waits (Kind.SYNC, e.g. a stream waiting on an event) do not."""

HOST_KINDS = frozenset({Kind.CPU_OP, Kind.PYTHON, Kind.ANNOTATION, Kind.STEP, Kind.RUNTIME})
"""Kinds that run on a host thread and nest into a call tree."""


def kind_names(kinds: Iterable[Kind]) -> tuple[str, ...]:
    """The ``kind`` column's values of some kinds, sorted (what ``isin`` and ``kind_rows`` take)."""
    return tuple(sorted(k.value for k in kinds))


# Every set of kinds the product selects by, built here once and used by name (tests/test_layers.py fails on a set
# of kinds spelled out anywhere else). Values of the ``kind`` column, sorted.
DEVICE = kind_names(DEVICE_KINDS)
"""Rows on a device stream (``DEVICE_KINDS``)."""
BUSY = kind_names(BUSY_KINDS)
"""Device work that makes a device busy (``BUSY_KINDS``): waits do not."""
HOST = kind_names(HOST_KINDS)
"""Host rows that nest into a call tree (``HOST_KINDS``)."""
HOST_WORK = kind_names(HOST_KINDS - {Kind.STEP})
"""Host rows that are work a thread does: annotations, ops, Python frames, runtime calls (not step markers)."""
HOST_CALLS = kind_names({Kind.CPU_OP, Kind.PYTHON, Kind.RUNTIME})
"""Host rows that are calls: ops, Python frames and runtime calls (not annotations or step markers)."""
CALL_TREE = kind_names(HOST_KINDS - {Kind.RUNTIME})
"""Host rows a call path is read from: step markers, annotations, ops and Python frames (runtime calls are leaves)."""
PATH = kind_names({Kind.ANNOTATION, Kind.CPU_OP})
"""Host rows that name a place in a call path: annotations and ops."""
MARKERS = kind_names({Kind.ANNOTATION, Kind.RUNTIME})
"""Host rows whose names mark what a program does (annotations, and runtime calls such as a graph launch)."""
REQUEST_HOST = kind_names({Kind.ANNOTATION, Kind.CPU_OP, Kind.RUNTIME})
"""Host rows a request starts with where no step marks it: annotations, ops and runtime calls (no Python frames)."""
OPS_AND_KERNELS = kind_names({Kind.CPU_OP, Kind.KERNEL})
"""Rows whose names tell what the model computes: host ops and device kernels."""
DEVICE_WORK = kind_names(BUSY_KINDS - {Kind.COMMUNICATION})
"""Device work other than communication: kernels, copies and sets."""
CORE_WORK = kind_names({Kind.KERNEL, Kind.COMMUNICATION})
"""Device work that runs on the compute cores: kernels and collectives (not copies, sets or waits)."""
NON_COPY_WORK = kind_names(BUSY_KINDS - {Kind.MEMCPY})
"""Busy device work other than copies: kernels, sets and collectives."""
NOT_COMPUTE = kind_names({Kind.SYNC, Kind.COMMUNICATION})
"""Device rows that wait or communicate: left out of the device's compute."""
MEMORY_OPS = kind_names({Kind.MEMCPY, Kind.MEMSET})
"""Device rows that copy or set memory."""
ON_DEVICE_LANE = kind_names(DEVICE_KINDS | {Kind.GPU_ANNOTATION})
"""Rows recorded on a device lane: a stream's rows and the annotations projected on it."""
LINKABLE_DEVICE = kind_names(DEVICE_KINDS | {Kind.GPU_ANNOTATION, Kind.COMM_TASK})
"""Device rows a host launch can be linked to: a stream's rows, annotations projected on it and collectives' tasks."""
TIMELINE_DEVICE = kind_names(DEVICE_KINDS | {Kind.COMM_TASK})
"""Device rows the timeline draws on a device lane: a stream's rows and collectives' tasks."""


class Platform(str, Enum):
    """The accelerator family a trace was recorded on."""

    CUDA = "cuda"
    ROCM = "rocm"
    MTIA = "mtia"
    ASCEND = "ascend"
    CPU = "cpu"


@dataclass(frozen=True)
class Column:
    """One column of a table: its name, dtype and meaning."""

    name: str
    dtype: str
    doc: str


EVENT_COLUMNS: tuple[Column, ...] = (
    Column("ts", "int64", "start, ns, on the rank's time base"),
    Column("dur", "int64", "duration, ns (0 for instants)"),
    Column("name", "category", "event name (op, kernel, runtime call, ...)"),
    Column("kind", "category", "one of Kind"),
    Column("cat", "category", "the source's own category, kept for reference"),
    Column("rank", "int32", "distributed rank (0 when the trace does not say)"),
    Column("pid", "category", "process (host) or device lane id, as the source writes it"),
    Column("tid", "category", "thread (host) or stream lane id, as the source writes it"),
    Column("device", "int32", "device index for device work, NO_ROW on the host"),
    Column("stream", "int64", "stream / task queue for device work, NO_ROW on the host"),
    Column("correlation", "int64", "runtime↔device correlation id, NO_ROW if none"),
    Column("external_id", "int64", "op↔runtime external id, NO_ROW if none"),
    Column("step", "int32", "the step the event belongs to, NO_ROW outside steps"),
    Column("parent", "int64", "enclosing host event on the same thread"),
    Column("depth", "int32", "nesting depth on its thread (0 = top level)"),
    Column("launch", "int64", "device work: the runtime call that launched it"),
    Column("op", "int64", "innermost CPU op that caused it (device work, runtime calls and ops)"),
    Column("top_op", "int64", "top-level CPU op that caused it"),
    Column("caller", "int64", "host event on another thread that handed it its work; of a comm_task, its collective"),
    Column("input_dims", "category", "recorded input shapes, JSON text, '' if none"),
    Column("input_types", "category", "recorded input dtypes, JSON text, '' if none"),
    Column("grid", "category", "a kernel's launch grid in blocks, 'x,y,z', '' if not recorded"),
    Column("block", "category", "a kernel's block in threads, 'x,y,z', '' if not recorded"),
    Column("bytes", "int64", "bytes moved (memcpy/memset/communication message), NO_ROW if unknown"),
    Column("collective", "category", "collective name (allreduce, all_gather, ...) for communication"),
    Column("group", "category", "process group / communicator name for communication"),
    Column("core", "category", "accelerator core type (Ascend: AI_CORE, AI_CPU, ...), '' if none"),
    Column("value", "float64", "a counter sample's value (Kind.COUNTER; name: the counter, cat: its source), NaN else"),
    Column("unit", "category", "a counter's unit: ratio (0..1), percent, ns, cycles, bytes, or '' where not said"),
    Column("measured", "category", "a counter sample's kernel, where its source names the one it measured, else ''"),
)

MEMORY_COLUMNS: tuple[Column, ...] = (
    Column("ts", "int64", "time of the allocation or free, ns"),
    Column("rank", "int32", "distributed rank"),
    Column("device", "int32", "device index (-1 = host memory)"),
    Column("bytes", "int64", "signed change: + allocation, - free"),
    Column("total_allocated", "int64", "allocated bytes after the change, NO_ROW if not recorded"),
    Column("total_reserved", "int64", "reserved bytes after the change, NO_ROW if not recorded"),
    Column("addr", "int64", "block address, NO_ROW if not recorded"),
    Column("op", "int64", "innermost CPU op (event-table label) during which it happened"),
    Column("step", "int32", "step it happened in"),
)


COUNTER_COLUMNS: tuple[Column, ...] = tuple(
    c for c in EVENT_COLUMNS if c.name in ("ts", "dur", "name", "kind", "cat", "device", "value", "unit", "measured")
)
"""The event columns a counter sample (``Kind.COUNTER``) fills: Ascend PMU values over their kernel's interval, CUPTI
range-profiler metrics over their range, Kineto counter-track samples at an instant; ``cat`` says which source."""


class Merge(str, Enum):
    """How a joined trace makes one side table of its ranks' tables."""

    STACKED = "stacked"  # the ranks' rows one after another, in rank order (each row names its rank)


@dataclass(frozen=True)
class SideTable:
    """A table a parser keeps beside the event table (``TraceMeta.side_tables``): its name, its columns (each with
    its unit; ``rank`` first, then those the source records, in this order), how a joined trace merges it."""

    name: str
    columns: tuple[Column, ...]
    merge: Merge
    doc: str


def _side(name: str, doc: str, *columns: Column) -> SideTable:
    """A stacked side table whose first column is the rank of each row."""
    return SideTable(name, (Column("rank", "int64", "distributed rank of the row"), *columns), Merge.STACKED, doc)


_STEP = Column("step", "int64", "step number (an id)")
_DEVICE = Column("device", "int64", "device index")
_OP = Column("name", "str", "communication op (msprof's name)")
_GROUP = Column("group", "str", "communication group")
_TRANSPORT = Column("transport", "str", "transport type (HCCS, PCIE, RDMA, SIO, LOCAL, ...)")
_BYTES = Column("bytes", "int64", "bytes moved, NO_ROW if not recorded")
_TRANSIT = Column("transit_ns", "int64", "transit time, ns, NO_ROW if not recorded")
_BANDWIDTH = Column("bandwidth_gbps", "float64", "bandwidth, GB/s (10^9 bytes/s)")
_STEP_FIGURE = "msprof's per-step figure, ns"

MODULE_MEMORY = _side(
    "module_memory",
    "reserved bytes per CANN module over time (Ascend npu_module_mem), apart from the allocator's events",
    Column("ts", "int64", "time of the sample, ns"),
    _DEVICE,
    Column("component", "str", "the CANN module"),
    Column("reserved_bytes", "int64", "bytes the module holds reserved, bytes"),
)
MEMORY_SEGMENTS = _side(
    "memory_segments",
    "a memory snapshot's segments at the peak, at each out-of-memory error and at the dump",
    Column("at", "str", "when: 'peak', an out-of-memory error, or 'dump'"),
    _DEVICE,
    Column("address", "str", "the segment's address, hex"),
    Column("bytes", "int64", "the segment's size, bytes"),
    Column("allocated_bytes", "int64", "bytes of its blocks allocated, bytes"),
    Column("unused_bytes", "int64", "reserved but not allocated, bytes"),
    Column("largest_free_bytes", "int64", "its largest free block, bytes"),
    Column("blocks", "int64", "allocated blocks in it, count"),
)
MEMORY_OOM = _side(
    "memory_oom",
    "the out-of-memory errors a memory snapshot's history recorded",
    Column("ts", "int64", "time of the error, ns"),
    _DEVICE,
    Column("requested_bytes", "int64", "the allocation that failed, bytes"),
    Column("allocated_bytes", "int64", "allocated then, bytes"),
    Column("reserved_bytes", "int64", "reserved then, bytes"),
    Column("unused_reserved_bytes", "int64", "reserved but not allocated then, bytes"),
    Column("largest_free_bytes", "int64", "the largest free block then, bytes"),
    Column("device_free_bytes", "int64", "device memory the driver reported free, bytes"),
    Column("stack", "str", "the failing allocation's Python stack"),
)
STEP_TRACE = _side(
    "step_trace",
    "msprof's per-step figures (step_trace_time.csv / analysis.db StepTraceTime)",
    _STEP,
    _DEVICE,
    *(
        Column(f"{what}_ns", "int64", _STEP_FIGURE)
        for what in (
            "computing",
            "communication_not_overlapped",
            "overlapped",
            "communication",
            "free",
            "stage",
            "bubble",
            "communication_not_overlapped_exclude_receive",
            "preparing",
        )
    ),
)
HCCL_OPS = _side(
    "hccl_ops",
    "msprof's per-op communication times (communication.json)",
    _STEP,
    _OP,
    _GROUP,
    Column("ts", "int64", "start of the op, ns"),
    *(
        Column(f"{what}_ns", "int64", f"the op's {what} time, ns")
        for what in ("elapse", "transit", "wait", "synchronization", "idle")
    ),
)
HCCL_LINKS = _side(
    "hccl_links",
    "msprof's per-op, per-transport transit size, time and bandwidth (communication.json)",
    _STEP,
    _OP,
    _GROUP,
    Column("ts", "int64", "start of the op, ns"),
    _TRANSPORT,
    _BYTES,
    _TRANSIT,
    _BANDWIDTH,
)
HCCL_MATRIX = _side(
    "hccl_matrix",
    "msprof's per-link (src-dst rank) step totals per op type (communication_matrix.json)",
    _STEP,
    Column("op_type", "str", "the collective"),
    _GROUP,
    Column("link", "str", "source and destination rank, 'src-dst'"),
    _TRANSPORT,
    _BYTES,
    _TRANSIT,
    _BANDWIDTH,
)
SIDE_TABLES: dict[str, SideTable] = {
    t.name: t for t in (MODULE_MEMORY, MEMORY_SEGMENTS, MEMORY_OOM, STEP_TRACE, HCCL_OPS, HCCL_LINKS, HCCL_MATRIX)
}
"""Every side table a trace may keep, by name: a parser keeps no other (``TraceMeta.keep`` refuses it)."""
Scalar = str | int | float | bool | None
"""A value of ``TraceMeta.facts``: as the file records it."""
PROFILER_LEVEL = "profiler_level"
"""The key in ``TraceMeta.facts`` of an Ascend run's profiler level (Level0, Level1, Level2)."""


def column_names(columns: tuple[Column, ...]) -> list[str]:
    """Names of the given columns, in order."""
    return [c.name for c in columns]


def positions(index: pd.Index, labels: np.ndarray) -> np.ndarray:
    """The positions of row labels in a table's index (-1 at NO_ROW or a label it lacks); where the labels are the
    positions (an event table's RangeIndex) without a lookup."""
    labels = np.asarray(labels, dtype=np.int64)
    if isinstance(index, pd.RangeIndex) and index.start == 0 and index.step == 1:
        return np.where((labels >= 0) & (labels < len(index)), labels, -1)
    return index.get_indexer(labels)


def codes_at(column: pd.Series, labels: np.ndarray) -> np.ndarray:
    """A category column's codes at the given row labels (-1 at NO_ROW, a label the column lacks or a missing value)."""
    position = positions(column.index, labels)
    codes = column.array.codes
    return np.where(position >= 0, codes[position], -1) if len(codes) else np.full(len(position), -1, dtype=np.int8)


def category_text(column: pd.Series) -> np.ndarray:
    """A category column's categories as text (an object array indexed by code), then '' for code -1 (missing)."""
    return np.array([*map(str, column.array.categories), ""], dtype=object)


def per_pair(
    first: np.ndarray, first_text: np.ndarray, second: np.ndarray, second_text: np.ndarray, value: Callable
) -> np.ndarray:
    """``value(a, b)`` of each row's pair of category texts (codes ``first``/``second`` into the ``category_text``
    arrays), computed once per distinct pair; an object array."""
    a, b = np.asarray(first, dtype=np.int64), np.asarray(second, dtype=np.int64)
    pairs, at = np.unique((a + 1) * len(second_text) + b + 1, return_inverse=True)
    firsts, seconds = np.divmod(pairs, len(second_text))
    values = [value(first_text[i - 1], second_text[j - 1]) for i, j in zip(firsts, seconds, strict=True)]
    return np.asarray(values, dtype=object)[at] if len(values) else np.empty(0, dtype=object)


def conform(df: pd.DataFrame, columns: tuple[Column, ...]) -> pd.DataFrame:
    """Return df with exactly the given columns in order and dtypes; missing ones get defaults ('', NaN for floats,
    else NO_ROW). Columns that already have their dtype are taken as they are, not copied."""
    out = {}
    n = len(df)
    for c in columns:
        if c.name in df:
            s = df[c.name]
            out[c.name] = s if str(s.dtype) == c.dtype else s.astype(c.dtype)
        elif c.dtype == "category":
            out[c.name] = pd.Categorical.from_codes(np.zeros(n, dtype=np.int8), categories=[""])
        else:
            out[c.name] = np.full(n, np.nan if c.dtype == "float64" else NO_ROW, dtype=c.dtype)
    return pd.DataFrame(out, index=df.index, copy=False)


def check_side_table(name: str, table: pd.DataFrame) -> pd.DataFrame:
    """``table`` when it is the side table ``name`` as declared (``SIDE_TABLES``: the name, and no column beyond
    the declared ones, in their order, ``rank`` first); else a ValueError naming what is not declared."""
    if name not in SIDE_TABLES:
        raise ValueError(f"side table {name!r} is not declared in schema.SIDE_TABLES")
    declared = column_names(SIDE_TABLES[name].columns)
    order = [c for c in declared if c in table.columns]
    if list(table.columns) != order or order[:1] != ["rank"]:
        raise ValueError(f"side table {name!r} has columns {list(table.columns)}, not {declared} (in that order)")
    return table


@dataclass
class Device:
    """One accelerator the trace describes."""

    index: int
    name: str
    memory_bytes: int | None = None
    properties: dict = field(default_factory=dict)


@dataclass
class TraceMeta:
    """Facts about a loaded trace (or job of several ranks)."""

    platform: Platform
    source_format: str
    format_version: str
    paths: list[str]
    ranks: list[int]
    world_size: int
    rank_known: bool
    devices: list[Device] = field(default_factory=list)
    base_time_ns: int = 0
    start_ns: int = 0
    end_ns: int = 0
    process_groups: list[dict] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    adjustments: dict[str, int] = field(default_factory=dict)
    """Events dropped or values clipped by the parser, by reason (``"negative duration clipped to 0": 12``); each
    reason also has a warning, and the report's ledger lists them."""
    side_tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    """Tables kept beside the event table, by declared name (``SIDE_TABLES``, their columns and merge rule), only
    those the trace has; each row names its rank (``keep`` adds the column, ``with_rank`` renames it)."""
    facts: dict[str, Scalar] = field(default_factory=dict)
    """Scalars the file records about the run by name (trace id, CUDA/CUPTI versions, profiler level), only those
    it records; a joined trace's are its first rank's."""
    job_ids: dict[str, str | int] = field(default_factory=dict)
    """What every rank of one job records alike (world size, backend, profiler settings: name → value, only those
    the file records); ranks that record two values of one are of two jobs."""

    def __post_init__(self) -> None:
        """Refuse a side table that is not declared (``SIDE_TABLES``) or has a column its declaration lacks."""
        for name, table in self.side_tables.items():
            check_side_table(name, table)

    def keep(self, declared: SideTable, table: pd.DataFrame) -> None:
        """Keep ``table`` (of the columns ``declared`` names) as that side table of this one-rank trace, its ``rank``
        column added (the columns put in their declared order); a ValueError for a table not in ``SIDE_TABLES`` or a
        column its declaration lacks."""
        table = table.assign(rank=self.ranks[0] if self.ranks else 0)
        names = column_names(declared.columns)
        order = [c for c in names if c in table] + [c for c in table if c not in names]
        self.side_tables[declared.name] = check_side_table(declared.name, table[order])

    def side_table(self, declared: SideTable) -> pd.DataFrame:
        """The side table ``declared`` of every rank of the trace (rows of each rank in rank order); empty, with the
        declared columns, when no rank has it."""
        found = self.side_tables.get(declared.name)
        return found if found is not None else pd.DataFrame(columns=column_names(declared.columns))

    def with_rank(self, rank: int) -> None:
        """Make this one-rank trace rank ``rank``, its side tables' rows too."""
        self.ranks = [rank]
        self.side_tables = {name: t.assign(rank=rank) for name, t in self.side_tables.items()}

    def adjust(self, reason: str, count: int) -> None:
        """Record that ``count`` events were dropped or clipped for ``reason`` (nothing when count is 0)."""
        if count:
            self.adjustments[reason] = self.adjustments.get(reason, 0) + int(count)

    @property
    def span_ns(self) -> int:
        """Length of the recorded window."""
        return self.end_ns - self.start_ns
