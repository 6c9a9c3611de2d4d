"""The data every health check reads, for some ranks: one rank's part (the per-rank stage, made where the rank is
loaded) or the merge of all ranks' parts (the combining stage; the joined trace is its own single part).

Every table is keyed by rank and untruncated (the section applies ``Options.top``), except the idle gaps, kept to
the ``GAPS_KEPT`` largest per device; nothing holds a row per event.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from traceanalyzer import intervals
from traceanalyzer.findings import Claims, StepTime
from traceanalyzer.intervals import Intervals, Packed
from traceanalyzer.schema import TraceMeta


@dataclass
class Part:
    """Health data of some ranks: tables keyed by rank, idle claims by rank, and sums over the ranks."""

    busy: pd.DataFrame
    """``device_busy``: span, busy and gap counts per rank and device."""
    gaps: pd.DataFrame
    """``idle_gaps``: the largest idle gaps of each device (``GAPS_KEPT``), described, longest first."""
    idle: dict[int, Packed]
    """Per rank: the device-idle intervals inside steps (``idle_claims``), packed (``intervals.pack``)."""
    idle_ns: dict[int, int]
    """Per rank: the length of those intervals."""
    computing: list[int]
    """The ranks that ran compute kernels (a rank with only communication is not judged idle)."""
    syncs: pd.DataFrame
    """``sync_places``: in-step host syncs per rank and place."""
    copies: pd.DataFrame
    """``dtoh_copies``: device-to-host copies per rank and name."""
    launches: pd.DataFrame
    """``launch_bound``: tiny kernels per rank and place."""
    gemms: pd.DataFrame
    """``fp32_gemms``: fp32 SIMT GEMM kernels per rank, name and op."""
    fp32_spans: dict[int, Packed]
    """Per rank: the device intervals of its in-step fp32 SIMT GEMMs, packed."""
    device_ns: dict[int, int]
    """Per rank: busy device time inside steps (summed durations)."""
    shapes: pd.DataFrame
    """``dynamic_shapes`` per rank and op (a part also has ``first_ts``, to merge in the joined trace's order)."""
    compile_ns: int
    """Host time in run-time op compiles inside steps, over the ranks."""
    causes: pd.DataFrame
    """``idle_causes``: per rank and cause, the idle inside steps it explains and where."""
    cause_idle: dict[tuple[int, str], Packed]
    """Per rank and cause: the idle intervals it explains, packed."""
    host_copies: pd.DataFrame
    """``host_copies``: in-step host<->device copies per rank, direction and memory kind."""
    pageable: dict[int, Packed]
    """Per rank: the device intervals of its in-step pageable copies, packed."""
    serial: dict[int, tuple[Packed, Packed]]
    """``serial_copies``: per rank, its in-step pinned copy time no other device work overlaps, and its other device
    work no such copy overlaps, packed."""
    blocked: pd.DataFrame
    """``critical.blocked``: per rank and step, the host's time waiting for the device."""
    stepped: list[int]
    """The ranks with step markers: where one has them, the in-step tables (syncs, launches, GEMMs, device time)
    of a rank without leave it out, as on the joined trace, whose rows outside every step are out of them."""

    def claims(self, rank: int) -> Claims:
        """The idle intervals inside steps of one rank, as a finding claims them (none for a rank without)."""
        return {rank: self.idle[rank].unpacked()} if rank in self.idle else {}

    def cause_claims(self, rank: int, cause: str) -> Claims:
        """The idle intervals of one rank that one cause explains, as a finding claims them."""
        packed = self.cause_idle.get((rank, cause))
        return {rank: packed.unpacked()} if packed is not None else {}


@dataclass(frozen=True)
class Context:
    """What the health findings are weighed and worded against: the job's facts (``meta``, as a trace's), its step
    time, its number of distinct steps, and each rank's own step time (a finding about one rank is a share of its
    steps, averaged over its steps alone)."""

    meta: TraceMeta
    step: StepTime
    steps: int
    by_rank: dict[int, StepTime] = field(default_factory=dict)

    spans: pd.DataFrame | None = None
    """Per rank and step: its span ``[start_ns, end_ns)`` (the step table's), what a per-step median reads."""

    def step_of(self, rank: int) -> StepTime:
        """The step time of one rank (the job's where the rank has none of its own)."""
        return self.by_rank.get(rank, self.step)

    def median_per_step(self, claims: Claims) -> int:
        """The median over a rank's steps of the time some intervals of it take in each step (ns); the mean over
        the steps analysed where the steps are not known."""
        if not claims:
            return 0
        rank, ivs = next(iter(claims.items()))
        each = self.step_lengths(rank, ivs)
        return int(np.median(each)) if each is not None else intervals.length(ivs) // max(self.step_of(rank).steps, 1)

    def step_lengths(self, rank: int, ivs: Intervals) -> np.ndarray | None:
        """The time some intervals of a rank take in each of its steps (ns), None where its steps are not known."""
        spans = self.spans[self.spans["rank"] == rank] if self.spans is not None else None
        if spans is None or not len(spans):
            return None
        pairs = zip(spans["start_ns"].tolist(), spans["end_ns"].tolist(), strict=True)
        return np.array([intervals.length(intervals.clip(ivs, lo, hi)) for lo, hi in pairs], dtype=np.int64)

    def as_total(self, rank: int, per_step: int) -> int:
        """A per-step figure of a rank as the total that ``findings.make`` divides by its steps (``step_of``)."""
        return per_step * max(self.step_of(rank).steps, 1)
