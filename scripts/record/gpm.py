#!/usr/bin/env python3
"""Record torch.profiler traces with hardware counters sampled by NVML GPM (issue 27): a GEMM-bound and a
memory-bound program on one Hopper GPU (ground truth: sample_traces/README.md, "counters/").

    python3 scripts/record/gpm.py --out /tmp/rec                   # on the GPU machine (Hopper or newer)
    python3 scripts/record/gpm.py --program gemm_bound --no-profile --steps 2   # the program alone (for ncu)

This machine's PyTorch (2.11, CUDA 13) records no CUPTI range-profiler counters (see sample_traces/README.md), so
the counters come from NVML's GPU Performance Monitoring (GPM: SM, tensor-pipe and DRAM-bandwidth utilisation,
measured by the GPU between two samples): a thread takes a GPM sample every ``--period-ms`` (100: GPM refreshes its
counters about that often, ``--calibrate`` shows it) while the profiled steps run, and the metrics of each pair of
samples are added to the exported trace as Chrome-trace counter events (``"ph": "C"``, track ``GPU <index> GPM``,
``pid`` the GPU's Kineto pid, ``ts`` the start of the sampled interval on the trace's clock). The clock is tied to
the trace by a ``record_function`` marker timed on the host (``time.monotonic_ns`` before and after): the offset is
in the meta. Writes <out>/counters/<program>.json.gz and .meta.json with per-step CUDA-event times and the counters'
means over the traced steps.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import statistics
import threading
import time
from pathlib import Path

import pynvml as nvml
import recording as rec
import torch
from torch.profiler import ProfilerActivity, profile, record_function

METRICS = {
    "sm_util_pct": nvml.NVML_GPM_METRIC_SM_UTIL,
    "sm_occupancy_pct": nvml.NVML_GPM_METRIC_SM_OCCUPANCY,
    "any_tensor_util_pct": nvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL,
    "hmma_tensor_util_pct": nvml.NVML_GPM_METRIC_HMMA_TENSOR_UTIL,
    "dram_bw_util_pct": nvml.NVML_GPM_METRIC_DRAM_BW_UTIL,
    "fp32_util_pct": nvml.NVML_GPM_METRIC_FP32_UTIL,
}
"""The counter series written, by GPM metric id (each a percent of the GPU's peak over the sampled interval)."""
MARKER = "gpm_clock_sync"


def gemm_bound(dev: torch.device):
    """32 bf16 GEMMs of 8192^3 a step: tensor pipes busy, little DRAM traffic per FLOP."""
    n = 8192
    a = torch.randn(n, n, device=dev, dtype=torch.bfloat16)

    def step() -> None:
        for _ in range(32):
            torch.mm(a, a)

    return step, {"pattern": f"32 x ({n}x{n} @ {n}x{n}) bf16 a step", "flop_per_step": 32 * 2 * n**3}


def memory_bound(dev: torch.device):
    """48 in-place fp32 axpy-like kernels on 2^28 elements (1 GiB) a step: DRAM bound, no tensor-pipe work."""
    n = 1 << 28
    x = torch.randn(n, device=dev)

    def step() -> None:
        for _ in range(48):
            x.mul_(0.999)

    return step, {"pattern": f"48 x (x *= 0.999) on {n} fp32 elements a step", "bytes_per_step": 48 * 2 * 4 * n}


PROGRAMS = {"gemm_bound": gemm_bound, "memory_bound": memory_bound}
STEPS = {"gemm_bound": 40, "memory_bound": 80}
"""Profiled steps of each program: about 2 s, so that some 20 GPM intervals of 100 ms fall inside the window."""


class Sampler(threading.Thread):
    """GPM samples of one GPU every ``period_s``; ``rows`` holds (start ns, end ns, {series: value})."""

    def __init__(self, index: int, period_s: float):
        super().__init__(daemon=True)
        self.handle = nvml.nvmlDeviceGetHandleByIndex(index)
        self.period_s = period_s
        self.rows: list[tuple[int, int, dict[str, float]]] = []
        self.halt = threading.Event()
        self.codes: dict[str, int] = {}

    def _metrics(self, s1, s2) -> dict[str, float]:
        """The METRICS between two samples."""
        get = nvml.c_nvmlGpmMetricsGet_t()
        get.version = nvml.NVML_GPM_METRICS_GET_VERSION
        get.numMetrics = len(METRICS)
        get.sample1, get.sample2 = s1, s2
        for i, metric in enumerate(METRICS.values()):
            get.metrics[i].metricId = metric
        nvml.nvmlGpmMetricsGet(get)
        self.codes = {name: int(get.metrics[i].nvmlReturn) for i, name in enumerate(METRICS)}
        values = {name: float(get.metrics[i].value) for i, name in enumerate(METRICS)}
        return {name: v for name, v in values.items() if self.codes[name] == 0 and math.isfinite(v)}

    def run(self) -> None:
        """Sample until halted."""
        prev, cur = nvml.nvmlGpmSampleAlloc(), nvml.nvmlGpmSampleAlloc()
        nvml.nvmlGpmSampleGet(self.handle, prev)
        t_prev = time.monotonic_ns()
        while not self.halt.wait(self.period_s):
            nvml.nvmlGpmSampleGet(self.handle, cur)
            t = time.monotonic_ns()
            self.rows.append((t_prev, t, self._metrics(prev, cur)))
            prev, cur, t_prev = cur, prev, t


def _clock_offset_ns(trace: dict, host_ns: tuple[int, int]) -> int:
    """Trace ns minus monotonic ns, from the marker's ts and the host times around it (their midpoint)."""
    marks = [e for e in trace["traceEvents"] if e.get("name") == MARKER and e.get("ph") == "X"]
    mark_ns = round(float(marks[0]["ts"]) * 1000 + float(marks[0]["dur"]) * 500)
    return mark_ns - (host_ns[0] + host_ns[1]) // 2


def _counter_events(rows, offset_ns: int, pid) -> list[dict]:
    """One counter event per sampled interval, at the interval's start on the trace's clock."""
    return [
        {"ph": "C", "name": f"GPU {pid} GPM", "pid": pid, "ts": round((t0 + offset_ns) / 1000, 3), "args": values}
        for t0, _, values in rows
    ]


def calibrate(args, dev: torch.device) -> None:
    """The GEMM program unprofiled for about 1.5 s under each sampling period, streaming off and on: the share of
    intervals that read 0 and the mean of the rest (GPM counters refresh at the GPU's own pace)."""
    step, _ = gemm_bound(dev)
    step()
    rec.sync(dev)
    handle = nvml.nvmlDeviceGetHandleByIndex(0)
    out = {}
    for streaming in (0, 1):
        try:
            nvml.nvmlGpmSetStreamingEnabled(handle, streaming)
        except nvml.NVMLError as e:
            out[f"streaming={streaming}"] = repr(e)
            continue
        for period in (0.01, 0.05, 0.1, 0.2):
            sampler = Sampler(0, period)
            sampler.start()
            t = time.monotonic()
            while time.monotonic() - t < 1.5:
                step()
            rec.sync(dev)
            sampler.halt.set()
            sampler.join()
            sm = [r[2].get("sm_util_pct", 0.0) for r in sampler.rows[1:-1]]
            busy = [v for v in sm if v > 0]
            out[f"streaming={streaming} period={period}"] = {
                "intervals": len(sm),
                "zero_share": round(1 - len(busy) / max(1, len(sm)), 3),
                "mean_sm_util_pct": round(statistics.fmean(sm), 2) if sm else None,
                "mean_nonzero": round(statistics.fmean(busy), 2) if busy else None,
                "codes": sampler.codes,
            }
    print("CALIBRATION", json.dumps(out), flush=True)
    (Path(args.out) / "gpm_calibration.json").write_text(json.dumps(out, indent=1))


def record(args, name: str, dev: torch.device) -> None:
    """Profile ``steps`` steps of one program with the GPM sampler running; write the trace and its meta."""
    step, meta = PROGRAMS[name](dev)
    for _ in range(3):
        step()
    rec.sync(dev)
    if args.no_profile:
        for _ in range(args.steps or 1):
            step()
        rec.sync(dev)
        return
    odir = Path(args.out) / "counters"
    odir.mkdir(parents=True, exist_ok=True)
    clock = rec.StepClock(dev)
    sampler = Sampler(dev.index or 0, args.period_ms / 1000)
    steps = args.steps or STEPS[name]
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True) as prof:
        t0 = time.monotonic_ns()
        with record_function(MARKER):
            sampler.start()
        t1 = time.monotonic_ns()
        for i in range(steps):
            with record_function(f"ProfilerStep#{i}"):
                clock.start()
                step()
                clock.end()
        rec.sync(dev)
        sampler.halt.set()
        sampler.join()
    raw = Path("/tmp") / f"{name}.gpm.json"
    prof.export_chrome_trace(str(raw))
    trace = json.loads(raw.read_text())
    raw.unlink()
    pid = next(e["pid"] for e in trace["traceEvents"] if e.get("cat") == "kernel")
    offset = _clock_offset_ns(trace, (t0, t1))
    trace["traceEvents"] += _counter_events(sampler.rows, offset, pid)
    (odir / f"{name}.json.gz").write_bytes(gzip.compress(json.dumps(trace).encode(), mtime=0))
    body = clock.body_ms()
    meta.update(
        steps=steps,
        step_ms_cuda_events=body,
        gpm_period_ms=args.period_ms,
        gpm_samples=len(sampler.rows),
        clock_offset_ns=offset,
        marker_host_window_ns=t1 - t0,
        gpm_mean_over_samples={k: statistics.fmean(r[2][k] for r in sampler.rows if k in r[2]) for k in METRICS},
        torch=torch.__version__,
        device=torch.cuda.get_device_name(dev),
    )
    rec.write_meta(odir, name, meta)
    print(name, json.dumps(meta)[:600], flush=True)


def main() -> None:
    """Record each program asked for."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", default="/tmp/rec")
    ap.add_argument("--program", choices=[*PROGRAMS, "all"], default="all")
    ap.add_argument("--steps", type=int, default=0, help="profiled steps (default: STEPS)")
    ap.add_argument("--period-ms", type=float, default=100.0, help="GPM refreshes about every 100 ms")
    ap.add_argument("--no-profile", action="store_true", help="run the program only (under ncu)")
    ap.add_argument("--calibrate", action="store_true", help="compare sampling periods, then stop")
    args = ap.parse_args()
    nvml.nvmlInit()
    dev = torch.device("cuda", 0)
    if args.calibrate:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        calibrate(args, dev)
        return
    for name in PROGRAMS if args.program == "all" else [args.program]:
        record(args, name, dev)


if __name__ == "__main__":
    main()
