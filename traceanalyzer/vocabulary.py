"""The names the analyses recognise, defined once: kernels and ops by what they compute, dtypes, runtime calls that
launch, sync or replay a graph, data loading, copies by kind, and library frames.

Each is matched against event names of either platform; an analysis asks here rather than keeping its own list.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

# ---------------------------------------------------------------- graphs

GRAPH_LAUNCH = re.compile(r"^(cuda|hip|cu)GraphLaunch")
"""Runtime calls that replay a captured graph: the kernels they launch were captured, their ops not recorded."""

GRAPH_REPLAYED = "graph-replayed (ops not recorded)"
"""How op tables name device work replayed from a graph whose ops the trace does not record."""

# ---------------------------------------------------------------- runtime calls

SYNC_CALLS = frozenset(
    {
        "cudaStreamSynchronize",
        "cudaDeviceSynchronize",
        "cudaEventSynchronize",
        "cuStreamSynchronize",
        "cuCtxSynchronize",
        "cuEventSynchronize",
        "hipStreamSynchronize",
        "hipDeviceSynchronize",
        "hipEventSynchronize",
        *(
            prefix + call + timeout
            for prefix in ("", "AscendCL@")
            for call in ("aclrtSynchronizeStream", "aclrtSynchronizeDevice", "aclrtSynchronizeEvent")
            for timeout in ("", "WithTimeout")
        ),
    }
)
"""Runtime calls that block the host until device work finishes (stream-to-stream waits are not host stalls); the
CANN calls as torch_npu's traces name them too (``AscendCL@aclrtSynchronizeStreamWithTimeout`` under ``.item()``)."""

LAUNCH_CALLS = frozenset(
    {
        "cudaLaunchKernel",
        "cudaLaunchKernelExC",
        "cudaLaunchCooperativeKernel",
        "cuLaunchKernel",
        "cuLaunchKernelEx",
        "hipLaunchKernel",
        "hipExtLaunchKernel",
        "hipModuleLaunchKernel",
        "hipExtModuleLaunchKernel",
    }
)
"""Runtime calls that launch one kernel."""

ALLOCATOR_CALLS = frozenset(
    {
        "cudaMalloc",
        "cudaFree",
        "cudaMallocHost",
        "cudaFreeHost",
        "cudaHostAlloc",
        "cuMemAlloc_v2",
        "cuMemFree_v2",
        "hipMalloc",
        "hipFree",
        "aclrtMalloc",
        "aclrtFree",
    }
)
"""Runtime calls of the device allocator that block the host (``cudaFree`` also waits for the device): the caching
allocator makes them on a miss, ``torch.cuda.empty_cache()`` frees every cached block with them."""

ALLOCATOR_FRAME = re.compile(r"\bempty_cache\b")
"""Python frames that hand the caching allocator's blocks back to the driver (``torch.cuda.empty_cache``)."""

HOST_SYNC_OPS = re.compile(r"aten::(?:_local_scalar_dense|item|nonzero|is_nonzero|equal|allclose|unique)")
"""Ops that read a device value on the host (``.item()``, ``.tolist()``, ``nonzero``, ``if tensor:``), so they sync."""

GRAD_SCALER = re.compile(r"grad_scaler\.py|GradScaler|_unscale_grads_|_maybe_opt_step")
"""Frames of torch.amp.GradScaler, whose inf/NaN check reads ``found_inf`` on the host each step."""

OPTIMIZER_STEP = re.compile(r"^Optimizer\.step#")
"""The range torch.optim records around every ``optimizer.step()`` (``Optimizer.step#AdamW.step``)."""

VECTORIZED_OPTIMIZER_OP = re.compile(r"_foreach_|_fused_|fused_adam|ApplyAdam|NpuFused|multi_tensor")
"""Ops of an optimizer step that update many parameters at once (foreach, fused): no per-parameter loop."""

GC_FRAME = re.compile(r"<built-in (?:function|method) collect\b|\bgc\.collect|gc_collect")
"""Python frames of the garbage collector (``gc.collect()``)."""

