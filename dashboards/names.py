"""Long trace names (templated kernels, Python frames) shortened in the middle for labels, kept distinct."""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Sequence

ELLIPSIS = "…"
LABEL_CHARS = 48
"""Longest label of a hotspot name; the full name shows on hover."""
CONTEXT = 10
"""Characters kept either side of where two names that look alike first differ."""


def middle(name: str, limit: int = LABEL_CHARS) -> str:
    """name with its middle cut to fit limit characters (the start and the end of a name tell kernels apart)."""
    if len(name) <= limit:
        return name
    head = (limit - 1) * 3 // 5
    return f"{name[:head]}{ELLIPSIS}{name[len(name) - (limit - 1 - head) :]}"


def shortened(names: Sequence[str], limit: int = LABEL_CHARS) -> list[str]:
    """Each name cut in the middle; names whose cuts look alike also show where they differ (else in full)."""
    out = [middle(n, limit) for n in names]
    groups: dict[str, set[str]] = defaultdict(set)
    for name, short in zip(names, out, strict=True):
        groups[short].add(name)
    for i, name in enumerate(names):
        alike = groups[out[i]] - {name}
        if alike:
            out[i] = _with_difference(name, alike, limit)
    return out if len(set(out)) == len(set(names)) else list(names)


def _with_difference(name: str, alike: set[str], limit: int) -> str:
    """name cut in the middle around the first place where it differs from the names it looks like."""
    at = max(len(os.path.commonprefix([name, other])) for other in alike)
    head, tail = limit // 3, limit // 4
    if at <= head + CONTEXT or at >= len(name) - tail - CONTEXT:
        return name
    return f"{name[:head]}{ELLIPSIS}{name[at - CONTEXT : at + CONTEXT]}{ELLIPSIS}{name[-tail:]}"
