"""The fusion patterns: one name-normalisation table for both platforms (op name → token), and the library.

Op names (``aten::masked_fill_``, autograd nodes ``MaskedFillBackward0``, CANN op types ``MaskedFill``,
``SoftmaxV2``, ``BatchMatMulV2``) become one canonical token each, so every pattern is written once and
matches PyTorch/Kineto and Ascend traces alike. A pattern is a sequence of elements over the op stream;
its backward counterpart (autograd nodes run in reverse order) is derived from it. The affinity-API rules
follow msprof-analyze's ``timeline_fusion_ops.yaml`` (anchors-ascend.md §12).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

ALIASES: dict[str, str] = {
    "matmul": "mm addmm bmm baddbmm addbmm matmul linear gemm matmulv2 matmulv3 batchmatmul batchmatmulv2 "
    "batchmatmulv3 quantbatchmatmul weightquantbatchmatmul grouped_mm scaled_mm",
    "fused_attention": "scaled_dot_product_attention scaled_dot_product_flash_attention "
    "scaled_dot_product_efficient_attention scaled_dot_product_cudnn_attention cudnn_attention_forward "
    "flash_attention_forward efficient_attention_forward flash_attn flashattentionscore flashattentionscoregrad "
    "npu_fusion_attention fused_attention",
    "add": "add addv2 adds sub subs rsub axpy",
    "bias_add": "biasadd",  # an aten add of a 1-D bias is re-tokenized as bias_add from its recorded shapes
    "mul": "mul muls",
    "div": "div divs realdiv true_divide",
    "masked_fill": "masked_fill maskedfill where select_v2 selectv2",
    "softmax": "softmax softmaxv2 safe_softmax softmax_backward_data",
    "dropout": "dropout native_dropout dropoutdomask dropoutgenmask dropoutgenmaskv3 dropoutv3",
    "relu": "relu clamp_min threshold threshold_backward",
    "gelu": "gelu fastgelu fast_gelu fastgeluv2 gelu_backward",
    "silu": "silu swish silu_backward",
    "sigmoid": "sigmoid",
    "tanh": "tanh",
    "layer_norm": "layer_norm native_layer_norm layernorm layernormv3 layernormv4",
    "rms_norm": "rms_norm rmsnorm fused_rms_norm npu_rms_norm addrmsnorm",
    "group_norm": "group_norm native_group_norm groupnorm",
    "pow": "pow square",
    "mean": "mean reducemean reducemeand",
    "sum": "sum reducesum reducesumd",
    "rsqrt": "rsqrt",
    "neg": "neg",
    "cat": "cat concat concatd concatv2 pack",
    "slice": "slice chunk split split_with_sizes narrow stridedslice stridedsliced splitv splitd",
    "transpose": "transpose permute t transposed confusiontransposed",
    "trans_data": "transdata transdataspecial npu_format_cast format_cast",
    "conv": "conv1d conv2d conv3d convolution _convolution conv_transpose2d cudnn_convolution npu_convolution",
    "batch_norm": "batch_norm native_batch_norm cudnn_batch_norm batchnorm bninfer bntrainingreduce bntrainingupdate",
    "contiguous": "contiguous clone copy tensormove identity",
    "view": "view reshape unsafe_view reshape_alias flatten unflatten expand unsqueeze squeeze select as_strided alias "
    "detach lift_fresh empty empty_like empty_strided",
    "cast": "to to_copy type_as cast float half bfloat16",
}
"""Canonical token → the op names (aten, autograd node, CANN op type) that mean it, space-separated."""

CANONICAL: dict[str, str] = {alias: token for token, names in ALIASES.items() for alias in names.split()}
"""Lower-case op name (``aten::``/``_``/``Backward0`` stripped, CamelCase made snake_case) → canonical token."""

GEMM_TOKENS = frozenset({"matmul", "fused_attention", "conv"})
"""Compute-bound tokens: a fusion keeps their work, so their time is not counted as saving."""

ACTIVATIONS = ("relu", "gelu", "silu", "sigmoid", "tanh")
"""Elementwise activations a GEMM epilogue or a norm kernel can absorb."""

LABELS: dict[str, str] = {
    "matmul": "MatMul",
    "add": "Add",
    "bias_add": "BiasAdd",
    "mul": "Mul",
    "div": "Div",
    "masked_fill": "MaskedFill",
    "softmax": "Softmax",
    "dropout": "Dropout",
    "relu": "ReLU",
    "gelu": "GELU",
    "silu": "SiLU",
    "sigmoid": "Sigmoid",
    "tanh": "Tanh",
    "layer_norm": "LayerNorm",
    "rms_norm": "RMSNorm",
    "group_norm": "GroupNorm",
    "batch_norm": "BatchNorm",
    "conv": "Conv",
    "pow": "Pow",
    "mean": "Mean",
    "rsqrt": "Rsqrt",
    "neg": "Neg",
    "cat": "Cat",
    "slice": "Slice",
    "transpose": "Transpose",
    "contiguous": "Contiguous",
    "cast": "Cast",
}
"""Display label of each token, for a pattern variant's name (e.g. ``MatMul+BiasAdd+ReLU``)."""

