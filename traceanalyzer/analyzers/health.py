"""What an expert checks next: GPU idle gaps, launch-bound loops, host syncs, fp32 GEMMs, dynamic shapes.

Each check is a function of the Trace returning a DataFrame; ``findings`` turns them into advice with
evidence, and ``section`` into the report's health section.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from traceanalyzer import findings as fnd
from traceanalyzer import intervals
from traceanalyzer.analyzers.attribution import (
    accelerator,
    busy_intervals,
    describe,
    host_activity,
    in_steps,
    locate,
    steps_count,
)
from traceanalyzer.analyzers.collective_calls import DATA_LOADING, DATA_LOADING_ADVICE
from traceanalyzer.analyzers.steps import BUSY, step_spans, step_time
from traceanalyzer.findings import Claims, Finding
from traceanalyzer.memo import per_trace, remember
from traceanalyzer.options import Options
from traceanalyzer.schema import HOST_KINDS, NO_ROW, Kind
from traceanalyzer.section import Fact, Per, Section, Table, Unit
from traceanalyzer.tracedata import TraceData

ANALYZER = "health"

LARGE_GAP_NS = 100_000
"""Idle gaps longer than this (100 µs) are counted and shown one by one; shorter ones are launch latency."""

LARGEST_GAPS = 10
"""How many of the largest gaps the section lists, with what the host was doing."""

SYNC_IDLE_MENTION = 0.1
"""An idle-gap finding points at host syncs when at least this share of the idle follows them."""

SYNC_CALLS = frozenset(
    {
        "cudaStreamSynchronize",
        "cudaDeviceSynchronize",
        "cudaEventSynchronize",
        "cuStreamSynchronize",
        "cuCtxSynchronize",
        "cuEventSynchronize",
        "hipStreamSynchronize",
        "hipDeviceSynchronize",
        "hipEventSynchronize",
        "aclrtSynchronizeStream",
        "aclrtSynchronizeDevice",
        "aclrtSynchronizeEvent",
    }
)
"""Runtime calls that block the host until device work finishes (stream-to-stream waits are not host stalls)."""

DTOH_COPY = re.compile(r"DtoH|D2H|Device -> (?:Pinned|Pageable)", re.IGNORECASE)
"""Device-to-host copy names: the host needs the result, so it waits for it."""

PAGEABLE_COPY = re.compile(r"Pageable", re.IGNORECASE)
"""Copies into pageable host memory, which are synchronous even when issued async."""

LAUNCH_CALLS = frozenset(
    {
        "cudaLaunchKernel",
        "cudaLaunchKernelExC",
        "cudaLaunchCooperativeKernel",
        "cuLaunchKernel",
        "cuLaunchKernelEx",
        "hipLaunchKernel",
        "hipExtLaunchKernel",
        "hipModuleLaunchKernel",
        "hipExtModuleLaunchKernel",
    }
)
"""Runtime calls that launch one kernel."""

TINY_KERNEL_NS = 10_000
"""A kernel shorter than this (10 µs) is tiny: its launch costs about as much as the work."""

LAUNCH_BOUND_BUSY_SHARE = 0.5
"""A place full of tiny kernels is launch-bound when the GPU is busy less than this share of its span."""

LAUNCH_BOUND_MIN_KERNELS = 100
"""Fewest tiny kernels per step from one place before it is reported as a launch-bound loop."""

FP32_GEMM_KERNEL = re.compile(r"simt_sgemm|(?:^|_)sgemm|_ffma_|f32f32_f32f32_f32|Cijk_Ai?lk_Bl?jk_S_")
"""GEMM kernels that run fp32 math on the SIMT cores (no tensor cores): cuBLAS/CUTLASS sgemm, xmma ffma."""

GEMM_KERNEL = re.compile(r"gemm|Cijk_|cutlass|xmma|matmul", re.IGNORECASE)
"""Kernel names of matrix-multiply kernels (any precision)."""

TENSOR_CORE_KERNEL = re.compile(r"tf32|bf16|f16|h884|h1688|s1688|s16816|tensorop|nvjet|hmma|wgmma", re.IGNORECASE)
"""GEMM kernel names that show tensor-core math."""

GEMM_OPS = frozenset({"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::matmul", "aten::linear"})
"""CPU ops that run a matrix multiplication."""

FP32_TYPE = re.compile(r'"(?:float|float32)"')
"""A recorded fp32 input type (``Input type`` args)."""

REDUCED_TYPE = re.compile(r"BFloat16|Half|float16|bfloat16|Float8|int8", re.IGNORECASE)
"""A recorded reduced-precision input type."""

TF32_SPEEDUP = 4.0
"""Conservative speedup of TF32 tensor cores over fp32 SIMT GEMMs (the peak ratio is ~8× on A100/H100-class GPUs)."""

TF32_ADVICE = (
    "Enable TF32 (torch.backends.cuda.matmul.allow_tf32 = True, torch.backends.cudnn.allow_tf32 = True, or "
    "torch.set_float32_matmul_precision('high')) for several times the throughput, or run the model under "
    "torch.autocast(dtype=torch.bfloat16) / in bf16 for more; keep fp32 master weights if accuracy needs them."
)
PRE_AMPERE_ADVICE = (
    "This GPU has no TF32 (compute capability < 8): run the model under torch.autocast(dtype=torch.float16) with a "
    "GradScaler so these GEMMs/convolutions use the fp16 tensor cores (and channels_last for convolutions)."
)

FP32_GEMM_MIN_SHARE = 0.01
"""fp32 GEMM time below this share of step time is left alone (e.g. RoPE's deliberate fp32 matmul)."""

DYNAMIC_SHAPE_MIN = 3
"""Fewest distinct input shapes of one op, some first seen after the first step, for it to count as dynamic."""


# ---------------------------------------------------------------- idle gaps


@per_trace
def device_busy(trace) -> pd.DataFrame:
    """Per rank and device: span, busy, busy share, idle, gap counts, large gaps (> 100 µs) and the largest."""
    rows = []
    for (rank, device), work in _busy_work(trace.events).groupby(["rank", "device"], sort=True):
        starts, ends = busy_intervals(work)
        gaps = starts[1:] - ends[:-1]
        large = gaps[gaps > LARGE_GAP_NS]
        span = int(ends.max() - starts.min())
        busy = intervals.length((starts, ends))
        rows.append(
            {
                "rank": int(rank),
                "device": int(device),
                "span_ns": span,
                "busy_ns": busy,
                "busy_share": busy / span if span else 0.0,
                "idle_ns": span - busy,
                "gaps": len(gaps),
                "large_gaps": len(large),
                "large_gap_ns": int(large.sum()),
                "largest_gap_ns": int(gaps.max()) if len(gaps) else 0,
            }
        )
    columns = ["rank", "device", "span_ns", "busy_ns", "busy_share", "idle_ns", "gaps", "large_gaps"]
    return pd.DataFrame(rows, columns=columns + ["large_gap_ns", "largest_gap_ns"])


def idle_gaps(trace, top: int = LARGEST_GAPS) -> pd.DataFrame:
    """The largest idle gaps per rank and device, with what the host was doing during each."""
    frames = []
    events = trace.events
    for (rank, device), work in _busy_work(events).groupby(["rank", "device"], sort=True):
        starts, ends = busy_intervals(work)
        gap_start, gap_end = ends[:-1], starts[1:]
        order = np.argsort(gap_start - gap_end, kind="stable")[:top]
        table = pd.DataFrame(
            {
                "rank": int(rank),
                "device": int(device),
                "offset_ns": gap_start[order] - starts.min(),
                "dur_ns": (gap_end - gap_start)[order],
            }
        )
        table["resumed_by"] = describe(events, _launch_at(work, gap_end[order]))
        activity = host_activity(events, int(rank), gap_start[order], gap_end[order])
        frames.append(pd.concat([table, activity], axis=1))
    if not frames:
        return pd.DataFrame(columns=["rank", "device", "offset_ns", "dur_ns"])
    return pd.concat(frames, ignore_index=True).sort_values("dur_ns", ascending=False, kind="stable")


def _launch_at(work: pd.DataFrame, times: np.ndarray) -> np.ndarray:
    """The launching runtime call of the device work that starts at each time (NO_ROW if none)."""
    first = work.sort_values("ts", kind="stable").drop_duplicates("ts")
    return first.set_index("ts")["launch"].reindex(times, fill_value=NO_ROW).to_numpy()


def _idle_claims(trace: TraceData) -> Claims:
    """Per rank: the device-idle intervals inside steps (the step spans minus all busy device work)."""
    return remember(trace, "health.idle_claims", lambda: _idle_in_spans(trace))


def _idle_in_spans(trace: TraceData) -> Claims:
    spans = step_spans(trace)
    work = _busy_work(trace.events)
    out: Claims = {}
    for rank, mine in spans.groupby("rank"):
        busy = busy_intervals(work[work["rank"] == rank])
        span = intervals.union(mine["start_ns"].to_numpy(), mine["end_ns"].to_numpy())
        out[int(rank)] = intervals.subtract(span, busy)
    return out


def idle_in_steps(claims: intervals.Intervals | None) -> int:
    """Length of some idle intervals (0 for none)."""
    return intervals.length(claims) if claims is not None else 0


def _busy_work(events: pd.DataFrame) -> pd.DataFrame:
    return events[events["kind"].isin(BUSY)]


def _gap_findings(trace, step_ns: fnd.StepTime) -> list[Finding]:
    busy = device_busy(trace)
    claims = _idle_claims(trace)
    gaps = idle_gaps(trace, top=1)
    after_sync = in_steps(trace, sync_stalls(trace)).groupby("rank")["idle_after_ns"].sum()
    out = []
    for row in busy[busy["large_gaps"] > 0].itertuples(index=False):
        largest = gaps[(gaps["rank"] == row.rank) & (gaps["device"] == row.device)]
        host = _host_phrase(largest.iloc[0]) if len(largest) else "unknown"
        synced = after_sync.get(row.rank, 0) / row.idle_ns
        after = f", {synced:.0%} of the idle right after host syncs" if synced >= SYNC_IDLE_MENTION else ""
        loading = len(largest) > 0 and _loading_input(largest.iloc[0])
        out.append(
            fnd.make(
                ANALYZER,
                "idle",
                f"{accelerator(trace)} {row.device} of rank {row.rank} is idle {1 - row.busy_share:.0%} of its "
                f"active span ({row.large_gaps} gaps > 100 µs{after})",
                f"The {accelerator(trace)} waits for the host. During the largest gap the host was in {host}. "
                f"{_first_advice(loading, after)}"
                "Move that work off the critical path (DataLoader workers and pin_memory for input, "
                "no host syncs in the loop, fewer and larger kernels via torch.compile or CUDA graphs), or overlap "
                "it with device work. See the idle-gap table for the other large gaps.",
                step_ns,
                concerns_ns=idle_in_steps(claims.get(row.rank)),
                saving_ns=max(idle_in_steps(claims.get(row.rank)) - int(after_sync.get(row.rank, 0)), 0),
                basis=fnd.Basis.MEASURED,
                model="the device idle inside steps would go if the host never made it wait (the idle right after "
                "host syncs is counted under the sync finding)",
                claims={row.rank: claims[row.rank]} if row.rank in claims else {},
                where={"rank": row.rank, "device": row.device},
                evidence={k: getattr(row, k) for k in busy.columns if k not in ("rank", "device")},
            )
        )
    return out


def _loading_input(gap: pd.Series) -> bool:
    """Was the host loading input (a DataLoader range) during the gap?"""
    return bool(DATA_LOADING.search(gap["host_during"] or gap["host_at_start"]))


def _first_advice(loading: bool, after_syncs: str) -> str:
    """What to do first: feed the input faster when the host was loading it, else remove syncs if they precede idle."""
    if loading:
        return "It was loading input: " + DATA_LOADING_ADVICE + " "
    return "Remove the host syncs first (see the sync finding). " if after_syncs else ""


def _host_phrase(gap: pd.Series) -> str:
    """What the host did in one gap, in words."""
    during = gap["host_during"] or gap["host_at_start"] or "nothing the profiler recorded"
    resumed = f"; work resumed with {gap['resumed_by']}" if gap["resumed_by"] else ""
    return f"{during}{resumed}"


# ---------------------------------------------------------------- launch-bound loops


@per_trace
def launch_bound(trace) -> pd.DataFrame:
    """Per rank and place (annotation, Python frame): tiny kernels, their launches, and the GPU idle just before them.

    ``idle_before_ns`` sums the gap (under 100 µs) that ends where each tiny kernel starts; larger gaps are left to
    the idle-gap and sync findings. ``busy_share`` is kernel time over kernel time plus that idle.
    """
    events = trace.events
    kernels = in_steps(trace, events[(events["kind"] == Kind.KERNEL.value) & (events["launch"] != NO_ROW)])
    launch = kernels["launch"].to_numpy()
    place = locate(events, launch)
    frame = pd.DataFrame(
        {
            "rank": kernels["rank"].to_numpy(),
            "annotation": place["annotation"].to_numpy(),
            "frame": place["frame"].to_numpy(),
            "kernel_ns": kernels["dur"].to_numpy(),
            "launch_ns": events["dur"].to_numpy()[launch],
            "launch_call": events["name"].astype(str).to_numpy()[launch],
            "idle_before_ns": _idle_before(events, kernels),
            "top_op": _linked(events, kernels["top_op"].to_numpy(), "name"),
        }
    )
    frame = frame[(frame["kernel_ns"] < TINY_KERNEL_NS) & (frame["launch_ns"] > frame["kernel_ns"])]
    frame["launch_calls"] = frame["launch_call"].isin(LAUNCH_CALLS)
    table = (
        frame.groupby(["rank", "annotation", "frame"], sort=False)
        .agg(
            tiny_kernels=("kernel_ns", "size"),
            kernel_ns=("kernel_ns", "sum"),
            launch_ns=("launch_ns", "sum"),
            launch_calls=("launch_calls", "sum"),
            median_kernel_ns=("kernel_ns", "median"),
            median_launch_ns=("launch_ns", "median"),
            idle_before_ns=("idle_before_ns", "sum"),
            top_ops=("top_op", _most_common),
        )
        .reset_index()
    )
    table["busy_share"] = table["kernel_ns"] / (table["kernel_ns"] + table["idle_before_ns"]).clip(lower=1)
    return table.sort_values("idle_before_ns", ascending=False, kind="stable").reset_index(drop=True)


def _most_common(names: pd.Series, n: int = 3) -> str:
    """The n most frequent non-empty names, comma-separated."""
    return ", ".join(names[names != ""].value_counts().head(n).index)


def _idle_before(events: pd.DataFrame, kernels: pd.DataFrame) -> np.ndarray:
    """Per kernel: the device idle gap (under 100 µs) that ends where it starts, 0 if it starts while busy."""
    out = np.zeros(len(kernels), dtype=np.int64)
    ts = kernels["ts"].to_numpy()
    for rank in kernels["rank"].unique():
        mine = np.flatnonzero((kernels["rank"] == rank).to_numpy())
        starts, ends = busy_intervals(events[events["rank"] == rank])
        j = np.searchsorted(starts, ts[mine], side="right") - 1
        opens = (j > 0) & (starts[np.maximum(j, 0)] == ts[mine])
        gap = np.where(opens, starts[np.maximum(j, 0)] - ends[np.maximum(j - 1, 0)], 0)
        out[mine] = np.where(gap < LARGE_GAP_NS, gap, 0)
    return out


def _launch_findings(trace, step_ns: fnd.StepTime) -> list[Finding]:
    table = launch_bound(trace)
    claims = _idle_claims(trace)
    steps = steps_count(trace)
    hit = table[
        (table["tiny_kernels"] >= LAUNCH_BOUND_MIN_KERNELS * steps) & (table["busy_share"] < LAUNCH_BOUND_BUSY_SHARE)
    ]
    out = []
    for row in hit.itertuples(index=False):
        place = _place(row.annotation, row.frame) if row.annotation or row.frame else f"ops {row.top_ops}"
        out.append(
            fnd.make(
                ANALYZER,
                "launch_bound",
                f"Launch-bound loop at {place}: {row.tiny_kernels / steps:,.0f} tiny kernels per step, "
                f"GPU busy {row.busy_share:.0%} there",
                f"Each kernel runs ~{row.median_kernel_ns / 1e3:.1f} µs but its launch takes "
                f"~{row.median_launch_ns / 1e3:.1f} µs, so the GPU waits for the CPU. Capture the loop in a CUDA graph "
                '(torch.cuda.graphs or torch.compile(mode="reduce-overhead")), let torch.compile fuse the elementwise '
                "ops, or batch the iterations into larger tensor ops.",
                step_ns,
                concerns_ns=row.idle_before_ns,
                saving_ns=row.idle_before_ns,
                basis=fnd.Basis.MODELLED,
                model="the idle before each tiny kernel would go if the loop were one CUDA graph or fused kernel",
                claims={row.rank: claims[row.rank]} if row.rank in claims else {},
                where={"rank": row.rank, "annotation": row.annotation, "frame": row.frame, "ops": row.top_ops},
                evidence={
                    k: getattr(row, k) for k in table.columns if k not in ("rank", "annotation", "frame", "top_ops")
                },
            )
        )
    return out


def _place(annotation: str, frame: str) -> str:
    return " › ".join(p for p in (annotation, frame) if p) or "(no annotation or Python frame)"


# ---------------------------------------------------------------- synchronization stalls


@per_trace
def sync_stalls(trace) -> pd.DataFrame:
    """Every blocking host sync call: where it was, how long the host waited, and the GPU idle right after it."""
    events = trace.events
    calls = events[(events["kind"] == Kind.RUNTIME.value) & events["name"].astype(str).isin(SYNC_CALLS)]
    place = locate(events, calls.index.to_numpy())
    table = pd.DataFrame(
        {
            "rank": calls["rank"].to_numpy(),
            "step": calls["step"].to_numpy(),
            "name": calls["name"].astype(str).to_numpy(),
            "ts": calls["ts"].to_numpy(),
            "sync_ns": calls["dur"].to_numpy(),
            "annotation": place["annotation"].to_numpy(),
            "frame": place["frame"].to_numpy(),
            "op": _linked(events, calls["op"].to_numpy(), "name"),
        },
        index=calls.index,
    )
    table["idle_after_ns"] = _idle_after(events, table)
    return table


def _idle_after(events: pd.DataFrame, calls: pd.DataFrame) -> np.ndarray:
    """GPU idle of the gap each call ends in, charged to the first call ending in it (0 if the GPU is busy then),
    less the time the host spends loading data in that gap (the GPU would wait for the input anyway)."""
    out = np.zeros(len(calls), dtype=np.int64)
    done = (calls["ts"] + calls["sync_ns"]).to_numpy()
    for rank in calls["rank"].unique():
        mine_events = events[events["rank"] == rank]
        starts, ends = busy_intervals(mine_events)
        if len(starts) < 2:
            continue
        mine = np.flatnonzero((calls["rank"] == rank).to_numpy())
        mine = mine[np.argsort(done[mine], kind="stable")]
        nxt = np.clip(np.searchsorted(starts, done[mine], side="right"), 1, len(starts) - 1)
        inside = (ends[nxt - 1] <= done[mine]) & (starts[nxt] > done[mine])
        first = inside & ~pd.Series(np.where(inside, nxt, -1)).duplicated().to_numpy()
        gap_start, gap_end = ends[nxt - 1][first], starts[nxt][first]
        loading = intervals.covered_within(_data_loading(mine_events), gap_start, gap_end)
        out[mine[first]] = gap_end - gap_start - loading
    return out


def _data_loading(events: pd.DataFrame) -> intervals.Intervals:
    """When the host loads data (DataLoader ranges and frames), as disjoint intervals."""
    host = events[events["kind"].isin([k.value for k in HOST_KINDS])]
    names = host["name"].cat.categories.astype(str)
    loading = np.asarray(names.str.contains(DATA_LOADING), dtype=bool)[host["name"].cat.codes.to_numpy()]
    rows = host[loading]
    return intervals.union(rows["ts"].to_numpy(), (rows["ts"] + rows["dur"]).to_numpy())


def dtoh_copies(trace) -> pd.DataFrame:
    """Device-to-host copies per rank and name (pageable ones flagged)."""
    events = trace.events
    copies = events[(events["kind"] == Kind.MEMCPY.value) & _matches(events["name"].astype(str).to_numpy(), DTOH_COPY)]
    table = copies.groupby(["rank", "name"], observed=True)["dur"].agg(["size", "sum"]).reset_index()
    table.columns = ["rank", "name", "count", "total_ns"]
    table["name"] = table["name"].astype(str)
    table["pageable"] = table["name"].str.contains(PAGEABLE_COPY)
    return table


def sync_places(trace) -> pd.DataFrame:
    """In-step syncs grouped by rank and place: count, host wait, GPU idle after, and the ops that synced."""
    stalls = in_steps(trace, sync_stalls(trace))  # a sync outside every step is the profiler's own flush
    grouped = stalls.groupby(["rank", "annotation", "frame"], sort=False)
    table = grouped.agg(
        syncs=("name", "size"),
        sync_ns=("sync_ns", "sum"),
        idle_after_ns=("idle_after_ns", "sum"),
        calls=("name", _joined),
        ops=("op", _joined),
    ).reset_index()
    return table.sort_values(["idle_after_ns", "sync_ns"], ascending=False, kind="stable").reset_index(drop=True)


def _joined(names: pd.Series) -> str:
    """The distinct non-empty names, sorted and comma-separated."""
    return ", ".join(sorted(set(names) - {""}))


def _sync_findings(trace, step_ns: fnd.StepTime) -> list[Finding]:
    places = sync_places(trace)
    if not len(places):
        return []
    steps = steps_count(trace) * max(len(trace.meta.ranks), 1)
    copies = dtoh_copies(trace)
    top = places.iloc[0]
    total = int(places["syncs"].sum())
    per_rank = " per rank" if len(trace.meta.ranks) > 1 else ""
    pageable = int(copies.loc[copies["pageable"], "count"].sum())
    advice = (
        f"Each sync drains the GPU queue; the GPU then idles until the host launches again. Most are at "
        f"{_place(top['annotation'], top['frame'])} ({top['syncs']} syncs, from {top['ops'] or top['calls']}). "
        "Keep values on the device (accumulate norms/losses in a tensor and call .item() once per step or every N "
        "steps), use torch.nn.utils.clip_grad_norm_/foreach norms instead of per-parameter .item(), and copy to "
        "pinned memory with non_blocking=True."
    )
    if pageable:
        advice += f" {pageable} device-to-host copies go to pageable memory, which is synchronous: pin the buffer."
    return [
        fnd.make(
            ANALYZER,
            "sync",
            f"{total / steps:g} host syncs per step{per_rank} stall the GPU (most at "
            f"{_place(top['annotation'], top['frame'])})",
            advice,
            step_ns,
            concerns_ns=int(places["sync_ns"].sum()),
            saving_ns=int(places["idle_after_ns"].sum()),
            basis=fnd.Basis.MEASURED,
            model="the device idle right after each host sync would go without the sync",
            where={"rank": int(top["rank"]), "annotation": top["annotation"], "frame": top["frame"]},
            evidence={
                "syncs": total,
                "syncs_per_step": total / steps,
                "sync_ns": int(places["sync_ns"].sum()),
                "idle_after_ns": int(places["idle_after_ns"].sum()),
                "dtoh_copies": {r["name"]: int(r["count"]) for r in copies.to_dict(orient="records")},
                "places": places.head(LARGEST_GAPS).to_dict(orient="records"),
            },
        )
    ]


# ---------------------------------------------------------------- fp32 matrix work


@per_trace
def fp32_gemms(trace) -> pd.DataFrame:
    """GEMM kernels running fp32 without tensor cores, by rank, name and op, with count and total time."""
    events = trace.events
    kernels = in_steps(trace, events[events["kind"] == Kind.KERNEL.value])
    names = kernels["name"].astype(str).to_numpy()
    op_names = _linked(events, kernels["op"].to_numpy(), "name")
    op_types = _linked(events, kernels["op"].to_numpy(), "input_types")
    fp32_op = np.isin(op_names, list(GEMM_OPS)) & _matches(op_types, FP32_TYPE) & ~_matches(op_types, REDUCED_TYPE)
    gemm_like = _matches(names, GEMM_KERNEL) & ~_matches(names, TENSOR_CORE_KERNEL)
    picked = _matches(names, FP32_GEMM_KERNEL) | (fp32_op & gemm_like)
    frame = pd.DataFrame(
        {
            "rank": kernels["rank"].to_numpy()[picked],
            "name": names[picked],
            "op": op_names[picked],
            "dur": kernels["dur"].to_numpy()[picked],
        }
    )
    table = frame.groupby(["rank", "name", "op"], sort=False)["dur"].agg(["size", "sum"]).reset_index()
    table.columns = ["rank", "name", "op", "count", "total_ns"]
    return table.sort_values("total_ns", ascending=False, kind="stable").reset_index(drop=True)


def _linked(events: pd.DataFrame, rows: np.ndarray, column: str) -> np.ndarray:
    """A text column of linked rows ('' where the link is NO_ROW)."""
    values = events[column].astype(str).to_numpy()
    return np.where(rows != NO_ROW, values[np.maximum(rows, 0)], "")


def _matches(texts: np.ndarray, pattern: re.Pattern) -> np.ndarray:
    """Per text: does the pattern occur in it? Evaluated once per distinct text."""
    distinct, inverse = np.unique(texts, return_inverse=True)
    hit = np.fromiter((bool(pattern.search(t)) for t in distinct), bool, len(distinct))
    return hit[inverse]


def _fp32_findings(trace, step_ns: fnd.StepTime) -> list[Finding]:
    table = fp32_gemms(trace)
    total = int(table["total_ns"].sum())
    if not total or total < FP32_GEMM_MIN_SHARE * step_ns.total_ns:
        return []
    steps = steps_count(trace)
    device = int(in_steps(trace, _busy_work(trace.events))["dur"].sum())
    saving = int(total * (1 - 1 / TF32_SPEEDUP))
    ops = sorted(set(table["op"]) - {""})
    return [
        fnd.make(
            ANALYZER,
            "fp32_gemm",
            f"fp32 matrix multiplies/convolutions run without tensor cores: {total / steps / 1e6:.1f} ms of GPU time "
            "per step",
            f"{', '.join(ops) or 'GEMM kernels'} run fp32 SIMT kernels ({table['name'].iloc[0][:60]}…). "
            + (TF32_ADVICE if _tf32_capable(trace) else PRE_AMPERE_ADVICE),
            step_ns,
            concerns_ns=total,
            saving_ns=saving,
            basis=fnd.Basis.MODELLED,
            model=f"the same GEMMs {TF32_SPEEDUP:g}× faster on TF32 tensor cores",
            where={"ops": ops, "kernels": table["name"].head(5).tolist()},
            evidence={
                "fp32_gemm_ns": total,
                "fp32_gemm_ns_per_step": total / steps,
                "kernels": int(table["count"].sum()),
                "device_time_share": total / device if device else 0.0,
                "assumed_tf32_speedup": TF32_SPEEDUP,
            },
        )
    ]


def _tf32_capable(trace) -> bool:
    """False only when every device's compute capability is known and below 8 (pre-Ampere)."""
    majors = [d.properties.get("computeMajor") for d in trace.meta.devices]
    return not majors or any(m is None or m >= 8 for m in majors)


# ---------------------------------------------------------------- dynamic shapes


@per_trace
def dynamic_shapes(trace) -> pd.DataFrame:
    """Ops whose input shapes keep changing across steps: distinct shapes, those first seen later, device time first."""
    events = trace.events
    ops = events[(events["kind"] == Kind.CPU_OP.value) & (events["step"] != NO_ROW)]
    ops = ops[ops["input_dims"].astype(str).str.len() > 0]
    frame = pd.DataFrame(
        {
            "rank": ops["rank"].to_numpy(),
            "name": ops["name"].astype(str).to_numpy(),
            "shape": ops["input_dims"].astype(str).to_numpy(),
            "step": ops["step"].to_numpy(),
            "device_ns": _device_ns(events, ops.index),
        }
    )
    keys = ["rank", "name"]
    per_shape = (
        frame.groupby(keys + ["shape"], sort=False)
        .agg(calls=("step", "size"), since=("step", "min"), device_ns=("device_ns", "sum"))
        .reset_index()
    )
    per_shape["new"] = per_shape["since"] > per_shape.groupby("rank")["since"].transform("min")
    table = (
        per_shape.groupby(keys, sort=False)
        .agg(
            calls=("calls", "sum"), shapes=("shape", "size"), new_shapes=("new", "sum"), device_ns=("device_ns", "sum")
        )
        .join(frame.groupby(keys)["step"].nunique().rename("steps"))
        .reset_index()
    )
    hit = (table["shapes"] >= DYNAMIC_SHAPE_MIN) & (table["new_shapes"] >= table["steps"] - 1) & (table["steps"] > 1)
    return table[hit].sort_values(["device_ns", "new_shapes"], ascending=False, kind="stable").reset_index(drop=True)


def _device_ns(events: pd.DataFrame, ops: pd.Index) -> np.ndarray:
    """Per op row: the busy device time of the work it launched itself (as the innermost op)."""
    work = _busy_work(events)
    return work[work["op"] != NO_ROW].groupby("op")["dur"].sum().reindex(ops, fill_value=0).to_numpy()


def _shape_findings(trace, step_ns: fnd.StepTime) -> list[Finding]:
    table = dynamic_shapes(trace)
    if not len(table):
        return []
    names = table["name"].drop_duplicates().head(5).tolist()
    return [
        fnd.make(
            ANALYZER,
            "dynamic_shapes",
            f"Dynamic shapes: {table['name'].nunique()} ops see new input shapes in later steps ({', '.join(names)})",
            "Shapes that change every step make torch.compile recompile (or fall back), defeat CUDA graphs and churn "
            "the caching allocator. Pad or bucket sequence lengths / batch sizes to a few fixed sizes, or mark the "
            "dimension dynamic (torch._dynamo.mark_dynamic) when compiling.",
            step_ns,
            concerns_ns=int(table["device_ns"].sum()),
            where={"ops": names},
            evidence={
                "ops_with_device_work": int(table.loc[table["device_ns"] > 0, "name"].nunique()),
                "device_ns": int(table["device_ns"].sum()),
                "ops": table.to_dict(orient="records"),
            },
        )
    ]


# ---------------------------------------------------------------- findings and section


_CHECKS = (_gap_findings, _launch_findings, _sync_findings, _fp32_findings, _shape_findings)


def findings(trace) -> list[Finding]:
    """Idle-gap, launch-bound, sync-stall, fp32-GEMM and dynamic-shape findings, cost against total step time."""
    step = step_time(trace)
    return [f for check in _CHECKS for f in check(trace, step)]


def section(trace: TraceData, options: Options) -> Section | None:
    """The health section: device busy per rank, the largest idle gaps, syncs, launch-bound places, fp32 GEMMs."""
    busy = device_busy(trace)
    if not len(busy):
        return None
    syncs = sync_places(trace)
    gemms = fp32_gemms(trace)
    idle = sum(idle_in_steps(c) for c in _idle_claims(trace).values())
    top = options.top
    return Section(
        "health",
        "GPU idle, launch overhead, syncs and precision",
        facts=[
            Fact(
                "device_busy_share",
                "device busy (active span)",
                float(busy["busy_ns"].sum() / max(busy["span_ns"].sum(), 1)),
                Unit.SHARE,
            ),
            Fact("idle_in_steps_ns", "device idle inside steps", idle, Unit.NS, Per.TOTAL),
            Fact("large_gaps", "idle gaps over 100 µs", int(busy["large_gaps"].sum()), Unit.COUNT, Per.TOTAL),
            Fact("large_gap_ns", "time in gaps over 100 µs", int(busy["large_gap_ns"].sum()), Unit.NS, Per.TOTAL),
            Fact("largest_gap_ns", "largest gap", int(busy["largest_gap_ns"].max()), Unit.NS),
            Fact("host_syncs", "host syncs", int(syncs["syncs"].sum()), Unit.COUNT, Per.TOTAL),
            Fact("fp32_gemm_ns", "fp32 GEMM time", int(gemms["total_ns"].sum()), Unit.NS, Per.TOTAL),
        ],
        tables=[
            Table("device_busy", "Device busy per rank and device (active span)", busy, Per.TOTAL),
            Table("largest_gaps", "Largest idle gaps", idle_gaps(trace, top=top).head(top)),
            Table("sync_places", "Host syncs by place", syncs.head(top), Per.TOTAL),
            Table("dtoh_copies", "Device-to-host copies", dtoh_copies(trace).head(top), Per.TOTAL),
            Table("launch_places", "Launch-bound places", launch_bound(trace).head(top), Per.TOTAL),
            Table("fp32_gemms", "fp32 GEMM kernels", gemms.head(top), Per.TOTAL),
            Table("dynamic_shapes", "Ops whose input shapes change", dynamic_shapes(trace).head(top), Per.TOTAL),
        ],
    )
