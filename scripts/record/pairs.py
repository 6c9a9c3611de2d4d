#!/usr/bin/env python3
"""Record the problem/fix pairs of issue 23: a planted cause of device idle and the same program with its usual fix.

    python3 scripts/record/pairs.py --scenario host_sync --out /tmp/rec
    python3 scripts/record/pairs.py --scenario all --device cpu --tiny --out /tmp/rec   # smoke test

Each scenario writes <out>/pairs/<scenario>/{problem,fix}.json.gz and .meta.json. Both variants run in one process:
first each variant without the profiler (CUDA events around every step: the measured saving of the fix), then each
under the profiler (recording.run_profiled: CUDA events around every traced step as well).
"""

from __future__ import annotations

import argparse
import gc
import traceback
from collections.abc import Callable
from pathlib import Path

import numpy as np
import recording as rec
import torch
import torch.nn as nn
import torch.nn.functional as F
from step_model import train_step
from torch.profiler import record_function

Step = Callable[[int], object]


def dtype_of(dev: torch.device) -> torch.dtype:
    """bf16 on a GPU, fp32 on the CPU smoke test."""
    return torch.bfloat16 if rec.is_cuda(dev) else torch.float32


def mlp(width: int, layers: int) -> nn.Sequential:
    """layers x (Linear(width, width) + GELU)."""
    return nn.Sequential(*[m for _ in range(layers) for m in (nn.Linear(width, width), nn.GELU())])


# ---- launch_bound: hundreds of tiny kernels from a Python loop; fix: the same loop captured in a CUDA graph ----


def launch_bound(args, dev: torch.device, variant: str) -> tuple[Step, dict]:
    """300 x (mul+add, sin) on a 128 x 128 tensor: 600 kernels of ~2 us a step; the fix replays them as one graph."""
    n = 20 if args.tiny else 300
    x = torch.randn(128, 128, device=dev)

    def body() -> torch.Tensor:
        y = x
        for _ in range(n):
            y = torch.sin(y * 1.0001 + 0.001)
        return y

    meta = {"pattern": f"{n} x (y*1.0001+0.001, sin) on 128x128 fp32 from a Python loop: {3 * n} tiny kernels a step"}
    if variant == "problem" or not rec.is_cuda(dev):
        meta["fix_applied"] = "none" if variant == "problem" else "CUDA graph (skipped on CPU)"
        return (lambda i: body()), meta
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            body()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        body()
    meta["fix_applied"] = "the loop captured once in torch.cuda.CUDAGraph and replayed (graph.replay()) each step"
    return (lambda i: graph.replay()), meta


# ---- optimizer_loop: AdamW(foreach=False) over a few hundred tensors; fix: AdamW(fused=True) ----


def optimizer_loop(args, dev: torch.device, variant: str) -> tuple[Step, dict]:
    """60 x (Linear(512, 512) + LayerNorm): 240 parameter tensors; AdamW per parameter vs fused."""
    blocks = 6 if args.tiny else 60
    torch.manual_seed(0)
    model = nn.Sequential(*[m for _ in range(blocks) for m in (nn.Linear(512, 512), nn.LayerNorm(512))]).to(dev)
    x = torch.randn(256, 512, device=dev)
    fused = variant == "fix" and rec.is_cuda(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=False if variant == "problem" else None, fused=fused)
    params = sum(1 for _ in model.parameters())
    meta = {
        "pattern": f"{blocks} x (Linear(512,512)+LayerNorm) fp32, batch 256; {params} parameter tensors; "
        "AdamW(foreach=False): one set of kernels per parameter",
        "fix_applied": "none" if variant == "problem" else "AdamW(fused=True)",
        "parameter_tensors": params,
    }
    return (lambda i: train_step(model, opt, x)), meta


# ---- host_sync: .item() on a device tensor after every layer; fix: no per-layer check ----


