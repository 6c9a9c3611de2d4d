"""Human-readable numbers: durations, sizes and shares, for titles and presenters."""

from __future__ import annotations

from numbers import Number

NS_PER_MS = 1_000_000
"""Nanoseconds (the event table's unit) per millisecond (the unit figures draw time in)."""


def duration(ns: float | None) -> str:
    """Nanoseconds as a short human duration."""
    if ns is None:
        return "–"
    ns = float(ns)
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("µs", 1e3)):
        if abs(ns) >= scale:
            return f"{ns / scale:,.2f} {unit}"
    return f"{ns:,.0f} ns"


def size(n: float | None) -> str:
    """Bytes as a short human size (binary units)."""
    if n is None:
        return "–"
    n = float(n)
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(n) >= scale:
            return f"{n / scale:,.2f} {unit}"
    return f"{n:,.0f} B"


def share(x: float | None) -> str:
    """A fraction as a percentage."""
    return "–" if x is None else f"{100 * float(x):.1f}%"


def value(key: str, v: object) -> str:
    """Format a value by its key: ``*_ns`` durations, ``*share`` percentages, ``*bytes`` sizes."""
    if isinstance(v, bool) or v is None or not isinstance(v, Number):
        return "–" if v is None else str(v)
    if key.endswith("_ns") or key.endswith("_ns_per_step") or key.endswith("_ns_mean"):
        return duration(v)
    if key.endswith("share") or key.endswith("_pct"):
        return share(v)
    if key.endswith("bytes") or key.endswith("_B"):
        return size(v)
    if isinstance(v, float) and not v.is_integer():
        return f"{v:,.2f}"
    if isinstance(v, float):
        v = int(v)
    return f"{v:,}"


def label(key: str) -> str:
    """A column key as a header."""
    for suffix in ("_ns_per_step", "_ns_mean", "_ns", "_bytes"):
        if key.endswith(suffix):
            key = key[: -len(suffix)] + ("/step" if suffix == "_ns_per_step" else "")
            break
    return key.replace("_", " ")
