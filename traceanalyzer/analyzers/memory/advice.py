"""Memory advice rules: leaks, large temporaries, dominating activations, fragmentation and peaks near capacity,
each tied to what holds the memory at the peak."""

from __future__ import annotations

import re
from dataclasses import replace

import numpy as np
import pandas as pd

from traceanalyzer.analyzers import callpath
from traceanalyzer.analyzers.memory.analysis import OUTSIDE_OP, MemoryJobPart
from traceanalyzer.analyzers.summary import job_step_time
from traceanalyzer.findings import Finding, Severity, StepTime, make
from traceanalyzer.humanize import share, size
from traceanalyzer.jobdata import JobData
from traceanalyzer.records import records

LARGE_BLOCK_SHARE = 0.10
"""A block live at the peak that alone holds this share of it is a large temporary."""
LARGE_BLOCK_MIN_BYTES = 512 << 20
"""... and is at least this big (smaller blocks are not worth restructuring code for)."""
LARGE_TEMPORARIES_SHARE = 0.25
"""Large temporaries of the peak's step holding this share of the peak make a finding."""
ACTIVATION_SHARE = 0.5
ACTIVATION_MIN_BYTES = 1 << 30
"""Blocks of the peak's step (other than the large temporaries) holding this share and size make a finding."""
UNUSED_RESERVED_SHARE = 0.3
UNUSED_RESERVED_MIN_BYTES = 1 << 30
"""Reserved-but-unallocated memory at the peak beyond both limits is allocator fragmentation worth fixing."""
CAPACITY_SHARE = 0.9
"""A peak above this share of the device's memory is close to running out."""
TOP_HOLDERS = 3

TEMPORARY_ADVICE: tuple[tuple[re.Pattern, str], ...] = (
    (
        re.compile(r"log_softmax|nll_loss|cross_entropy", re.IGNORECASE),
        "compute the loss in chunks over the tokens (chunked cross-entropy), or use a fused linear + cross-entropy "
        "kernel (e.g. Liger-Kernel's LigerFusedLinearCrossEntropyLoss), so the full tokens × vocabulary logits, "
        "their log-probabilities and gradients are never materialised at once",
    ),
    (
        re.compile(r"attention|attn|score|softmax|baddbmm|\bbmm\b|masked_fill", re.IGNORECASE),
        "use F.scaled_dot_product_attention (flash / memory-efficient / cuDNN backend), which never materialises the "
        "(batch, heads, seq, seq) score matrix, or compute the attention in chunks of queries",
    ),
)
"""Advice for large temporaries, by the first pattern that the allocating ops' names and paths match."""
DEFAULT_TEMPORARY_ADVICE = (
    "compute it in chunks (slices of the batch or sequence) or with a fused kernel, so the whole intermediate is "
    "never allocated at once"
)

RISK = {
    "leak": Severity.HIGH,
    "capacity": Severity.HIGH,
    "temporaries": Severity.MEDIUM,
    "activations": Severity.LOW,
    "fragmentation": Severity.MEDIUM,
}
"""Memory findings cost no time, so their severity follows the risk of running out of memory, not step share: each
rule fires only where the risk is real (a leak that fills the device, a temporary or an unused reserve that sets
the peak), so high and medium ones are pushed (``Finding.risk``)."""


def job_findings(part: MemoryJobPart, job: JobData) -> list[Finding]:
    """Memory findings of a job's merged part: leaks, large temporaries, dominating activations, fragmentation,
    peaks near capacity."""
    if not job.memory_events:
        return []
    return _findings(part, job_step_time(job))


def _findings(analysis: MemoryJobPart, step_ns: StepTime) -> list[Finding]:
    """The findings of a memory job part, per device pool, then per leaking pool."""
    found = []
    for _, peak in analysis.device_peaks.iterrows():
        live = _pool(analysis.live_at_peak, peak)
        found += _temporaries(peak, live, step_ns)
        found += _activations(peak, live, analysis.training, step_ns)
        found += _fragmentation(peak, step_ns)
        found += _capacity_finding(peak, step_ns)
    for _, leak in analysis.leaking.iterrows():
        found.append(_leak_finding(leak, _pool(analysis.unfreed, leak), _pool(analysis.peaks, leak), step_ns))
    return found


def _pool(table: pd.DataFrame, key: pd.Series) -> pd.DataFrame:
    """Rows of a table that belong to the pool (rank, device) of ``key``."""
    return table[(table["rank"] == key["rank"]) & (table["device"] == key["device"])]


def _finding(kind: str, title: str, advice: str, step: StepTime, **details: object) -> Finding:
    return replace(make("memory", kind, title, advice, step, concerns_ns=0, **details), risk=RISK[kind])


def _headroom(capacity: float, used: float) -> str:
    """The device memory left beside ``used`` bytes, in words ('' where the device's capacity is unknown)."""
    if not capacity > 0:
        return ""
    return f"{size(max(capacity - used, 0))} of {size(capacity)} left"


