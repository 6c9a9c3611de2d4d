#!/usr/bin/env python3
"""Record AlexNet training on one GPU the way the Ascend level0-2 msinsight samples trained it (issue 16 item 4).

    python3 scripts/record/cnn.py --scenario alexnet_ddp --out /tmp/rec
    python3 scripts/record/cnn.py --scenario alexnet_ddp --device cpu --tiny --out /tmp/rec   # smoke test

What the Ascend samples show (shared/traces/public/ascend/msinsight/pytorch_text/level{0,1,2}/rank{0,1}_ascend_pt,
operator_details.csv / kernel_details.csv / trace_view.json / communication.json): torchvision AlexNet (nn.Module
names AlexNet_0, Sequential_0/1, Conv2d_0..4, MaxPool2d_0..2, AdaptiveAvgPool2d_0, Dropout_0/1, Linear_0..2) inside
DistributedDataParallel (8 ranks, 4 all-reduce buckets of 4,097,000 / 16,781,312 / 37,752,832 / 2,469,696 fp32
elements = the default 25 MB buckets), batch 32 of 3 x 224 x 224 fp32 per rank, CrossEntropyLoss, SGD with momentum
and weight decay (foreach: _foreach_add, _foreach_mul_, 2 x _foreach_add_), top-1/top-5 accuracy (topk, eq on (5,32)),
a multi-process DataLoader, loss.item() - the PyTorch ImageNet example (main.py) with --arch alexnet.
Here: the same model, batch, dtype, loss, optimizer and accuracy, under DDP with world size 1 (NCCL, one H200).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import recording as rec
import torch
import torch.distributed as dist
import torch.nn as nn
from models import AlexNet
from torch.nn.parallel import DistributedDataParallel
from torch.profiler import record_function
from torch.utils.data import DataLoader, Dataset

SCENARIOS = ["alexnet_ddp"]
FOLDER = "cnn_h200"


class RandomImages(Dataset):
    """A fixed pool of 64 seeded random 3 x H x W fp32 images with labels, served like an image folder."""

    def __init__(self, size: int, length: int, classes: int = 1000):
        g = torch.Generator().manual_seed(0)
        self.images = torch.randn(64, 3, size, size, generator=g)
        self.labels = torch.randint(0, classes, (64,), generator=g)
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.images[i % 64].clone(), self.labels[i % 64]


def accuracy(output: torch.Tensor, target: torch.Tensor, topk: tuple[int, ...] = (1, 5)) -> list[torch.Tensor]:
    """The ImageNet example's accuracy: top-k correct in percent, as tensors (no host sync)."""
    with torch.no_grad():
        _, pred = output.topk(max(topk), 1, True, True)
        correct = pred.t().eq(target.view(1, -1).expand_as(pred.t()))
        return [correct[:k].reshape(-1).float().sum(0, keepdim=True).mul_(100.0 / target.size(0)) for k in topk]


def init_ddp(model: nn.Module, dev: torch.device, meta: dict) -> nn.Module:
    """Wrap in DistributedDataParallel, world size 1 (NCCL on a GPU, gloo on CPU)."""
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29517")
    backend = "nccl" if rec.is_cuda(dev) else "gloo"
    dist.init_process_group(backend, rank=0, world_size=1)
    meta["ddp"] = f"DistributedDataParallel, backend {backend}, world size 1, default bucket_cap_mb (25)"
    return DistributedDataParallel(model, device_ids=[dev.index or 0] if rec.is_cuda(dev) else None)


