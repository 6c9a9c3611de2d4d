#!/usr/bin/env python3
"""Record the step-model traces (issue 11 item 1): four single-GPU loops with CUDA events around each step's body.

    python3 scripts/record/step_model.py --scenario gpu_bound --out /tmp/rec
    python3 scripts/record/step_model.py --scenario cpu_bound --device cpu --tiny --out /tmp/rec   # smoke test

Scenarios (each writes <out>/<scenario>/<scenario>.json.gz and .meta.json):
  gpu_bound          big bf16 GEMMs, no sync inside the step: the host runs far ahead of the device
  cuda_graph_replay  a whole training step captured once in torch.cuda.CUDAGraph, replayed each step
  compiled           a torch.compile'd (inductor) transformer with a fused AdamW
  cpu_bound          hundreds of tiny elementwise kernels launched from a Python loop
"""

from __future__ import annotations

import time
import traceback
from pathlib import Path

import recording as rec
import torch
import torch.nn as nn
from models import Blocks, mlp
from torch.profiler import record_function

SCENARIOS = ["gpu_bound", "cuda_graph_replay", "compiled", "cpu_bound"]


def train_step(model: nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor) -> torch.Tensor:
    """One forward (loss = mean(y.float()^2)), backward and optimizer step, annotated like tracegen; no host sync."""
    with record_function("forward"):
        loss = model(x).float().square().mean()
    with record_function("backward"):
        loss.backward()
    with record_function("optimizer_step"):
        opt.step()
        opt.zero_grad(set_to_none=True)
    return loss.detach()


def gpu_bound(args, dev: torch.device, plan: rec.Plan) -> dict:
    """4 x Linear(8192, 8192, bias=False) + ReLU in bf16 on an (8192, 8192) input, SGD: ~1 TFLOP per GEMM."""
    width, rows, layers = (64, 64, 2) if args.tiny else (8192, 8192, 4)
    dtype = torch.bfloat16 if rec.is_cuda(dev) else torch.float32
    torch.manual_seed(0)
    model = mlp(width, layers).to(dev, dtype)
    opt = torch.optim.SGD(model.parameters(), lr=1e-4, foreach=True)
    x = torch.randn(rows, width, device=dev, dtype=dtype)
    meta = {
        "pattern": f"{layers} x (Linear({width},{width},bias=False)+ReLU) {dtype}, input ({rows},{width}); "
        "forward + backward + SGD(foreach); no host sync anywhere in the loop",
        "gemms_per_step": 3 * layers - 1,
        "flop_per_gemm": 2 * rows * width * width,
    }
    rec.run_profiled(plan, lambda i: train_step(model, opt, x), meta)
    return meta


def capture_step(model: nn.Module, opt: torch.optim.Optimizer, static_x: torch.Tensor, graph) -> torch.Tensor:
    """Warm up on a side stream, then capture forward + backward + SGD step into graph (the PyTorch docs' recipe)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            opt.zero_grad(set_to_none=True)
            model(static_x).float().square().mean().backward()
            opt.step()
    torch.cuda.current_stream().wait_stream(side)
    opt.zero_grad(set_to_none=True)
    with torch.cuda.graph(graph):
        loss = model(static_x).float().square().mean()
        loss.backward()
        opt.step()
    return loss


def new_graph() -> tuple[torch.cuda.CUDAGraph, bool]:
    """A CUDAGraph in debug mode that keeps its cudaGraph_t for debug_dump (keep_graph=True where torch has it)."""
    try:
        graph, kept = torch.cuda.CUDAGraph(keep_graph=True), True
    except TypeError:
        graph, kept = torch.cuda.CUDAGraph(), False
    graph.enable_debug_mode()
    return graph, kept


def dump_graph(graph, plan: rec.Plan) -> str:
    """Write the captured graph's DOT dump (kept with keep_graph=True), gzipped, beside the trace; return its text."""
    plan.odir.mkdir(parents=True, exist_ok=True)
    dot = Path("/tmp") / f"{plan.name}.graph.dot"
    try:
        graph.debug_dump(str(dot))
    except RuntimeError:
        return ""
    if not dot.exists():
        return ""
    rec.gzip_file(dot, plan.odir / f"{plan.name}.graph.dot.gz")
    return dot.read_text(errors="replace")


