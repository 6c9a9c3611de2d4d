#!/usr/bin/env python3
"""Record Hugging Face generate() traces (issue 28) with CUDA-event truth: TTFT and the time of every output token.

    python3 scripts/record/inference.py --scenario eager_dynamic --out /tmp/rec
    python3 scripts/record/inference.py --scenario all --device cpu --tiny --out /tmp/rec     # smoke test

Writes <out>/inference/<scenario>.json.gz and .meta.json. The model is a randomly initialised LlamaForCausalLM in
bf16; generation is greedy with a fixed number of new tokens (no EOS). Each profiler step is one generate() call
(schedule wait=1, warmup=1, active=1, after 2 warm-up and 3 timed unprofiled calls). A streamer records a CUDA
event each time generate() hands it tokens (the prompt first, then each new token, after the token's argmax), so
TTFT = start event -> first new token, TPOT = token i-1 -> token i.
Scenarios:
  eager_dynamic    batch 1, prompt 512, 32 new tokens, the default dynamic KV cache, eager
  static_compiled  the same with cache_implementation="static" and forward torch.compile (inductor, default mode)
  batched          4 prompts of 128 / 256 / 384 / 512 tokens, left-padded to 512, 32 new tokens each
  long_prefill     batch 1, prompt 4096, 4 new tokens
  eager_attention  long_prefill with attn_implementation="eager" (unfused softmax(QK^T)V): the problem of a pair whose
                   fix is long_prefill
  cudnn_kv         eager_dynamic with SDPA held to the cuDNN backend and a prompt 40 tokens longer at every call, so
                   every call meets KV lengths never seen before: a cuDNN graph is planned for each
  flash_kv         its fix: the same held to the flash / memory-efficient backends (no per-shape planning)
  marked           eager_dynamic as a hand-written loop (one prefill forward, then one forward per token) inside
                   record_function("prefill") and record_function("decode") ranges, as serving code marks phases
"""

from __future__ import annotations

import argparse
import contextlib
import time
import traceback
from pathlib import Path

import recording as rec
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.profiler import ProfilerActivity, profile, record_function, schedule
from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM

SCENARIOS = {
    "eager_dynamic": {"prompts": [512], "new": 32, "cache": "dynamic", "compile": False},
    "static_compiled": {"prompts": [512], "new": 32, "cache": "static", "compile": True},
    "batched": {"prompts": [128, 256, 384, 512], "new": 32, "cache": "dynamic", "compile": False},
    "long_prefill": {"prompts": [4096], "new": 4, "cache": "dynamic", "compile": False},
    "eager_attention": {"prompts": [4096], "new": 4, "cache": "dynamic", "compile": False, "attn": "eager"},
    "cudnn_kv": {"prompts": [512], "new": 32, "cache": "dynamic", "compile": False, "sdpa": "cudnn", "fresh": 40},
    "flash_kv": {"prompts": [512], "new": 32, "cache": "dynamic", "compile": False, "sdpa": "flash", "fresh": 40},
    "marked": {"prompts": [512], "new": 32, "cache": "dynamic", "compile": False, "marked": True},
}
SDPA_BACKENDS = {
    "cudnn": [SDPBackend.CUDNN_ATTENTION],
    "flash": [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION],
}
MARKERS = 'record_function("prefill") around the prompt forward, record_function("decode") around each new token'


class TokenClock:
    """A generate() streamer: a CUDA event (perf_counter on CPU) each time generate() hands it tokens."""

    def __init__(self, device: torch.device):
        self.clock = rec.StepClock(device)
        self.marks: list = []

    def put(self, value) -> None:
        self.marks.append(self.clock.mark())

    def end(self) -> None:
        self.marks.append(self.clock.mark())


