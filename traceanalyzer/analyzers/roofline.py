"""The roofline: the least time work of given FLOPs and bytes can take on a device, and which limit sets it.

Work of ``flops`` floating-point operations that moves ``bytes`` to or from device memory takes at least
``max(flops / peak, bytes / bandwidth)``: the dense tensor peak of its dtype and the HBM bandwidth of the device
(``traceanalyzer.devices``). Its arithmetic intensity (FLOPs per byte) against the device's ridge point
(peak / bandwidth) says which limit that is: a batch-1 decode GEMV (intensity ~1) is memory-bound and judged
against bandwidth, a large prefill GEMM (intensity in the hundreds) compute-bound and judged against the peak.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from traceanalyzer import devices
from traceanalyzer.schema import TraceMeta

MEMORY = "memory"
COMPUTE = "compute"
UNKNOWN = "unknown"
"""The limits a roofline judges work against (``UNKNOWN``: the device has no peak for the dtype)."""


@dataclass(frozen=True)
class Roof:
    """A device's two limits for one dtype: dense peak TFLOP/s (NaN: not documented) and bandwidth (bytes/s)."""

    peak_tflops: float
    bandwidth: float
    source: str

    @property
    def ridge(self) -> float:
        """FLOPs per byte where the two limits meet (NaN without a peak)."""
        return self.peak_tflops * 1e12 / self.bandwidth


def roof(meta: TraceMeta, dtype: str) -> Roof:
    """The roofline of the trace's device for a dtype key (bandwidth assumed, and said so, for an unknown device)."""
    device = devices.of_trace(meta)
    bandwidth, source = devices.bandwidth(meta)
    peak = device.peak_tflops.get(dtype, np.nan) if device else np.nan
    return Roof(float(peak), bandwidth, source)


def compute_ns(flops: np.ndarray, peak_tflops: np.ndarray) -> np.ndarray:
    """Time the FLOPs take at the dense peak, ns (NaN without a peak)."""
    return np.asarray(flops, dtype=float) / (np.asarray(peak_tflops, dtype=float) * 1e3)


def memory_ns(nbytes: np.ndarray, bandwidth: np.ndarray) -> np.ndarray:
    """Time the bytes take at the peak bandwidth, ns."""
    return np.asarray(nbytes, dtype=float) / np.asarray(bandwidth, dtype=float) * 1e9


def minimum_ns(flops: np.ndarray, nbytes: np.ndarray, peak_tflops: np.ndarray, bandwidth: np.ndarray) -> np.ndarray:
    """The roofline time, ns: the larger of compute and memory time (the memory time alone without a peak)."""
    compute = np.nan_to_num(compute_ns(flops, peak_tflops), nan=0.0)
    return np.maximum(compute, memory_ns(nbytes, bandwidth))


def bound(flops: np.ndarray, nbytes: np.ndarray, peak_tflops: np.ndarray, bandwidth: np.ndarray) -> np.ndarray:
    """Per row, the limit that sets the roofline time: ``MEMORY``, ``COMPUTE``, or ``UNKNOWN`` without a peak."""
    compute = compute_ns(flops, peak_tflops)
    memory = memory_ns(nbytes, bandwidth)
    judged = np.where(memory >= compute, MEMORY, COMPUTE)
    return np.where(np.isnan(compute), UNKNOWN, judged).astype(object)
