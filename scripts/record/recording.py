"""Shared recording helpers: the profiler settings of shared/tracegen/gen.py, CUDA-event step timing, the meta file.

Every recording runs ``pre_steps`` unprofiled steps, then ``wait + warmup + active`` steps under
``torch.profiler.profile(record_shapes, profile_memory, with_stack, with_flops)`` with a schedule; the exported trace
holds the ``active`` steps. Each step's loop body is bracketed by two CUDA events (perf_counter on CPU), so the meta
holds the step time as the device measures it.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile, schedule


def parse_args(scenarios: list[str], doc: str) -> argparse.Namespace:
    """The command line every recording script shares: --scenario, --out, --device, --tiny."""
    ap = argparse.ArgumentParser(description=doc)
    ap.add_argument("--scenario", required=True, choices=scenarios)
    ap.add_argument("--out", default="/tmp/record_out", help="writes <out>/<folder>/<name>.json.gz and .meta.json")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--tiny", action="store_true", help="tiny sizes for a CPU smoke test")
    return ap.parse_args()


def is_cuda(device: torch.device) -> bool:
    """Whether the recording runs on a CUDA device."""
    return device.type == "cuda"


def sync(device: torch.device) -> None:
    """Wait for the device (no-op on CPU)."""
    if is_cuda(device):
        torch.cuda.synchronize(device)


def gzip_file(src: Path, dst: Path) -> None:
    """Compress src into dst (gzip level 6)."""
    with open(src, "rb") as fi, gzip.open(dst, "wb", compresslevel=6) as fo:
        shutil.copyfileobj(fi, fo, 16 << 20)


def median(values: list[float]) -> float | None:
    """The median, rounded to µs precision in ms; None for no values."""
    return round(statistics.median(values), 4) if values else None


class StepClock:
    """Per-step start/end marks around each loop body: CUDA events on a GPU, perf_counter on CPU."""

    def __init__(self, device: torch.device):
        self.cuda = is_cuda(device)
        self.device = device
        self.starts: list = []
        self.ends: list = []

    def mark(self):
        """A CUDA event recorded on the current stream now (perf_counter seconds on CPU)."""
        if not self.cuda:
            return time.perf_counter()
        e = torch.cuda.Event(enable_timing=True)
        e.record()
        return e

    def start(self) -> None:
        """Mark the start of a step's loop body."""
        self.starts.append(self.mark())

    def end(self) -> None:
        """Mark the end of a step's loop body."""
        self.ends.append(self.mark())

    def ms(self, a, b) -> float:
        """Milliseconds from mark a to mark b (a CUDA event's elapsed_time; needs both to have completed)."""
        return round(a.elapsed_time(b) if self.cuda else (b - a) * 1e3, 4)

    def body_ms(self) -> list[float]:
        """Per step: end minus start of the loop body (ms; synchronises the device)."""
        sync(self.device)
        return [self.ms(a, b) for a, b in zip(self.starts, self.ends, strict=True)]

    def period_ms(self) -> list[float]:
        """Per step but the last: start of this body to the start of the next (ms)."""
        sync(self.device)
        return [self.ms(a, b) for a, b in zip(self.starts[:-1], self.starts[1:], strict=True)]


@dataclass
class Plan:
    """How many steps run before and under the profiler, and where the outputs go."""

    name: str
    odir: Path
    device: torch.device
    wait: int = 1
    warmup: int = 1
    active: int = 4
    pre_steps: int = 2
    with_modules: bool = False
    with_stack: bool = True

    @property
    def steps(self) -> int:
        return self.wait + self.warmup + self.active

    @property
    def traced(self) -> range:
        return range(self.wait + self.warmup, self.steps)


def _export(prof, plan: Plan, done: dict) -> None:
    raw = Path("/tmp") / f"{plan.name}.{os.getpid()}.json"
    out = plan.odir / f"{plan.name}.json.gz"
    t = time.time()
    prof.export_chrome_trace(str(raw))
    done["trace_export_s"] = round(time.time() - t, 2)
    done["trace_raw_bytes"] = raw.stat().st_size
    gzip_file(raw, out)
    raw.unlink()
    done["trace_gz_bytes"] = out.stat().st_size
    done["trace_file"] = out.name


def _profiler(plan: Plan, done: dict) -> profile:
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if is_cuda(plan.device) else [])
    return profile(
        activities=acts,
        schedule=schedule(wait=plan.wait, warmup=plan.warmup, active=plan.active, repeat=1),
        on_trace_ready=lambda p: _export(p, plan, done),
        record_shapes=True,
        profile_memory=True,
        with_stack=plan.with_stack,
        with_flops=True,
        with_modules=plan.with_modules,
    )


