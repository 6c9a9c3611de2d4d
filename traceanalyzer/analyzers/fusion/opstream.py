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

import numpy as np
import pandas as pd

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
from traceanalyzer.schema import NO_ROW, Kind
from traceanalyzer.vocabulary import (
    ATTENTION_KERNEL,
    CONV_KERNEL,
    FUSED_KERNEL,
    GEMM_KERNEL,
    MEMCPY_KIND,
    dtype_bytes,
    matches,
)

WORK_KINDS = (Kind.KERNEL.value, Kind.MEMCPY.value, Kind.MEMSET.value)
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


def op_stream(trace) -> pd.DataFrame:
    """All entries of the trace, ordered by lane then start time; ``lane`` numbers the sequences."""
    ev = trace.events
    work = ev[ev["kind"].isin(WORK_KINDS)]
    linked = work[work["top_op"] != NO_ROW]
    orphans = work[(work["top_op"] == NO_ROW) & ~work["rank"].isin(linked["rank"].unique())]
    entry = stream_ops(ev)
    op = linked["op"].to_numpy()
    owner = np.where(op != NO_ROW, entry[np.maximum(op, 0)], NO_ROW)
    owner = np.where(owner != NO_ROW, owner, linked["top_op"].to_numpy())
    frames = [_op_entries(ev, linked, owner, entry), _kernel_entries(orphans)]
    table = pd.concat([f for f in frames if len(f)], ignore_index=True) if any(len(f) for f in frames) else None
    if table is None:
        return pd.DataFrame(columns=ENTRY_COLUMNS)
    table = table.sort_values(["lane_key", "ts"], kind="stable").reset_index(drop=True)
    table["lane"] = pd.factorize(table["lane_key"])[0]
    _add_bytes(table, ev)
    token = table["token"].to_numpy(dtype=object)
    token[_bias_adds(table, ev)] = BIAS_ADD
    _name_layout_work(token, table, ev)
    idle = table["kernels"].to_numpy() == 0
    token[idle] = token[idle] + KERNELLESS_SUFFIX
    table["token"] = token
    return table[ENTRY_COLUMNS + ["shape_row"]]


def stream_ops(ev: pd.DataFrame) -> np.ndarray:
    """Per event, its stream op: the outermost CPU op at or above it that is not a record_function range
    (``WRAPPER_OP``: torch_npu writes those as CPU ops); NO_ROW where there is none."""
    kind, parent, depth = ev["kind"].to_numpy(), ev["parent"].to_numpy(), ev["depth"].to_numpy()
    names = ev["name"]
    wrapper = pd.Series([bool(WRAPPER_OP.match(str(c))) for c in names.cat.categories], dtype=bool)
    own = (kind == Kind.CPU_OP.value) & ~wrapper.to_numpy()[names.cat.codes.to_numpy()]
    entry = np.where(own, np.arange(len(ev)), NO_ROW)
    nested = np.flatnonzero(parent != NO_ROW)
    nested = nested[np.argsort(depth[nested], kind="stable")]
    for level in np.split(nested, np.flatnonzero(np.diff(depth[nested])) + 1):
        above = entry[parent[level]]
        entry[level] = np.where(above != NO_ROW, above, entry[level])
    return entry


def _op_entries(ev: pd.DataFrame, linked: pd.DataFrame, owner: np.ndarray, entry: np.ndarray) -> pd.DataFrame:
    """Stream ops (with or without device work), each with the device work it caused (``owner``: its stream op)."""
    rows = np.union1d(np.flatnonzero(entry == np.arange(len(ev))), owner)
    ops = ev.iloc[rows]
    fmt = _is_format_kernel(linked["name"])
    per_op = _device_totals(linked[~fmt], owner[~fmt])
    names = ops["name"].astype(str)
    table = pd.DataFrame(
        {
            "row": ops.index.to_numpy(),
            "lane_key": ops["rank"].astype(str) + "/" + ops["pid"].astype(str) + "/" + ops["tid"].astype(str),
            "ts": ops["ts"].to_numpy(),
            "step": ops["step"].to_numpy(),
            "rank": ops["rank"].to_numpy(),
            "token": _tokens(names),
            "label": _labels(names),
        }
    )
    table = table.join(per_op, on="row").fillna({"device_ns": 0, "gemm_ns": 0, "kernels": 0})
    named = _work_tokens(linked, owner).reindex(table["row"].to_numpy())
    table["token"] = np.where(named.notna(), named.to_numpy(), table["token"].to_numpy())
    table.loc[_name_hits(names, FUSED_OPTIMIZER_OP), "token"] = FUSED_TOKEN
    table["shape_row"] = _shape_rows(ev, ops.index.to_numpy(), linked.assign(top_op=owner))
    table = pd.concat([_format_entries(table, linked[fmt], owner[fmt]), table], ignore_index=True)
    return table.astype({"device_ns": np.int64, "gemm_ns": np.int64, "kernels": np.int64})


