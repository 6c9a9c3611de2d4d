"""GPU ↔ NPU: two runs of different platforms (CUDA or ROCm vs Ascend) compared at the levels both share, since their
kernels share no names.

- **Categories**, after msprof-analyze's compare tool (its OverallMetrics): device time in GEMM (cube),
  convolution and attention (forward and backward apart), normalisation, vector (elementwise, reductions, pooling,
  optimizer), copies (memcpy, memset, TensorMove, TransData, Cast, layout copies); then exposed communication,
  device idle and host overhead (runtime calls that launch or copy work, synchronisation left out), per step. A
  kernel's category comes from its framework op, its launching op and its own name, by the first rule that matches
  (``CATEGORY_RULES``), as the compare tool's ``compare_config.ini`` masks do (``aten::conv``; ``aten::addmm,
  aten::bmm,aten::mm,aten::matmul``; ``gemm,conv,cutlass,wgrad,gemvx``; ``flash_attention,fusion_attention,...``).
- **Framework ops**: device time per outermost framework op (``aten::conv2d``, ``aten::convolution_backward``, ...),
  the level both platforms' torch record alike. torch_npu's own ops are renamed to what they stand for on a GPU:
  ``NPU_EQUIVALENTS`` to the aten op, ``NPU_FUSED`` to the chain of aten ops the fused op replaces (found on the
  other run as msprof-analyze's advisor finds them: a regex over the thread's consecutive aten op names).
- **Modules**: device time per ``nn.Module`` path (of the op that launched the work), where both traces record them
  (``with_modules``/``with_stack``); backward and optimizer work has no module and is left out of this table.

Every table is per step, with each side's share of its step time and which side spends more.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from traceanalyzer import calltree
from traceanalyzer.analyzers import callpath
from traceanalyzer.comparison import diff, samples
from traceanalyzer.comparison.samples import Compared
from traceanalyzer.schema import NO_ROW, Kind, Platform
from traceanalyzer.tracedata import TraceData
from traceanalyzer.vocabulary import ATTENTION_KERNEL, BACKWARD_KERNEL, GEMM_KERNEL, MATMUL_OP, NORMALISATION

GPU = frozenset({Platform.CUDA, Platform.ROCM})

CATEGORY_RULES: tuple[tuple[str, tuple[re.Pattern, ...]], ...] = (
    ("attention", (ATTENTION_KERNEL,)),
    (
        "convolution",
        (
            re.compile(r"^aten::(_?conv|cudnn_conv|miopen_conv|convolution)|conv[23]d", re.I),
            re.compile(r"implicit_gemm|fprop|dgrad|wgrad|winograd", re.I),
        ),
    ),
    ("gemm", (MATMUL_OP, GEMM_KERNEL)),
    ("normalisation", (NORMALISATION,)),
    (
        "copy",
        (
            re.compile(
                r"copy|TensorMove|TransData|Transpose|Cast|contiguous|clone|Memcpy|Memset|^aten::(to|_to_copy)$", re.I
            ),
        ),
    ),
)
"""Device-work categories by the names of a kernel's framework op, launching op and kernel; the first rule any of
them matches wins; what none matches is ``vector``."""

COMPUTE_CATEGORIES = (
    "gemm", "convolution fwd", "convolution bwd", "attention fwd", "attention bwd", "normalisation", "vector", "copy",
)  # fmt: skip
DIRECTED = ("attention", "convolution")
"""Categories split into forward and backward, as the compare tool splits Flash Attention and Conv."""
STEP_CATEGORIES = {"communication exposed": "comm_exposed_ns", "idle": "idle_ns"}
"""Per-step parts taken from the overlap of compute and communication (``samples.METRICS``)."""
HOST_OVERHEAD = "host overhead"
CATEGORIES = (*COMPUTE_CATEGORIES, *STEP_CATEGORIES, HOST_OVERHEAD)

FRAMEWORK_PREFIXES = ("aten::", "npu::", "torch_npu::", "c10d::")
"""CPU ops of the framework, named alike on both platforms (the outermost one on a call path is a device event's
framework op)."""

NPU_EQUIVALENTS = {
    "npu::_npu_dropout": "aten::native_dropout",
    "npu::npu_dropout": "aten::native_dropout",
    "npu::npu_dropout_backward": "aten::native_dropout_backward",
    "npu::npu_fusion_attention": "aten::scaled_dot_product_attention",
    "npu::npu_fusion_attention_grad": "aten::_scaled_dot_product_attention_backward",
    "npu::npu_format_cast": "aten::copy_",
}
"""torch_npu ops and the aten op a GPU run records for the same work."""

NPU_FUSED = {
    "npu::npu_rms_norm": ("pow → mean → add → rsqrt → mul", "(pow-)?(mean-)?(add-)?rsqrt-mul-(type_as-)?"),
    "npu::npu_swiglu": ("chunk → silu → mul", "(slice-|chunk-)(silu-mul-|mul-silu-|sigmoid-mul-mul-)"),
    "npu::npu_geglu": ("chunk → gelu → mul", "(slice-|chunk-)(gelu-mul-|mul-gelu-)"),
    "npu::npu_rotary_mul": ("chunk → neg → cat → mul → add", "(chunk-|slice-)neg-cat-(mul-){0,2}add-"),
    "npu::npu_add_layer_norm": ("add → layer_norm", "add-layer_norm-"),
    "npu::npu_scaled_masked_softmax": ("softmax → mul → masked_fill_", "softmax-(mul-)?(masked_fill_-|add-)"),
    "npu::npu_confusion_transpose": (
        "permute → contiguous → reshape",
        "(permute-|transpose-)(contiguous-)?(reshape-|view-)",
    ),
    "npu::fast_gelu": ("gelu", "gelu-"),
}
"""torch_npu fused ops, the chain of aten ops they replace, and its pattern over a thread's consecutive aten op names
(without ``aten::``, each followed by '-'), from msprof-analyze's ``timeline_fusion_ops.yaml``."""

