"""Sizes no real run records, checked once per parsed rank whatever its format: a recorded input shape with a
negative dim or more than MAX_ELEMENTS elements is not read (the op has no shape), and a byte count of a collective
or copy that is negative or at least MAX_BYTES is unknown (NO_ROW), each counted in ``meta.adjustments`` with a
warning. What reaches the analyzers then cannot make negative FLOPs, bytes or GEMM dims, nor overflow int64."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd

from traceanalyzer.schema import NO_ROW, TraceMeta

MAX_ELEMENTS = 1 << 50
"""A tensor of this many elements or more is not a recorded shape (its bytes would overflow int64)."""
MAX_BYTES = 1 << 50
"""A message or copy of this many bytes (1 PiB) or more is not a recorded size."""
BAD_SHAPES = "input shapes with a negative or impossibly large dim not read"
BAD_BYTES = "negative or impossibly large byte counts read as unknown"


def check(events: pd.DataFrame, meta: TraceMeta) -> pd.DataFrame:
    """The events with impossible shapes and byte counts made unknown, each kind counted in meta."""
    _count(meta, BAD_SHAPES, _clear_shapes(events))
    _count(meta, BAD_BYTES, _clear_bytes(events))
    return events


def _count(meta: TraceMeta, reason: str, count: int) -> None:
    if count:
        meta.adjust(reason, count)
        meta.warnings.append(f"{meta.paths[0] if meta.paths else 'trace'}: {count:,} {reason}")


def _clear_shapes(events: pd.DataFrame) -> int:
    """Set the ``input_dims`` of rows whose shapes are impossible to ''; how many rows."""
    if "input_dims" not in events or not isinstance(events["input_dims"].dtype, pd.CategoricalDtype):
        return 0
    column = events["input_dims"]
    bad = [text for text in column.cat.categories if not plausible_shapes(str(text))]
    if not bad:
        return 0
    rows = column.isin(bad).to_numpy()
    if "" not in column.cat.categories:
        column = column.cat.add_categories([""])
    events["input_dims"] = column.where(~rows, "")
    return int(rows.sum())


def plausible_shapes(text: str) -> bool:
    """Is this recorded ``Input Dims`` JSON free of negative dims and of tensors of MAX_ELEMENTS or more elements?
    (Text that is not JSON is left to the analyzers, which read it as no shape.)"""
    if not text or not any(ch.isdigit() for ch in text):
        return True
    try:
        shapes = json.loads(text)
    except ValueError:
        return True
    return _plausible(shapes)


def _plausible(value: object) -> bool:
    if not isinstance(value, list):
        return not isinstance(value, int) or value >= 0
    dims = [d for d in value if isinstance(d, int) and not isinstance(d, bool)]
    if any(d < 0 for d in dims):
        return False
    if dims and len(dims) == len(value) and math.prod(dims) >= MAX_ELEMENTS:
        return False
    return all(_plausible(v) for v in value if isinstance(v, list))


def _clear_bytes(events: pd.DataFrame) -> int:
    """Set ``bytes`` that are negative (other than NO_ROW) or at least MAX_BYTES to NO_ROW; how many rows."""
    if "bytes" not in events:
        return 0
    values = events["bytes"].to_numpy()
    bad = ((values < 0) & (values != NO_ROW)) | (values >= MAX_BYTES)
    if bad.any():
        events["bytes"] = np.where(bad, NO_ROW, values)
    return int(bad.sum())