def alexnet_ddp(args, dev: torch.device, plan: rec.Plan) -> dict:
    """AlexNet, batch 32 fp32, SGD(0.1, momentum 0.9, wd 1e-4), CrossEntropyLoss, top-1/5 accuracy, loss.item()."""
    batch, size = (4, 64) if args.tiny else (32, 224)
    torch.manual_seed(0)
    meta = {
        "tf32": {
            "cudnn.allow_tf32": torch.backends.cudnn.allow_tf32,
            "cuda.matmul.allow_tf32": torch.backends.cuda.matmul.allow_tf32,
        },
        "cudnn.benchmark": torch.backends.cudnn.benchmark,
    }
    model = init_ddp(AlexNet().to(dev), dev, meta)
    criterion = nn.CrossEntropyLoss().to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
    loader = DataLoader(
        RandomImages(size, batch * 64),
        batch_size=batch,
        shuffle=True,
        num_workers=2,
        pin_memory=rec.is_cuda(dev),
        persistent_workers=True,
    )
    batches = iter(loader)
    losses = []

    def step(i: int) -> None:
        images, target = next(batches)
        images = images.to(dev, non_blocking=True)
        target = target.to(dev, non_blocking=True)
        output = model(images)
        loss = criterion(output, target)
        accuracy(output, target)
        opt.zero_grad()
        loss.backward()
        opt.step()
        with record_function("loss_item"):
            losses.append(loss.item())

    meta["pattern"] = (
        f"AlexNet under DDP (world size 1), batch {batch} x 3 x {size} x {size} fp32, CrossEntropyLoss, "
        "SGD(0.1, momentum 0.9, wd 1e-4), top-1/5 accuracy, loss.item() (annotation loss_item)"
    )
    meta.update(ascend_match(batch, size))
    rec.run_profiled(plan, step, meta)
    meta["losses"] = [round(v, 4) for v in losses]
    dist.destroy_process_group()
    return meta


def ascend_match(batch: int, size: int) -> dict:
    """What this run shares with the Ascend samples, and what differs (for the meta)."""
    return {
        "matches_ascend_sample": "shared/traces/public/ascend/msinsight/pytorch_text/level{0,1,2}/rank{0,1}_ascend_pt "
        "(and pytorch_db/level{0,1,2}: the same run exported as .db), step 50",
        "same": [
            "torchvision AlexNet layer for layer (5 Conv2d, 3 MaxPool2d, AdaptiveAvgPool2d(6,6), 2 Dropout, "
            "3 Linear, 7 ReLU(inplace))",
            f"batch {batch} x 3 x {size} x {size} per rank",
            "fp32 parameters and activations (no autocast)",
            "CrossEntropyLoss",
            "SGD(lr=0.1, momentum=0.9, weight_decay=1e-4), foreach",
            "top-1/top-5 accuracy (topk + eq), loss.item() each step",
            "DDP with the default 25 MB "
            "buckets (4 all-reduces: 4,097,000 / 16,781,312 / 37,752,832 / 2,469,696 elements)",
            "record_shapes, profile_memory, with_stack, with_modules",
        ],
        "differs": [
            "world size 1 on one H200 (the Ascend run: 8 ranks over HCCS), so the all-reduces move nothing "
            "and never wait for another rank",
            "random images from a 64-image pool instead of ImageNet (2 DataLoader workers, pinned memory)",
            "cuDNN/cuBLAS may run convolutions and GEMMs in TF32 "
            "(torch defaults, see tf32); Ascend used HF32-eligible Conv2D and fp32 MatMul",
            "the Ascend profile holds 1 step (schedule skip_first 40, warmup 10, active 1); this one 4",
        ],
    }


def main() -> None:
    """Record AlexNet into <out>/cnn_h200/."""
    args = rec.parse_args(SCENARIOS, __doc__)
    dev = torch.device(args.device)
    odir = Path(args.out) / FOLDER
    plan = rec.Plan(args.scenario, odir, dev, wait=1, warmup=1, active=4, pre_steps=3, with_modules=True)
    t = time.time()
    meta = alexnet_ddp(args, dev, plan)
    meta["scenario"] = args.scenario
    meta["recorded_with"] = f"python3 scripts/record/cnn.py --scenario {args.scenario}"
    rec.write_meta(odir, args.scenario, meta)
    print(f"== cnn {args.scenario} done in {time.time() - t:.1f} s", flush=True)


if __name__ == "__main__":
    main()