_SYNC = re.compile(r"synchroni|wait", re.I)


def differ(baseline: Platform, candidate: Platform) -> bool:
    """One run on a GPU, the other on an Ascend NPU."""
    return {baseline in GPU, candidate in GPU} == {True, False} and Platform.ASCEND in (baseline, candidate)


def category(*names: str) -> str:
    """The category of device work from its framework op, launching op and kernel names (attention and
    convolution with their direction: backward when any of the names says so)."""
    for name, patterns in CATEGORY_RULES:
        if any(pattern.search(n) for pattern in patterns for n in names if n):
            if name in DIRECTED:
                return f"{name} {'bwd' if any(BACKWARD_KERNEL.search(n) for n in names if n) else 'fwd'}"
            return name
    return "vector"


@dataclass
class CrossPlatform:
    """Per step: device time by category, by framework op and by module, with each side's share of its step."""

    categories: pd.DataFrame
    ops: pd.DataFrame
    modules: pd.DataFrame
    mapped: dict[str, str]  # torch_npu op → what it was compared as


def compare(baseline: Compared, candidate: Compared, step_ns: tuple[float, float]) -> CrossPlatform:
    """The cross-platform view of two scopes; ``step_ns``: each run's median step time (the shares' base)."""
    scopes = (baseline, candidate)
    present = {op for op in (*NPU_EQUIVALENTS, *NPU_FUSED) if any(_has_op(s.trace, op) for s in scopes)}
    fused = present & set(NPU_FUSED)
    work = [_work(s, fused) for s in scopes]
    parts = {
        "categories": [_categories(w, s) for w, s in zip(work, scopes, strict=True)],
        "ops": [w.assign(name=w["framework_op"]) for w in work],
        "modules": [w[w["module"] != ""].assign(name=lambda f: f["module"]) for w in work],
    }
    units = (baseline.units, candidate.units)
    out = {key: _shared_diff(p, units, step_ns, scopes) for key, p in parts.items()}
    mapped = {op: NPU_EQUIVALENTS.get(op) or _chain_label(op) for op in sorted(present)}
    return CrossPlatform(_ordered(out["categories"]), out["ops"], out["modules"], mapped)