def host_sync(args, dev: torch.device, variant: str) -> tuple[Step, dict]:
    """32 x (Linear(2048)+GELU) bf16, batch 4096; the problem checks isfinite(x).all().item() after every layer."""
    width, layers, rows = (64, 4, 64) if args.tiny else (2048, 32, 4096)
    torch.manual_seed(0)
    model = mlp(width, layers).to(dev, dtype_of(dev))
    opt = torch.optim.SGD(model.parameters(), lr=1e-4, foreach=True)
    x = torch.randn(rows, width, device=dev, dtype=dtype_of(dev))

    def step(i: int) -> None:
        with record_function("forward"):
            y = x
            for layer in model:
                y = layer(y)
                if variant == "problem" and not bool(torch.isfinite(y).all().item()):
                    raise FloatingPointError("non-finite activation")
            loss = y.float().square().mean()
        with record_function("backward"):
            loss.backward()
        with record_function("optimizer_step"):
            opt.step()
            opt.zero_grad(set_to_none=True)

    meta = {
        "pattern": f"{layers} x (Linear({width})+GELU) bf16, batch {rows}; forward checks "
        f"torch.isfinite(y).all().item() after each of the {2 * layers} modules: {2 * layers} host syncs a step",
        "fix_applied": "none" if variant == "problem" else "the per-layer .item() check removed",
        "host_syncs_per_step": 2 * layers if variant == "problem" else 0,
    }
    return step, meta


# ---- input_pipeline: batch prepared on the training thread; fix: DataLoader workers with pin_memory ----


class Images(torch.utils.data.Dataset):
    """Seeded uint8 images made and augmented with numpy on the host (crop, flip, normalise): ~1 ms a sample."""

    def __init__(self, n: int, size: int):
        self.n, self.size = n, size

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        rng = np.random.default_rng(i)
        img = rng.integers(0, 255, (3, self.size + 32, self.size + 32), dtype=np.uint8)
        y0, x0 = rng.integers(0, 32, 2)
        img = img[:, y0 : y0 + self.size, x0 : x0 + self.size].astype(np.float32) / 255.0
        if rng.random() < 0.5:
            img = img[:, :, ::-1]
        img = (img - img.mean(axis=(1, 2), keepdims=True)) / (img.std(axis=(1, 2), keepdims=True) + 1e-6)
        img = np.ascontiguousarray(img)
        for _ in range(3):
            img = 0.5 * img + 0.25 * (np.roll(img, 1, axis=1) + np.roll(img, -1, axis=2))
        return torch.from_numpy(img), int(i % 10)


class ConvNet(nn.Module):
    """4 x (Conv2d 3x3 + BatchNorm + ReLU) at full resolution, mean pool, Linear(10)."""

    def __init__(self, ch: int):
        super().__init__()
        layers: list[nn.Module] = []
        cin = 3
        for _ in range(4):
            layers += [nn.Conv2d(cin, ch, 3, padding=1), nn.BatchNorm2d(ch), nn.ReLU()]
            cin = ch
        self.features = nn.Sequential(*layers)
        self.fc = nn.Linear(ch, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.features(x).mean(dim=(2, 3)))


def input_pipeline(args, dev: torch.device, variant: str) -> tuple[Step, dict]:
    """A ConvNet on 32 images of 160 x 160 a step; the problem loads them with num_workers=0 on the training thread."""
    size, batch = (32, 4) if args.tiny else (160, 32)
    workers = 0 if variant == "problem" else 4
    loader = torch.utils.data.DataLoader(
        Images(100_000, size),
        batch_size=batch,
        shuffle=False,
        num_workers=workers,
        pin_memory=workers > 0 and rec.is_cuda(dev),
        prefetch_factor=4 if workers else None,
        persistent_workers=workers > 0,
    )
    it = iter(loader)
    torch.manual_seed(0)
    model = ConvNet(32 if args.tiny else 64).to(dev).to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9, foreach=True)

    def step(i: int) -> None:
        with record_function("data_loading"):
            xb, yb = next(it)
        xb = xb.to(dev, non_blocking=True).to(memory_format=torch.channels_last)
        yb = yb.to(dev, non_blocking=True)
        with record_function("forward"):
            loss = F.cross_entropy(model(xb), yb)
        with record_function("backward"):
            loss.backward()
        with record_function("optimizer_step"):
            opt.step()
            opt.zero_grad(set_to_none=True)

    meta = {
        "pattern": f"ConvNet (4 x Conv2d 3x3, 64 ch) on batch {batch} x 3 x {size} x {size}; the Dataset makes and "
        "augments each image with numpy (~1 ms a sample); DataLoader(num_workers=0) on the training thread",
        "fix_applied": "none"
        if variant == "problem"
        else "DataLoader(num_workers=4, pin_memory=True, prefetch_factor=4, persistent_workers=True)",
        "dataloader_num_workers": workers,
    }
    return step, meta


