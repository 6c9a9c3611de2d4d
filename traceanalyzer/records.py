"""Plain data from tables: DataFrame rows as JSON-ready dicts, numpy scalars as Python numbers."""

from __future__ import annotations

import numpy as np
import pandas as pd


def records(frame: pd.DataFrame) -> list[dict]:
    """DataFrame rows as JSON-ready dicts (numpy scalars to Python, NaN to None)."""
    return [{k: plain(v) for k, v in row.items()} for row in frame.to_dict(orient="records")]


def plain(value: object) -> object:
    """A numpy scalar as the Python value it holds (NaN as None); anything else as it is."""
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating | float):
        return None if np.isnan(value) else float(value)
    if isinstance(value, np.bool_):
        return bool(value)
    return value
