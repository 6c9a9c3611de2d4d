#!/usr/bin/env python3
"""Measure what torch.profiler adds to host time per traced event (issue 23: savings without the profiler).

    python3 scripts/record/overhead.py --out /tmp/rec            # on the GPU machine
    python3 scripts/record/overhead.py --device cpu --tiny --out /tmp/rec

Each microbenchmark runs the same host loop unprofiled and under the profiler the pairs are recorded with
(``record_shapes``, ``profile_memory``, ``with_stack`` on and off), timed on the host with ``perf_counter_ns``
after a device sync; the exported trace's events are counted by category. Writes <out>/overhead.json: per
benchmark the host ns per iteration both ways and the events per iteration, so that the profiler's cost per
event is (profiled - unprofiled) / events, measured on programs apart from the pairs it is used on.
"""

from __future__ import annotations

import argparse
import collections
import gzip
import json
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile


def _sync(dev: torch.device) -> None:
    """Wait for the device's queued work."""
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def launches(dev: torch.device, n: int) -> Callable[[], None]:
    """n tiny elementwise ops: one aten op and one kernel launch each."""
    x = torch.ones(16, device=dev)

    def body() -> None:
        for _ in range(n):
            x.add_(1.0)

    return body


def python_calls(dev: torch.device, n: int) -> Callable[[], None]:
    """n tiny ops, each three Python calls deep (what with_stack records as python_function events)."""
    x = torch.ones(16, device=dev)

    def leaf() -> None:
        x.mul_(1.0)

    def middle() -> None:
        leaf()

    def outer() -> None:
        middle()

    def body() -> None:
        for _ in range(n):
            outer()

    return body


def allocator(dev: torch.device, n: int) -> Callable[[], None]:
    """n fresh 2 MiB blocks (cudaMalloc each), freed and returned to the driver (cudaFree each)."""

    def body() -> None:
        blocks = [torch.empty(1 << 19, device=dev) for _ in range(n)]
        del blocks
        if dev.type == "cuda":
            torch.cuda.empty_cache()

    return body


def optimizer(dev: torch.device, n: int) -> Callable[[], None]:
    """One AdamW step with foreach=False over n small parameters (a per-parameter loop of aten ops)."""
    params = [torch.nn.Parameter(torch.randn(64, device=dev)) for _ in range(n)]
    for p in params:
        p.grad = torch.randn_like(p)
    opt = torch.optim.AdamW(params, foreach=False)

    def body() -> None:
        opt.step()

    return body


BENCHMARKS = {"launches": launches, "python_calls": python_calls, "allocator": allocator, "optimizer": optimizer}
SIZES = {"launches": 2000, "python_calls": 2000, "allocator": 64, "optimizer": 200}


def _timed(body: Callable[[], None], dev: torch.device, reps: int) -> list[int]:
    """Host ns of each of reps runs of body, each closed by a device sync."""
    out = []
    for _ in range(reps):
        _sync(dev)
        t0 = time.perf_counter_ns()
        body()
        _sync(dev)
        out.append(time.perf_counter_ns() - t0)
    return out


def _counts(prof: profile) -> dict[str, int]:
    """Events per category in the profile's exported trace."""
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "t.json"
        prof.export_chrome_trace(str(path))
        events = json.loads(path.read_text()).get("traceEvents", [])
    return dict(collections.Counter(str(e.get("cat", "")) for e in events if e.get("ph") == "X"))


def measure(name: str, dev: torch.device, n: int, reps: int) -> dict:
    """One benchmark unprofiled and under the pairs' profiler settings with and without stacks."""
    body = BENCHMARKS[name](dev, n)
    _timed(body, dev, 3)
    result: dict = {"iterations": n, "unprofiled_ns": _timed(body, dev, reps)}
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev.type == "cuda" else [])
    for stack in (True, False):
        key = "with_stack" if stack else "no_stack"
        times, counts = [], {}
        for _ in range(reps):
            with profile(activities=acts, record_shapes=True, profile_memory=True, with_stack=stack) as prof:
                times += _timed(body, dev, 1)
            counts = _counts(prof)
        result[key] = {"profiled_ns": times, "events": counts}
    return result


def main() -> None:
    """Run every benchmark and write overhead.json with the machine's versions."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", default="/tmp/rec")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    dev = torch.device(args.device)
    out = {
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu",
        "settings": "record_shapes=True, profile_memory=True, with_stack on/off (the pairs' settings)",
        "benchmarks": {},
    }
    for name in BENCHMARKS:
        n = max(4, SIZES[name] // 50) if args.tiny else SIZES[name]
        out["benchmarks"][name] = measure(name, dev, n, args.reps)
        print(name, json.dumps(out["benchmarks"][name])[:400], flush=True)
    path = Path(args.out) / "overhead.json.gz"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(json.dumps(out, indent=1).encode(), mtime=0))
    print("wrote", path)


if __name__ == "__main__":
    main()