# ---- allocator: torch.cuda.empty_cache() every step; fix: without it ----


def allocator(args, dev: torch.device, variant: str) -> tuple[Step, dict]:
    """8 x (Linear(8192)+GELU) bf16, batch 4096 (64 MiB activations); the problem empties the cache every step."""
    width, layers, rows = (64, 2, 64) if args.tiny else (8192, 8, 4096)
    torch.manual_seed(0)
    model = mlp(width, layers).to(dev, dtype_of(dev))
    opt = torch.optim.SGD(model.parameters(), lr=1e-4, foreach=True)
    x = torch.randn(rows, width, device=dev, dtype=dtype_of(dev))

    def step(i: int) -> None:
        train_step(model, opt, x)
        if variant == "problem" and rec.is_cuda(dev):
            with record_function("empty_cache"):
                torch.cuda.empty_cache()

    meta = {
        "pattern": f"{layers} x (Linear({width})+GELU) bf16, batch {rows}, SGD; torch.cuda.empty_cache() after "
        "every step, so every activation is a new cudaMalloc and the cache is cudaFree'd each step",
        "fix_applied": "none" if variant == "problem" else "the torch.cuda.empty_cache() call removed",
    }
    return step, meta


# ---- first_call_shapes: a new sequence length every step through cuDNN SDPA; fix: pad to one bucket ----


class Attn(nn.Module):
    """A pre-LN attention + MLP block, causal SDPA (cuDNN on the H200 in bf16)."""

    def __init__(self, d: int, heads: int):
        super().__init__()
        self.heads = heads
        self.ln = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.fc = nn.Sequential(nn.LayerNorm(d), nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = self.qkv(self.ln(x)).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, s, d))
        return x + self.fc(x)


def seq_len(i: int, bucket: int) -> int:
    """A sequence length unique to step index i (pre-steps, profiled and unprofiled steps alike), below bucket."""
    k = {-1: 0, -2: 1, -100: 2, -101: 3}.get(i, 4 + i if i < 1000 else 14 + i - 1000)
    return bucket // 4 + 24 * k


def first_call_shapes(args, dev: torch.device, variant: str) -> tuple[Step, dict]:
    """4 attention blocks (d 1024, 16 heads) bf16, batch 8; a new sequence length each step vs padded to 1024."""
    d, heads, blocks, batch, bucket = (64, 4, 1, 2, 64) if args.tiny else (1024, 16, 4, 8, 1024)
    torch.manual_seed(0)
    model = nn.Sequential(*[Attn(d, heads) for _ in range(blocks)]).to(dev, dtype_of(dev))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
    seen: list[int] = []

    def step(i: int) -> None:
        s = seq_len(i, bucket) if variant == "problem" else bucket
        seen.append(seq_len(i, bucket))
        x = torch.randn(batch, s, d, device=dev, dtype=dtype_of(dev))
        train_step(model, opt, x)

    meta = {
        "pattern": f"{blocks} x pre-LN block (d {d}, {heads} heads, causal SDPA) bf16, batch {batch}, AdamW; the "
        f"sequence length is new every step ({bucket // 4} + 24 k): every new shape plans new cuDNN/cuBLAS work",
        "fix_applied": "none" if variant == "problem" else f"every batch padded to one bucket of {bucket} tokens",
        "seq_lens_by_step_index": seen,
    }
    return step, meta


# ---- pageable_copy: 256 MiB pageable host->device copy every step; fix: pinned buffer, non_blocking ----


