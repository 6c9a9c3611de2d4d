#!/usr/bin/env python3
"""Record the regression gate's calibration runs (issue 30): one program per process, repeated, and regressions.

    python3 scripts/record/repeats.py --program device_bound --repeat 3 --out /tmp/rec
    python3 scripts/record/repeats.py --program device_bound --extra-pct 15 --out /tmp/rec
    python3 scripts/record/repeats.py --program host_bound --repeat 1 --device cpu --tiny --out /tmp/rec  # smoke

Writes <out>/gate/<program>/<name>.json.gz and .meta.json, name = run<k>, regress<pct> or added_gemms.
Programs:
  device_bound  a chain of 20 bf16 GEMMs (4096^3) a step: the device is busy all step; --extra-pct adds GEMMs
  host_bound    300 tiny elementwise kernels from a Python loop plus 4 small GEMMs: the host sets the pace;
                --added-gemms adds 20 large GEMMs a step that fit in the host-bound step's idle
"""

from __future__ import annotations

import argparse
from pathlib import Path

import recording as rec
import torch
from torch.profiler import record_function

BASE_GEMMS = 20


def device_bound(dev: torch.device, tiny: bool, extra_pct: int) -> tuple:
    """BASE_GEMMS x (x @ w) in bf16 a step, plus extra_pct % more GEMMs (rounded, at least one when asked)."""
    n = 64 if tiny else 4096
    dtype = torch.bfloat16 if rec.is_cuda(dev) else torch.float32
    g = torch.Generator(device="cpu").manual_seed(0)
    x = torch.randn(n, n, generator=g).to(dev, dtype)
    w = (torch.randn(n, n, generator=g) / n**0.5).to(dev, dtype)
    gemms = BASE_GEMMS + (max(1, round(BASE_GEMMS * extra_pct / 100)) if extra_pct else 0)

    def step(i: int) -> torch.Tensor:
        y = x
        with record_function("gemm_chain"):
            for _ in range(gemms):
                y = y @ w
        return y

    meta = {
        "pattern": f"{gemms} x ({n}x{n} @ {n}x{n}) {dtype} a step, no host sync",
        "gemms_per_step": gemms,
        "flop_per_gemm": 2 * n**3,
    }
    return step, meta


def host_bound(dev: torch.device, tiny: bool, added_gemms: int) -> tuple:
    """300 x (mul+add, sin) on 64x64 from Python, 4 GEMMs of 1024^3, plus added_gemms GEMMs of 4096^3."""
    n_small = 20 if tiny else 300
    big = 64 if tiny else 4096
    dtype = torch.bfloat16 if rec.is_cuda(dev) else torch.float32
    g = torch.Generator(device="cpu").manual_seed(0)
    t = torch.randn(64, 64, generator=g).to(dev)
    a = torch.randn(1024 if not tiny else 64, 1024 if not tiny else 64, generator=g).to(dev, dtype)
    b = (torch.randn(big, big, generator=g) / big**0.5).to(dev, dtype)

    def step(i: int) -> torch.Tensor:
        y = t
        with record_function("elementwise_loop"):
            for _ in range(n_small):
                y = torch.sin(y * 1.0001 + 0.001)
        with record_function("small_gemms"):
            z = a
            for _ in range(4):
                z = z @ a
        if added_gemms:
            with record_function("added_gemms"):
                u = b
                for _ in range(added_gemms):
                    u = u @ b
        return y

    meta = {
        "pattern": f"{n_small} x (y*1.0001+0.001, sin) on 64x64 fp32 from Python, 4 GEMMs of 1024^3 {dtype}"
        + (f", plus {added_gemms} GEMMs of {big}^3" if added_gemms else ""),
        "added_gemms_per_step": added_gemms,
    }
    return step, meta


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--program", required=True, choices=["device_bound", "host_bound"])
    ap.add_argument("--repeat", type=int, default=0, help="the repeat number (run<k>); 0 with --extra-pct")
    ap.add_argument("--extra-pct", type=int, default=0, help="device_bound: this many %% more GEMMs a step")
    ap.add_argument("--added-gemms", type=int, default=0, help="host_bound: this many large GEMMs added a step")
    ap.add_argument("--active", type=int, default=20)
    ap.add_argument("--out", default="/tmp/record_out")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--tiny", action="store_true")
    args = ap.parse_args()
    dev = torch.device(args.device)
    if args.program == "device_bound":
        step, meta = device_bound(dev, args.tiny, args.extra_pct)
        name = f"regress{args.extra_pct:02d}" if args.extra_pct else f"run{args.repeat}"
    else:
        step, meta = host_bound(dev, args.tiny, args.added_gemms)
        name = "added_gemms" if args.added_gemms else f"run{args.repeat}"
    meta.update(program=args.program, repeat=args.repeat, regression_pct=args.extra_pct)
    meta.update(rec.time_unprofiled(step, dev, steps=args.active))
    odir = Path(args.out) / "gate" / args.program
    plan = rec.Plan(name, odir, dev, wait=1, warmup=1, active=args.active, with_stack=False)
    rec.run_profiled(plan, step, meta)
    rec.write_meta(odir, name, meta)


if __name__ == "__main__":
    main()
