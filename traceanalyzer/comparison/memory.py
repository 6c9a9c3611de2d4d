"""Peak memory of two runs: how high, where (the op and call path running at the peak), and whether it moved."""

from __future__ import annotations

from traceanalyzer.trace import Trace

PEAK_KEYS = ("rank", "device", "peak_allocated_bytes", "peak_reserved_bytes", "peak_step", "op", "path")


def peak(trace: Trace, rank: int | None) -> dict | None:
    """The highest device pool's peak of one run (of one rank or all): bytes, step, op and path; None without
    memory records."""
    peaks = trace.memory().device_peaks
    if rank is not None:
        peaks = peaks[peaks["rank"] == rank]
    if not len(peaks):
        return None
    top = peaks.loc[peaks["peak_allocated_bytes"].idxmax()]
    return {key: _plain(top.get(key)) for key in PEAK_KEYS}


def diff(trace_b: Trace, trace_c: Trace, rank: int | None) -> dict:
    """Both runs' peaks, the change in allocated bytes and whether the peak is reached elsewhere."""
    b, c = peak(trace_b, rank), peak(trace_c, rank)
    out = {"baseline": b, "candidate": c, "delta_bytes": None, "delta_share": None, "moved": None}
    if b and c:
        delta = c["peak_allocated_bytes"] - b["peak_allocated_bytes"]
        base = b["peak_allocated_bytes"]
        out.update(delta_bytes=delta, delta_share=delta / base if base else None, moved=b["path"] != c["path"])
    return out


def _plain(value: object) -> object:
    """numpy scalars to Python; NaN to None."""
    if value is None or value != value:
        return None
    return value.item() if hasattr(value, "item") else value
