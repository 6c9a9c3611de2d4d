"""Every colour a chart or the timeline gives a meaning, defined once: no two meanings share a colour (each pair
at least MIN_DISTANCE apart in RGB, tests/test_palette.py)."""

from __future__ import annotations

CATEGORY = {
    "compute": "#1f77b4",
    "communication": "#d62728",
    "memory copy/set": "#2ca02c",
    "sync/wait": "#ff7f0e",
    "cpu op": "#9467bd",
    "python": "#8c564b",
    "annotation/step": "#7f7f7f",
    "runtime call": "#e377c2",
    "other": "#bcbd22",
}
"""Colour of each timeline category (communication red, compute blue)."""

KIND = {"memset": "#98df8a"}
"""Kinds that share their timeline category with another kind: a shade of their own (memcpy keeps the green)."""

MARK = {
    "idle gap": "#17becf",
    "host sync": "#e7298a",
    "exposed collective": "#393b79",
    "fusion chain": "#a6cee3",
    "memory peak": "#000000",
}
"""Colour of each analyzer mark drawn over the timeline's lanes."""

MARK_NAMES = {
    "idle gap": "cyan",
    "host sync": "magenta",
    "exposed collective": "indigo",
    "fusion chain": "light blue",
    "memory peak": "black dotted line",
}
"""How the timeline's caption names each mark's colour."""

MEMORY = {"allocated": "#006d2c", "reserved": "#fdae6b"}
"""Colour of the timeline's memory track lines (the peak takes its mark's colour)."""

SELECTED = "#ffd400"
"""The outline of the selected name's bars on the timeline."""

MIN_DISTANCE = 60.0
"""The least RGB distance between the colours of two meanings drawn together."""


def meanings() -> dict[str, str]:
    """Every meaning drawn on the timeline and the hotspot bars, with its colour."""
    marks = {f"mark: {k}": v for k, v in MARK.items()}
    memory = {f"memory: {k}": v for k, v in MEMORY.items()}
    return {**CATEGORY, **KIND, **marks, **memory, "selected": SELECTED}


def distance(a: str, b: str) -> float:
    """Euclidean distance of two #rrggbb colours in RGB."""
    return sum((int(a[i : i + 2], 16) - int(b[i : i + 2], 16)) ** 2 for i in (1, 3, 5)) ** 0.5
