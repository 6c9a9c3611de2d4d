"""The fusion opportunities: occurrences summed per pattern variant and step, their findings and the section.

The opportunities come from the ranks' parts (``part``), combined once: the chains discovered over all ranks'
runs are summed like the library occurrences, the groups of all ranks are summed per variant (in the order they
first appear, by rank then start), occurrences outside steps are dropped when any is in a step, and the launch
saving is priced with the median launch call of all ranks. A joined trace is combined from its own part, a job
analysed rank by rank from its ranks' parts; both give the same table, findings and claims.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from traceanalyzer import devices, intervals
from traceanalyzer import findings as fnd
from traceanalyzer.analyzers import advice
from traceanalyzer.analyzers.fusion import discovery
from traceanalyzer.analyzers.fusion.matching import discovered, launch_median, measured, rank_steps, whole
from traceanalyzer.analyzers.fusion.opstream import combinations, pieces, sums
from traceanalyzer.analyzers.fusion.part import PLACE_COLUMNS, Part, aggregate, rank_part
from traceanalyzer.analyzers.fusion.patterns import DISCOVERY_REPLACEMENT, OPTIMIZER_REPLACEMENT, PATTERNS
from traceanalyzer.analyzers.summary import (
    compute_steps,
    job_compute_step_time,
    job_step_table,
)
from traceanalyzer.findings import Claims, Finding, StepTime
from traceanalyzer.jobdata import JobData
from traceanalyzer.memo import per_trace, remember
from traceanalyzer.options import Options
from traceanalyzer.schema import TraceMeta
from traceanalyzer.section import Fact, Per, Section, Table, Unit
from traceanalyzer.tables import stack
from traceanalyzer.tracedata import TraceData

ANALYZER = "fusion"

SAVING_MODEL = (
    "measured kernel time of the chain minus its GEMM/attention kernels, minus a fused kernel that reads the "
    "chain's first input and writes its last output once at the device's peak memory bandwidth"
)
"""How a fusion saving is modelled."""

FINDING_MIN_SHARE = 0.002
"""Opportunities worth less than 0.2 % of step time stay in the table but make no finding."""

OPPORTUNITY_COLUMNS = [
    "pattern",
    "variant",
    "per_step",
    "backward_per_step",
    "kernels_per_step",
    "current_ns_per_step",
    "kept_ns_per_step",
    "saving_ns_per_step",
    "intermediate_bytes_per_step",
    "traffic_ns_per_step",
    "launch_ns_per_step",
    "occurrences",
    "where",
    "replacement",
]


SEQ_DISCOVERED = 1 << 40
"""The order found of the first discovered chain: after every library and optimizer occurrence of its rank."""


@dataclass
class Combined:
    """The opportunities (``OPPORTUNITY_COLUMNS``, ranked by saving) and, per row, the device work its fix
    removes."""

    table: pd.DataFrame
    claims: list[Claims]


def combine(parts: list[Part], meta: TraceMeta, steps: int) -> Combined:
    """The opportunities of the ranks whose parts are given (rank order), of a trace or job with ``meta`` and
    ``steps`` (rank, step) pairs."""
    groups, places, removed = (stack(list(t)) for t in zip(*_tables(parts, meta), strict=True))
    if groups["in_step"].astype(bool).any() and steps:
        groups, places, removed = (t[t["in_step"].astype(bool)] for t in (groups, places, removed))
    if not len(groups):
        return Combined(pd.DataFrame(columns=OPPORTUNITY_COLUMNS), [])
    launch = launch_median(pd.concat([p.launches for p in parts], ignore_index=True))
    price = _Pricing(max(steps, 1), launch, advice.platform(meta), any(p.compiled for p in parts))
    groups = groups.take(_order(groups, "first"))
    variants = _Variants(groups, places, removed)
    table = _rows(variants, groups, removed, price)
    spots = {c: places[c].to_numpy() for c in PLACE_COLUMNS}
    table["where"] = [_where(spots, rows, f > 0) for rows, f in zip(variants.places, variants.forward, strict=True)]
    table = pd.DataFrame(table, columns=OPPORTUNITY_COLUMNS)
    claims = [_claims(groups, rows) for rows in variants.groups]
    order = table.sort_values("saving_ns_per_step", ascending=False, kind="stable").index.to_numpy()
    return Combined(table.iloc[order].reset_index(drop=True), [claims[i] for i in order.tolist()])


def _order(table: pd.DataFrame | dict[str, np.ndarray], prefix: str) -> np.ndarray:
    """Positions of the rows (of a table, or of columns) by rank, then ``{prefix}_ts``, then ``{prefix}_seq``
    (stable)."""
    cols = (table[f"{prefix}_seq"], table[f"{prefix}_ts"], table["rank"])
    return np.lexsort(tuple(np.asarray(c, dtype=np.int64) for c in cols))


class _Variants:
    """The (family, variant) of each row of the groups (rank, start order), places and removed tables, numbered in
    the order they first appear in the groups (``group``, ``place``, ``removed``: the codes); ``forward`` counts
    each one's forward occurrences, ``groups`` and ``places`` list each one's rows (ascending)."""

    def __init__(self, groups: pd.DataFrame, places: pd.DataFrame, removed: pd.DataFrame) -> None:
        tables = (groups, places, removed)
        keys = [np.concatenate([t[c].to_numpy(dtype=object) for t in tables]) for c in ("family", "variant")]
        codes, distinct = combinations(*keys)
        self.first = np.full(len(distinct), len(codes), dtype=np.int64)
        np.minimum.at(self.first, codes, np.arange(len(codes)))
        cuts = np.cumsum([len(t) for t in tables])[:-1]
        self.group, self.place, self.removed = np.split(codes, cuts)
        self.forward = sums(self.group, groups["forward"].to_numpy(dtype=np.int64), len(self.first))
        self.groups, self.places = _members(self.group, len(self.first)), _members(self.place, len(self.first))

    def __len__(self) -> int:
        return len(self.first)


def _members(codes: np.ndarray, n: int) -> list[np.ndarray]:
    """Per code 0..n-1, the positions (ascending) that hold it."""
    order = np.argsort(codes, kind="stable")
    return pieces(order, np.bincount(codes, minlength=n))


def _tables(parts: list[Part], meta: TraceMeta) -> list[tuple[pd.DataFrame, ...]]:
    """The groups, places and launches removed of every part, and of the chains discovered over all their runs."""
    runs = discovery.merge([p.runs for p in parts])
    chains = discovery.discover(runs)
    found = [discovered(c, c.entries) for c in chains]
    occ = pd.DataFrame()
    if found:
        bandwidth, _ = devices.bandwidth(meta)
        occ = measured(runs.cols, np.zeros(len(runs), dtype=bool), bandwidth, found)
        first = runs.cols["place"][np.array([c.entries[0] for c in chains], dtype=np.int64)]
        occ["seq"] = SEQ_DISCOVERED + np.arange(len(found))
        occ["place"] = np.asarray(runs.vocab["place"], dtype=object)[first]
        occ["entries"] = [c.entries for c in chains]
    return [(p.groups, p.places, p.removed) for p in parts] + [aggregate(occ, runs.work)]


@dataclass(frozen=True)
class _Pricing:
    """What turns a variant's sums into its row: (rank, step) pairs, the median launch call (ns), the platform and
    whether the model ran compiled."""

    per: int
    launch_ns: float
    platform: str
    compiled: bool


def _rows(variants: _Variants, groups: pd.DataFrame, removed: pd.DataFrame, price: _Pricing) -> dict[str, list]:
    """The columns of the opportunities but ``where``, one value per variant."""
    n, per = len(variants), price.per

    def total(col: str) -> np.ndarray:
        return sums(variants.group, groups[col].to_numpy(dtype=np.int64), n)

    forward, every = variants.forward, total("occurrences")
    removes = removed["removed"].to_numpy(dtype=np.int64)
    launch = removed["count"].to_numpy(dtype=np.int64) * whole(removes * price.launch_ns)
    family = groups["family"].to_numpy(dtype=object)[variants.first]
    variant = groups["variant"].to_numpy(dtype=object)[variants.first]
    pattern = groups["pattern"].to_numpy(dtype=object)[variants.first]
    return {
        "pattern": family.tolist(),
        "variant": variant.tolist(),
        "per_step": (forward / per).tolist(),
        "backward_per_step": ((every - forward) / per).tolist(),
        "kernels_per_step": (total("kernels") / per).tolist(),
        **{f"{c}_per_step": [int(v) for v in (total(c) / per).tolist()] for c in PRICED},
        "launch_ns_per_step": [int(v) for v in (sums(variants.removed, launch, n) / per).tolist()],
        "occurrences": every.tolist(),
        "replacement": [
            _replacement(p, v, price.platform, price.compiled) for p, v in zip(pattern, variant, strict=True)
        ],
    }


PRICED = ["current_ns", "kept_ns", "saving_ns", "intermediate_bytes", "traffic_ns"]
"""The sums a variant's row shows per step as integers."""