def run_profiled(plan: Plan, step_fn: Callable[[int], object], meta: dict) -> profile:
    """Run the plan's steps (the profiled ones bracketed by StepClock marks) and fill meta with what was measured."""
    plan.odir.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    for i in range(plan.pre_steps):
        step_fn(-1 - i)
    sync(plan.device)
    meta["pre_steps"] = plan.pre_steps
    meta["pre_steps_wall_s"] = round(time.time() - t0, 2)
    if is_cuda(plan.device):
        meta["max_memory_allocated_pre_steps_B"] = torch.cuda.max_memory_allocated()
        torch.cuda.reset_peak_memory_stats()
    meta["memory_allocated_before_profiled_loop_B"] = memory_allocated(plan.device)
    clock, done, host = StepClock(plan.device), {}, []
    with _profiler(plan, done) as prof:
        for i in range(plan.steps):
            t = time.perf_counter()
            clock.start()
            step_fn(i)
            clock.end()
            host.append(round((time.perf_counter() - t) * 1e3, 4))
            prof.step()
    meta.update(step_truth(plan, clock, host))
    meta["max_memory_allocated_B"] = torch.cuda.max_memory_allocated() if is_cuda(plan.device) else 0
    meta.update(done)
    meta["key_averages_top_self_device_ns"] = top_ops(prof, is_cuda(plan.device))
    meta["key_averages_top_counts"] = top_op_counts(prof, meta["key_averages_top_self_device_ns"])
    return prof


def memory_allocated(device: torch.device) -> int:
    """torch.cuda.memory_allocated() on a GPU, 0 on CPU."""
    return torch.cuda.memory_allocated() if is_cuda(device) else 0


def step_truth(plan: Plan, clock: StepClock, host_ms: list[float]) -> dict:
    """The measured step times: per profiled-loop step and their median over the steps the trace holds."""
    body, period = clock.body_ms(), clock.period_ms()
    traced = list(plan.traced)
    unit = "cuda_events" if clock.cuda else "perf_counter_cpu"
    return {
        "schedule": {"wait": plan.wait, "warmup": plan.warmup, "active": plan.active, "repeat": 1},
        "trace_holds_profiler_steps": [f"ProfilerStep#{k}" for k in traced],
        "step_timing": f"{unit}: an event recorded before and after each step's loop body (before prof.step())",
        f"step_body_ms_{unit}": body,
        f"step_period_ms_{unit}": period,
        f"step_body_ms_{unit}_traced": [body[k] for k in traced],
        f"step_body_ms_{unit}_median_traced": median([body[k] for k in traced]),
        f"step_period_ms_{unit}_median_traced": median([period[k] for k in traced if k < len(period)]),
        "step_host_wall_ms": host_ms,
        "step_host_wall_ms_median_traced": median([host_ms[k] for k in traced]),
    }


def top_ops(prof: profile, cuda: bool, n: int = 25) -> dict[str, int]:
    """key_averages(): op name -> self device time in ns (self CPU time on CPU), the top n names.

    A record_function name has two key_averages rows (the CPU range and its GPU annotation); the larger one is kept.
    """
    attr = "self_device_time_total" if cuda else "self_cpu_time_total"
    out: dict[str, int] = {}
    for e in sorted(prof.key_averages(), key=lambda e: getattr(e, attr) or 0.0, reverse=True):
        if len(out) == n:
            break
        out.setdefault(e.key, round((getattr(e, attr) or 0.0) * 1e3))
    return out


def top_op_counts(prof: profile, names: dict[str, int]) -> dict[str, int]:
    """key_averages() call counts of the named ops (the largest count where a name has two rows)."""
    counts: dict[str, int] = {}
    for e in prof.key_averages():
        if e.key in names:
            counts[e.key] = max(counts.get(e.key, 0), e.count)
    return {k: counts.get(k, 0) for k in names}


def write_meta(odir: Path, name: str, meta: dict) -> Path:
    """Write <odir>/<name>.meta.json (adds torch version and device name) and print its short form."""
    meta.setdefault("torch", torch.__version__)
    meta.setdefault("cuda", torch.version.cuda)
    meta.setdefault("device", torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu")
    meta.setdefault("recorded_utc", time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    path = odir / f"{name}.meta.json"
    odir.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(meta, indent=1, default=str))
    print(json.dumps(meta, default=str)[:3000], flush=True)
    return path


def graph_launches(trace_gz: Path) -> dict:
    """From an exported trace: kernels per cudaGraphLaunch (matched by correlation id), and any graph-id arg keys."""
    with gzip.open(trace_gz, "rt") as f:
        events = json.load(f)["traceEvents"]
    launches = [e["args"]["correlation"] for e in events if e.get("name") == "cudaGraphLaunch" and "args" in e]
    kernels: dict[int, int] = {}
    graph_keys: set[str] = set()
    for e in events:
        if e.get("cat") == "kernel":
            args = e.get("args", {})
            kernels[args.get("correlation")] = kernels.get(args.get("correlation"), 0) + 1
            graph_keys |= {k for k in args if "graph" in k.lower()}
    return {
        "kernels_per_cudaGraphLaunch_in_trace": [kernels.get(c, 0) for c in launches],
        "graph_id_arg_keys_on_kernels": sorted(graph_keys),
    }


def time_unprofiled(step_fn: Callable[[int], object], device: torch.device, steps: int = 8, pre: int = 2) -> dict:
    """The same loop without the profiler: CUDA events around each step's body, after pre unprofiled warm-ups."""
    for i in range(pre):
        step_fn(-100 - i)
    sync(device)
    clock, host = StepClock(device), []
    for i in range(steps):
        t = time.perf_counter()
        clock.start()
        step_fn(1000 + i)
        clock.end()
        host.append(round((time.perf_counter() - t) * 1e3, 4))
    body = clock.body_ms()
    return {
        "unprofiled_step_ms_cuda_events": body,
        "unprofiled_step_ms_median": median(body),
        "unprofiled_step_host_wall_ms": host,
        "unprofiled_step_host_wall_ms_median": median(host),
    }