def pageable_copy(args, dev: torch.device, variant: str) -> tuple[Step, dict]:
    """A 256 MiB fp32 host batch copied to the device each step, then 4 GEMMs on it; pageable vs pinned."""
    rows, cols = (256, 256) if args.tiny else (8192, 8192)
    pinned = variant == "fix" and rec.is_cuda(dev)
    host = torch.randn(rows, cols, pin_memory=pinned)
    w = torch.randn(cols, 4096 if not args.tiny else 64, device=dev, dtype=dtype_of(dev))

    def step(i: int) -> torch.Tensor:
        with record_function("copy_input"):
            x = host.to(dev, non_blocking=pinned)
        return gemms_on(x, w, 4)

    how = "fp32 host tensor copied to the device every step (pageable memory), then 4 x (x @ w @ w.T) in bf16"
    return step, copy_meta(host, how, variant, "the host buffer pinned (pin_memory=True), non_blocking copy")


def gemms_on(x: torch.Tensor, w: torch.Tensor, times: int) -> torch.Tensor:
    """The copy pairs' compute: x in the working dtype, then times x (x @ w @ w.T), in a "compute" range."""
    with record_function("compute"):
        y = x.to(w.dtype)
        for _ in range(times):
            y = y @ w @ w.T
    return y


def copy_meta(host: torch.Tensor, how: str, variant: str, fix: str) -> dict:
    """The meta of a copy pair: what is copied and how, the fix applied, the bytes copied a step."""
    size = host.numel() * host.element_size()
    return {
        "pattern": f"a {size / 2**20:.0f} MiB {how}",
        "fix_applied": "none" if variant == "problem" else fix,
        "copy_bytes_per_step": size,
    }


# ---- python_gc: gc.collect() every step with a large live object graph; fix: without it ----


def python_gc(args, dev: torch.device, variant: str) -> tuple[Step, dict]:
    """16 x (Linear(4096)+GELU) bf16 training step; the problem calls gc.collect() with 600k live dicts."""
    width, layers, rows, objs = (64, 2, 64, 10_000) if args.tiny else (4096, 16, 4096, 600_000)
    torch.manual_seed(0)
    model = mlp(width, layers).to(dev, dtype_of(dev))
    opt = torch.optim.SGD(model.parameters(), lr=1e-4, foreach=True)
    x = torch.randn(rows, width, device=dev, dtype=dtype_of(dev))
    keep = [{"id": k, "tags": [k, str(k)]} for k in range(objs)]

    def step(i: int) -> None:
        train_step(model, opt, x)
        if variant == "problem":
            gc.collect()
        return keep

    meta = {
        "pattern": f"{layers} x (Linear({width})+GELU) bf16 training step; {objs} live Python dicts; gc.collect() "
        "after every step",
        "fix_applied": "none" if variant == "problem" else "the gc.collect() call removed",
        "live_python_objects": objs * 3,
    }
    return step, meta


# ---- side_stream_copy: a pinned copy serialised before compute; fix: prefetched on a side stream ----


def side_stream_copy(args, dev: torch.device, variant: str) -> tuple[Step, dict]:
    """A 256 MiB pinned fp32 batch copied each step, then GEMMs on it; fix: next batch prefetched on a side stream."""
    rows, cols = (256, 256) if args.tiny else (8192, 8192)
    cuda = rec.is_cuda(dev)
    hosts = [torch.randn(rows, cols, pin_memory=cuda) for _ in range(2)]
    w = torch.randn(cols, 64 if args.tiny else 4096, device=dev, dtype=dtype_of(dev))
    side = torch.cuda.Stream() if cuda else None
    ready: dict[int, torch.Tensor] = {}

    def prefetch(j: int) -> None:
        with torch.cuda.stream(side), record_function("prefetch_input"):
            ready[j] = hosts[j % 2].to(dev, non_blocking=True)

    def step(i: int) -> torch.Tensor:
        if variant == "problem" or side is None:
            with record_function("copy_input"):
                x = hosts[i % 2].to(dev, non_blocking=True)
        else:
            if i not in ready:
                prefetch(i)
            torch.cuda.current_stream().wait_stream(side)
            x = ready.pop(i)
            x.record_stream(torch.cuda.current_stream())
            prefetch(i + 1)
        return gemms_on(x, w, 3)

    how = (
        "pinned fp32 host batch copied to the device every step (non_blocking, on the compute stream, so the GEMMs "
        "wait for it), then 3 x (x @ w @ w.T) in bf16"
    )
    fix = "the next step's batch prefetched on a side CUDA stream while this step computes"
    return step, copy_meta(hosts[0], how, variant, fix)


