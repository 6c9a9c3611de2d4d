"""Advice text in one place: sentences built from parts, and advice chosen by platform and by what the kernel already
is, so no Ascend report advises CUDA graphs and no fused kernel is told to fuse."""

from __future__ import annotations

from traceanalyzer.schema import Platform, TraceMeta
from traceanalyzer.vocabulary import ATTENTION_KERNEL, FUSED_KERNEL

_ARTICLES = {"a", "an", "the", "one"}

CUDA, ASCEND = "cuda", "ascend"


def platform(meta: TraceMeta) -> str:
    """The advice platform of a trace: 'ascend' for CANN traces, else 'cuda' (ROCm reads the CUDA advice)."""
    return ASCEND if meta.platform == Platform.ASCEND else CUDA


def replace_with(replacement: str) -> str:
    """'Replace with X.' for a named replacement (code, a product); the instruction itself, as a sentence, when the
    replacement already is one ('keep the layout …' → 'Keep the layout ….')."""
    text = replacement.strip().rstrip(".")
    if not text:
        return ""
    first = text.split(" ", 1)[0]
    if first.isalpha() and first.islower() and first not in _ARTICLES:
        return sentence(text)
    return f"Replace with {text}."


def sentence(text: str) -> str:
    """Text as one sentence: capitalised first letter, one final full stop."""
    text = text.strip().rstrip(".")
    return text[:1].upper() + text[1:] + "." if text else ""


DATA_LOADING_ADVICE = (
    "raise DataLoader num_workers, use pin_memory=True, persistent_workers=True and a larger prefetch_factor."
)
"""What to do when the training process itself loads its input."""

FEWER_LAUNCHES = {
    CUDA: "fewer and larger kernels via torch.compile or CUDA graphs",
    ASCEND: "fewer and larger ops via torch.compile with the torchair backend (graph mode)",
}
"""How to cut per-op launch overhead, per platform."""

CAPTURE_LOOP = {
    CUDA: 'Capture the loop in a CUDA graph (torch.cuda.graphs or torch.compile(mode="reduce-overhead")), let '
    "torch.compile fuse the elementwise ops, or batch the iterations into larger tensor ops.",
    ASCEND: "Run the loop in graph mode (torch.compile with the torchair backend, or torch_npu's aclgraph capture) so "
    "its ops are dispatched once, or batch the iterations into larger tensor ops.",
}
"""Advice for a launch-bound loop of tiny kernels, per platform."""

FP32_MATMUL = {
    CUDA: "Enable TF32 (torch.backends.cuda.matmul.allow_tf32 = True, torch.backends.cudnn.allow_tf32 = True, or "
    "torch.set_float32_matmul_precision('high')) for several times the throughput, or run the model under "
    "torch.autocast(dtype=torch.bfloat16) / in bf16 for more; keep fp32 master weights if accuracy needs them.",
    ASCEND: "Let the cube units run fp32 matmuls in HF32 (torch.npu.matmul.allow_hf32 = True, "
    "torch.npu.conv.allow_hf32 = True), or run the model under torch.autocast('npu', dtype=torch.bfloat16); keep "
    "fp32 master weights if accuracy needs them.",
}
"""Advice for fp32 matrix multiplies that run without tensor/cube-unit reduced-precision math, per platform."""

PRE_AMPERE = (
    "This GPU has no TF32 (compute capability < 8): run the model under torch.autocast(dtype=torch.float16) with a "
    "GradScaler so these GEMMs/convolutions use the fp16 tensor cores (and channels_last for convolutions)."
)

DYNAMIC_SHAPES = {
    CUDA: "Shapes that change every step make torch.compile recompile (or fall back), make cuDNN/cuBLAS re-plan, "
    "defeat CUDA graphs and churn the caching allocator. Pad or bucket sequence lengths / batch sizes to a few fixed "
    "sizes, or mark the dimension dynamic (torch._dynamo.mark_dynamic) when compiling.",
    ASCEND: "Changing shapes make CANN compile or select kernels at run time. Pad or bucket inputs to a few fixed "
    "shapes, and call torch_npu.npu.set_compile_mode(jit_compile=False) to use prebuilt binary kernels.",
}
"""Advice for ops whose input shapes change from step to step, per platform."""

PINNED_COPY = {
    CUDA: "copy to pinned memory with non_blocking=True",
    ASCEND: "copy to pinned memory with non_blocking=True (tensor.pin_memory())",
}