def _where(places: dict[str, np.ndarray], rows: np.ndarray, forward: bool, most: int = 6) -> str:
    """The distinct source locations of a variant's occurrences (``rows`` of the ``places`` columns; its forward
    ones, if any), most frequent first (of as many, the first to appear first), with counts."""
    if forward:
        rows = rows[places["forward"][rows] > 0]
    rows = rows[_order({c: v[rows] for c, v in places.items()}, "forward" if forward else "first")]
    place, first = combinations(np.asarray(places["place"][rows], dtype=object))
    counts = sums(place, places["forward" if forward else "occurrences"][rows].astype(np.int64), len(first))
    shown = np.argsort(-counts, kind="stable")
    names = np.asarray(places["place"][rows], dtype=object)[first]
    text = [f"{names[i]} ×{counts[i]}" for i in shown[:most].tolist()]
    return "; ".join(text) + (f"; … {len(counts) - most} more" if len(counts) > most else "")


def _claims(groups: pd.DataFrame, rows: np.ndarray) -> Claims:
    """The device work a variant's fix removes (``rows`` of ``groups``), per rank (ranks without any left out)."""
    out: Claims = {}
    rank = groups["rank"].to_numpy(dtype=np.int64)[rows]
    claims = groups["claims"].to_numpy(dtype=object)[rows]
    for r in np.unique(rank).tolist():
        held = [packed.unpacked() for packed in claims[rank == r]]
        union = intervals.union(np.concatenate([h[0] for h in held]), np.concatenate([h[1] for h in held]))
        if len(union[0]):
            out[int(r)] = union
    return out


