"""The op stream the fusion patterns match on: one entry per top-level op (or per unlinked device task).

An entry is a top-level CPU op on a host thread (the framework op sequence: forward ops on the main thread,
autograd nodes on the backward thread) with the device work it caused, or, where device work has no
causing op (kernel-only traces), the device task itself on its stream. Each entry carries its canonical
token, measured device time, compute-bound (GEMM/attention/convolution) time, kernel count, and the tensor
bytes from the recorded shapes. An op whose only device work is copies is named by the copy's kind
(``memcpy_htod``) before any cast rule: moving a batch to the device is not a cast chain.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from traceanalyzer import calltree, intervals
from traceanalyzer.analyzers import callpath
from traceanalyzer.analyzers.fusion.patterns import (
    BACKWARD_SUFFIX,
    BIAS_ADD,
    FORMAT_TOKEN,
    FUSED_OPTIMIZER_OP,
    GEMM_TOKENS,
    KERNELLESS_SUFFIX,
    LAYOUT_TOKENS,
    WRAPPER_OP,
    canonical,
    display_name,
)
from traceanalyzer.intervals import Intervals, Packed, narrow, pack
from traceanalyzer.memo import remember
from traceanalyzer.schema import DEVICE_WORK, NO_ROW, Kind, category_text
from traceanalyzer.vocabulary import (
    ATTENTION_KERNEL,
    CONV_KERNEL,
    FUSED_KERNEL,
    GEMM_KERNEL,
    MEMCPY_KIND,
    dtype_bytes,
)

"""Device work a fusion can remove (communication is never fused away)."""

COMPUTE_BOUND = re.compile("|".join(r.pattern for r in (GEMM_KERNEL, ATTENTION_KERNEL, CONV_KERNEL)), re.IGNORECASE)
"""Kernel names of compute-bound work (GEMM, fused attention, convolution): a fusion keeps it."""

COPY_PREFIX = "memcpy_"
"""Prefix of the token of an op whose device work is only copies, by the copy's kind (``memcpy_htod``)."""

FUSED_TOKEN = "fused_kernel"
"""Token of an op whose device work already is fused kernels: no pattern or discovered chain claims it."""

FORMAT_KERNEL = re.compile(r"(?:^|_)TransData")
"""Ascend format-conversion tasks (``trans_TransData_3``, ``aclnnMaxPool2dWithMask_TransDataSpecial_...``): split
out of the op that ran them into an entry of their own, before it."""

ENTRY_COLUMNS = [
    "row",
    "lane",
    "ts",
    "step",
    "rank",
    "token",
    "label",
    "device_ns",
    "gemm_ns",
    "kernels",
    "in_bytes",
    "out_bytes",
]

Entries = dict[str, np.ndarray]
"""Entries as columns (name → one value per entry), before they become the op stream's DataFrame."""


def op_stream(trace) -> pd.DataFrame:
    """All entries of the trace, ordered by lane then start time; ``lane`` numbers the sequences."""
    table = stream(trace)
    return pd.DataFrame(table) if table else pd.DataFrame(columns=ENTRY_COLUMNS)


def stream(trace) -> Entries:
    """The columns of ``op_stream`` (``ENTRY_COLUMNS`` and ``shape_row``; none without entries)."""
    ev = trace.events
    rows, bound = device_work(trace)
    linked, orphans = _work_rows(ev, rows)
    parts = [_op_entries(ev, linked, bound)] + ([_kernel_entries(ev, orphans, bound)] if len(orphans) else [])
    parts = [p for p in parts if len(p["row"])]
    if not parts:
        return {}
    table = {c: np.concatenate([p[c] for p in parts]) for c in parts[0]}
    table = _in_lane_order(table)
    table["in_bytes"], table["out_bytes"] = _bytes(table, ev)
    token = table["token"]
    token[_bias_adds(table, ev)] = BIAS_ADD
    _name_layout_work(token, table, ev)
    idle = table["kernels"] == 0
    token[idle] = token[idle] + KERNELLESS_SUFFIX
    return {c: table[c] for c in ENTRY_COLUMNS + ["shape_row"]}