CATEGORY_ADVICE = {
    "gemm": {
        CUDA: "Matrix multiplies and convolutions: run them on tensor cores (bf16/fp16 autocast, or TF32 for fp32), "
        "keep dimensions multiples of 8/16, batch many small GEMMs into one (bmm, grouped GEMM), and check the "
        "achieved TFLOP/s against the GPU's peak.",
        ASCEND: "Matrix multiplies and convolutions: run them on the cube units in bf16/fp16 (autocast), keep "
        "dimensions multiples of 16 so no padding TransData is inserted, keep weights in FRACTAL_NZ, and batch many "
        "small GEMMs into one.",
    },
    "attention": {
        CUDA: "Attention: use a fused kernel (F.scaled_dot_product_attention with the flash/cuDNN backend, not the "
        "math fallback) and check the sequence length and head dim it is given.",
        ASCEND: "Attention: use torch_npu.npu_fusion_attention (FlashAttentionScore) instead of the matmul/softmax "
        "chain, and check the sequence length and head dim it is given.",
    },
    "elementwise": {
        CUDA: "Elementwise ops: each eager op reads and writes the whole tensor. Fuse the chain with torch.compile, "
        "use foreach/fused optimizer variants (fused=True), or a fused kernel.",
        ASCEND: "Elementwise ops: each eager op reads and writes the whole tensor. Fuse the chain in graph mode "
        "(torchair), use torch_npu's fused ops, or NpuFused optimizers.",
    },
    "normalisation": {
        CUDA: "Norms and softmax: use fused implementations (torch.compile, fused RMSNorm/LayerNorm kernels) so the "
        "surrounding elementwise ops fold into them.",
        ASCEND: "Norms and softmax: use torch_npu's fused ops (npu_rms_norm, npu_add_rms_norm, npu_add_layer_norm).",
    },
    "reduction": {
        CUDA: "Reductions: fuse them with their producers (torch.compile) and avoid reducing the same tensor twice.",
        ASCEND: "Reductions: fuse them with their producers (graph mode) and avoid reducing the same tensor twice.",
    },
    "copy": {
        CUDA: "Copies: avoid .contiguous()/.clone() after transposes, keep dtypes consistent so .to()/autocast casts "
        "are not repeated every step (cast weights once), and keep host↔device copies out of the loop.",
        ASCEND: "Copies: avoid .contiguous()/.clone() after transposes, keep dtypes and NPU formats consistent so "
        "casts and TransData are not repeated every step, and keep host↔device copies out of the loop.",
    },
    "memset": {
        CUDA: "Memsets: avoid zero-initialising buffers that are overwritten anyway (torch.empty instead of "
        "torch.zeros, zero_grad(set_to_none=True)).",
    },
    "communication": {
        CUDA: "Communication: see the overlap findings; overlap it with compute (DDP buckets, FSDP prefetch), reduce "
        "its volume (bf16 gradients, fewer larger collectives) and check rank skew.",
    },
    "other": {CUDA: "Check whether this op must run every step, and what its kernels do."},
}
"""Advice per hotspot category and platform (a platform left out reads the CUDA text, which names no CUDA API)."""

ALREADY_FUSED = (
    "Its kernel {kernel} is already a fused kernel, so fusing is done: check its achieved bandwidth (or FLOP/s) "
    "against the device's peak, its launch configuration, and whether the op must run every step."
)
ALREADY_FUSED_ATTENTION = (
    "It already runs a fused attention kernel ({kernel}): check the sequence length, head dim and dtype it is given "
    "(padding and masks waste its work), and whether a causal mask could replace an explicit one."
)


def category_advice(category: str, meta: TraceMeta, kernel: str = "") -> str:
    """Advice for a hotspot of a category on this platform, unless its main kernel already is what it would say."""
    if kernel and ATTENTION_KERNEL.search(kernel) and category in ("attention", "other", "normalisation"):
        return ALREADY_FUSED_ATTENTION.format(kernel=kernel[:60])
    if kernel and FUSED_KERNEL.search(kernel) and category not in ("gemm", "communication", "memset", "copy"):
        return ALREADY_FUSED.format(kernel=kernel[:60])
    texts = CATEGORY_ADVICE[category]
    return texts.get(platform(meta), texts[CUDA])