def build(tiny: bool, dev: torch.device, attn: str = "sdpa") -> tuple[LlamaForCausalLM, dict]:
    """A random Llama (hidden 2048, 4 layers, 16 heads, 4 KV heads, vocab 32000) in bf16, and its facts."""
    cfg = LlamaConfig(
        hidden_size=64 if tiny else 2048,
        intermediate_size=128 if tiny else 5632,
        num_hidden_layers=2 if tiny else 4,
        num_attention_heads=4 if tiny else 16,
        num_key_value_heads=2 if tiny else 4,
        vocab_size=1000 if tiny else 32000,
        max_position_embeddings=8192,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=None,
    )
    torch.manual_seed(0)
    dtype = torch.bfloat16 if rec.is_cuda(dev) else torch.float32
    model = LlamaForCausalLM._from_config(cfg, attn_implementation=attn).to(dev, dtype).eval()
    params = sum(p.numel() for p in model.parameters())
    head_dim = cfg.hidden_size // cfg.num_attention_heads
    elem = torch.finfo(dtype).bits // 8
    facts = {
        "model": "LlamaForCausalLM (random init)",
        "config": {
            k: getattr(cfg, k)
            for k in (
                "hidden_size",
                "intermediate_size",
                "num_hidden_layers",
                "num_attention_heads",
                "num_key_value_heads",
                "vocab_size",
            )
        },
        "dtype": str(dtype),
        "attn_implementation": attn,
        "params": params,
        "param_bytes": params * elem,
        "kv_bytes_per_token": 2 * cfg.num_hidden_layers * cfg.num_key_value_heads * head_dim * elem,
    }
    return model, facts


