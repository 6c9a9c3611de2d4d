"""The small form of intervals a rank's part carries (``intervals.pack``) gives back exactly what it was given, on
the intervals the parts carry of the largest trace and on the edge cases its contract allows, and is small."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

import traceanalyzer as ta
from tests.conftest import REPO, load_shared
from traceanalyzer import intervals
from traceanalyzer.analyzers import hotspots
from traceanalyzer.analyzers.health.gaps import idle_claims
from traceanalyzer.schema import Kind

INT64 = np.iinfo(np.int64)


def _round_trip(starts: np.ndarray, ends: np.ndarray) -> intervals.Packed:
    """Pack and unpack; the same int64 values in the same order come back."""
    packed = intervals.pack(starts, ends)
    got = packed.unpacked()
    assert got[0].dtype == np.int64 and got[1].dtype == np.int64
    assert np.array_equal(got[0], starts) and np.array_equal(got[1], ends)
    assert packed.count == len(starts)
    assert pickle.loads(pickle.dumps(packed)) == packed
    return packed


def _device(trace) -> tuple[np.ndarray, np.ndarray]:
    """The device work of a trace in event order: unsorted across streams and overlapping."""
    device = trace.events[trace.events["kind"].isin([Kind.KERNEL.value, Kind.MEMCPY.value])]
    ts = device["ts"].to_numpy(dtype=np.int64)
    return ts, ts + device["dur"].to_numpy(dtype=np.int64)


def _int64_bytes(starts: np.ndarray) -> int:
    return len(pickle.dumps((starts.astype(np.int64), starts.astype(np.int64))))


def test_the_intervals_of_the_largest_trace_come_back_and_pack_small():
    """h200/big (356k events): the hotspots part's busy spans (per op and kernel, so not sorted as a whole, with
    steps of seconds between them), the idle claims, the busy union and every device event as recorded."""
    trace = load_shared("h200", "big", "big.json.gz")
    spans = hotspots.rank_part(trace).work.spans.unpacked()
    assert len(spans[0]) > 30_000 and (np.diff(spans[0]) < 0).any() and np.abs(np.diff(spans[0])).max() > 2**31
    idle = idle_claims(trace)[0]
    device = _device(trace)
    union = intervals.union(*device)
    for starts, ends in (spans, idle, union, device):
        packed = _round_trip(starts, ends)
        assert len(pickle.dumps(packed)) <= 0.3 * _int64_bytes(starts)
    assert len(pickle.dumps(intervals.pack(*spans))) <= 0.25 * _int64_bytes(spans[0])


def test_a_small_trace_round_trips_in_event_order_and_sorted():
    trace = load_shared("h200", "ddp_overlap", "ddp_overlap_rank0.json.gz")
    starts, ends = _device(trace)
    _round_trip(starts, ends)
    _round_trip(*intervals.union(starts, ends))
    _round_trip(starts[::-1].copy(), ends[::-1].copy())


def test_a_bundled_sample_round_trips():
    _round_trip(*_device(ta.load(REPO / "sample_traces" / "fsdp")))


@pytest.mark.parametrize(
    ("starts", "ends"),
    [
        ([], []),
        ([5], [9]),
        ([1_700_000_000_000_000_000], [1_700_000_000_000_000_001]),
        ([10, 0, 30], [20, 40, 30]),  # unsorted, overlapping, empty
        ([7, 3], [2, 3]),  # ends before starts
        ([INT64.min, INT64.max, 0], [INT64.max, INT64.min, INT64.max]),  # differences overflow int64
    ],
)
def test_edge_cases_come_back(starts, ends):
    _round_trip(np.array(starts, dtype=np.int64), np.array(ends, dtype=np.int64))


def test_starts_and_ends_of_other_lengths_are_refused():
    with pytest.raises(ValueError, match="2 starts but 1 ends"):
        intervals.pack(np.array([1, 2]), np.array([3]))


def test_narrow_keeps_values_in_the_smallest_type():
    for values, kind in (([], np.int8), ([-128, 127], np.int8), ([128], np.int16), ([-(2**31)], np.int32)):
        got = intervals.narrow(np.array(values, dtype=np.int64))
        assert got.dtype == kind and np.array_equal(got, values)
    assert intervals.narrow(np.array([INT64.max])).dtype == np.int64
