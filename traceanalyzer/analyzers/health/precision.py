"""Precision: matrix multiplies that run fp32 math without tensor cores (or the NPU's HF32), and their finding."""

from __future__ import annotations

import numpy as np
import pandas as pd

from traceanalyzer import findings as fnd
from traceanalyzer import humanize, intervals
from traceanalyzer.analyzers import advice
from traceanalyzer.analyzers.attribution import in_step_rows, kind_rows, linked, name_hits, rank_spans
from traceanalyzer.analyzers.health.part import Context, Part
from traceanalyzer.findings import Finding
from traceanalyzer.groups import Groups
from traceanalyzer.intervals import Packed
from traceanalyzer.memo import per_trace, remember
from traceanalyzer.schema import BUSY, Kind, TraceMeta, category_text, codes_at
from traceanalyzer.tables import stack
from traceanalyzer.tracedata import TraceData
from traceanalyzer.vocabulary import (
    DTYPES,
    FP32_GEMM_KERNEL,
    GEMM_KERNEL,
    MATMUL_OPS,
    REDUCED_DTYPES,
    TENSOR_CORE_KERNEL,
)

ANALYZER = "health"

TF32_SPEEDUP = 4.0
"""Conservative speedup of TF32 tensor cores over fp32 SIMT GEMMs (the peak ratio is ~8× on A100/H100-class GPUs)."""

FP32_GEMM_MIN_SHARE = 0.01
"""fp32 GEMM time below this share of step time is left alone (e.g. RoPE's deliberate fp32 matmul)."""

_FP32_TYPE = "|".join(f'"{name}"' for name, (key, _) in DTYPES.items() if key == "fp32")
_REDUCED_TYPE = "|".join(f'"{name}"' for name, (key, _) in DTYPES.items() if key in REDUCED_DTYPES)


@per_trace
def fp32_gemms(trace: TraceData) -> pd.DataFrame:
    """GEMM kernels running fp32 without tensor cores, by rank, name and op, with count and total time."""
    events = trace.events
    rows, op = _fp32_rows(trace)
    keys = {
        "rank": events["rank"].array.take(rows),
        "name": linked(events, events.index.to_numpy()[rows], "name"),
        "op": linked(events, op, "name"),
    }
    dur, g = events["dur"].to_numpy()[rows], Groups(list(keys.values()))
    table = pd.DataFrame(
        {**{key: column.take(g.first) for key, column in keys.items()}, "count": g.sizes, "total_ns": g.sum(dur)}
    )
    return merged_gemms([table])


def fp32_spans(trace: TraceData) -> dict[int, Packed]:
    """Per rank: the device intervals of its fp32 SIMT GEMM kernels inside steps, packed (what their finding
    claims)."""
    events = trace.events
    rows, _ = _fp32_rows(trace)
    return {rank: intervals.pack(*ivs) for rank, ivs in rank_spans(events, rows).items()}


def _fp32_rows(trace: TraceData) -> tuple[np.ndarray, np.ndarray]:
    """The in-step fp32 SIMT GEMM kernels (positions) and their ops (once per trace)."""
    return remember(trace, "health.fp32_rows", lambda: _fp32_rows_of(trace))


def _fp32_rows_of(trace: TraceData) -> tuple[np.ndarray, np.ndarray]:
    events = trace.events
    kernels = in_step_rows(trace, kind_rows(events, [Kind.KERNEL.value]))
    op = events["op"].to_numpy()[kernels]
    types = pd.Series(category_text(events["input_types"])).str.lower()
    fp32_types = (types.str.contains(_FP32_TYPE) & ~types.str.contains(_REDUCED_TYPE)).to_numpy()
    matmul = np.isin(category_text(events["name"]), list(MATMUL_OPS))[codes_at(events["name"], op)]
    fp32_op = matmul & fp32_types[codes_at(events["input_types"], op)]
    kernel = events["name"].iloc[kernels]
    gemm_like = name_hits(kernel, GEMM_KERNEL) & ~name_hits(kernel, TENSOR_CORE_KERNEL)
    picked = name_hits(kernel, FP32_GEMM_KERNEL) | (fp32_op & gemm_like)
    return kernels[picked], op[picked]


def merged_gemms(tables: list[pd.DataFrame]) -> pd.DataFrame:
    """``fp32_gemms`` of several parts' ranks, the most time first."""
    return stack(tables).sort_values("total_ns", ascending=False, kind="stable").reset_index(drop=True)


def device_in_steps_ns(trace: TraceData) -> dict[int, int]:
    """Per rank: busy device time inside steps (summed durations), what the fp32 GEMM time is a share of."""
    events = trace.events
    work = in_step_rows(trace, kind_rows(events, BUSY))
    ranks, at = np.unique(events["rank"].to_numpy()[work], return_inverse=True)
    ns = np.zeros(len(ranks), dtype=np.int64)
    np.add.at(ns, at.reshape(-1), events["dur"].to_numpy()[work])
    return {int(rank): int(n) for rank, n in zip(ranks.tolist(), ns.tolist(), strict=True)}


def fp32_findings(health: Part, context: Context) -> list[Finding]:
    """One finding when fp32 SIMT matrix work is at least 1 % of step time, its saving modelled at TF32 speed."""
    table = health.gemms
    total = int(table["total_ns"].sum())
    if not total or total < FP32_GEMM_MIN_SHARE * context.step.total_ns:
        return []
    steps, device = context.steps, sum(health.device_ns.values())
    ops = sorted(set(table["op"]) - {""})
    return [
        fnd.make(
            ANALYZER,
            "fp32_gemm",
            f"fp32 matrix multiplies/convolutions run without tensor cores: {humanize.duration(total / steps, 1)} of "
            "device time per step",
            f"{', '.join(ops) or 'GEMM kernels'} run fp32 SIMT kernels ({table['name'].iloc[0][:60]}…). "
            + _advice(context.meta),
            context.step,
            concerns_ns=total,
            saving_ns=int(total * (1 - 1 / TF32_SPEEDUP)),
            basis=fnd.Basis.MODELLED,
            model=f"the same GEMMs {TF32_SPEEDUP:g}× faster on TF32 tensor cores",
            claims={rank: packed.unpacked() for rank, packed in health.fp32_spans.items()},
            device_time=True,
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


def _advice(meta: TraceMeta) -> str:
    """TF32 (or HF32 on Ascend), or fp16 autocast on GPUs without TF32."""
    platform = advice.platform(meta)
    if platform == advice.CUDA and not _tf32_capable(meta):
        return advice.PRE_AMPERE
    return advice.FP32_MATMUL[platform]


def _tf32_capable(meta: TraceMeta) -> bool:
    """False only when every device's compute capability is known and below 8 (pre-Ampere)."""
    majors = [d.properties.get("computeMajor") for d in meta.devices]
    return not majors or any(m is None or m >= 8 for m in majors)
