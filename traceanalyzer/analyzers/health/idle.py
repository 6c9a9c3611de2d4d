"""The idle findings: one per rank and cause of its idle inside steps (``causes``), each with the idle it explains
as its measured saving and one fix, and one residual finding for the idle no cause explains. Host syncs,
pageable copies and launch-bound stretches have their own modules' findings (``syncs``, ``transfers``,
``launch``), priced the same way (the idle their cause explains, from ``causes``)."""

from __future__ import annotations

import pandas as pd

from traceanalyzer import findings as fnd
from traceanalyzer import humanize
from traceanalyzer.analyzers import advice
from traceanalyzer.analyzers.attribution import accelerator
from traceanalyzer.analyzers.health.causes import LAUNCH_BOUND, QUEUED, UNEXPLAINED
from traceanalyzer.analyzers.health.part import Context, Part
from traceanalyzer.findings import Finding

ANALYZER = "health"

OWN_FINDINGS = frozenset({"host_sync", "pageable_copy", LAUNCH_BOUND})
"""Causes whose finding another module makes (sync, pageable-copy and launch-bound), priced by the idle they explain."""

MODELS = {
    "compile": "the idle while the launching thread (re)compiles would go with one compiled graph per shape",
    "allocator": "the idle while the launching thread is in allocator calls (cudaFree/cudaMalloc), and after a "
    "cudaFree drained the device queue, would go without them",
    "first_call": "the idle during first calls with a new input shape (library planning, autotuning, module loads) "
    "would go with a few fixed shapes",
    "python_gc": "the idle during garbage collection on the launching thread would go",
    "input_pipeline": "the idle while the launching thread prepares or loads input (until the host-to-device copy "
    "it launches) would go if the input were ready",
    "optimizer_loop": "the idle inside a per-parameter optimizer step (its host loop) would go with one fused "
    "kernel per step",
    "python_work": "the idle while the launching thread runs host code between kernels would go if that code "
    "left the step",
    UNEXPLAINED: "the device idle inside steps that no cause explains (measured)",
}
"""How each cause's saving is obtained (all measured: the idle the cause explains, per step)."""

PROFILED_EVENTS_PER_MS = 20
"""A cause's idle is profiler-inflated host time when the profiler recorded at least this many host events of the
launching threads per ms of it (one per 50 µs: at the few µs each costs, a sizeable part of that idle is the profiler's;
on our pairs the idle of a GC pause or a planning stall has under 1 per ms, a launch or optimizer loop 100 or more)."""

PROFILER_EVENT_NS = 4_150
"""What recording one host event costs the host under torch.profiler (ns; ``record_shapes``, ``profile_memory``,
``with_stack``, ``with_flops``, torch 2.11 on the lent H200's host). Fitted on half of the pairs of
``sample_traces/pairs`` (``launch_bound``, ``optimizer_loop``, ``allocator``, ``python_gc``, ``side_stream_copy``):
the value, on a 50 ns grid, that brings their top findings' savings without the profiler (``without_profiler``)
closest to the fixes' unprofiled CUDA-event gains (least squares of the log ratio); checked on the other half
(``tests/test_pairs.py``, docs/diagnosis.md). Cross-checked on programs apart from the pairs:
``scripts/record/overhead.py`` on two lent H200 hosts (``sample_traces/pairs/overhead/``) measured 1.3-4.3 µs per host
event with the same settings (median 2.6 µs), and the host-bound pair traces' profiled median step less the
unprofiled one, per host event recorded in a step, is 1.8-7.3 µs."""


def without_profiler(row: pd.Series, saving_ns: int) -> int:
    """A saving (ns) made of a cause's idle, less what recording the host events inside that idle cost the host
    (``PROFILER_EVENT_NS`` each, at the density of ``row``'s recorded events per ns of idle), never below 0: the
    saving estimated for a run without the profiler."""
    if not row["idle_ns"]:
        return int(saving_ns)
    return int(saving_ns * max(0.0, 1 - PROFILER_EVENT_NS * row["recorded"] / row["idle_ns"]))


