#!/usr/bin/env python3
"""Record PyTorch memory snapshots (issue 13 item 8): a small training loop, and one taken at a real OOM.

    python3 scripts/record/memory_snapshot.py --scenario train --out /tmp/rec
    python3 scripts/record/memory_snapshot.py --scenario oom --out /tmp/rec

Both write into <out>/memory_snapshot/:
  train  train.snapshot.pickle[.gz] (torch.cuda.memory._dump_snapshot after a profiled training loop, history
         recorded from the process start), the same loop's Kineto trace train.json.gz, and train.meta.json
  oom    oom.snapshot.pickle[.gz], dumped inside the `except torch.cuda.OutOfMemoryError` of a training loop whose
         batch doubles every step under set_per_process_memory_fraction, and oom.meta.json
"""

from __future__ import annotations

import pickle
import re
import time
from pathlib import Path

import recording as rec
import torch
from models import Blocks
from step_model import train_step

SCENARIOS = ["train", "oom"]
FOLDER = "memory_snapshot"
MAX_RAW_BYTES = 2 << 20
OOM_FRACTION = 0.02


def start_history(max_entries: int) -> dict:
    """Record allocator history with Python stacks; returns the settings for the meta."""
    torch.cuda.memory._record_memory_history(enabled="all", context="all", stacks="python", max_entries=max_entries)
    return {"enabled": "all", "context": "all", "stacks": "python", "max_entries": max_entries}


def lm(dev: torch.device) -> tuple[Blocks, torch.optim.Optimizer]:
    """2 pre-LN blocks (d 1024, 16 heads, ff 4096) with embedding and LM head (vocab 8192), bf16, AdamW."""
    torch.manual_seed(0)
    model = Blocks(2, 1024, 16, 4096, vocab=8192, embed=True, head=True).to(dev, torch.bfloat16)
    return model, torch.optim.AdamW(model.parameters(), lr=1e-4)


def trace_replay(entries: list[dict]) -> dict:
    """Replay the allocator trace: peak of allocated bytes (alloc adds, free_completed subtracts) and action counts."""
    live = peak = 0
    actions: dict[str, int] = {}
    for e in entries:
        actions[e["action"]] = actions.get(e["action"], 0) + 1
        if e["action"] == "alloc":
            live += e["size"]
            peak = max(peak, live)
        elif e["action"] == "free_completed":
            live -= e["size"]
    return {
        "trace_entries": len(entries),
        "trace_actions": actions,
        "trace_replay_peak_allocated_B": peak,
        "trace_replay_allocated_at_end_B": live,
    }


def summarise(snap: dict, max_entries: int) -> dict:
    """Segments, blocks by state, reserved and allocated bytes in the snapshot; the history's own counts."""
    blocks = [b for s in snap["segments"] for b in s["blocks"]]
    states: dict[str, int] = {}
    for b in blocks:
        states[b["state"]] = states.get(b["state"], 0) + 1
    entries = [e for t in snap["device_traces"] for e in t]
    out = {
        "segments": len(snap["segments"]),
        "blocks": len(blocks),
        "blocks_by_state": states,
        "segments_total_size_B": sum(s["total_size"] for s in snap["segments"]),
        "active_allocated_blocks_size_B": sum(b["size"] for b in blocks if b["state"] == "active_allocated"),
        "history_wrapped": len(entries) >= max_entries,
    }
    out.update(trace_replay(entries))
    return out


def dump(odir: Path, name: str, max_entries: int) -> dict:
    """_dump_snapshot to <odir>/<name>.snapshot.pickle, gzipped when over 2 MiB; what it holds, for the meta."""
    odir.mkdir(parents=True, exist_ok=True)
    allocated, reserved = torch.cuda.memory_allocated(), torch.cuda.memory_reserved()
    raw = Path("/tmp") / f"{name}.snapshot.pickle"
    torch.cuda.memory._dump_snapshot(str(raw))
    with open(raw, "rb") as f:
        snap = pickle.load(f)
    out = {
        "memory_allocated_at_dump_B": allocated,
        "memory_reserved_at_dump_B": reserved,
        "max_memory_allocated_at_dump_B": torch.cuda.max_memory_allocated(),
        "snapshot_raw_bytes": raw.stat().st_size,
    }
    if raw.stat().st_size > MAX_RAW_BYTES:
        rec.gzip_file(raw, odir / f"{name}.snapshot.pickle.gz")
        out["snapshot_file"], out["snapshot_gzipped"] = f"{name}.snapshot.pickle.gz", True
    else:
        raw.rename(odir / f"{name}.snapshot.pickle")
        out["snapshot_file"], out["snapshot_gzipped"] = f"{name}.snapshot.pickle", False
    out.update(summarise(snap, max_entries))
    return out


