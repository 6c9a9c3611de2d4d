"""Human-readable numbers: durations, sizes and shares, for titles and presenters."""

from __future__ import annotations

import re
from numbers import Number

NS_PER_MS = 1_000_000
"""Nanoseconds (the event table's unit) per millisecond (the unit figures draw time in)."""


def duration(ns: float | None, digits: int = 2) -> str:
    """Nanoseconds as a short human duration in the largest unit it reaches (s, ms, µs, ns), ``digits`` decimals
    (0 for thresholds: ``duration(LARGE_GAP_NS, 0)`` is ``100 µs``)."""
    if ns is None:
        return "–"
    ns = float(ns)
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("µs", 1e3)):
        if abs(ns) >= scale:
            return f"{ns / scale:,.{digits}f} {unit}"
    return f"{ns:,.0f} ns"


_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff]")
_CONTROL_OR_BREAK = re.compile(r"[\x00-\x1f\x7f-\x9f\ud800-\udfff]")


def printable(text: str, one_line: bool = False) -> str:
    """Text safe to show on a terminal: control characters (ANSI escapes, and with ``one_line`` line breaks) and
    undecodable bytes of a file name shown as escapes (``\\x1b``, ``\\n``, ``\\udcff``) instead of acting."""
    pattern = _CONTROL_OR_BREAK if one_line else _CONTROL
    return pattern.sub(lambda m: m.group().encode("unicode_escape", "backslashreplace").decode("ascii"), text)


def ranges(runs: list[tuple[int, int]], shown: int = 20) -> str:
    """Runs of whole numbers (first, last) as text (``0, 2–7, 9``): the first ``shown``, then how many in all."""
    parts = [str(a) if a == b else f"{a}–{b}" for a, b in runs[:shown]]
    if len(runs) > shown:
        parts.append(f"… ({sum(b - a + 1 for a, b in runs):,} in all)")
    return ", ".join(parts)


def missing_runs(upto: int, present: list[int]) -> list[tuple[int, int]]:
    """The runs (first, last) of [0, ``upto``) missing from ``present``; never sized by ``upto``."""
    out, start = [], 0
    for n in sorted({n for n in present if 0 <= n < upto}) + [upto]:
        if n > start:
            out.append((start, n - 1))
        start = n + 1
    return out


def size(n: float | None, digits: int = 2) -> str:
    """Bytes as a short human size in binary units (GiB, MiB, KiB, B), ``digits`` decimals (0 for thresholds)."""
    if n is None:
        return "–"
    n = float(n)
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(n) >= scale:
            return f"{n / scale:,.{digits}f} {unit}"
    return f"{n:,.0f} B"


def bandwidth(bytes_per_s: float | None, digits: int = 0) -> str:
    """Bytes per second as GB/s, or TB/s from 1 TB/s on (decimal, as link and memory bandwidths are quoted)."""
    if bytes_per_s is None:
        return "–"
    unit, scale = ("TB/s", 1e12) if abs(float(bytes_per_s)) >= 1e12 else ("GB/s", 1e9)
    return f"{float(bytes_per_s) / scale:,.{digits}f} {unit}"


def tflops(tflops_per_s: float, digits: int = 0) -> str:
    """A throughput in TFLOP/s (as device peaks are quoted), ``digits`` decimals."""
    return f"{float(tflops_per_s):,.{digits}f} TFLOP/s"


def amount_of(done: int, total: int, unit: str) -> str:
    """How far a count has come, for a progress line: bytes in decimal MB (``12 of 340 MB``), else ``3 of 8 ranks``."""
    if unit == "B":
        return f"{done / 1e6:,.0f} of {total / 1e6:,.0f} MB"
    return f"{done:,} of {total:,} {unit}"


def byte_count(n: int) -> str:
    """A byte count exactly, with thousands separators (``3,404,640,768 B``): where every byte matters."""
    return f"{int(n):,} B"


def seconds(s: float, digits: int = 1) -> str:
    """Wall-clock seconds (what a progress line or a time limit says), ``digits`` decimals."""
    return f"{float(s):,.{digits}f} s"


def axis_ms(ns: float, digits: int = 4) -> str:
    """Nanoseconds as a position on a figure's ms axis: always ms (the axis' unit), ``digits`` decimals."""
    return f"{float(ns) / NS_PER_MS:,.{digits}f} ms"


def share(x: float | None, digits: int = 1) -> str:
    """A fraction as a percentage, ``digits`` decimals."""
    return "–" if x is None else f"{100 * float(x):.{digits}f}%"


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
