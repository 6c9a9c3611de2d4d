"""``groups.Groups`` groups rows as ``groupby(keys, sort=False)`` does and reduces them to the same values, on the
device work of real traces (per rank and kernel name: sizes, sums, maxima, medians, a Python reducer)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import traceanalyzer as ta
from tests.conftest import REPO
from traceanalyzer.groups import Groups
from traceanalyzer.schema import Kind

TRACES = ["gpu_bound/gpu_bound.json.gz", "data_loader", "tf32_matmul/tf32_matmul.json.gz"]


def _kernels(name: str) -> pd.DataFrame:
    """A sample trace's kernels: rank, name (as text) and duration."""
    path = REPO / "sample_traces" / name
    if not path.exists():
        pytest.skip(f"sample trace {path} is absent")
    events = ta.load(path).events
    kernels = events[(events["kind"] == Kind.KERNEL.value).to_numpy()]
    return pd.DataFrame(
        {
            "rank": kernels["rank"].to_numpy(),
            "name": kernels["name"].astype(str).array,
            "dur": kernels["dur"].to_numpy(),
        }
    )


@pytest.mark.parametrize("name", TRACES)
def test_groups_reduce_as_groupby(name: str) -> None:
    """The groups come in first-seen order with groupby's keys, sizes, sums, maxima, medians and per-group values."""
    frame = _kernels(name)
    want = frame.groupby(["rank", "name"], sort=False)["dur"]
    g = Groups([frame["rank"].array, frame["name"].array])
    dur = frame["dur"].to_numpy()
    keys = want.size().index
    assert len(g) == len(keys) > 0
    assert list(
        zip(frame["rank"].to_numpy()[g.first].tolist(), frame["name"].array.take(g.first), strict=True)
    ) == list(keys)
    assert np.array_equal(g.sizes, want.size().to_numpy())
    assert np.array_equal(g.sum(dur), want.sum().to_numpy())
    assert np.array_equal(g.max(dur), want.max().to_numpy())
    assert np.array_equal(g.median(dur), want.median().to_numpy())
    assert g.each(frame["dur"], lambda d: d.tolist()) == [list(d) for _, d in want]


def test_no_rows_no_groups() -> None:
    """Rows of none: no groups, and empty reductions of the values' type."""
    g = Groups([np.zeros(0, dtype=np.int32), np.zeros(0, dtype=object)])
    assert len(g) == 0
    assert g.sum(np.zeros(0, dtype=np.int64)).dtype == np.int64
    assert g.max(np.zeros(0, dtype=np.int64)).dtype == np.int64
    assert len(g.median(np.zeros(0, dtype=np.int64))) == 0
    assert g.each(np.zeros(0), len) == []
