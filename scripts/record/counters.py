#!/usr/bin/env python3
"""Record torch.profiler traces with CUPTI hardware counters (issue 27): a GEMM-bound and a memory-bound program.

    python3 scripts/record/counters.py --out /tmp/rec
    python3 scripts/record/counters.py --device cpu --tiny --out /tmp/rec    # smoke test (no counters on CPU)

Writes <out>/counters/<program>.json.gz and .meta.json. The counters are asked for through
torch.profiler._ExperimentalConfig(profiler_metrics=[...], profiler_measure_per_kernel=True) (Kineto's CUPTI range
profiler); each metric set is tried in turn and the meta says which one the machine accepted and what the trace holds
(events per category and phase, the counter names and the first values).
"""

from __future__ import annotations

import argparse
import collections
import gzip
import json
import traceback
from pathlib import Path

import recording as rec
import torch
from torch.profiler import ProfilerActivity, _ExperimentalConfig, profile

METRIC_SETS = [
    [
        "sm__throughput.avg.pct_of_peak_sustained_elapsed",
        "dram__throughput.avg.pct_of_peak_sustained_elapsed",
        "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
        "dram__bytes_read.sum",
        "dram__bytes_write.sum",
    ],
    ["kineto__tensor_core_insts", "kineto__cuda_core_flops", "dram__bytes_read.sum"],
    ["sm__cycles_active.avg", "dram__bytes_read.sum"],
]


def gemm_bound(dev: torch.device, tiny: bool):
    """8 x (4096^3 bf16 GEMM) a step: tensor pipes busy, little DRAM traffic per FLOP."""
    n = 64 if tiny else 4096
    dtype = torch.bfloat16 if rec.is_cuda(dev) else torch.float32
    a = torch.randn(n, n, device=dev, dtype=dtype)

    def step() -> torch.Tensor:
        y = a
        for _ in range(8):
            y = y @ a
        return y

    return step, {"pattern": f"8 x ({n}x{n} @ {n}x{n}) {dtype} a step", "flop_per_step": 8 * 2 * n**3}


def memory_bound(dev: torch.device, tiny: bool):
    """8 x (y = x * 1.5 + 0.5) on 256 M fp32 elements a step: DRAM bound, no tensor-pipe work."""
    n = 1 << 12 if tiny else 1 << 28
    x = torch.randn(n, device=dev)

    def step() -> torch.Tensor:
        y = x
        for _ in range(8):
            y = y * 1.5 + 0.5
        return y

    return step, {"pattern": f"8 x (y*1.5+0.5) on {n} fp32 elements a step", "bytes_per_step_min": 8 * 2 * 4 * n}


def summarize(trace: Path) -> dict:
    """What the exported trace holds: events per (cat, ph), and the counter/metric-like events' names and args."""
    with gzip.open(trace, "rt") as f:
        events = json.load(f)["traceEvents"]
    kinds = collections.Counter(f"{e.get('cat')}|{e.get('ph')}" for e in events)
    counters = [e for e in events if e.get("ph") == "C" or "range" in str(e.get("cat", "")).lower()]
    metric_args = collections.Counter(k for e in events if e.get("cat") == "kernel" for k in e.get("args", {}))
    return {
        "events_by_cat_ph": dict(kinds),
        "counter_like_events": len(counters),
        "counter_like_examples": counters[:5],
        "kernel_arg_keys": dict(metric_args),
    }


def record(args, name: str, dev: torch.device) -> None:
    """Try each metric set until one records; a plain trace (no counters) if none does."""
    step, meta = (gemm_bound if name == "gemm_bound" else memory_bound)(dev, args.tiny)
    for _ in range(3):
        step()
    rec.sync(dev)
    odir = Path(args.out) / "counters"
    odir.mkdir(parents=True, exist_ok=True)
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if rec.is_cuda(dev) else [])
    attempts = []
    tries = [(m, per) for m in METRIC_SETS for per in (True, False)] + [([], False)]
    for metrics, per_kernel in tries if rec.is_cuda(dev) else [([], False)]:
        raw = Path("/tmp") / f"{name}.counters.json"
        try:
            cfg = (
                _ExperimentalConfig(profiler_metrics=metrics, profiler_measure_per_kernel=per_kernel)
                if metrics
                else None
            )
            with profile(activities=acts, record_shapes=True, experimental_config=cfg) as prof:
                for _ in range(3):
                    step()
                    prof.step()
                rec.sync(dev)
            prof.export_chrome_trace(str(raw))
            out = odir / f"{name}.json.gz"
            rec.gzip_file(raw, out)
            raw.unlink()
            held = summarize(out)
            attempts.append(
                {
                    "metrics": metrics,
                    "per_kernel": per_kernel,
                    "ok": True,
                    "counter_like_events": held["counter_like_events"],
                }
            )
            if held["counter_like_events"] or not metrics:
                meta.update(profiler_metrics=metrics, trace=held, trace_file=out.name)
                break
        except Exception as e:
            attempts.append({"metrics": metrics, "per_kernel": per_kernel, "ok": False, "error": repr(e)[:500]})
            traceback.print_exc()
    meta["attempts"] = attempts
    rec.write_meta(odir, name, meta)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", default="/tmp/record_out")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--tiny", action="store_true")
    args = ap.parse_args()
    dev = torch.device(args.device)
    for name in ("gemm_bound", "memory_bound"):
        record(args, name, dev)


if __name__ == "__main__":
    main()