BIAS_ADD = "bias_add"
"""Token of an add whose second input is a bias vector (the add a GEMM epilogue absorbs)."""

BACKWARD_SUFFIX = "_bwd"
"""Suffix of the token of an autograd node (``SoftmaxBackward0`` → ``softmax_bwd``)."""

FORMAT_TOKEN = "trans_data"
"""Token of an Ascend format conversion (TransData: ND/NCHW ↔ the NPU's private NC1HWC0/FRACTAL formats)."""

LAYOUT_TOKENS = frozenset({"view", "transpose", "contiguous"})
"""Tokens of layout ops; one that launched work is named after the op doing that work (a copy, or an add)."""

KERNELLESS_SUFFIX = "~"
"""Suffix of the token of an op that launched no device work (views, no-op casts); gaps may skip these."""

MAX_CHAIN_GAP_NS = 5_000_000
"""Longest host gap (ns) between two consecutive ops with device work of one occurrence: from the end of one to the
start of the next on their thread (or stream, for device tasks). Ops fuse into one kernel only when they run back to
back in one region of the program; an occurrence also never crosses a step or a phase (forward, backward,
after_backward, optimizer: ``collective_calls.phases``). Measured between consecutive kernel-launching ops of a lane
on h200/big, gpt_train and ddp_no_overlap, the gaps fall in two groups with none from 5 to 10 ms: up to 3.5 ms is
Python between the ops of one region (AdamW's foreach list building, the loss), 30 ms and more is a thread waiting
for something else (the main thread for the autograd thread's backward, a rank's sleep, communication, the next
step)."""


@dataclass(frozen=True)
class Element:
    """One position of a pattern: any of ``tokens``, repeated ``least``..``most`` times."""

    tokens: tuple[str, ...]
    least: int = 1
    most: int = 1
    kernelless: bool = False  # True: the op may have launched nothing (a view such as slice or transpose)


@dataclass(frozen=True)
class Pattern:
    """A fusion pattern of the library: forward element sequences (alternatives) and what replaces them."""

    key: str
    family: str
    alternatives: tuple[tuple[Element, ...], ...]
    replacement: dict[str, str]
    backward: bool = False  # also match the autograd nodes of the same chain, in reverse order
    named: str = ""  # a fixed variant name; '' names the variant after the matched ops
    backward_alternatives: tuple[tuple[Element, ...], ...] = ()
    removable: bool = False  # True: the fix removes the work (no fused kernel replaces it)


def _e(tokens: str, least: int = 1, most: int = 1, kernelless: bool = False) -> Element:
    return Element(tuple(tokens.split()), least, most, kernelless)


_ACT = " ".join(ACTIVATIONS)

