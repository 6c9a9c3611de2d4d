"""The op stream the fusion analyzer matches on: one unit per top-level op (or per unlinked kernel).

A unit is a top-level CPU op on a host thread (the framework op sequence: forward ops on the main thread,
autograd nodes on the backward thread) with the device work it caused, or, where device work has no
causing op (kernel-only traces), the device task itself on its stream. Each unit carries its canonical
token, measured device time, GEMM time, kernel count, and the tensor bytes from the recorded shapes.
"""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pandas as pd

from traceanalyzer.analyzers.fusion_patterns import (
    BACKWARD_SUFFIX,
    BANDWIDTH,
    BIAS_ADD,
    DEFAULT_BANDWIDTH,
    DTYPE_BYTES,
    FORMAT_TOKEN,
    GEMM_TOKENS,
    KERNELLESS_SUFFIX,
    LAYOUT_TOKENS,
    WRAPPER_OP,
    canonical,
    display_name,
)
from traceanalyzer.schema import NO_ROW, Kind

WORK_KINDS = (Kind.KERNEL.value, Kind.MEMCPY.value, Kind.MEMSET.value)
"""Device work a fusion can remove (communication is never fused away)."""

GEMM_KERNEL = re.compile(
    r"gemm|nvjet|cutlass|cublas|xmma|wgmma|hgemm|sgemm|matmul|flash|fmha|sdpa|attention|_mma|conv", re.IGNORECASE
)
"""Kernel names of compute-bound work (GEMM, convolution, fused attention)."""

FORMAT_KERNEL = re.compile(r"(?:^|_)TransData")
"""Ascend format-conversion tasks (``trans_TransData_3``, ``aclnnMaxPool2dWithMask_TransDataSpecial_...``): split
out of the op that ran them into a unit of their own, before it."""

LIBRARY_FRAME = re.compile(
    r"^<built-in|^<frozen|(^|/)(torch|contextlib|threading|runpy)[/.]|site-packages|dist-packages"
)
"""Python frames of library code; the first other frame above an op is the user's source line."""

MODULE_FRAME = re.compile(r"^nn\.Module: (.+)$")
"""with_stack frames naming the nn.Module whose forward is running."""

UNIT_COLUMNS = [
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


def units(trace) -> pd.DataFrame:
    """All units of the trace, ordered by lane then start time; ``lane`` numbers the sequences."""
    ev = trace.events
    work = ev[ev["kind"].isin(WORK_KINDS)]
    linked = work[work["top_op"] != NO_ROW]
    orphans = work[(work["top_op"] == NO_ROW) & ~work["rank"].isin(linked["rank"].unique())]
    unit = unit_ops(ev)
    op = linked["op"].to_numpy()
    owner = np.where(op != NO_ROW, unit[np.maximum(op, 0)], NO_ROW)
    owner = np.where(owner != NO_ROW, owner, linked["top_op"].to_numpy())
    frames = [_op_units(ev, linked, owner, unit), _kernel_units(orphans)]
    table = pd.concat([f for f in frames if len(f)], ignore_index=True) if any(len(f) for f in frames) else None
    if table is None:
        return pd.DataFrame(columns=UNIT_COLUMNS)
    table = table.sort_values(["lane_key", "ts"], kind="stable").reset_index(drop=True)
    table["lane"] = pd.factorize(table["lane_key"])[0]
    _add_bytes(table, ev)
    token = table["token"].to_numpy(dtype=object)
    token[_bias_adds(table, ev)] = BIAS_ADD
    _name_layout_work(token, table, ev)
    idle = table["kernels"].to_numpy() == 0
    token[idle] = token[idle] + KERNELLESS_SUFFIX
    table["token"] = token
    return table[UNIT_COLUMNS + ["shape_row"]]


def unit_ops(ev: pd.DataFrame) -> np.ndarray:
    """Per event, its unit op: the outermost CPU op at or above it that is not a record_function range
    (``WRAPPER_OP``: torch_npu writes those as CPU ops); NO_ROW where there is none."""
    kind, parent, depth = ev["kind"].to_numpy(), ev["parent"].to_numpy(), ev["depth"].to_numpy()
    names = ev["name"]
    wrapper = pd.Series([bool(WRAPPER_OP.match(str(c))) for c in names.cat.categories], dtype=bool)
    own = (kind == Kind.CPU_OP.value) & ~wrapper.to_numpy()[names.cat.codes.to_numpy()]
    unit = np.where(own, np.arange(len(ev)), NO_ROW)
    nested = np.flatnonzero(parent != NO_ROW)
    nested = nested[np.argsort(depth[nested], kind="stable")]
    for level in np.split(nested, np.flatnonzero(np.diff(depth[nested])) + 1):
        above = unit[parent[level]]
        unit[level] = np.where(above != NO_ROW, above, unit[level])
    return unit


def _op_units(ev: pd.DataFrame, linked: pd.DataFrame, owner: np.ndarray, unit: np.ndarray) -> pd.DataFrame:
    """Unit ops (with or without device work), each with the device work it caused (``owner``: its unit op)."""
    rows = np.union1d(np.flatnonzero(unit == np.arange(len(ev))), owner)
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
    table["shape_row"] = _shape_rows(ev, ops.index.to_numpy(), linked.assign(top_op=owner))
    table = pd.concat([_format_units(table, linked[fmt], owner[fmt]), table], ignore_index=True)
    return table.astype({"device_ns": np.int64, "gemm_ns": np.int64, "kernels": np.int64})


def _format_units(table: pd.DataFrame, work: pd.DataFrame, owner: np.ndarray) -> pd.DataFrame:
    """One unit per op for the format conversions it ran, placed just before the op (same row and start)."""
    totals = _device_totals(work, owner)
    units = table.drop(columns=["device_ns", "gemm_ns", "kernels"]).set_index("row", drop=False)
    units = units.loc[totals.index].join(totals).reset_index(drop=True)
    return units.assign(token=FORMAT_TOKEN, label="TransData")


def _kernel_units(orphans: pd.DataFrame) -> pd.DataFrame:
    """Device work of a rank where no op is linked (kernel-only traces): one unit per task, in stream order."""
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
            "token": np.where(_is_format_kernel(orphans["name"]), FORMAT_TOKEN, _tokens(orphans["name"].astype(str))),
            "label": _labels(orphans["name"].astype(str)),
            "device_ns": dur,
            "gemm_ns": np.where(_is_gemm_kernel(orphans["name"]), dur, 0),
            "kernels": 1,
            "shape_row": orphans.index.to_numpy(),
        }
    )