def device_work(trace) -> tuple[np.ndarray, np.ndarray]:
    """Rows of the device work (``DEVICE_WORK``) and, per event, whether it is compute-bound device work (GEMM,
    attention, convolution: ``COMPUTE_BOUND``), once per trace."""
    return remember(trace, f"{__name__}.device_work", lambda: _device_work(trace.events))


def _device_work(ev: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """``device_work`` of an event table (each distinct kernel name searched once)."""
    rows = np.flatnonzero(ev["kind"].isin(DEVICE_WORK).to_numpy())
    bound = np.zeros(len(ev), dtype=bool)
    bound[rows] = per_text(ev["name"], rows, finds(COMPUTE_BOUND), bool)
    return rows, bound


def _work_rows(ev: pd.DataFrame, work: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows of device work (``work``) linked to a CPU op, and of device work of ranks where none is linked
    (kernel-only)."""
    top = ev["top_op"].to_numpy()[work]
    rank = ev["rank"].to_numpy()[work]
    linked = top != NO_ROW
    return work[linked], work[~linked & ~np.isin(rank, np.unique(rank[linked]))]


def _in_lane_order(table: Entries) -> Entries:
    """The entries sorted by lane label then start (stable), with ``lane`` numbering the lanes in that order."""
    codes, labels = pd.factorize(table.pop("lane_key"))
    rank_of = np.empty(len(labels), dtype=np.int64)
    rank_of[np.argsort(np.asarray(labels, dtype=object), kind="stable")] = np.arange(len(labels))
    lane = rank_of[codes]
    order = np.lexsort((table["ts"], lane))
    table = {c: v[order] for c, v in table.items()}
    table["lane"] = lane[order]
    return table


def unwrapped_top_ops(ev: pd.DataFrame, rows: np.ndarray) -> np.ndarray:
    """Per CPU-op row, its stream op: its top-level op (linking's ``top_op``), except below a record_function range
    that torch_npu writes as a CPU op (``WRAPPER_OP``), where it is the outermost op inside such ranges (NO_ROW for
    a range with no op inside)."""
    wrapper = _wrapper_ops(ev)
    top = ev["top_op"].to_numpy()[rows]
    under = (top != NO_ROW) & wrapper[np.maximum(top, 0)]
    if not under.any():
        return top
    out = top.copy()
    out[under] = _outermost_unwrapped(ev, wrapper)[rows[under]]
    return out


def _wrapper_ops(ev: pd.DataFrame) -> np.ndarray:
    """Per event: is it a record_function range written as a CPU op (``WRAPPER_OP``)?"""
    cpu = np.flatnonzero((ev["kind"] == Kind.CPU_OP.value).to_numpy())
    out = np.zeros(len(ev), dtype=bool)
    out[cpu] = per_text(ev["name"], cpu, lambda n: bool(WRAPPER_OP.match(n)), bool)
    return out


def _outermost_unwrapped(ev: pd.DataFrame, wrapper: np.ndarray) -> np.ndarray:
    """Per event (and the sentinel: NO_ROW), the outermost CPU op at or above it (``parent`` links) that is not a
    wrapper; NO_ROW if none."""
    own = (ev["kind"] == Kind.CPU_OP.value).to_numpy() & ~wrapper
    return calltree.CallTree.of(ev).outermost(own)


def _owners(ev: pd.DataFrame, linked: np.ndarray, stream_op: np.ndarray) -> np.ndarray:
    """Per linked device task, the stream op that caused it: that of its innermost op, else its top-level op
    (``stream_op``: per event, the stream op of a CPU op)."""
    op = ev["op"].to_numpy()[linked]
    owner = np.where(op != NO_ROW, stream_op[np.maximum(op, 0)], NO_ROW)
    return np.where(owner != NO_ROW, owner, ev["top_op"].to_numpy()[linked])


def _op_entries(ev: pd.DataFrame, linked: np.ndarray, bound: np.ndarray) -> Entries:
    """Stream ops (with or without device work), each with the device work it caused (``bound``: per event, is it
    compute-bound), its format conversions (Ascend TransData) as entries of their own just before it."""
    cpu = np.flatnonzero((ev["kind"] == Kind.CPU_OP.value).to_numpy())
    stream_op = np.full(len(ev), NO_ROW, dtype=np.int64)
    stream_op[cpu] = unwrapped_top_ops(ev, cpu)
    owner = _owners(ev, linked, stream_op)
    rows = _union(len(ev), cpu[stream_op[cpu] == cpu], owner)
    at = np.searchsorted(rows, owner)  # the entry of each linked task's owner
    fmt = per_text(ev["name"], linked, finds(FORMAT_KERNEL), bool)
    table = _host_entries(ev, rows)
    totals = _device_totals(ev, bound, linked[~fmt], at[~fmt], len(rows))
    table["device_ns"], table["gemm_ns"], table["kernels"] = totals
    named = _work_tokens(ev, linked, at, len(rows))
    table["token"] = np.where(named != "", named, table["token"])
    table["token"][per_text(ev["name"], rows, finds(FUSED_OPTIMIZER_OP), bool)] = FUSED_TOKEN
    table["shape_row"] = _shape_rows(ev, rows, linked, at)
    return _concat(_format_entries(ev, bound, table, linked[fmt], at[fmt]), table)


def _union(n: int, *rows: np.ndarray) -> np.ndarray:
    """The distinct rows (ascending, of a table of n) in any of the ``rows`` arrays."""
    mark = np.zeros(n, dtype=bool)
    for r in rows:
        mark[r] = True
    return np.flatnonzero(mark)


def _host_entries(ev: pd.DataFrame, rows: np.ndarray) -> Entries:
    """The columns every entry of a host op has: row, lane label (``rank/pid/tid``), start, step, rank, token, label."""
    rank = ev["rank"].to_numpy()[rows]
    pid = ev["pid"].cat.codes.to_numpy()[rows]
    tid = ev["tid"].cat.codes.to_numpy()[rows]
    cats = (ev["pid"].cat.categories, ev["tid"].cat.categories)
    label = _lane_labels(lambda r, p, t: f"{r}/{cats[0][p]}/{cats[1][t]}", rank, pid, tid)
    return {
        "row": rows,
        "lane_key": label,
        "ts": ev["ts"].to_numpy()[rows],
        "step": ev["step"].to_numpy()[rows],
        "rank": rank,
        "token": per_text(ev["name"], rows, canonical),
        "label": per_text(ev["name"], rows, display_name),
    }


def _lane_labels(label: Callable[..., str], *parts: np.ndarray) -> np.ndarray:
    """``label(*values)`` per entry, made once per distinct combination of the ``parts``."""
    codes, first = combinations(*parts)
    labels = np.array([label(*(p[i] for p in parts)) for i in first.tolist()], dtype=object)
    return labels[codes]


def combinations(*parts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A code per distinct combination of the parts' values at each position (numbered in order of first
    appearance), and one position holding each."""
    codes = np.zeros(len(parts[0]), dtype=np.int64)
    for part in parts:
        values, distinct = pd.factorize(part)
        codes, _ = pd.factorize(codes * len(distinct) + values)  # renumbered each time: keys stay below n²
    first = np.empty(int(codes.max(initial=-1)) + 1, dtype=np.int64)
    first[codes] = np.arange(len(codes))
    return codes, first


def _concat(*tables: Entries) -> Entries:
    return {c: np.concatenate([t[c] for t in tables]) for c in tables[-1]}


def _format_entries(ev: pd.DataFrame, bound: np.ndarray, table: Entries, work: np.ndarray, at: np.ndarray) -> Entries:
    """One entry per op for the format conversions it ran, placed just before the op (same row and start)."""
    mine = np.unique(at)
    device_ns, gemm_ns, kernels = _device_totals(ev, bound, work, np.searchsorted(mine, at), len(mine))
    entries = {c: v[mine] for c, v in table.items()}
    entries.update(device_ns=device_ns, gemm_ns=gemm_ns, kernels=kernels)
    entries["token"] = np.full(len(mine), FORMAT_TOKEN, dtype=object)
    entries["label"] = np.full(len(mine), "TransData", dtype=object)
    return entries


def _kernel_entries(ev: pd.DataFrame, orphans: np.ndarray, bound: np.ndarray) -> Entries:
    """Device work of a rank where no op is linked (kernel-only traces): one entry per task, in stream order."""
    dur = ev["dur"].to_numpy()[orphans]
    rank = ev["rank"].to_numpy()[orphans]
    return {
        "row": orphans,
        "lane_key": _lane_labels(lambda r, s: f"dev/{r}/{s}", rank, ev["stream"].to_numpy()[orphans]),
        "ts": ev["ts"].to_numpy()[orphans],
        "step": ev["step"].to_numpy()[orphans],
        "rank": rank,
        "token": _task_tokens(ev, orphans),
        "label": per_text(ev["name"], orphans, display_name),
        "device_ns": dur,
        "gemm_ns": np.where(bound[orphans], dur, 0),
        "kernels": np.ones(len(orphans), dtype=np.int64),
        "shape_row": orphans,
    }


def _work_tokens(ev: pd.DataFrame, work: np.ndarray, at: np.ndarray, n: int) -> np.ndarray:
    """Per entry (``at``: the entry of each task), a name from its device work, else "": only copies → the first
    copy's kind (``memcpy_htod``); only already-fused kernels (Triton/Inductor, CANN fused ops) → ``FUSED_TOKEN``,
    which no pattern matches."""
    tasks = np.bincount(at, minlength=n)
    copies = np.bincount(at, weights=(ev["kind"] == Kind.MEMCPY.value).to_numpy()[work], minlength=n)
    fused = np.bincount(at, weights=per_text(ev["name"], work, finds(FUSED_KERNEL), bool), minlength=n)
    out = np.where((tasks > 0) & (fused == tasks), FUSED_TOKEN, "").astype(object)
    only_copies = np.flatnonzero((tasks > 0) & (copies == tasks))
    first = np.full(n, len(work), dtype=np.int64)
    np.minimum.at(first, at, np.arange(len(at)))
    first_of = np.append(work, NO_ROW)[first]  # each entry's first task (NO_ROW for none)
    out[only_copies] = per_text(ev["name"], first_of[only_copies], copy_token)
    return out


def copy_token(name: str) -> str:
    """The token of a copy by its kind: ``Memcpy HtoD (Pageable -> Device)`` → ``memcpy_htod``."""
    found = MEMCPY_KIND.search(name)
    return COPY_PREFIX + (found.group(1).lower().replace("2", "to") if found else "other")


def _task_tokens(ev: pd.DataFrame, tasks: np.ndarray) -> np.ndarray:
    """Tokens of device tasks: format conversions, copies by kind, else the canonical name."""
    names = ev["name"]
    tokens = np.where(
        per_text(names, tasks, finds(FORMAT_KERNEL), bool), FORMAT_TOKEN, per_text(names, tasks, canonical)
    )
    copies = (ev["kind"] == Kind.MEMCPY.value).to_numpy()[tasks]
    tokens[copies] = per_text(names, tasks[copies], copy_token)
    tokens[per_text(names, tasks, finds(FUSED_KERNEL), bool)] = FUSED_TOKEN
    return tokens


def _device_totals(ev: pd.DataFrame, bound: np.ndarray, work: np.ndarray, at: np.ndarray, n: int) -> tuple:
    """Per entry (``at``: the entry of each task): device time, compute-bound (GEMM) time (ns) and kernel count."""
    dur = ev["dur"].to_numpy()[work]
    gemm = np.where(bound[work], dur, 0)
    return sums(at, dur, n), sums(at, gemm, n), np.bincount(at, minlength=n).astype(np.int64)


def sums(at: np.ndarray, values: np.ndarray, n: int) -> np.ndarray:
    """Integer sums of ``values`` per position ``at`` (0..n-1)."""
    out = np.zeros(n, dtype=np.int64)
    np.add.at(out, at, values)
    return out


def finds(regex: re.Pattern) -> Callable[[str], bool]:
    """A test of a name: does ``regex`` occur in it?"""
    return lambda name: bool(regex.search(name))


def per_text(column: pd.Series, rows: np.ndarray, fn: Callable[[str], object], dtype=object) -> np.ndarray:
    """``fn`` of the text of a categorical column at each row ("" where missing), once per distinct value."""
    text = category_text(column)
    at = column.cat.codes.to_numpy()[rows].astype(np.int64) % len(text)  # code -1 (missing) is the last text: ''
    used = np.flatnonzero(np.bincount(at, minlength=len(text)))
    values = np.empty(len(text), dtype=dtype)
    values[used] = [fn(t) for t in text[used]]
    return values[at]


def _shape_rows(ev: pd.DataFrame, ops: np.ndarray, linked: np.ndarray, at: np.ndarray) -> np.ndarray:
    """The row whose recorded shapes describe each op: itself, else the op that launched its longest kernel (of
    equally long ones, the first in row order: the same whether the rank is loaded alone or with others)."""
    has_dims = per_text(ev["input_dims"], ops, bool, bool)
    dur = ev["dur"].to_numpy().astype(np.int64)[linked]
    longest = np.full(len(ops), np.iinfo(np.int64).min, dtype=np.int64)
    np.maximum.at(longest, at, dur)
    top = np.flatnonzero(dur == longest[at])
    pick = np.full(len(ops), len(linked), dtype=np.int64)
    np.minimum.at(pick, at[top], top)
    found = pick < len(linked)
    fallback = np.full(len(ops), NO_ROW, dtype=np.int64)
    fallback[found] = ev["op"].to_numpy()[linked[pick[found]]]
    use = ~has_dims & (fallback != NO_ROW)
    return np.where(use, fallback, ops)


def _bytes(table: Entries, ev: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """In/out tensor bytes of each entry, from the recorded input shapes and dtypes of its shape row."""
    rows = table["shape_row"]
    gemm = per_token(table["token"], lambda t: t.replace(BACKWARD_SUFFIX, "") in GEMM_TOKENS, bool)
    dims = ev["input_dims"].cat.codes.to_numpy()[rows]
    types = ev["input_types"].cat.codes.to_numpy()[rows]
    codes, first = combinations(dims, types, gemm)
    dims_text = category_text(ev["input_dims"])[dims[first]]
    types_text = category_text(ev["input_types"])[types[first]]
    sizes = [tensor_bytes(d, t, bool(g)) for d, t, g in zip(dims_text, types_text, gemm[first].tolist(), strict=True)]
    sizes = np.array(sizes, dtype=np.int64).reshape(-1, 2)[codes]
    return sizes[:, 0].copy(), sizes[:, 1].copy()


def per_token(tokens: np.ndarray, fn: Callable[[str], object], dtype=object) -> np.ndarray:
    """``fn`` of each token, evaluated once per distinct token."""
    codes, distinct = pd.factorize(tokens)
    values = np.empty(len(distinct), dtype=dtype)
    values[:] = [fn(t) for t in distinct]
    return values[codes]


def tensor_bytes(dims_text: str, types_text: str, gemm: bool = False) -> tuple[int, int]:
    """(input bytes, estimated output bytes) from JSON shape/dtype text; the output of a GEMM is M×N, else the
    largest input (elementwise ops keep the shape); (0, 0) when nothing was recorded."""
    shapes, sizes = _parse(dims_text, types_text)
    if not shapes:
        return 0, 0
    counts = [math.prod(s) for s in shapes]
    inputs = sum(c * b for c, b in zip(counts, sizes, strict=True))
    if gemm and len(shapes) >= 2 and len(shapes[0]) >= 2 and shapes[1]:
        return inputs, math.prod(shapes[0][:-1]) * shapes[1][-1] * sizes[0]
    return inputs, max(c * b for c, b in zip(counts, sizes, strict=True))


def _parse(dims_text: str, types_text: str) -> tuple[list[list[int]], list[int]]:
    """Tensor shapes (tensor lists flattened) and their element sizes; scalars and unknowns dropped."""
    try:
        dims = json.loads(dims_text) if dims_text else []
        types = json.loads(types_text) if types_text else []
    except (ValueError, TypeError):
        return [], []
    if not isinstance(dims, list):
        return [], []
    types = types if isinstance(types, list) else []
    known = [dtype_bytes(str(t)) for t in types]
    fallback = next((k for k in known if k), 4)
    shapes, sizes = [], []
    for i, d in enumerate(dims):
        size = known[i] if i < len(known) and known[i] else fallback
        for shape in _shapes_in(d):
            shapes.append(shape)
            sizes.append(size)
    return shapes, sizes


def _shapes_in(value) -> list[list[int]]:
    """The non-empty integer shapes in one recorded input (a shape, or a list of shapes for a TensorList)."""
    if not isinstance(value, list) or not value:
        return []
    if all(isinstance(v, int) for v in value):
        return [value]
    return [s for v in value for s in _shapes_in(v)]


def _name_layout_work(token: np.ndarray, table: Entries, ev: pd.DataFrame) -> None:
    """A layout op (view, transpose, autograd view node) that launched work takes the token of that work."""
    backward = per_token(token, lambda t: t.endswith(BACKWARD_SUFFIX), bool)
    layout = per_token(token, lambda t: t.removesuffix(BACKWARD_SUFFIX) in LAYOUT_TOKENS, bool)
    pick = np.flatnonzero(layout & (table["kernels"] > 0))
    work = per_text(ev["name"], table["shape_row"][pick], lambda n: canonical(n).removesuffix(BACKWARD_SUFFIX))
    keep = ~per_token(work, lambda t: t in LAYOUT_TOKENS, bool)
    token[pick[keep]] = work[keep] + np.where(backward[pick[keep]], BACKWARD_SUFFIX, "")


def _bias_adds(table: Entries, ev: pd.DataFrame) -> np.ndarray:
    """Adds of a 1-D tensor broadcast over the last dim of the other input: a bias add."""
    add = np.flatnonzero(table["token"] == "add")
    out = np.zeros(len(table["token"]), dtype=bool)
    out[add] = per_text(ev["input_dims"], table["shape_row"][add], _is_bias_shape, bool)
    return out


def _is_bias_shape(dims_text: str) -> bool:
    """Is the second recorded input a 1-D tensor as long as the first one's last dim?"""
    shapes, _ = _parse(dims_text, "")
    return len(shapes) >= 2 and len(shapes[0]) >= 2 and shapes[1] == shapes[0][-1:]


def locations(trace, rows: np.ndarray) -> dict[str, np.ndarray]:
    """For host rows: annotation path (outermost first), innermost user Python frame, innermost nn.Module (object
    arrays, from the trace's one call-path walk)."""
    walk = callpath.walk(trace)
    rows = np.asarray(rows, dtype=np.int64)
    codes, paths = pd.factorize(np.asarray(walk.modules.joined(rows), dtype=object))
    module = np.array([p.split(callpath.SEPARATOR)[-1] for p in paths], dtype=object)[codes]
    frame = np.asarray(walk.innermost_names(rows)["frame"], dtype=object)
    return {"annotation": np.asarray(walk.annotations.joined(rows), dtype=object), "stack": frame, "module": module}


@dataclass
class EntryWork:
    """Per op-stream entry, the device work a fusion of it removes, as intervals: entry i's are
    ``starts[offsets[i]:offsets[i + 1]]`` (and ``ends``)."""

    offsets: np.ndarray
    starts: np.ndarray
    ends: np.ndarray

    def take(self, entries: np.ndarray) -> EntryWork:
        """The work of some entries (positions), in that order."""
        counts = np.diff(self.offsets)[entries]
        at = ranges(self.offsets[entries], counts)
        return EntryWork(np.concatenate(([0], np.cumsum(counts))).astype(np.int64), self.starts[at], self.ends[at])

    def union(self, entries: np.ndarray) -> Intervals:
        """The union of the work of some entries (positions)."""
        part = self.take(entries)
        return intervals.union(part.starts, part.ends)

    def packed(self) -> PackedWork:
        """The small form (``intervals.pack``, ``intervals.narrow``)."""
        return PackedWork(narrow(np.diff(self.offsets)), pack(self.starts, self.ends))

    @staticmethod
    def empty() -> EntryWork:
        """No entries."""
        return EntryWork(np.zeros(1, dtype=np.int64), np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64))

    @staticmethod
    def concat(parts: list[EntryWork]) -> EntryWork:
        """The entries of several, one after another."""
        counts = np.concatenate([np.diff(p.offsets) for p in parts])
        offsets = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
        return EntryWork(offsets, np.concatenate([p.starts for p in parts]), np.concatenate([p.ends for p in parts]))


@dataclass
class PackedWork:
    """``EntryWork`` in its small form: how many intervals each entry has, and the intervals (``intervals.Packed``)."""

    counts: np.ndarray
    intervals: Packed

    def unpacked(self) -> EntryWork:
        """The ``EntryWork`` again."""
        starts, ends = self.intervals.unpacked()
        return EntryWork(np.concatenate(([0], np.cumsum(self.counts, dtype=np.int64))), starts, ends)


def pieces(values: np.ndarray, counts: np.ndarray) -> list[np.ndarray]:
    """``values`` cut into consecutive pieces of ``counts[i]`` values each (views, as ``np.split`` makes them)."""
    ends = np.cumsum(counts).tolist()
    return [values[lo:hi] for lo, hi in zip([0, *ends[:-1]], ends, strict=True)]


def ranges(starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """The positions starts[i] .. starts[i] + counts[i] - 1 of every i, one range after another."""
    total = int(counts.sum())
    before = np.cumsum(counts) - counts
    return np.repeat(starts - before, counts) + np.arange(total, dtype=np.int64)


def removable_work(trace) -> np.ndarray:
    """Rows of the device work a fusion can remove: compute-bound kernels (GEMM, attention, convolution) are kept
    by a fusion, communication is never fused away."""
    rows, bound = device_work(trace)
    return rows[~bound[rows]]


def entry_work(trace, rows: np.ndarray) -> EntryWork:
    """Per entry (its row), the removable device work (``removable_work``) it launched, an op inside it launched,
    or it is (an entry of a kernel-only trace)."""
    ev = trace.events
    work = removable_work(trace)
    distinct, slot = np.unique(rows, return_inverse=True)
    owner, task = [], []
    for key in (ev["op"].to_numpy()[work], ev["top_op"].to_numpy()[work], work):
        at = np.minimum(np.searchsorted(distinct, key), max(len(distinct) - 1, 0))
        hit = distinct[at] == key if len(distinct) else np.zeros(len(key), dtype=bool)
        owner.append(at[hit])
        task.append(work[hit])
    pairs = np.unique(np.concatenate(owner) * len(ev) + np.concatenate(task))
    owner_of, task_of = np.divmod(pairs, max(len(ev), 1))
    per_row = np.bincount(owner_of, minlength=len(distinct))
    first = np.cumsum(per_row) - per_row
    counts = per_row[slot]
    tasks = task_of[ranges(first[slot], counts)]
    ts = ev["ts"].to_numpy().astype(np.int64)[tasks]
    ends = ts + ev["dur"].to_numpy().astype(np.int64)[tasks]
    return EntryWork(np.concatenate(([0], np.cumsum(counts))).astype(np.int64), ts, ends)
