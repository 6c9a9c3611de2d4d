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
    """Each name cut in the middle; names whose cuts look alike also show each place where they differ from the
    others (so the cuts stay distinct), and the few that still collide are shown in full."""
    out = [middle(n, limit) for n in names]
    for _ in range(2):  # a name's windows can make it collide anew with another's: once more settles it
        groups: dict[str, set[str]] = defaultdict(set)
        for name, short in zip(names, out, strict=True):
            groups[short].add(name)
        out = [
            _with_differences(n, groups[s] - {n}, limit) if len(groups[s]) > 1 else s
            for n, s in zip(names, out, strict=True)
        ]
    groups = defaultdict(set)
    for name, short in zip(names, out, strict=True):
        groups[short].add(name)
    return [n if len(groups[s]) > 1 else s for n, s in zip(names, out, strict=True)]


def _with_differences(name: str, alike: set[str], limit: int) -> str:
    """name cut to its start, a window around each place where it first differs from one of the names it looks
    like, and its end."""
    head, tail = limit // 3, limit // 4
    places = sorted({len(os.path.commonprefix([name, other])) for other in alike})
    kept = [(0, head), *[(max(p - CONTEXT, 0), p + CONTEXT) for p in places], (max(len(name) - tail, 0), len(name))]
    merged: list[list[int]] = []
    for lo, hi in kept:
        if merged and lo <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], hi)
        else:
            merged.append([lo, hi])
    return ELLIPSIS.join(name[lo:hi] for lo, hi in merged)