def _device_totals(work: pd.DataFrame, key: np.ndarray) -> pd.DataFrame:
    """Per causing op: device time, compute-bound (GEMM) time and kernel count."""
    dur = work["dur"].to_numpy()
    gemm = np.where(_is_gemm_kernel(work["name"]), dur, 0)
    frame = pd.DataFrame({"key": key, "device_ns": dur, "gemm_ns": gemm})
    grouped = frame.groupby("key").agg(device_ns=("device_ns", "sum"), gemm_ns=("gemm_ns", "sum"))
    grouped["kernels"] = frame.groupby("key").size()
    return grouped


def _is_gemm_kernel(names: pd.Series) -> np.ndarray:
    return _name_hits(names, GEMM_KERNEL)


def _is_format_kernel(names: pd.Series) -> np.ndarray:
    return _name_hits(names, FORMAT_KERNEL)


def _name_hits(names: pd.Series, regex: re.Pattern) -> np.ndarray:
    """Per row: does the name match ``regex``? Evaluated once per distinct name."""
    cats = names.cat.categories if hasattr(names, "cat") else pd.Index(names.unique())
    hit = pd.Series([bool(regex.search(str(c))) for c in cats], index=cats, dtype=bool)
    return hit.reindex(names.astype(str).to_numpy()).to_numpy()


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
    """In/out tensor bytes of each unit, from the recorded input shapes and dtypes of its shape row."""
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
    known = [DTYPE_BYTES.get(str(t).lower(), 0) for t in types]
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


def bandwidth(trace) -> tuple[float, str]:
    """Peak memory bandwidth (bytes/s) of the trace's device, and where the number comes from."""
    name = trace.meta.devices[0].name if trace.meta.devices else ""
    for pattern, value in BANDWIDTH:
        if name and re.search(pattern, name, re.IGNORECASE):
            return value, f"{name}: {value / 1e12:.2f} TB/s peak (data sheet)"
    return (
        DEFAULT_BANDWIDTH,
        f"device '{name or 'unknown'}' not in the table: assumed {DEFAULT_BANDWIDTH / 1e12:.1f} TB/s",
    )


def locations(ev: pd.DataFrame, rows: np.ndarray) -> pd.DataFrame:
    """For host rows: annotation path (outermost first), innermost user Python frame, innermost nn.Module."""
    parent = ev["parent"].to_numpy()
    kind = ev["kind"].astype(str).to_numpy()
    names = ev["name"].astype(str).to_numpy()
    out = []
    cache: dict[int, tuple[str, str, str]] = {}
    for row in np.asarray(rows, dtype=np.int64).tolist():
        if row not in cache:
            cache[row] = _walk(row, parent, kind, names)
        out.append(cache[row])
    return pd.DataFrame(out, columns=["annotation", "stack", "module"], index=rows)


def _walk(row: int, parent: np.ndarray, kind: np.ndarray, names: np.ndarray) -> tuple[str, str, str]:
    annotations, frame, module = [], "", ""
    while row != NO_ROW:
        name = names[row]
        if kind[row] == Kind.ANNOTATION.value:
            annotations.append(name)
        elif kind[row] == Kind.PYTHON.value:
            m = MODULE_FRAME.match(name)
            if m and not module:
                module = m.group(1)
            elif not m and not frame and not LIBRARY_FRAME.search(name):
                frame = name
        row = int(parent[row])
    return " › ".join(reversed(annotations)), frame, module