def train(args, dev: torch.device, odir: Path) -> dict:
    """History from the start, 2 unprofiled + 6 profiled training steps (batch 4 x 512 tokens), then the dump."""
    meta = {"memory_history": start_history(max_entries=60000)}
    model, opt = lm(dev)
    ids = torch.randint(0, 8192, (4, 512), device=dev)
    meta["pattern"] = (
        "2 pre-LN Blocks (d 1024, 16 heads, ff 4096, SDPA) + Embedding/LM head (vocab 8192), bf16 "
        "params, AdamW(foreach); batch 4 x 512 tokens; loss = mean(logits.float()^2); history recorded "
        "from before the model was built, dumped after the loop with model and AdamW state alive"
    )
    plan = rec.Plan("train", odir, dev, wait=1, warmup=1, active=3, pre_steps=2)
    rec.run_profiled(plan, lambda i: train_step(model, opt, ids), meta)
    meta["max_memory_allocated_note"] = (
        "max_memory_allocated_B is the profiled loop's (peak reset after the "
        "pre-steps); the whole run's peak is the larger of it and "
        "max_memory_allocated_pre_steps_B"
    )
    meta.update(dump(odir, "train", 60000))
    torch.cuda.memory._record_memory_history(enabled=None)
    return meta


def oom(args, dev: torch.device, odir: Path) -> dict:
    """Train with a doubling batch under a 2 % memory fraction until OutOfMemoryError; dump inside the except."""
    torch.cuda.set_per_process_memory_fraction(OOM_FRACTION)
    total = torch.cuda.get_device_properties(dev).total_memory
    meta = {
        "memory_history": start_history(max_entries=20000),
        "per_process_memory_fraction": OOM_FRACTION,
        "allowed_bytes": int(total * OOM_FRACTION),
        "device_total_memory_B": total,
    }
    model, opt = lm(dev)
    meta["pattern"] = (
        "the train scenario's model and AdamW; step k uses batch 2^k x 512 tokens (k = 0, 1, ...) "
        "until torch.cuda.OutOfMemoryError; the snapshot is dumped inside the except block, while "
        "the failing step's frames (and its activations) are still alive"
    )
    batch = 1
    try:
        while batch <= 4096:
            ids = torch.randint(0, 8192, (batch, 512), device=dev)
            train_step(model, opt, ids)
            torch.cuda.synchronize()
            meta.setdefault("batches_that_fit", []).append(batch)
            batch *= 2
        raise SystemExit("no OOM up to batch 4096")
    except torch.cuda.OutOfMemoryError as e:
        meta["oom_at_batch"] = batch
        meta["oom_message"] = str(e).splitlines()[0][:600]
        m = re.search(r"Tried to allocate ([\d.]+ [KMG]iB)", str(e))
        meta["oom_tried_to_allocate"] = m.group(1) if m else None
        meta.update(dump(odir, "oom", 20000))
    torch.cuda.memory._record_memory_history(enabled=None)
    return meta


def main() -> None:
    """Record one scenario into <out>/memory_snapshot/."""
    args = rec.parse_args(SCENARIOS, __doc__)
    dev = torch.device(args.device)
    if not rec.is_cuda(dev):
        raise SystemExit("memory snapshots need a CUDA device (torch.cuda.memory._record_memory_history)")
    odir = Path(args.out) / FOLDER
    t = time.time()
    meta = {"train": train, "oom": oom}[args.scenario](args, dev, odir)
    meta["scenario"] = args.scenario
    meta["recorded_with"] = f"python3 scripts/record/memory_snapshot.py --scenario {args.scenario}"
    rec.write_meta(odir, args.scenario, meta)
    print(f"== memory_snapshot {args.scenario} done in {time.time() - t:.1f} s", flush=True)


if __name__ == "__main__":
    main()