def _format_entries(table: pd.DataFrame, work: pd.DataFrame, owner: np.ndarray) -> pd.DataFrame:
    """One entry per op for the format conversions it ran, placed just before the op (same row and start)."""
    totals = _device_totals(work, owner)
    entries = table.drop(columns=["device_ns", "gemm_ns", "kernels"]).set_index("row", drop=False)
    entries = entries.loc[totals.index].join(totals).reset_index(drop=True)
    return entries.assign(token=FORMAT_TOKEN, label="TransData")


def _kernel_entries(orphans: pd.DataFrame) -> pd.DataFrame:
    """Device work of a rank where no op is linked (kernel-only traces): one entry per task, in stream order."""
    if not len(orphans):
        return pd.DataFrame()
    dur = orphans["dur"].to_numpy()
    return pd.DataFrame(
        {
            "row": orphans.index.to_numpy(),
            "lane_key": "dev/" + orphans["rank"].astype(str) + "/" + orphans["stream"].astype(str),
            "ts": orphans["ts"].to_numpy(),
            "step": orphans["step"].to_numpy(),
            "rank": orphans["rank"].to_numpy(),
            "token": _task_tokens(orphans),
            "label": _labels(orphans["name"].astype(str)),
            "device_ns": dur,
            "gemm_ns": np.where(_is_gemm_kernel(orphans["name"]), dur, 0),
            "kernels": 1,
            "shape_row": orphans.index.to_numpy(),
        }
    )


def _work_tokens(work: pd.DataFrame, key: np.ndarray) -> pd.Series:
    """Per causing op named by its device work: only copies → the first copy's kind (``memcpy_htod``); only
    already-fused kernels (Triton/Inductor, CANN fused ops) → ``FUSED_TOKEN``, which no pattern matches."""
    frame = pd.DataFrame(
        {
            "key": key,
            "copy": (work["kind"] == Kind.MEMCPY.value).to_numpy(),
            "fused": _name_hits(work["name"], FUSED_KERNEL),
            "name": work["name"].astype(str).to_numpy(),
        }
    )
    g = frame.groupby("key")
    copies, fused = g["copy"].all(), g["fused"].all()
    first = g["name"].first()
    out = pd.Series(np.where(fused.to_numpy(), FUSED_TOKEN, None), index=first.index, dtype=object)
    out[copies.to_numpy()] = first[copies.to_numpy()].map(copy_token)
    return out.dropna()


def copy_token(name: str) -> str:
    """The token of a copy by its kind: ``Memcpy HtoD (Pageable -> Device)`` → ``memcpy_htod``."""
    found = MEMCPY_KIND.search(name)
    return COPY_PREFIX + (found.group(1).lower().replace("2", "to") if found else "other")


def _task_tokens(tasks: pd.DataFrame) -> np.ndarray:
    """Tokens of device tasks: format conversions, copies by kind, else the canonical name."""
    names = tasks["name"].astype(str)
    tokens = np.where(_is_format_kernel(tasks["name"]), FORMAT_TOKEN, _tokens(names))
    copies = (tasks["kind"] == Kind.MEMCPY.value).to_numpy()
    tokens[copies] = [copy_token(n) for n in names.to_numpy()[copies]]
    tokens[_name_hits(tasks["name"], FUSED_KERNEL)] = FUSED_TOKEN
    return tokens


def _device_totals(work: pd.DataFrame, key: np.ndarray) -> pd.DataFrame:
    """Per causing op: device time, compute-bound (GEMM) time and kernel count."""
    dur = work["dur"].to_numpy()
    gemm = np.where(_is_gemm_kernel(work["name"]), dur, 0)
    frame = pd.DataFrame({"key": key, "device_ns": dur, "gemm_ns": gemm})
    grouped = frame.groupby("key").agg(device_ns=("device_ns", "sum"), gemm_ns=("gemm_ns", "sum"))
    grouped["kernels"] = frame.groupby("key").size()
    return grouped


def _is_gemm_kernel(names: pd.Series) -> np.ndarray:
    return _name_hits(names, COMPUTE_BOUND)


def _is_format_kernel(names: pd.Series) -> np.ndarray:
    return _name_hits(names, FORMAT_KERNEL)