def _ordered(table: pd.DataFrame) -> pd.DataFrame:
    order = {name: i for i, name in enumerate(CATEGORIES)}
    return table.sort_values("name", key=lambda s: s.map(order), kind="stable").reset_index(drop=True)


def _shared_diff(parts, units: tuple[int, int], step_ns: tuple[float, float], scopes) -> pd.DataFrame:
    """A diff table of per-unit samples, matched by exact name, with shares of step time and the side that spends
    more (its platform)."""
    keys = (diff.exact(parts[0], parts[1]), diff.exact(parts[1], parts[0]))
    table = diff.level_diff((parts[0], parts[1]), keys, units)
    table["baseline_share"] = table["baseline_ns"] / step_ns[0] if step_ns[0] else np.nan
    table["candidate_share"] = table["candidate_ns"] / step_ns[1] if step_ns[1] else np.nan
    names = [s.trace.meta.platform.value for s in scopes]
    table["more"] = np.select(
        [table["delta_ns"] > 0, table["delta_ns"] < 0], [f"candidate ({names[1]})", f"baseline ({names[0]})"], ""
    )
    return table.drop(columns=["label", "baseline_names", "candidate_names"])


def _work(scope: Compared, fused: set[str]) -> pd.DataFrame:
    """The scope's device work (waits left out), one row per event: unit, kernel name, framework op, module,
    category, kind, dur; in the columns ``samples.level`` gives (``name`` is the kernel), ``count`` 1 each."""
    events = scope.trace.events
    device = scope.trace.select(step=scope.steps, rank=scope.rank, kind=samples.DEVICE)
    device = device[device["kind"] != Kind.SYNC.value]
    unit = _units(scope, device)
    device, unit = device[unit >= 0], unit[unit >= 0]
    op = device["op"].to_numpy()
    framework = _outermost_framework_op(scope.trace, op)
    names = events["name"].astype(str)
    launcher = np.where(op != NO_ROW, names.reindex(np.maximum(op, 0)).to_numpy(), "")
    fw_name = np.where(framework != NO_ROW, names.reindex(np.maximum(framework, 0)).to_numpy(), launcher)
    fw_name = _renamed(scope.trace, framework, fw_name, fused)
    where = callpath.where_many(events, op[op != NO_ROW]).set_index("row")["module"]
    module = np.where(op != NO_ROW, where.reindex(op).fillna("").to_numpy(), "")
    kernel = device["name"].astype(str).to_numpy()
    kind = device["kind"].astype(str).to_numpy()
    keys = pd.Series(list(zip(fw_name, launcher, kernel, kind, strict=True)), dtype=object)
    cats = keys.map({key: _category_of(*key) for key in set(keys)}).to_numpy()
    return pd.DataFrame(
        {
            "unit": unit,
            "name": kernel,
            "kind": kind,
            "framework_op": fw_name,
            "module": module,
            "category": cats,
            "total_ns": device["dur"].to_numpy(),
            "count": 1,
        }
    )


def _category_of(framework_op: str, launcher: str, kernel: str, kind: str) -> str:
    """Kernels by their names; communication as such; copies and memsets are copies."""
    if kind == Kind.KERNEL.value:
        return category(framework_op, launcher, kernel)
    return "communication" if kind == Kind.COMMUNICATION.value else "copy"


def _units(scope: Compared, events: pd.DataFrame) -> np.ndarray:
    """Each event's unit index in the scope (-1: none)."""
    index = {key: i for i, key in enumerate(scope.keys)}
    steps = events["step"].to_numpy() if scope.steps is not None else [None] * len(events)
    return np.array(
        [
            index.get((int(r), None if s is None else int(s)), -1)
            for r, s in zip(events["rank"].to_numpy(), steps, strict=True)
        ],
        dtype=np.int64,
    )


def _framework_rows(events: pd.DataFrame) -> np.ndarray:
    names = events["name"].astype(str)
    return ((events["kind"] == Kind.CPU_OP.value) & names.str.startswith(FRAMEWORK_PREFIXES)).to_numpy()


