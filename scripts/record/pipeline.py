#!/usr/bin/env python3
"""Record a 2-stage pipeline-parallel training run (issue 18): hand-written 1F1B with send/recv between 2 ranks.

    torchrun --standalone --nproc_per_node=2 scripts/record/pipeline.py --out /tmp/rec  # 8 micro-batches
    torchrun --standalone --nproc_per_node=2 scripts/record/pipeline.py --out /tmp/rec --microbatches 2
    torchrun --standalone --nproc_per_node=2 scripts/record/pipeline.py --device cpu --tiny --out /tmp/rec  # gloo

Each rank writes <out>/pipeline_mb{M}/pipeline_mb{M}_rank{r}.json.gz and .meta.json. The model: a pre-LN transformer
LM (8 blocks) split in two; rank 0 holds the embedding and blocks 0-3, rank 1 blocks 4-7, the final LayerNorm, the LM
head and the loss. The global batch (16 sequences) is split into M micro-batches. Schedule (1F1B, one warm-up
forward on stage 0):

    rank 0:  F0 | send a0 | F1 | send a1 + recv g0 | B0 | F2 | ... | recv g(M-1) | B(M-1) | AdamW
    rank 1:  recv a0 | F0 B0 | send g0 + recv a1 | F1 B1 | ... | send g(M-1) | AdamW

Every exchange is one dist.batch_isend_irecv (so NCCL pairs the send and the recv of both directions in one group)
and is waited on at once; its host launch time (time.monotonic_ns, one clock for both ranks of a host) and CUDA
events around it go into the meta, with CUDA events around every micro-batch's forward and backward.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import recording as rec
import torch
import torch.distributed as dist
import torch.nn.functional as F
from models import Blocks
from torch.profiler import record_function

GLOBAL_BATCH = 16


def parse_args() -> argparse.Namespace:
    """--out, --device, --tiny, --microbatches, --active."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="/tmp/record_out")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--tiny", action="store_true", help="tiny sizes (CPU smoke test with gloo)")
    ap.add_argument("--microbatches", type=int, default=8, choices=[1, 2, 4, 8, 16])
    ap.add_argument("--active", type=int, default=3, help="profiled steps kept in the trace")
    return ap.parse_args()


def sizes(tiny: bool) -> dict:
    """Model and batch sizes: layers per stage, d, heads, ff, vocab, sequence length."""
    if tiny:
        return {"layers_per_stage": 2, "d": 64, "heads": 4, "ff": 256, "vocab": 512, "seq": 32}
    return {"layers_per_stage": 4, "d": 2048, "heads": 16, "ff": 8192, "vocab": 32000, "seq": 1024}


class Stage:
    """One pipeline stage: its half of the model, its optimizer, and the per-step log of what it measured."""

    def __init__(self, rank: int, z: dict, mb: int, dev: torch.device, dtype: torch.dtype):
        torch.manual_seed(rank)
        self.rank, self.peer, self.z, self.mb, self.dev, self.dtype = rank, 1 - rank, z, mb, dev, dtype
        self.model = Blocks(
            z["layers_per_stage"], z["d"], z["heads"], z["ff"], z["vocab"], embed=rank == 0, head=rank == 1
        ).to(dev, dtype)
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-4, foreach=True)
        self.clock = rec.StepClock(dev)
        self.log: list[dict] = []
        self.cur: dict = {}

    def activation(self) -> torch.Tensor:
        """An empty buffer of one micro-batch's activation (or gradient) between the stages."""
        return torch.empty(self.mb, self.z["seq"], self.z["d"], device=self.dev, dtype=self.dtype)

    def timed(self, what: str, fn):
        """Run fn under record_function(what) between two CUDA events; log the events."""
        with record_function(what):
            a = self.clock.mark()
            out = fn()
            self.cur["marks"].append((what, a, self.clock.mark()))
        return out

    def exchange(self, what: str, send: torch.Tensor | None, recv: torch.Tensor | None) -> None:
        """One batch_isend_irecv of a send and/or a recv with the other stage, waited on at once."""
        ops = []
        if send is not None:
            ops.append(dist.P2POp(dist.isend, send.contiguous(), self.peer))
        if recv is not None:
            ops.append(dist.P2POp(dist.irecv, recv, self.peer))

        def go():
            self.cur["p2p_launch_monotonic_ns"].append((what, time.monotonic_ns()))
            for req in dist.batch_isend_irecv(ops):
                req.wait()

        self.timed(what, go)


def step_stage0(st: Stage, ids: list[torch.Tensor]) -> None:
    """Stage 0's 1F1B step: one warm-up forward, then forward i / backward i-1 pairs, then the last backward."""
    outs = []
    m = len(ids)
    for i in range(m):
        outs.append(st.timed(f"pp.forward.mb{i}", lambda i=i: st.model(ids[i])))
        grad = st.activation() if i > 0 else None
        st.exchange(f"pp.p2p.send_act.mb{i}" + (f"+recv_grad.mb{i - 1}" if i else ""), outs[i].detach(), grad)
        if i > 0:
            st.timed(f"pp.backward.mb{i - 1}", lambda i=i, g=grad: outs[i - 1].backward(g))
    grad = st.activation()
    st.exchange(f"pp.p2p.recv_grad.mb{m - 1}", None, grad)
    st.timed(f"pp.backward.mb{m - 1}", lambda: outs[m - 1].backward(grad))


