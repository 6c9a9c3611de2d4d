"""What a device can do, from its vendor's data sheet: dense peak TFLOP/s per dtype, memory bandwidth, SM count.

One entry per device family, matched on the device name the trace records (``NVIDIA H200``, ``AMD Instinct MI300X``,
``Ascend910B3``). Peaks are dense (no structured sparsity), tensor-core/matrix-core figures where the dtype has
them (fp32 is the SIMT/vector figure; tf32 the tensor-core one). A dtype a family has no figure for is absent.
``bandwidth`` is the HBM (device memory) peak. Together they are the two limits of the roofline
(``traceanalyzer.analyzers.roofline``): compute-bound work is judged against ``peak_tflops`` of its dtype,
memory-bound work (decode GEMVs, elementwise kernels) against ``bandwidth``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from traceanalyzer import humanize
from traceanalyzer.schema import TraceMeta


@dataclass(frozen=True)
class Device:
    """One device family's data-sheet numbers."""

    family: str
    peak_tflops: dict[str, float] = field(default_factory=dict)  # dtype key → dense peak TFLOP/s
    bandwidth: float = 0.0  # peak memory bandwidth, bytes/s (0: not documented)
    sms: int = 0  # streaming multiprocessors / compute units / AI cores (0: not documented)
    host_link: float = 0.0  # pinned host<->device copy bandwidth per direction, bytes/s (0: not documented)


def _peaks(bf16: float, tf32: float, fp32: float, fp8: float = 0.0, fp64: float = 0.0) -> dict[str, float]:
    out = {"bf16": bf16, "fp16": bf16, "tf32": tf32, "fp32": fp32, "fp8": fp8, "fp64": fp64}
    return {k: v for k, v in out.items() if v}


PCIE3, PCIE4, PCIE5, NVLINK_C2C = 12.5e9, 25.0e9, 50.0e9, 450.0e9
"""Pinned host<->device copy bandwidth per direction (bytes/s) over a x16 PCIe link of generation 3, 4 and 5: about
80 % of the link's 16, 32 and 64 GB/s, what cudaMemcpy from pinned memory reaches (NVIDIA's bandwidthTest); GH200's
NVLink-C2C: 450 GB/s per direction (data sheet)."""

FAMILIES: tuple[tuple[re.Pattern, Device], ...] = (
    (re.compile(r"GH200"), Device("GH200", _peaks(989.0, 494.0, 67.0, 1979.0, 67.0), 4.8e12, 132, NVLINK_C2C)),
    (re.compile(r"H200"), Device("H200", _peaks(989.0, 494.0, 67.0, 1979.0, 67.0), 4.8e12, 132, PCIE5)),
    (re.compile(r"H100.*PCIe"), Device("H100 PCIe", _peaks(756.0, 378.0, 51.0, 1513.0, 51.0), 2.0e12, 114, PCIE5)),
    (re.compile(r"H100|H800"), Device("H100", _peaks(989.0, 494.0, 67.0, 1979.0, 67.0), 3.35e12, 132, PCIE5)),
    (re.compile(r"B200|GB200"), Device("B200", _peaks(2250.0, 1100.0, 80.0, 4500.0, 40.0), 8.0e12, 148, PCIE5)),
    (re.compile(r"A100.*80|A800"), Device("A100 80GB", _peaks(312.0, 156.0, 19.5, 0.0, 19.5), 2.039e12, 108, PCIE4)),
    (re.compile(r"A100"), Device("A100", _peaks(312.0, 156.0, 19.5, 0.0, 19.5), 1.555e12, 108, PCIE4)),
    (re.compile(r"L40S"), Device("L40S", _peaks(362.0, 183.0, 91.6, 733.0), 0.864e12, 142, PCIE4)),
    (re.compile(r"L40"), Device("L40", _peaks(181.0, 90.5, 90.5, 362.0), 0.864e12, 142, PCIE4)),
    (re.compile(r"A10\b"), Device("A10", _peaks(125.0, 62.5, 31.2), 0.6e12, 72, PCIE4)),
    (re.compile(r"V100"), Device("V100", {"fp16": 125.0, "fp32": 15.7, "fp64": 7.8}, 0.9e12, 80, PCIE3)),
    (re.compile(r"MI300X|MI325"), Device("MI300X", _peaks(1307.4, 653.7, 163.4, 2614.9, 163.4), 5.3e12, 304, PCIE5)),
    (
        re.compile(r"MI250"),
        Device("MI250X", {"bf16": 383.0, "fp16": 383.0, "fp32": 95.7, "fp64": 95.7}, 3.2e12, 220, PCIE4),
    ),
    (re.compile(r"910B|910_9|Ascend910"), Device("Ascend 910B", {"fp16": 280.0, "bf16": 280.0}, 1.6e12, 0, PCIE5)),
)
"""Device-name pattern → family, first match wins (NVIDIA, AMD and Huawei data sheets). Ascend 910B: Huawei
publishes no per-SKU data sheet; its fp16/bf16 cube peak is the 280 TFLOP/s of the 910B cloud listings (the lowest
SKU's figure, so a share of it is an upper bound for faster SKUs), HBM2e bandwidth 1.6 TB/s."""