def _outermost_framework_op(trace: TraceData, rows: np.ndarray) -> np.ndarray:
    """For each row (an op row or NO_ROW), the outermost framework op among it and its ancestors (NO_ROW: none)."""
    return calltree.of(trace).outermost(_framework_rows(trace.events))[np.asarray(rows, dtype=np.int64)]


def _renamed(trace, framework: np.ndarray, names: np.ndarray, fused: set[str]) -> np.ndarray:
    """Framework op names with torch_npu ops as their GPU equivalents, and aten chains that a torch_npu fused op of
    the other run replaces named after it."""
    names = np.array([_chain_label(n) if n in fused else NPU_EQUIVALENTS.get(n, n) for n in names], dtype=object)
    if not fused:
        return names
    labels = chain_labels(trace, fused)
    found = pd.Series(framework).map(labels)
    return np.where(found.notna().to_numpy(), found.to_numpy(), names)


def chain_labels(trace, fused: set[str]) -> dict[int, str]:
    """Framework op rows (outermost aten ops) that belong to a chain one of the ``fused`` torch_npu ops replaces,
    each with the fused op's label; found per thread over the ops in time order."""
    events = trace.events
    framework = _framework_rows(events)
    rows = np.flatnonzero(framework)
    outer = _outermost_framework_op(trace, rows) == rows
    ops = events.iloc[rows[outer]]
    labels: dict[int, str] = {}
    for _, thread in ops.sort_values("ts", kind="stable").groupby(["rank", "tid"], observed=True, sort=False):
        names = [str(n).removeprefix("aten::") + "-" for n in thread["name"]]
        starts = np.cumsum([0, *map(len, names)])
        text = "".join(names)
        for op in fused:
            for found in re.finditer(NPU_FUSED[op][1], text):
                first, last = np.searchsorted(starts, [found.start(), found.end()], side="right") - 1
                labels.update(dict.fromkeys(thread.index[first : max(last, first + 1)], _chain_label(op)))
    return labels


def _chain_label(op: str) -> str:
    return f"{op.split('::')[-1]} ≈ {NPU_FUSED[op][0]}" if op in NPU_FUSED else op


def _has_op(trace, name: str) -> bool:
    events = trace.events
    return bool(((events["kind"] == Kind.CPU_OP.value) & (events["name"] == name)).any())


def _categories(work: pd.DataFrame, scope: Compared) -> pd.DataFrame:
    """Per-unit samples of every category: compute categories from the device work, communication exposed and
    idle from the step's overlap, host overhead from the runtime calls."""
    compute = work[work["category"] != "communication"].assign(name=lambda f: f["category"], kind="")
    metrics = samples.window(scope)
    rows = [
        pd.DataFrame({"unit": range(scope.units), "name": name, "kind": "", "total_ns": metrics[column], "count": 0})
        for name, column in STEP_CATEGORIES.items()
    ]
    host = _host_overhead(scope)
    rows.append(
        pd.DataFrame(
            {"unit": range(scope.units), "name": HOST_OVERHEAD, "kind": "", "total_ns": host[0], "count": host[1]}
        )
    )
    columns = ["unit", "name", "kind", "total_ns", "count"]
    return pd.concat([compute[columns], *rows], ignore_index=True)


def _host_overhead(scope: Compared) -> tuple[np.ndarray, np.ndarray]:
    """Per unit: time and count of the runtime calls that launch or copy work (not nested in another runtime
    call; synchronisation and waits left out)."""
    events = scope.trace.events
    calls = scope.trace.select(step=scope.steps, rank=scope.rank, kind=Kind.RUNTIME.value)
    parent_kind = events["kind"].astype(str).reindex(calls["parent"].to_numpy()).to_numpy()
    calls = calls[(parent_kind != Kind.RUNTIME.value) & ~calls["name"].astype(str).str.contains(_SYNC)]
    unit = _units(scope, calls)
    time = np.bincount(unit[unit >= 0], weights=calls["dur"].to_numpy()[unit >= 0], minlength=scope.units)
    count = np.bincount(unit[unit >= 0], minlength=scope.units)
    return time, count