def combined(trace: TraceData) -> Combined:
    """The trace's opportunities, combined from its own part (once per trace)."""
    return remember(trace, f"{__name__}.combined", lambda: combine([rank_part(trace)], trace.meta, rank_steps(trace)))


def merge(parts: list[Part], job: JobData) -> Combined:
    """The analyzer's merge rule: a job's opportunities, combined from its ranks' parts over its compute steps."""
    return combine(parts, job.meta, compute_steps(job_step_table(job)))


@per_trace
def opportunities(trace: TraceData) -> pd.DataFrame:
    """One row per pattern variant found, ranked by estimated saving per step (ns)."""
    return combined(trace).table


def _replacement(pattern: str, variant: str, platform: str, compiled: bool) -> str:
    """What replaces a pattern on this platform (a discovered chain in a compiled model: compile it too)."""
    if pattern == "optimizer":
        return OPTIMIZER_REPLACEMENT[platform].format(name=variant.split(" ")[0])
    if pattern == "discovered":
        return DISCOVERY_REPLACEMENT["compiled" if compiled else platform]
    return next(p.replacement[platform] for p in PATTERNS if p.key == pattern)


def job_findings(part: Combined, job: JobData) -> list[Finding]:
    """One finding per opportunity of a job's merged part worth at least 0.2 % of step time, its saving modelled
    per step."""
    return _findings(part, job_compute_step_time(job))


def _findings(combined: Combined, step: StepTime) -> list[Finding]:
    out = []
    for row, claims in zip(combined.table.itertuples(index=False), combined.claims, strict=True):
        if step.per_step_ns and row.saving_ns_per_step / step.per_step_ns < FINDING_MIN_SHARE:
            continue
        out.append(_finding(row, step, claims))
    return out


def _finding(row, step: StepTime, claims: Claims) -> Finding:
    title = f"{row.pattern}: {row.variant} ({row.per_step:g}/step"
    title += f" + {row.backward_per_step:g} backward)" if row.backward_per_step else ")"
    n = max(step.steps, 1)
    return fnd.make(
        ANALYZER,
        "chain",
        title,
        f"{advice.replace_with(row.replacement)} Where: {_first_places(row.where)}.",
        step,
        concerns_ns=int((row.current_ns_per_step - row.kept_ns_per_step) * n),
        saving_ns=int(row.saving_ns_per_step * n),
        basis=fnd.Basis.MODELLED,
        model=SAVING_MODEL,
        claims=claims,
        where={"locations": row.where},
        evidence={
            "per_step": row.per_step,
            "kernels_per_step": row.kernels_per_step,
            "current_ns_per_step": row.current_ns_per_step,
            "kept_ns_per_step": row.kept_ns_per_step,
            "intermediate_bytes_per_step": row.intermediate_bytes_per_step,
            "traffic_ns_per_step": row.traffic_ns_per_step,
            "launch_ns_per_step": row.launch_ns_per_step,
        },
    )


def _first_places(where: str, shown: int = 2) -> str:
    """The first few of a '; '-separated list of places, pointing to the table for the rest."""
    places = where.split("; ")
    return "; ".join(places[:shown]) + ("; … (all places in the fusion table)" if len(places) > shown else "")


def job_section(part: Combined, job: JobData, options: Options) -> Section | None:
    """The fusion section of a job's merged part: the model, the bandwidth assumption and the ranked
    opportunities."""
    return _section(part.table, job.meta, options)


def _section(table: pd.DataFrame, meta: TraceMeta, options: Options) -> Section | None:
    if not len(table):
        return None
    _, source = devices.bandwidth(meta)
    fusable = int((table["current_ns_per_step"] - table["kept_ns_per_step"]).sum())
    return Section(
        "fusion",
        "Fusion opportunities",
        facts=[
            Fact(
                "estimated_saving_ns",
                "estimated saving",
                int(table["saving_ns_per_step"].sum()),
                Unit.NS,
                Per.STEP,
                True,
            ),
            Fact("fusable_kernel_ns", "time in fusable kernels", fusable, Unit.NS, Per.STEP),
            Fact("memory_bandwidth", "memory bandwidth assumed", source),
            Fact("model", "saving model", SAVING_MODEL),
        ],
        tables=[Table("opportunities", "Opportunities", table.head(options.top), Per.STEP)],
    )