DEFAULT_BANDWIDTH = 2.0e12
"""Assumed peak bandwidth (bytes/s) when the device is not in the table."""


def lookup(name: str) -> Device | None:
    """The family of a device name; None when it is not in the table."""
    return next((device for pattern, device in FAMILIES if name and pattern.search(name)), None)


def of_trace(meta: TraceMeta) -> Device | None:
    """The family of the trace's (first known) device; None when no device is recorded or known."""
    return next((found for d in meta.devices if (found := lookup(d.name))), None)


def bandwidth(meta: TraceMeta) -> tuple[float, str]:
    """Peak memory bandwidth (bytes/s) of the trace's device, and where the number comes from."""
    device = of_trace(meta)
    name = meta.devices[0].name if meta.devices else ""
    if device and device.bandwidth:
        return device.bandwidth, f"{name}: {humanize.bandwidth(device.bandwidth, 2)} peak (data sheet)"
    assumed = f"device '{name or 'unknown'}' not in the table: assumed {humanize.bandwidth(DEFAULT_BANDWIDTH, 1)}"
    return DEFAULT_BANDWIDTH, assumed


DEFAULT_HOST_LINK = PCIE4
"""Assumed pinned host<->device copy bandwidth (bytes/s) when the device is not in the table."""


def host_link(meta: TraceMeta) -> tuple[float, str]:
    """Pinned host<->device copy bandwidth (bytes/s, per direction) of the trace's device, and where it comes from."""
    device = of_trace(meta)
    name = meta.devices[0].name if meta.devices else ""
    if device and device.host_link:
        return device.host_link, f"{name}: {humanize.bandwidth(device.host_link)} pinned host<->device (link figure)"
    assumed = f"device '{name or 'unknown'}' not in the table: assumed {humanize.bandwidth(DEFAULT_HOST_LINK)} pinned"
    return DEFAULT_HOST_LINK, assumed


LINK_GBPS = (
    (re.compile(r"H100.*PCIe|H200 NVL", re.I), None),
    (re.compile(r"H100|H200|H800|GH200", re.I), 450.0),
    (re.compile(r"B200|B100|GB200", re.I), 900.0),
    (re.compile(r"A100.*PCIe", re.I), None),
    (re.compile(r"A100|A800", re.I), 300.0),
    (re.compile(r"V100-SXM", re.I), 150.0),
)
"""Nominal per-direction NVLink bandwidth (GB/s) of a device by name; None where the interconnect varies."""


def link_gbps(meta: TraceMeta) -> float:
    """Nominal per-direction link bandwidth of a trace's devices (its ``TraceMeta``; NaN when unknown)."""
    name = meta.devices[0].name if meta.devices else ""
    for pattern, gbps in LINK_GBPS:
        if pattern.search(name):
            return float("nan") if gbps is None else gbps
    return float("nan")