def inputs(prompts: list[int], vocab: int, dev: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-padded random token ids for prompts of the given lengths, and their attention mask."""
    width = max(prompts)
    g = torch.Generator().manual_seed(1)
    ids = torch.zeros(len(prompts), width, dtype=torch.long)
    mask = torch.zeros(len(prompts), width, dtype=torch.long)
    for row, n in enumerate(prompts):
        ids[row, width - n :] = torch.randint(2, vocab, (n,), generator=g)
        mask[row, width - n :] = 1
    return ids.to(dev), mask.to(dev)


def marked_loop(model, ids, mask, new: int, clock: TokenClock) -> torch.Tensor:
    """Greedy decoding by hand: a prefill forward, then one forward per token, in prefill / decode ranges."""
    cache = DynamicCache()
    with record_function("prefill"):
        logits = model(input_ids=ids, attention_mask=mask, past_key_values=cache, use_cache=True).logits
        token = logits[:, -1:].argmax(-1)
    clock.put(ids)
    clock.put(token)
    out = [ids, token]
    for _ in range(new - 1):
        mask = torch.cat([mask, torch.ones_like(token)], dim=1)
        with record_function("decode"):
            logits = model(input_ids=token, attention_mask=mask, past_key_values=cache, use_cache=True).logits
            token = logits[:, -1:].argmax(-1)
        clock.put(token)
        out.append(token)
    clock.end()
    return torch.cat(out, dim=1)


def generated(model, ids, mask, sc: dict, clock: TokenClock, kw: dict) -> torch.Tensor:
    """The prompt and its new tokens, from generate() or the marked loop."""
    if sc.get("marked"):
        return marked_loop(model, ids, mask, sc["new"], clock)
    return model.generate(
        input_ids=ids,
        attention_mask=mask,
        max_new_tokens=sc["new"],
        min_new_tokens=sc["new"],
        do_sample=False,
        streamer=clock,
        pad_token_id=0,
        **kw,
    )


def timed_generate(model, ids, mask, sc: dict, dev: torch.device) -> dict:
    """One generate() call (or the marked loop) bracketed by CUDA events; TTFT, TPOT per token, the call, in ms."""
    clock = TokenClock(dev)
    start = clock.clock.mark()
    kw = {"cache_implementation": "static"} if sc["cache"] == "static" else {}
    backends = SDPA_BACKENDS.get(sc.get("sdpa", ""), []) if rec.is_cuda(dev) else []
    t = time.perf_counter()
    with sdpa_kernel(backends) if backends else contextlib.nullcontext():
        out = generated(model, ids, mask, sc, clock, kw)
    end = clock.clock.mark()
    host_ms = (time.perf_counter() - t) * 1e3
    rec.sync(dev)
    ms = clock.clock.ms
    tokens = clock.marks[1:-1]  # the first put is the prompt, the last mark is end()
    return {
        "new_tokens": int(out.shape[1] - ids.shape[1]),
        "ttft_ms_cuda_events": ms(start, tokens[0]),
        "tpot_ms_cuda_events": [ms(a, b) for a, b in zip(tokens[:-1], tokens[1:], strict=True)],
        "generate_ms_cuda_events": ms(start, end),
        "generate_host_wall_ms": round(host_ms, 4),
    }


def record(args, name: str, dev: torch.device) -> None:
    """Unprofiled calls (after 2 warm-ups), then 3 profiled calls of which the last is traced."""
    sc = SCENARIOS[name]
    model, meta = build(args.tiny, dev, sc.get("attn", "sdpa"))
    prompts = [max(4, p // 32) for p in sc["prompts"]] if args.tiny else sc["prompts"]
    calls = iter(range(1000))

    def call() -> dict:
        """One timed call; a fresh prompt length per call where the scenario asks for new KV lengths."""
        grow = sc.get("fresh", 0) * next(calls)
        ids, mask = inputs([p + grow for p in prompts], model.config.vocab_size, dev)
        return {"prompt_lens": [p + grow for p in prompts], **timed_generate(model, ids, mask, sc, dev)}

    meta.update(scenario=name, prompt_lens=prompts, batch=len(prompts), cache=sc["cache"])
    if sc.get("sdpa"):
        meta["sdpa_backends"] = [b.name for b in SDPA_BACKENDS[sc["sdpa"]]]
    if sc.get("marked"):
        meta["markers"] = MARKERS
    if sc["compile"]:
        t = time.time()
        model.forward = torch.compile(model.forward, fullgraph=True)
        meta["compile"] = (
            "forward = torch.compile(forward, fullgraph=True) (inductor, default mode; "
            "reduce-overhead failed here: CUDA-graph outputs overwritten)"
        )
    with torch.inference_mode():
        t = time.time()
        for _ in range(2):
            call()
        meta["warmup_calls_wall_s"] = round(time.time() - t, 2)
        meta["unprofiled"] = [call() for _ in range(3)]
        odir = Path(args.out) / "inference"
        odir.mkdir(parents=True, exist_ok=True)
        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if rec.is_cuda(dev) else [])
        profiled = []
        raw = Path("/tmp") / f"{name}.trace.json"
        with profile(
            activities=acts,
            schedule=schedule(wait=1, warmup=1, active=1, repeat=1),
            record_shapes=True,
            profile_memory=True,
            with_stack=False,
            on_trace_ready=lambda p: p.export_chrome_trace(str(raw)),
        ) as prof:
            for _ in range(3):
                profiled.append(call())
                prof.step()
    rec.gzip_file(raw, odir / f"{name}.json.gz")
    raw.unlink()
    meta["profiled_traced"] = profiled[2:]
    meta["trace_holds_profiler_steps"] = ["ProfilerStep#2"]
    meta["trace_file"] = f"{name}.json.gz"
    meta["max_memory_allocated_B"] = torch.cuda.max_memory_allocated() if rec.is_cuda(dev) else 0
    meta["timing"] = (
        "CUDA events: one before generate(), one in the streamer's put() for each new token (after its argmax), "
        "one after generate() returns"
    )
    rec.write_meta(odir, name, meta)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--scenario", required=True, choices=[*SCENARIOS, "all"])
    ap.add_argument("--out", default="/tmp/record_out")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--tiny", action="store_true")
    args = ap.parse_args()
    dev = torch.device(args.device)
    for name in SCENARIOS if args.scenario == "all" else [args.scenario]:
        try:
            record(args, name, dev)
        except Exception:
            print(f"=== {name} FAILED", flush=True)
            traceback.print_exc()


if __name__ == "__main__":
    main()