def cuda_graph_replay(args, dev: torch.device, plan: rec.Plan) -> dict:
    """6 x (Linear(4096)+GELU) bf16, batch 8192: the whole training step replayed from one CUDA graph each step."""
    if not rec.is_cuda(dev):
        raise SystemExit("cuda_graph_replay needs a CUDA device")
    width, rows, layers = 4096, 8192, 6
    torch.manual_seed(0)
    model = mlp(width, layers, act=nn.GELU, bias=True).to(dev, torch.bfloat16)
    opt = torch.optim.SGD(model.parameters(), lr=1e-4, foreach=True)
    static_x = torch.randn(rows, width, device=dev, dtype=torch.bfloat16)
    inputs = [torch.randn_like(static_x) for _ in range(2)]
    graph, kept = new_graph()
    capture_step(model, opt, static_x, graph)
    dot_text = dump_graph(graph, plan)
    if kept:
        graph.instantiate()

    def step(i: int) -> None:
        with record_function("copy_input"):
            static_x.copy_(inputs[i % 2])
        with record_function("graph_replay"):
            graph.replay()

    meta = {
        "pattern": f"{layers} x (Linear({width},{width})+GELU) bf16, batch {rows}; forward + backward + "
        "SGD(foreach) captured once (torch.cuda.graph after 3 side-stream warm-ups); each step: copy_ the next "
        "input into the static buffer (annotation copy_input), graph.replay() (annotation graph_replay)",
        "graph_debug_dump": f"{plan.name}.graph.dot.gz (CUDAGraph.debug_dump)"
        if dot_text
        else "CUDAGraph.debug_dump wrote no file",
        "graph_node_types_in_debug_dump": {k: dot_text.count(k) for k in ("KERNEL", "MEMCPY", "MEMSET", "EVENT")},
    }
    rec.run_profiled(plan, step, meta)
    meta.update(rec.graph_launches(plan.odir / meta["trace_file"]))
    return meta


def compiled(args, dev: torch.device, plan: rec.Plan) -> dict:
    """4-layer pre-LN transformer (d 2048, SDPA) bf16, torch.compile (inductor), fused AdamW; batch 8 x 2048.

    Sized so the device outlasts the host even under the profiler's stack tracing (at d 1024 x 1024 tokens the
    profiled host took as long as the device: 24 ms per step both).
    """
    n, d, heads, ff, b, s = (2, 64, 4, 256, 2, 32) if args.tiny else (4, 2048, 16, 8192, 8, 2048)
    dtype = torch.bfloat16 if rec.is_cuda(dev) else torch.float32
    torch.manual_seed(0)
    model = Blocks(n, d, heads, ff, vocab=1).to(dev, dtype)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=rec.is_cuda(dev))
    x = torch.randn(b, s, d, device=dev, dtype=dtype)
    meta = {
        "pattern": f"{n} x pre-LN Block(d={d}, heads={heads}, ff={ff}, causal SDPA) {dtype}, input ({b},{s},{d}); "
        "torch.compile(model); loss = mean(y.float()^2); AdamW(fused)"
    }
    fwd = compile_with_fallback(model, opt, x, meta)
    rec.run_profiled(plan, lambda i: train_step(fwd, opt, x), meta)
    return meta


def compile_with_fallback(model: nn.Module, opt, x: torch.Tensor, meta: dict) -> nn.Module:
    """torch.compile with inductor; if the first step fails (no working Triton), aot_eager, saying so in meta."""
    for backend in ("inductor", "aot_eager"):
        fwd = torch.compile(model, backend=backend)
        t = time.time()
        try:
            train_step(fwd, opt, x)
            rec.sync(x.device)
        except Exception:  # noqa: BLE001 - any compiler failure means: try the next backend, and record why
            meta.setdefault("compile_errors", {})[backend] = traceback.format_exc(limit=4)[-1500:]
            torch._dynamo.reset()
            continue
        meta["compile"] = f"torch.compile(model, backend={backend!r}), default mode"
        meta["first_step_with_compile_s"] = round(time.time() - t, 1)
        return fwd
    raise RuntimeError("no torch.compile backend worked")


def cpu_bound(args, dev: torch.device, plan: rec.Plan) -> dict:
    """150 x (mul, add, sin, clamp) on a (64, 64) fp32 tensor per step: 600 tiny kernels launched from Python."""
    n_iter = 20 if args.tiny else 150
    x0 = torch.randn(64, 64, device=dev)

    def step(i: int) -> torch.Tensor:
        y = x0
        with record_function("tiny_elementwise_loop"):
            for _ in range(n_iter):
                y = torch.clamp(torch.sin(y * 1.0001 + 0.0001), -1.0, 1.0)
        return y

    meta = {
        "pattern": f"per step: {n_iter} x (mul, add, sin, clamp) on a (64, 64) fp32 tensor, launched from a "
        "Python loop",
        "kernels_per_step": 4 * n_iter,
    }
    rec.run_profiled(plan, step, meta)
    return meta


RECORDERS = {
    "gpu_bound": gpu_bound,
    "cuda_graph_replay": cuda_graph_replay,
    "compiled": compiled,
    "cpu_bound": cpu_bound,
}


def main() -> None:
    """Record one scenario into <out>/<scenario>/."""
    args = rec.parse_args(SCENARIOS, __doc__)
    dev = torch.device(args.device)
    odir = Path(args.out) / args.scenario
    plan = rec.Plan(args.scenario, odir, dev, wait=1, warmup=1, active=5 if args.scenario != "cpu_bound" else 4)
    t = time.time()
    meta = RECORDERS[args.scenario](args, dev, plan)
    meta["scenario"] = args.scenario
    meta["recorded_with"] = f"python3 scripts/record/step_model.py --scenario {args.scenario}"
    rec.write_meta(odir, args.scenario, meta)
    print(f"== {args.scenario} done in {time.time() - t:.1f} s", flush=True)


if __name__ == "__main__":
    main()