PATTERNS: tuple[Pattern, ...] = (
    Pattern(
        key="attention",
        family="Unfused attention",
        alternatives=(
            (
                _e("matmul"),
                _e("add bias_add", 0),
                _e("mul div", 0),
                _e("masked_fill add", 0),
                _e("softmax"),
                _e("dropout", 0),
                _e("matmul"),
            ),
        ),
        replacement={
            "cuda": "F.scaled_dot_product_attention(q, k, v, attn_mask=..., is_causal=...) (flash/cuDNN kernels: the "
            "score matrix never reaches HBM, forward and backward)",
            "ascend": "torch_npu.npu_fusion_attention (FlashAttentionScore), forward and backward",
        },
        backward=True,
    ),
    Pattern(
        key="rms_norm",
        family="RMSNorm",
        alternatives=(
            (
                _e("add", 0),
                _e("cast", 0, 1, kernelless=True),
                _e("pow", 0),
                _e("mean", 0),
                _e("add", 0),
                _e("rsqrt"),
                _e("mul"),
                _e("cast", 0, 1, kernelless=True),
                _e("mul", 0),
            ),
        ),
        replacement={
            "cuda": "a fused RMSNorm kernel: torch.nn.RMSNorm / F.rms_norm under torch.compile, or apex/TE "
            "FusedRMSNorm (with the residual add fused in)",
            "ascend": "torch_npu.npu_rms_norm (npu_add_rms_norm with the residual add)",
        },
        backward=True,
        named="",
    ),
    Pattern(
        key="add_norm",
        family="Residual add + norm",
        alternatives=(
            (_e("add"), _e("layer_norm group_norm rms_norm"), _e(_ACT, 0)),
            (_e("layer_norm group_norm rms_norm"), _e(_ACT)),
        ),
        replacement={
            "cuda": "one kernel for add + norm (+ activation): torch.compile, or Apex/Transformer Engine fused "
            "add-LayerNorm",
            "ascend": "torch_npu.npu_add_layer_norm (npu_group_norm_silu for GroupNorm+SiLU)",
        },
    ),
    Pattern(
        key="rotary",
        family="Rotary embedding",
        alternatives=(
            (
                _e("mul", 0),
                _e("slice", 1, 2, kernelless=True),
                _e("neg"),
                _e("cat"),
                _e("mul", 0, 2),
                _e("add"),
            ),
        ),
        replacement={
            "cuda": "a fused rotary kernel (flash_attn.layers.rotary / Transformer Engine / Liger apply_rotary) or "
            "torch.compile",
            "ascend": "torch_npu.npu_rotary_mul",
        },
        backward=True,
        named="RoPE (slice/neg/cat/mul/add)",
    ),
    Pattern(
        key="glu",
        family="Gated MLP",
        alternatives=(
            (_e("slice", 0, 1, kernelless=True), _e("silu gelu sigmoid"), _e("matmul", 0), _e("mul", 1, 2)),
            (_e("slice", 0, 1, kernelless=True), _e("mul"), _e("silu gelu")),
        ),
        replacement={
            "cuda": "fused SwiGLU/GeGLU: torch.compile, or Liger/Transformer Engine swiglu (act(gate) * up in one "
            "kernel, also in backward)",
            "ascend": "torch_npu.npu_swiglu (SwiGLU) / torch_npu.npu_geglu (GeGLU) on the concatenated gate/up output",
        },
        backward=True,
    ),
    Pattern(
        key="gemm_epilogue",
        family="GEMM epilogue",
        alternatives=((_e("matmul"), _e("bias_add", 0), _e(_ACT)), (_e("matmul"), _e("bias_add"))),
        replacement={
            "cuda": "nn.Linear / F.linear with bias (aten::addmm: the bias add runs in the cuBLAS epilogue); the "
            "activation after it: torch.compile or cublasLt epilogue (ReLU/GELU)",
            "ascend": "nn.Linear with bias (MatMul with bias input), mindspeed npu_matmul_add; activation fused by "
            "graph mode (ATbeMatMulElemwiseFusionPass)",
        },
    ),
    Pattern(
        key="conv_act",
        family="Conv + BN + activation",
        alternatives=(
            (_e("conv"), _e("batch_norm", 0), _e("add", 0), _e(_ACT)),
            (_e("conv"), _e("batch_norm")),
        ),
        replacement={
            "cuda": "torch.compile (Inductor folds BatchNorm/add/activation into the conv epilogue); for inference "
            "fold BN into the conv weights (torch.ao.quantization.fuse_modules)",
            "ascend": "graph mode (torch.compile with the torchair backend: ConvBatchnormFusionPass, TbeConvAddFusion "
            "fuse BN, add and ReLU into Conv2D); for inference fold BN into the conv weights",
        },
    ),
    Pattern(
        key="format",
        family="NPU format conversion",
        alternatives=((_e("trans_data", 1, 8),),),
        replacement={
            "cuda": "keep tensors in the layout the kernel wants (channels_last for convolutions)",
            "ascend": "convert once and keep the NPU format: torch_npu.npu_format_cast(weight, format) at model "
            "setup (conv weights FRACTAL_Z, GEMM weights FRACTAL_NZ) with "
            "torch.npu.config.allow_internal_format = True",
        },
        named="TransData (layout conversion around the op)",
        removable=True,
    ),
    Pattern(
        key="layout",
        family="Layout copy",
        alternatives=(
            (_e("transpose", kernelless=True), _e("contiguous")),
            (_e("transpose"),),
        ),
        backward_alternatives=((_e("view contiguous transpose"),),),
        replacement={
            "cuda": "keep the layout the consumer wants (SDPA takes (B,H,S,D) views without .contiguous(); "
            "einsum/permute into the GEMM), or torch.compile",
            "ascend": "torch_npu.npu_confusion_transpose (transpose + reshape in one op)",
        },
        named="Transpose/permute → contiguous copy",
    ),
    Pattern(
        key="cast",
        family="Cast chain",
        alternatives=((_e("cast", 2, 4),),),
        replacement={
            "cuda": "cast once (keep one dtype through the chain, or let autocast / torch.compile fuse the casts)",
            "ascend": "cast once; graph mode fuses Cast with its neighbours (TbeEltwiseCastFusionPass)",
        },
        named="Cast → cast",
    ),
)
"""The library, in matching priority: a unit belongs to the first pattern that claims it."""