# ---- recompile: torch.compile with static shapes recompiles on every new batch size; fix: dynamic=True ----


def recompile(args, dev: torch.device, variant: str) -> tuple[Step, dict]:
    """A compiled 8-layer MLP fed a new batch size every step: dynamic=False recompiles each time, dynamic=True once."""
    width, layers = (64, 2) if args.tiny else (2048, 8)
    torch.manual_seed(0)
    torch._dynamo.config.recompile_limit = 64
    torch._dynamo.reset()
    model = mlp(width, layers).to(dev, dtype_of(dev))
    compiled = torch.compile(model, dynamic=variant == "fix")
    seen: list[int] = []

    def step(i: int) -> torch.Tensor:
        rows = seq_len(i, 1024 if not args.tiny else 64)
        seen.append(rows)
        with torch.no_grad():
            return compiled(torch.randn(rows, width, device=dev, dtype=dtype_of(dev)))

    meta = {
        "pattern": f"torch.compile({layers} x (Linear({width})+GELU)) in bf16, inference, a new batch size every "
        "step (256 + 24 k rows)",
        "fix_applied": "none (dynamic=False: one Inductor compile per new shape)"
        if variant == "problem"
        else "torch.compile(dynamic=True): one dynamic-shape graph compiled before the timed steps",
        "batch_rows_by_step_index": seen,
    }
    return step, meta


SCENARIOS: dict[str, Callable[..., tuple[Step, dict]]] = {
    "launch_bound": launch_bound,
    "optimizer_loop": optimizer_loop,
    "host_sync": host_sync,
    "input_pipeline": input_pipeline,
    "allocator": allocator,
    "first_call_shapes": first_call_shapes,
    "pageable_copy": pageable_copy,
    "python_gc": python_gc,
    "side_stream_copy": side_stream_copy,
    "recompile": recompile,
}
ACTIVE = {"launch_bound": 4, "optimizer_loop": 4, "recompile": 3}
NO_STACK = {"recompile"}  # with_stack over an Inductor compile writes ~2 GB of Python frames a trace


def record_pair(args, name: str, dev: torch.device) -> None:
    """Both variants of one scenario: unprofiled timings first, then the profiled runs; a meta file each."""
    odir = Path(args.out) / "pairs" / name
    timed: dict[str, dict] = {}
    for variant in ("problem", "fix"):
        step, meta = SCENARIOS[name](args, dev, variant)
        timed[variant] = rec.time_unprofiled(step, dev, steps=4 if args.tiny else 8)
        plan = rec.Plan(
            variant, odir, dev, wait=1, warmup=1, active=ACTIVE.get(name, 5), with_stack=name not in NO_STACK
        )
        meta.update(cause=name, variant=variant, **timed[variant])
        rec.run_profiled(plan, step, meta)
        rec.write_meta(odir, variant, meta)
        del step
        gc.collect()
        if rec.is_cuda(dev):
            torch.cuda.empty_cache()
    p, f = timed["problem"]["unprofiled_step_ms_median"], timed["fix"]["unprofiled_step_ms_median"]
    print(f"=== {name}: problem {p} ms, fix {f} ms, saving {round(p - f, 3)} ms (unprofiled medians)", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--scenario", required=True, choices=[*SCENARIOS, "all"])
    ap.add_argument("--out", default="/tmp/record_out")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--tiny", action="store_true", help="tiny sizes for a CPU smoke test")
    args = ap.parse_args()
    dev = torch.device(args.device)
    names = list(SCENARIOS) if args.scenario == "all" else [args.scenario]
    for name in names:
        try:
            record_pair(args, name, dev)
        except Exception:
            print(f"=== {name} FAILED", flush=True)
            traceback.print_exc()


if __name__ == "__main__":
    main()