def profiled_note(row: pd.Series | None, saving_ns: int) -> str:
    """What the profiler inflates, said of a cause whose idle is dense with host events it recorded, with the saving
    (ns per step) as traced and estimated without the profiler; else ''."""
    if row is None or not row["idle_ns"] or row["recorded"] * 1e6 < PROFILED_EVENTS_PER_MS * row["idle_ns"]:
        return ""
    every = humanize.duration(row["idle_ns"] / row["recorded"], 0)
    return (
        f" This idle was measured under the profiler, which recorded a host event every {every} of it on "
        f"the threads that launch the work; recording each costs the host about "
        f"{humanize.duration(PROFILER_EVENT_NS, 1)} (fitted on our H200 pairs, with_stack/record_shapes), so the "
        f"profiler inflates host time here: the saving is ~{humanize.duration(saving_ns)}/step as traced and "
        f"~{humanize.duration(without_profiler(row, saving_ns))}/step without the profiler (estimated)."
    )


def cause_row(health: Part, rank: int, cause: str) -> pd.Series | None:
    """One rank's row of the cause table for a cause, None where the cause explains none of its idle."""
    rows = health.causes[(health.causes["rank"] == rank) & (health.causes["cause"] == cause)]
    return rows.iloc[0] if len(rows) else None


def unprofiled_evidence(row: pd.Series | None, saving_ns: int, device_ns: int = 0) -> dict:
    """The evidence keys of a saving (ns per step) made of a cause's idle plus ``device_ns`` of device time (which
    the profiler does not inflate): as traced, and estimated without the profiler (``without_profiler``)."""
    host = saving_ns if row is None else without_profiler(row, saving_ns)
    return {
        "saving_traced_ns_per_step": int(saving_ns + device_ns),
        "saving_without_profiler_ns_per_step": int(host + device_ns),
    }


PER_STEP = " (the median over the rank's steps of that idle in each step)"
"""How a cause's idle becomes a figure per step: the same statistic as the summary's step time."""


ALLOCATOR_NPU = ("aclrtFree", "aclrtMalloc", "PYTORCH_NPU_ALLOC_CONF")
"""The allocator calls and setting an Ascend allocator finding names."""


def _titles(row: pd.Series, gpu: str, idle: str, meta) -> tuple[str, str]:
    """A cause's title (what, and its one fix) and advice."""
    cuda = advice.platform(meta) == advice.CUDA
    where = f" at {row['where']}" if row["where"] and not row["where"].startswith("(") else ""
    ops = f" ({row['ops']})" if row["ops"] else ""
    cause = row["cause"]
    if cause == "compile":
        return (
            f"(Re)compilation inside the step leaves the {gpu} idle {idle}/step{where}: compile once with "
            "torch._dynamo.mark_dynamic on the changing dimension",
            "The launching thread compiles (Dynamo/Inductor/Triton) while the device waits. Mark the changing "
            "dimension dynamic (torch._dynamo.mark_dynamic) or pad inputs to a few fixed shapes so each graph "
            "compiles once, before the loop.",
        )
    if cause == "allocator":
        free, malloc, conf = ("cudaFree", "cudaMalloc", "PYTORCH_CUDA_ALLOC_CONF") if cuda else ALLOCATOR_NPU
        device = "cuda" if cuda else "npu"
        if row["empty_cache"]:
            return (
                f"torch.{device}.empty_cache() in the step leaves the {gpu} idle {idle}/step "
                f"({free}/{malloc} on the host{where}): remove empty_cache() from the loop",
                f"empty_cache() hands every cached block back with {free}, which waits for the device; the next "
                f"allocations call {malloc} again. Remove it from the training loop (call it once, outside, if "
                "another process needs the memory).",
            )
        return (
            f"Allocator calls ({malloc}/{free}{ops}) leave the {gpu} idle {idle}/step: keep allocation sizes stable "
            f"({conf}=expandable_segments:True)",
            f"The caching allocator misses and calls the driver, which blocks the host ({free} also waits for the "
            f"device). Keep tensor sizes stable across steps, preallocate buffers, and set "
            f"{conf}=expandable_segments:True against fragmentation.",
        )
    if cause == "first_call":
        planner = "cuDNN/cuBLAS plan (or autotune, or load a kernel)" if cuda else "CANN compile or select its kernels"
        return (
            f"First calls with new input shapes stall the {gpu} {idle}/step{ops}: "
            "pad or bucket the shapes to a few sizes",
            f"Each new shape makes {planner} on the host before the first launch. Pad or bucket sequence lengths "
            "and batch sizes to a few fixed sizes (or mark the dimension dynamic when compiling), so every shape's "
            "plan is made once, in warm-up.",
        )
    if cause == "python_gc":
        return (
            f"Python garbage collection in the step leaves the {gpu} idle {idle}/step{where}: "
            "do not call gc.collect() in the loop",
            "The launching thread runs the garbage collector while the device waits. Remove gc.collect() from the "
            "step; for automatic collections, gc.freeze() after setup (or gc.disable() and collect between "
            "epochs).",
        )
    if cause == "input_pipeline":
        return (
            f"Input preparation on the training thread leaves the {gpu} idle {idle}/step{where}: "
            "load batches in DataLoader "
            "workers with pin_memory=True",
            "The thread that launches the step prepares its input before the host-to-device copy, so the device "
            "waits. Move that work into a Dataset served by DataLoader workers (num_workers > 0, "
            "persistent_workers=True, prefetch_factor), with pin_memory=True and non_blocking copies.",
        )
    if cause == "optimizer_loop":
        name = row["optimizer"] or "the optimizer"
        fused = "fused=True" if cuda else "foreach=True (or torch_npu's NpuFused optimizers)"
        return (
            f"Per-parameter optimizer loop ({name}) leaves the {gpu} idle {idle}/step: create it with {fused}",
            f"{name}.step() updates one parameter at a time (no foreach/fused op), launching a handful of tiny "
            f"kernels per parameter from the host. Create {name}(..., {fused}) (or foreach=True) so each step runs "
            "a few multi-tensor kernels.",
        )
    if cause == "python_work":
        return (
            f"Host code between kernels leaves the {gpu} idle {idle}/step{where}{ops}: "
            "move it out of the step or compile it",
            "The launching thread runs host code (Python, op dispatch) while the device has nothing queued. Move "
            f"that work out of the step, or {advice.FEWER_LAUNCHES[advice.platform(meta)]} so the host runs ahead.",
        )
    return (
        f"{gpu} idle {idle}/step inside steps (cause not identified)",
        "No host activity of the launching thread explains this idle (the profiler recorded nothing there, or it "
        "lies where the step's work is not recorded). Profile with with_stack=True to see the host's Python.",
    )


