"""Kernel names matched across two runs by the first rule that applies, so a library or GPU upgrade that renames a
kernel does not turn it into one kernel gone and another new.

1. ``exact``: the same name in both runs.
2. ``normalised``: the same name once what upgrades change is folded (``normalise``): GEMM, convolution and attention
   kernels of any library (cuBLAS, cuBLASLt/nvjet, CUTLASS, cuDNN, flash/FMHA, rocBLAS/hipBLASLt) become their family
   and data type (``GEMM fp32``, ``attention bwd``); other kernels lose numeric template arguments, tile sizes
   (``128x128``, ``64x4``) and architecture tags (``sm90``, ``ampere_``, ``cutlass_80``, ``Policy800``).
3. ``op``: the same launching op (the CPU op that launched most of the kernel's time).

Names still unmatched are new (candidate only) or gone (baseline only): rule ``none``. Several names of one run
can share a match (all GEMMs of a data type, all kernels of one op); their times add up.
"""

from __future__ import annotations

import re
from enum import Enum

import pandas as pd

from traceanalyzer.vocabulary import ATTENTION_KERNEL, BACKWARD_KERNEL, CONV_KERNEL, GEMM_KERNEL, KERNEL_DTYPES


class Rule(str, Enum):
    """Which rule matched a name across the two runs."""

    EXACT = "exact"
    NORMALISED = "normalised"
    OP = "op"
    NONE = "none"  # unmatched: new or gone


_PARAMETERS = re.compile(r"\((?!anonymous namespace\))[^()]*(?:\([^()]*\)[^()]*)*\)\s*$")
_NUMERIC_ARG = re.compile(r"(?<=[<,])(\s*)-?\d+[uUlL]*(?=\s*[,>])")
_TILE = re.compile(r"_?\b\d+(?:x\d+)+\b|(?<=_)\d+(?:x\d+)+")
_ARCH = re.compile(
    r"\b(?:maxwell|pascal|volta|turing|ampere|ada|hopper|blackwell)_|_?\bsm_?\d+[a-z]?\b|(?<=_)sm_?\d+[a-z]?"
    r"|(?<=cutlass)_\d+|(?<=Policy)\d+|_?(?:align|stages?|tilesize|warpsize)\d+",
    re.I,
)


_QUALIFIERS = re.compile(r"\(anonymous namespace\)::|\bat::native::|\bat::|\bc10::|\bstd::")


def label(name: str) -> str:
    """A kernel name shortened for display: a C++ signature without ``void``, its parameter list and at::native:: /
    c10:: / std:: qualifiers (its distinctive part, the functor, often sits deep in the template arguments)."""
    if not (name.startswith("void ") or "<" in name):
        return name  # not a C++ signature: Memcpy HtoD (Pinned -> Device), ncclKernel_...(ncclWorkElem)
    return _QUALIFIERS.sub("", _PARAMETERS.sub("", name.removeprefix("void ").strip()))


def normalise(name: str) -> str:
    """The name a kernel keeps across library, version and architecture changes (see the module docstring)."""
    family = _family(name)
    if family:
        return family
    plain = _PARAMETERS.sub("", name.removeprefix("void ").strip())
    plain = _NUMERIC_ARG.sub(r"\1#", plain)
    plain = _ARCH.sub("", plain)
    return re.sub(r"_{2,}", "_", _TILE.sub("", plain)).strip("_ ")


def _family(name: str) -> str:
    """``attention fwd``, ``convolution bwd (bf16)``, ``GEMM (fp32)``..., or '' for any other kernel."""
    direction = "bwd" if BACKWARD_KERNEL.search(name) else "fwd"
    if ATTENTION_KERNEL.search(name):
        return f"attention {direction}"
    for family, pattern in (("convolution " + direction, CONV_KERNEL), ("GEMM", GEMM_KERNEL)):
        if pattern.search(name):
            dtype = next((d for d, p in KERNEL_DTYPES if p.search(name)), "")
            return f"{family} ({dtype})" if dtype else family
    return ""


def match(baseline: pd.Series, candidate: pd.Series) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Match two runs' names (each Series: name → its launching op name, '' if none) by the rules in order. Returns
    per run a table indexed by name with ``key`` (the entry it belongs to, shared by both runs) and ``rule``; an
    entry is identified by its key and rule together."""
    sides = [
        pd.DataFrame({"key": pd.Series(s.index, index=s.index, dtype=object), "rule": Rule.NONE.value})
        for s in (baseline, candidate)
    ]
    exact = baseline.index.intersection(candidate.index)
    for side in sides:
        side.loc[exact, "rule"] = Rule.EXACT.value
    for rule in (Rule.NORMALISED, Rule.OP):
        keys = [
            _keys(rule, ops[side["rule"] == Rule.NONE.value])
            for side, ops in zip(sides, (baseline, candidate), strict=True)
        ]
        shared = set(keys[0]) & set(keys[1]) - {""}
        for side, key in zip(sides, keys, strict=True):
            picked = key[key.isin(shared)]
            side.loc[picked.index, "key"] = picked.to_numpy()
            side.loc[picked.index, "rule"] = rule.value
    return sides[0], sides[1]


def _keys(rule: Rule, ops: pd.Series) -> pd.Series:
    """What rule matches on, per name ('' where it has nothing to match on)."""
    if rule is Rule.NORMALISED:
        return pd.Series([normalise(str(n)) for n in ops.index], index=ops.index, dtype=object)
    return ops.fillna("").map(lambda op: f"kernels of {op}" if op else "").astype(object)