OPTIMIZER_STEP = re.compile(r"^Optimizer\.step#(\w+)\.step$")
"""torch.optim's record_function around each ``optimizer.step()``."""

FUSED_OPTIMIZER_OP = re.compile(r"_fused_|npufused|apply_?adam|applyadamw", re.IGNORECASE)
"""Ops of an optimizer that is already fused (one kernel pass per parameter group)."""

OPTIMIZER_REPLACEMENT: dict[str, str] = {
    "cuda": "torch.optim.{name}(..., fused=True) (one kernel pass over all parameters; foreach=True at least)",
    "ascend": "torch_npu.optim.NpuFused{name}",
}
"""Replacement of an unfused optimizer step, per platform."""

DISCOVERY_REPLACEMENT: dict[str, str] = {
    "cuda": "torch.compile on the module (Inductor fuses chains of elementwise/reduction ops into one Triton kernel)",
    "ascend": "torch.compile with the torchair backend / graph mode (TbeEltwiseFusionPass), or a fused torch_npu op",
    "compiled": "these ops run outside the compiled region: move them into the torch.compile'd function (the loss, "
    "norms or optimizer step), or compile that code too, so Inductor fuses them",
}
"""Replacement for a discovered repeated chain of memory-bound kernels."""

_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_ASCEND_QUEUE = re.compile(r"^(?:Dequeue|Enqueue)@")
_ACLNN = re.compile(r"^aclnn(?:Inplace)?([A-Za-z0-9]+?)\d*(?:_.*)?$")
_TRANS = re.compile(r"^trans_([A-Za-z]+)_\d+$")
_AUTOGRAD = re.compile(r"^autograd::engine::evaluate_function:\s*(?:torch::autograd::)?")
_BACKWARD = re.compile(r"^(\w+?)(?:Backward\d*|(?<!Accumulate)Grad(?:V\d+)?)$")
_PREFIX = re.compile(r"^(?:aten|c10d|npu|torch_npu|prims|triton|at)::")


WRAPPER_OP = re.compile(r"^\w+(?:\.\w+)+(?:[#:]|$)")
"""Dotted record_function labels (``DistributedDataParallel.forward``, ``Optimizer.step#SGD.step``,
``torch.distributed.ddp.reducer::copy_bucket_to_grad``): torch_npu writes them as CPU ops; they are not ops."""


def display_name(name: str) -> str:
    """The name a user knows an op or kernel by: aten op, autograd node, or CANN op type (``aclnnAdd_AddAiCore_Add``
    → Add, ``trans_TransData_3`` → TransData)."""
    return _PREFIX.sub("", _ascend_op(_AUTOGRAD.sub("", name.strip())))


def canonical(name: str) -> str:
    """The canonical token of an op or kernel name (backward nodes get ``_bwd``); unknown names lower-cased."""
    name = _ascend_op(_AUTOGRAD.sub("", name.strip()))
    backward = _BACKWARD.match(name)
    if backward:
        return _canonical_op(_CAMEL.sub("_", backward.group(1)).lower()) + BACKWARD_SUFFIX
    return _canonical_op(name)


def _ascend_op(name: str) -> str:
    """The CANN op type in torch_npu task names: ``Dequeue@aclnnInplaceMuls`` / ``aclnnMuls_MulAiCore_Mul`` → Muls."""
    name = _ASCEND_QUEUE.sub("", name)
    m = _ACLNN.match(name) or _TRANS.match(name)
    return m.group(1) if m else name


def _canonical_op(name: str) -> str:
    base = _PREFIX.sub("", name.strip()).strip("_").lower()
    if base.startswith("foreach_"):
        return "foreach"
    plain = base.replace("_", "")
    known = CANONICAL.get(base) or CANONICAL.get(plain) or CANONICAL.get(plain.rstrip("0123456789"))
    return known or re.sub(r"[^a-z0-9_]", "", base)[:40] or "op"