def _code(stack: object) -> str:
    """' (code: <stack>)' for a recorded Python stack, else ''."""
    return f" (code: {stack})" if isinstance(stack, str) and stack else ""


def _where(peak: pd.Series) -> dict:
    return {"rank": int(peak["rank"]), "device": int(peak["device"])}


def _large(peak: pd.Series, live: pd.DataFrame) -> pd.DataFrame:
    """Blocks of the peak's step that alone hold a large share of the peak."""
    big = live["bytes"] >= max(LARGE_BLOCK_SHARE * peak["peak_allocated_bytes"], LARGE_BLOCK_MIN_BYTES)
    return live[big & (live["step"] == peak["peak_step"])]


def _of_its_step(step: object) -> str:
    """Where the peak's blocks were allocated: in the peak's step, or (a snapshot, a peak between steps) in none."""
    in_a_step = pd.notna(step) and int(step) >= 0
    return "of this step" if in_a_step else "allocated outside every step"


def _temporaries(peak: pd.Series, live: pd.DataFrame, step_ns: StepTime) -> list[Finding]:
    large = _large(peak, live)
    held = int(large["bytes"].sum())
    if held < LARGE_TEMPORARIES_SHARE * peak["peak_allocated_bytes"]:
        return []
    first = large.iloc[0]
    text = " ".join(large["op_name"].astype(str) + " " + large["path"].astype(str))
    advice = next((a for pattern, a in TEMPORARY_ADVICE if pattern.search(text)), DEFAULT_TEMPORARY_ADVICE)
    fp32 = " (fp32 inputs)" if first["fp32_inputs"] else ""
    headroom = _headroom(peak["capacity_bytes"], peak["peak_allocated_bytes"])
    title = (
        f"{len(large)} large temporar{'y' if len(large) == 1 else 'ies'} set the "
        f"{size(peak['peak_allocated_bytes'])} peak on device {peak['device']} ({size(held)} of it"
        + (f"; {headroom}" if headroom else "")
        + f"): {first['op_name']} in {first['path']}"
    )
    advice = (
        f"At the peak ({peak['path']}) {len(large)} block(s) {_of_its_step(peak['peak_step'])} each hold "
        f"≥{share(LARGE_BLOCK_SHARE, 0)} of it, "
        f"the largest {size(first['bytes'])} from {first['op_name']}{_code(first['stack'])}"
        + (" (fp32 inputs)" if fp32 else "")
        + f": {advice}."
    )
    blocks = large[["bytes", "op_name", "path"]].head(TOP_HOLDERS * 2)
    return [
        _finding(
            "temporaries",
            title,
            advice,
            step_ns,
            where=_where(peak)
            | {"op": first["op_name"], "path": first["path"], "module": first["module"], "stack": first["stack"]},
            evidence={
                "peak_bytes": int(peak["peak_allocated_bytes"]),
                "held_bytes": held,
                "capacity_bytes": _bytes(peak["capacity_bytes"]),
                "blocks": records(blocks),
            },
        )
    ]


def _activations(peak: pd.Series, live: pd.DataFrame, training: bool, step_ns: StepTime) -> list[Finding]:
    in_step = live[live["step"] == peak["peak_step"]]
    rest = in_step.drop(_large(peak, live).index) if _temporaries_found(peak, live) else in_step
    if int(rest["bytes"].sum()) < max(ACTIVATION_SHARE * peak["peak_allocated_bytes"], ACTIVATION_MIN_BYTES):
        return []
    holders = rest.assign(where=rest["path"].map(_head)).groupby("where")["bytes"].sum().nlargest(TOP_HOLDERS)
    held = rest["bytes"].sum() / peak["peak_allocated_bytes"]
    named = ", ".join(f"{w or OUTSIDE_OP} {size(b)}" for w, b in holders.items())
    advice = (
        "recompute them in backward with activation checkpointing (torch.utils.checkpoint) on the largest blocks, "
        "use a smaller micro-batch with gradient accumulation, or keep activations in bf16"
        if training
        else "run under torch.inference_mode(), use a smaller batch, or release intermediates earlier (del)"
    )
    return [
        _finding(
            "activations",
            f"Tensors of the step itself hold {share(held, 0)} of the {size(peak['peak_allocated_bytes'])} peak "
            f"on device {peak['device']}",
            f"At the peak, {size(rest['bytes'].sum())} was allocated during the same step (largest holders: {named}), "
            f"against {size(peak['peak_allocated_bytes'] - in_step['bytes'].sum())} held across steps: {advice}.",
            step_ns,
            where=_where(peak) | {"path": peak["path"]},
            evidence={"step_bytes": int(rest["bytes"].sum()), "holders": {str(k): int(v) for k, v in holders.items()}},
        )
    ]