COMPILE_FRAME = re.compile(
    r"torch/_dynamo/(?:convert_frame|symbolic_convert|output_graph)\.py|torch/_inductor/(?:compile_fx|codecache|"
    r"async_compile|graph)\.py|triton/compiler/compiler\.py|torch/_functorch/aot_autograd\.py|aclopCompile|"
    r"\(dynamo_timed\)$|^(?:dynamo|entire_frame_compile)$"
)
"""Host frames and calls of (re)compilation: Dynamo tracing, AOTAutograd, Inductor and Triton codegen, CANN op
compiles, and the ranges Dynamo records around a compile without Python frames (``dynamo``,
``entire_frame_compile``, ``… (dynamo_timed)``); a compiled region's own range, ``Torch-Compiled Region``, is
running compiled code, not compiling."""

COMPILE_CALL = "Compile"
"""Substring of the CANN calls that compile ops at run time (AscendCL@aclopCompileAndExecute)."""

DATA_LOADING = re.compile(r"DataLoader|dataloader|_next_data|__next__")
"""Host ranges and Python frames of input loading (torch.utils.data's iterator)."""

# ---------------------------------------------------------------- copies

MEMCPY_KIND = re.compile(r"\b(HtoD|DtoH|DtoD|HtoH|PtoP|H2D|D2H|D2D)\b(?:\s*\(([^)]*)\))?")
"""A copy's direction and memory kinds from its name (``Memcpy HtoD (Pageable -> Device)``)."""

DTOH_COPY = re.compile(r"DtoH|D2H|Device -> (?:Pinned|Pageable)", re.IGNORECASE)
"""Device-to-host copy names: the host needs the result, so it waits for it."""

HTOD_COPY = re.compile(r"HtoD|H2D|(?:Pinned|Pageable) -> Device", re.IGNORECASE)
"""Host-to-device copy names: the input (or state) the device needs from the host."""

PAGEABLE_COPY = re.compile(r"Pageable", re.IGNORECASE)
"""Copies to or from pageable host memory, which are synchronous even when issued async."""

# ---------------------------------------------------------------- kernels and ops by what they compute

GEMM_KERNEL = re.compile(
    r"gemm|gemv|nvjet|cutlass|cublas|xmma|wgmma|hgemm|sgemm|matmul|Cijk_|_mma|splitKreduce|epilogue::impl",
    re.IGNORECASE,
)
"""Kernel names of matrix-multiply kernels (any precision, any vendor library)."""

ATTENTION_KERNEL = re.compile(r"flash|fmha|sdpa|attention|_attn|mha_|FlashAttentionScore", re.IGNORECASE)
"""Kernel names of fused attention (flash, memory-efficient, cuDNN SDPA, CANN FlashAttentionScore)."""

CONV_KERNEL = re.compile(r"conv|implicit_gemm|fprop|dgrad|wgrad|winograd", re.IGNORECASE)
"""Kernel names of convolutions (cuDNN, MIOpen, CANN Conv2D)."""

BACKWARD_KERNEL = re.compile(r"bwd|backward|bprop|dgrad|wgrad|dq_dk|dkdv|cutlassB|_grad\b|Grad", re.IGNORECASE)
"""Kernel and op names of backward passes (cuDNN dgrad/wgrad, flash-attention bwd, autograd *Grad/*Backward)."""

KERNEL_DTYPES = (
    ("fp8", re.compile(r"e4m3|e5m2|fp8|f8f8", re.I)),
    ("bf16", re.compile(r"bf16|bfloat16", re.I)),
    ("fp16", re.compile(r"f16|half|hgemm|h\d{3,5}gemm|_h\d{3,5}", re.I)),
    ("fp64", re.compile(r"dgemm|fp64|f64|d\d{3}gemm|double", re.I)),
    ("int8", re.compile(r"i8|imma|int8", re.I)),
    ("fp32", re.compile(r"sgemm|s\d{3,5}gemm|tf32|f32|fp32|float", re.I)),
)
"""Data type of a GEMM/convolution kernel from its name, checked in order (bf16 before f16, fp16 before fp32)."""