def idle_findings(health: Part, context: Context) -> list[Finding]:
    """One finding per rank and cause the cause table names (not queued work, not those of ``OWN_FINDINGS``)."""
    out = []
    gpu = accelerator(context)
    judged = set(health.computing)
    for _, row in health.causes.iterrows():
        rank, cause = int(row["rank"]), row["cause"]
        if rank not in judged or cause in OWN_FINDINGS or cause == QUEUED:
            continue
        claims = health.cause_claims(rank, cause)
        per_step = context.median_per_step(claims)
        if not per_step:  # idle in some steps only: not a per-step cost (the idle-by-cause table shows it)
            continue
        idle = humanize.duration(per_step)
        title, text = _titles(row, gpu, idle, context.meta)
        text += profiled_note(row, per_step)
        rank_text = f" on rank {rank}" if len(context.meta.ranks) > 1 else ""
        out.append(
            fnd.make(
                ANALYZER,
                "idle" if cause == UNEXPLAINED else cause,
                title.replace(f" the {gpu} ", f" the {gpu}{rank_text} ", 1) if rank_text else title,
                text,
                context.step_of(rank),
                concerns_ns=context.as_total(rank, per_step),
                saving_ns=context.as_total(rank, per_step),
                basis=fnd.Basis.MEASURED,
                model=MODELS[cause] + PER_STEP,
                claims=claims,
                where={"rank": rank, "place": row["where"], "ops": row["ops"]},
                evidence={
                    "cause": cause,
                    "gaps": int(row["gaps"]),
                    "idle_ns": int(row["idle_ns"]),
                    "explained_share": explained_share(health, rank),
                }
                | unprofiled_evidence(row, per_step),
            )
        )
    return out


def explained_share(health: Part, rank: int | None = None) -> float:
    """The share of the idle inside steps (of a rank, or of all) that a cause explains (queued work included: the
    host did not make the device wait)."""
    causes = health.causes if rank is None else health.causes[health.causes["rank"] == rank]
    total = int(causes["idle_ns"].sum())
    return 1 - int(causes.loc[causes["cause"] == UNEXPLAINED, "idle_ns"].sum()) / total if total else 1.0