def _temporaries_found(peak: pd.Series, live: pd.DataFrame) -> bool:
    return _large(peak, live)["bytes"].sum() >= LARGE_TEMPORARIES_SHARE * peak["peak_allocated_bytes"]


def _head(path: str) -> str:
    """The first two names of a path: where in the model a block was allocated."""
    return callpath.SEPARATOR.join(path.split(callpath.SEPARATOR)[:2])


def _fragmentation(peak: pd.Series, step_ns: StepTime) -> list[Finding]:
    reserved, allocated = peak["peak_reserved_bytes"], peak["peak_allocated_bytes"]
    unused = reserved - allocated
    if not unused >= max(UNUSED_RESERVED_MIN_BYTES, UNUSED_RESERVED_SHARE * reserved):
        return []
    headroom = _headroom(peak["capacity_bytes"], reserved)
    return [
        _finding(
            "fragmentation",
            f"Fragmentation: {size(unused)} reserved but unallocated at the {size(allocated)} peak on device "
            f"{peak['device']} (reserve {size(reserved)}" + (f"; {headroom}" if headroom else "") + ")",
            f"The caching allocator holds {share(unused / reserved, 0)} of its reserve unused at the peak "
            f"({peak['path']}"
            f"{_code(peak['stack'])}: fragmentation from blocks of changing sizes), memory no other allocation can "
            "use: set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (Ascend: "
            "PYTORCH_NPU_ALLOC_CONF=expandable_segments:True), and avoid torch.cuda.empty_cache() inside the loop.",
            step_ns,
            where=_where(peak) | {"path": peak["path"], "stack": peak["stack"]},
            evidence={
                "peak_reserved_bytes": int(reserved),
                "peak_allocated_bytes": int(allocated),
                "capacity_bytes": _bytes(peak["capacity_bytes"]),
            },
        )
    ]


def _capacity_finding(peak: pd.Series, step_ns: StepTime) -> list[Finding]:
    if not peak["capacity_share"] >= CAPACITY_SHARE:
        return []
    return [
        _finding(
            "capacity",
            f"Memory peak {size(peak['peak_allocated_bytes'])} is {share(peak['capacity_share'], 0)} of device "
            f"{peak['device']}'s memory",
            f"The peak at {peak['path']} leaves little headroom: use activation checkpointing, mixed precision, "
            "a smaller batch, or shard parameters and optimizer state (FSDP/ZeRO).",
            step_ns,
            where=_where(peak) | {"path": peak["path"]},
            evidence={"capacity_bytes": int(peak["capacity_bytes"])},
        )
    ]


def _leak_finding(leak: pd.Series, unfreed: pd.DataFrame, peak: pd.DataFrame, step_ns: StepTime) -> Finding:
    growth = leak["growth_per_step_bytes"]
    recurring = unfreed[unfreed["steps"] >= 2].head(TOP_HOLDERS)
    headroom = peak["capacity_bytes"].iloc[0] - peak["peak_allocated_bytes"].iloc[0] if len(peak) else np.nan
    steps_left = int(headroom // growth) if headroom > 0 else None
    title = (
        f"Memory leak on device {leak['device']}: allocated memory grows {size(growth)} per step over "
        f"{leak['steps']} steps (r² {leak['r2']:.2f})"
        + (f"; out of memory after about {steps_left:,} more steps at this rate" if steps_left is not None else "")
    )
    cause = (
        "something keeps a reference to a tensor made every step: a list or dict that appends outputs or losses "
        "(a .detach() copy still holds the memory), a cache keyed per step, or a hook that stores activations; "
        "keep .item() / .cpu() values instead, or clear the container"
    )
    if len(recurring):
        top = recurring.iloc[0]
        cause = (
            f"{top['blocks']} blocks of {size(top['per_step_bytes'])} per step allocated by {top['op_name']} at "
            f"{top['path']}{_code(top['stack'])} are never freed: {cause}"
        )
    if steps_left is not None:
        cause += f"; at this rate the device's {size(headroom)} of headroom is gone in about {steps_left:,} more steps"
    where = {"rank": int(leak["rank"]), "device": int(leak["device"])}
    if len(recurring):
        top = recurring.iloc[0]
        where |= {"op": top["op_name"], "path": top["path"], "stack": top["stack"]}
    return _finding(
        "leak",
        title,
        cause[0].upper() + cause[1:] + ".",
        step_ns,
        where=where,
        evidence={
            "growth_per_step_bytes": float(growth),
            "r2": float(leak["r2"]),
            "steps_to_out_of_memory": steps_left,
            "headroom_bytes": _bytes(headroom),
            "unfreed": records(recurring[["op_name", "path", "blocks", "unfreed_bytes"]]),
        },
    )


def _bytes(value: float) -> int | None:
    """A byte count for the JSON report, None where unknown (NaN)."""
    return int(value) if value == value else None