FP32_GEMM_KERNEL = re.compile(r"simt_sgemm|(?:^|_)sgemm|_ffma_|f32f32_f32f32_f32|Cijk_Ai?lk_Bl?jk_S_")
"""GEMM kernels that run fp32 math on the SIMT cores (no tensor cores): cuBLAS/CUTLASS sgemm, xmma ffma."""

TF32_KERNEL = re.compile(r"tf32|s1688|s16816|_xf32", re.IGNORECASE)
"""GEMM/convolution kernels that run fp32 inputs on TF32 tensor cores."""

TENSOR_CORE_KERNEL = re.compile(r"tf32|bf16|f16|h884|h1688|s1688|s16816|tensorop|nvjet|hmma|wgmma", re.IGNORECASE)
"""GEMM kernel names that show tensor-core math."""

FUSED_KERNEL = re.compile(
    r"^triton_|^fused_|_fused_|^Fused|npu_fusion|FlashAttentionScore|RmsNorm|AddLayerNorm|ApplyAdam|RotaryPosition|SwiGlu"
)
"""Kernels that already fuse several ops: Triton/Inductor (``triton_poi_fused_add_mul_0``), CANN fused ops."""

COMPILED_REGION = re.compile(r"^Torch-Compiled Region|^## Call CompiledFxGraph|CompiledFunction")
"""Host ranges of torch.compile'd code (Dynamo regions, Inductor graph calls, compiled autograd functions)."""

GEMM_OPS = {
    "aten::mm": "mm",
    "aten::addmm": "addmm",
    "aten::bmm": "bmm",
    "aten::baddbmm": "baddbmm",
}
"""CPU ops whose recorded input shapes give their FLOPs, and the shape rule for each."""

MATMUL_OPS = frozenset(GEMM_OPS) | {"aten::matmul", "aten::linear"}
"""CPU ops that run a matrix multiplication."""

MATMUL_OP = re.compile(
    r"^aten::(mm|addmm|bmm|baddbmm|addbmm|matmul|linear)$|::mm$|::addmm$|::bmm$|baddbmm|linear", re.I
)
"""Op names of matrix multiplications, for the category rules (aten ops and the autograd/CANN names that say so)."""

NORMALISATION = re.compile(r"norm|softmax", re.I)
"""Op and kernel names of normalisations (layer/batch/RMS norm, softmax)."""

# ---------------------------------------------------------------- inference

ENGINE_STEP = re.compile(
    r"^execute_(?P<tokens>\d+)_context_(?P<context>\d+)\(sq(?P<context_sq>\d+)sk(?P<context_sk>\d+)[^)]*\)"
    r"_generation_(?P<generation>\d+)\(sq(?P<generation_sq>\d+)sk(?P<generation_sk>\d+)[^)]*\)"
    r"|^step\[(?P<mode>EXTEND|PREFILL|DECODE|MIXED|IDLE)\s+bs=(?P<bs>\d+)(?:\s+toks=(?P<toks>\d+))?\]"
)
"""Serving engines' annotations of one forward: vLLM's ``execute_<tokens>_context_<n>(sq..sk..)_generation_<n>(..)``
(sequences in prefill and in decode, their query and key lengths) and SGLang's ``step[EXTEND bs=15 toks=15360]``."""

PHASE_MARKER = re.compile(
    r"(?<![A-Za-z])(?:(?P<prefill>prefill|prompt_phase|context_phase)|(?P<decode>decode|decoding|generation_phase))"
    r"(?![A-Za-z])",
    re.I,
)
"""User and engine ``record_function`` names that say a range is a prefill or a decode step (``prefill``,
``decode_step_3``, ``vllm: decode``; not ``Decoder``)."""

TOKEN_EMBEDDING = frozenset({"aten::embedding", "aten::embedding_renorm_"})
"""CPU ops that look tokens up in an embedding table: one per forward on the model's vocabulary (the largest table)."""

ATTENTION_OPS = frozenset(
    {
        "aten::scaled_dot_product_attention",
        "aten::_scaled_dot_product_flash_attention",
        "aten::_scaled_dot_product_efficient_attention",
        "aten::_scaled_dot_product_cudnn_attention",
        "aten::_scaled_dot_product_attention_math",
    }
)
"""CPU ops of scaled-dot-product attention; inputs query ``[B, H, Sq, D]``, key and value ``[B, Hkv, Skv, D]``."""

