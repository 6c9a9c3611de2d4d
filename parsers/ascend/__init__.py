"""Ascend (CANN / torch_npu) profiler output → the common tables. Detection only, for now."""

from __future__ import annotations

from pathlib import Path


def units(path: Path) -> list:
    """The Ascend rank outputs under path ([] when the path holds none)."""
    return []