def _name_hits(names: pd.Series, regex: re.Pattern) -> np.ndarray:
    """Per row: does the name match ``regex``? Evaluated once per distinct name (category codes where categorical)."""
    if not isinstance(names.dtype, pd.CategoricalDtype):
        return matches(names.to_numpy(), regex)
    cats = names.cat.categories
    hit = np.fromiter((bool(regex.search(str(c))) for c in cats), bool, len(cats))
    codes = names.cat.codes.to_numpy()
    return np.append(hit, False)[np.where(codes >= 0, codes, len(cats))]


def _tokens(names: pd.Series) -> np.ndarray:
    """Canonical token per name, computed once per distinct name."""
    distinct = pd.unique(names.to_numpy())
    table = {n: canonical(n) for n in distinct}
    return np.array([table[n] for n in names.to_numpy()], dtype=object)


def _labels(names: pd.Series) -> np.ndarray:
    """Display name per op or kernel name, computed once per distinct name."""
    table = {n: display_name(n) for n in pd.unique(names.to_numpy())}
    return np.array([table[n] for n in names.to_numpy()], dtype=object)


def _shape_rows(ev: pd.DataFrame, ops: np.ndarray, linked: pd.DataFrame) -> np.ndarray:
    """The row whose recorded shapes describe each op: itself, else the op that launched its longest kernel."""
    has_dims = (ev["input_dims"].astype(str) != "").to_numpy()
    out = ops.copy()
    longest = linked.sort_values("dur", ascending=False).drop_duplicates("top_op").set_index("top_op")["op"]
    fallback = longest.reindex(ops).fillna(NO_ROW).astype(np.int64).to_numpy()
    use = ~has_dims[ops] & (fallback != NO_ROW)
    out[use] = fallback[use]
    return out


def _add_bytes(table: pd.DataFrame, ev: pd.DataFrame) -> None:
    """In/out tensor bytes of each entry, from the recorded input shapes and dtypes of its shape row."""
    rows = table["shape_row"].to_numpy()
    dims = ev["input_dims"].astype(str).to_numpy()[rows]
    types = ev["input_types"].astype(str).to_numpy()[rows]
    gemm = np.isin(table["token"].str.replace("_bwd", "", regex=False).to_numpy(), list(GEMM_TOKENS))
    cache: dict = {}
    for key in zip(dims, types, gemm, strict=True):
        if key not in cache:
            cache[key] = tensor_bytes(*key)
    sizes = [cache[key] for key in zip(dims, types, gemm, strict=True)]
    table["in_bytes"] = np.array([s[0] for s in sizes], dtype=np.int64)
    table["out_bytes"] = np.array([s[1] for s in sizes], dtype=np.int64)


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


def _name_layout_work(token: np.ndarray, table: pd.DataFrame, ev: pd.DataFrame) -> None:
    """A layout op (view, transpose, autograd view node) that launched work takes the token of that work."""
    suffix = np.where(pd.Series(token).str.endswith(BACKWARD_SUFFIX), BACKWARD_SUFFIX, "")
    base = np.array([t.removesuffix(BACKWARD_SUFFIX) for t in token], dtype=object)
    pick = np.flatnonzero(np.isin(base, list(LAYOUT_TOKENS)) & (table["kernels"].to_numpy() > 0))
    inner = ev["name"].astype(str).to_numpy()[table["shape_row"].to_numpy()[pick]]
    work = np.array([canonical(n).removesuffix(BACKWARD_SUFFIX) for n in inner], dtype=object)
    keep = ~np.isin(work, list(LAYOUT_TOKENS))
    token[pick[keep]] = work[keep] + suffix[pick[keep]]


def _bias_adds(table: pd.DataFrame, ev: pd.DataFrame) -> np.ndarray:
    """Adds of a 1-D tensor broadcast over the last dim of the other input: a bias add."""
    add = (table["token"] == "add").to_numpy()
    dims = ev["input_dims"].astype(str).to_numpy()[table["shape_row"].to_numpy()]
    out = np.zeros(len(table), dtype=bool)
    cache: dict[str, bool] = {}
    for i in np.flatnonzero(add):
        text = dims[i]
        if text not in cache:
            shapes, _ = _parse(text, "")
            cache[text] = len(shapes) >= 2 and len(shapes[0]) >= 2 and shapes[1] == shapes[0][-1:]
        out[i] = cache[text]
    return out


def locations(ev: pd.DataFrame, rows: np.ndarray) -> pd.DataFrame:
    """For host rows: annotation path (outermost first), innermost user Python frame, innermost nn.Module."""
    where = callpath.context(ev, rows)
    module = where["module"].fillna("").str.split(callpath.SEPARATOR).str[-1]
    return pd.DataFrame(
        {
            "annotation": where["annotations"].fillna("").to_numpy(),
            "stack": where["frame"].fillna("").to_numpy(),
            "module": module.to_numpy(),
        },
        index=np.asarray(rows, dtype=np.int64),
    )