BATCHED_GEMM_OPS = frozenset({"aten::matmul", "aten::bmm", "aten::baddbmm"})
"""CPU ops of batched GEMMs: attention written out computes its scores Q·Kᵀ and their product with V with them."""
SOFTMAX_OPS = frozenset({"aten::softmax", "aten::_softmax", "aten::_safe_softmax"})
"""CPU ops of a softmax (over attention scores, between the two batched GEMMs of attention written out)."""

FORWARD_REPEAT = re.compile(
    r"^Torch-Compiled Region|^## Call CompiledFxGraph|^(cuda|hip)GraphLaunch|^CompiledFunction$"
)
"""Host events that stand for one whole forward when its ops are not all recorded (a compiled or graph-replayed
model); the matched prefix names the family (each compiled graph has its own hash)."""

# ---------------------------------------------------------------- dtypes

DTYPES: dict[str, tuple[str, int]] = {
    "float": ("fp32", 4),
    "float32": ("fp32", 4),
    "double": ("fp64", 8),
    "float64": ("fp64", 8),
    "c10::half": ("fp16", 2),
    "half": ("fp16", 2),
    "float16": ("fp16", 2),
    "c10::bfloat16": ("bf16", 2),
    "bfloat16": ("bf16", 2),
    "bf16": ("bf16", 2),
    "c10::float8_e4m3fn": ("fp8", 1),
    "c10::float8_e5m2": ("fp8", 1),
    "c10::float8_e4m3fnuz": ("fp8", 1),
    "float8_e4m3fn": ("fp8", 1),
    "float8_e5m2": ("fp8", 1),
    "c10::float8_e5m2fnuz": ("fp8", 1),
    "long int": ("int64", 8),
    "long": ("int64", 8),
    "int64": ("int64", 8),
    "int": ("int32", 4),
    "int32": ("int32", 4),
    "short int": ("int16", 2),
    "short": ("int16", 2),
    "int16": ("int16", 2),
    "bool": ("bool", 1),
    "unsigned char": ("uint8", 1),
    "byte": ("uint8", 1),
    "char": ("int8", 1),
    "uint8": ("uint8", 1),
    "signed char": ("int8", 1),
    "int8": ("int8", 1),
    "c10::complex<float>": ("complex64", 8),
}
"""Recorded input type (Kineto ``Input type``, CANN ``Input Data Types``; lower-case) → (dtype key, element bytes)."""

REDUCED_DTYPES = frozenset({"fp16", "bf16", "fp8", "int8"})
"""Dtype keys of reduced-precision math."""


def dtype_key(recorded: str) -> str:
    """The dtype key (fp32, bf16, …) of a recorded type name; the name itself when it is not in the table."""
    return DTYPES.get(recorded.strip().lower(), (recorded, 0))[0]


def dtype_bytes(recorded: str) -> int:
    """Element size of a recorded type name; 0 when unknown."""
    return DTYPES.get(recorded.strip().lower(), ("", 0))[1]


# ---------------------------------------------------------------- where code lives

MODULE_PREFIX = "nn.Module: "
"""How torch.profiler names a Python frame that is an nn.Module call (with_modules / with_stack)."""

LIBRARY_FRAME = re.compile(
    r"^<built-in|^nn\.Module: |(^|/)(torch|torch_npu|transformers|accelerate|deepspeed|megatron|triton|site-packages|"
    r"dist-packages|threading|contextlib|runpy|multiprocessing)[/.]|^<frozen|^<string>|^\.\.\./"
)
"""Python frames that belong to libraries or the interpreter, not to the user's code."""


def matches(texts: np.ndarray, pattern: re.Pattern) -> np.ndarray:
    """Per text: does the pattern occur in it? Evaluated once per distinct text."""
    codes, distinct = pd.factorize(np.asarray(texts, dtype=object).ravel(), use_na_sentinel=False)  # hashes, no sort
    hit = np.fromiter((bool(pattern.search(str(t))) for t in distinct), bool, len(distinct))
    return hit[codes]