def step_stage1(st: Stage, labels: list[torch.Tensor]) -> None:
    """Stage 1's 1F1B step: receive a micro-batch's activation (sending the previous gradient), forward, backward."""
    m = len(labels)
    prev = None
    for i in range(m):
        x = st.activation()
        st.exchange("pp.p2p." + (f"send_grad.mb{i - 1}+" if i else "") + f"recv_act.mb{i}", prev, x)
        x.requires_grad_()
        logits = st.timed(f"pp.forward.mb{i}", lambda x=x: st.model(x))
        loss = F.cross_entropy(logits.flatten(0, 1).float(), labels[i].flatten()) / m
        st.timed(f"pp.backward.mb{i}", loss.backward)
        prev = x.grad
    st.exchange(f"pp.p2p.send_grad.mb{m - 1}", prev, None)


def run_step(st: Stage, data: list[torch.Tensor]) -> None:
    """One pipeline step on this rank, then its optimizer step; what it measured goes to st.log."""
    st.cur = {"marks": [], "p2p_launch_monotonic_ns": [], "step_start": st.clock.mark()}
    (step_stage0 if st.rank == 0 else step_stage1)(st, data)
    st.timed("pp.optimizer_step", lambda: (st.opt.step(), st.opt.zero_grad(set_to_none=True)))
    st.log.append(st.cur)


def summarise(st: Stage) -> list[dict]:
    """Per logged step: each forward/backward/exchange as (name, start_ms, dur_ms) from the step's start event."""
    rec.sync(st.dev)
    out = []
    for s in st.log:
        t0 = s["step_start"]
        spans = [(w, round(st.clock.ms(t0, a), 4), round(st.clock.ms(a, b), 4)) for w, a, b in s["marks"]]
        kinds = {
            k: round(sum(d for w, _, d in spans if w.startswith(k)), 4)
            for k in ("pp.forward", "pp.backward", "pp.p2p", "pp.optimizer_step")
        }
        end = round(spans[-1][1] + spans[-1][2], 4)
        out.append(
            {
                "spans_ms": spans,
                "totals_ms": kinds,
                "step_span_ms": end,
                "p2p_launch_monotonic_ns": s["p2p_launch_monotonic_ns"],
            }
        )
    return out


def batches(st: Stage, m: int) -> list[torch.Tensor]:
    """Stage 0: the token ids of each micro-batch; stage 1: their next-token labels (seeded, the same each step)."""
    g = torch.Generator().manual_seed(1234)
    ids = torch.randint(0, st.z["vocab"], (GLOBAL_BATCH, st.z["seq"] + 1), generator=g).to(st.dev)
    part = ids[:, :-1] if st.rank == 0 else ids[:, 1:]
    return list(part.chunk(m))


def main() -> None:
    """Set up the process group, run the profiled pipeline steps, write this rank's trace and meta."""
    args = parse_args()
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if world != 2:
        raise SystemExit("pipeline.py runs on exactly 2 ranks (torchrun --nproc_per_node=2)")
    dev = torch.device(f"cuda:{int(os.environ['LOCAL_RANK'])}" if args.device == "cuda" else "cpu")
    if rec.is_cuda(dev):
        torch.cuda.set_device(dev)
    dist.init_process_group("nccl" if rec.is_cuda(dev) else "gloo", device_id=dev if rec.is_cuda(dev) else None)
    m, z = args.microbatches, sizes(args.tiny)
    st = Stage(rank, z, GLOBAL_BATCH // m, dev, torch.bfloat16 if rec.is_cuda(dev) else torch.float32)
    data = batches(st, m)
    name = f"pipeline_mb{m}"
    plan = rec.Plan(f"{name}_rank{rank}", Path(args.out) / name, dev, wait=1, warmup=1, active=args.active, pre_steps=2)
    meta = describe(args, rank, z, st)
    rec.run_profiled(plan, lambda i: run_step(st, data), meta)
    meta["per_step"] = summarise(st)[plan.pre_steps :]
    meta["per_step_note"] = (
        "one entry per profiled-loop step (ProfilerStep#0..); spans are (annotation, start ms "
        "after the step's first CUDA event, duration ms), timed with CUDA events on the compute "
        "stream; an exchange's span is the time the stream waited for the send/recv"
    )
    rec.write_meta(plan.odir, plan.name, meta)
    dist.destroy_process_group()


def describe(args, rank: int, z: dict, st: Stage) -> dict:
    """What was planted, for the meta."""
    return {
        "pattern": f"2-stage pipeline, hand-written 1F1B over dist.batch_isend_irecv; {args.microbatches} "
        f"micro-batches of {st.mb} x {z['seq']} tokens per step (global batch {GLOBAL_BATCH}); stage {rank} holds "
        + ("Embedding + blocks 0-3" if rank == 0 else "blocks 4-7 + LayerNorm + LM head + cross-entropy"),
        "rank": rank,
        "world_size": 2,
        "stage": rank,
        "microbatches": args.microbatches,
        "sizes": z,
        "dtype": str(st.dtype),
        "backend": dist.get_backend(),
        "optimizer": "AdamW(foreach) per stage",
        "params_this_stage": sum(p.numel() for p in st.model.parameters()),
        "recorded_with": "torchrun --standalone --nproc_per_node=2 scripts/record/pipeline.py "
        f"--microbatches {args.microbatches}" + (" --device cpu --tiny" if args.tiny else ""),
    }


if __name__ == "__main__":
    main()
