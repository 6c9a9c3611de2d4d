"""The fusion opportunities: occurrences summed per pattern variant and step, their findings and the section."""

from __future__ import annotations

import numpy as np
import pandas as pd

from traceanalyzer import devices
from traceanalyzer import findings as fnd
from traceanalyzer.analyzers import advice
from traceanalyzer.analyzers.fusion.matching import occurrences, rank_steps
from traceanalyzer.analyzers.fusion.opstream import COMPUTE_BOUND, WORK_KINDS, finds, per_text
from traceanalyzer.analyzers.fusion.patterns import DISCOVERY_REPLACEMENT, OPTIMIZER_REPLACEMENT, PATTERNS
from traceanalyzer.analyzers.steps import step_time
from traceanalyzer.findings import Claims, Finding, StepTime, claims_of
from traceanalyzer.memo import per_trace
from traceanalyzer.options import Options
from traceanalyzer.section import Fact, Per, Section, Table, Unit
from traceanalyzer.tracedata import TraceData
from traceanalyzer.vocabulary import COMPILED_REGION

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


@per_trace
def opportunities(trace: TraceData) -> pd.DataFrame:
    """One row per pattern variant found, ranked by estimated saving per step (ns)."""
    occ = occurrences(trace)
    if not len(occ):
        return pd.DataFrame(columns=OPPORTUNITY_COLUMNS)
    per = max(rank_steps(trace), 1)
    platform = advice.platform(trace.meta)
    compiled = bool(trace.events["name"].cat.categories.str.contains(COMPILED_REGION).any())
    groups = occ.assign(place=_places(occ)).groupby(["family", "variant"], sort=False)
    rows = [_summarize(key, group, per, platform, compiled) for key, group in groups]
    table = pd.DataFrame(rows, columns=OPPORTUNITY_COLUMNS)
    return table.sort_values("saving_ns_per_step", ascending=False, kind="stable").reset_index(drop=True)


def _summarize(key: tuple[str, str], group: pd.DataFrame, per: int, platform: str, compiled: bool) -> dict:
    family, variant = key
    fwd = group[group["phase"] != "backward"]
    pattern = group["pattern"].iloc[0]
    return {
        "pattern": family,
        "variant": variant,
        "per_step": len(fwd) / per,
        "backward_per_step": (len(group) - len(fwd)) / per,
        "kernels_per_step": group["kernels"].sum() / per,
        "current_ns_per_step": int(group["current_ns"].sum() / per),
        "kept_ns_per_step": int(group["kept_ns"].sum() / per),
        "saving_ns_per_step": int(group["saving_ns"].sum() / per),
        "intermediate_bytes_per_step": int(group["intermediate_bytes"].sum() / per),
        "traffic_ns_per_step": int(group["traffic_ns"].sum() / per),
        "launch_ns_per_step": int(group["launch_ns"].sum() / per),
        "occurrences": len(group),
        "where": _where(fwd if len(fwd) else group),
        "replacement": _replacement(pattern, variant, platform, compiled),
    }


def _places(occ: pd.DataFrame) -> np.ndarray:
    """Per occurrence, its source location: annotation | module | stack (those known), else its first op."""
    parts = zip(occ["annotation"].tolist(), occ["module"].tolist(), occ["stack"].tolist(), strict=True)
    place = np.array([" | ".join(x for x in p if x) for p in parts], dtype=object)
    return np.where(place != "", place, occ["first_op"].to_numpy(dtype=object))


def _where(group: pd.DataFrame, most: int = 6) -> str:
    """The distinct source locations of a pattern's occurrences, most frequent first, with counts."""
    counts = group["place"].value_counts()
    shown = [f"{p} ×{n}" for p, n in counts.head(most).items()]
    return "; ".join(shown) + (f"; … {len(counts) - most} more" if len(counts) > most else "")


def _replacement(pattern: str, variant: str, platform: str, compiled: bool) -> str:
    """What replaces a pattern on this platform (a discovered chain in a compiled model: compile it too)."""
    if pattern == "optimizer":
        return OPTIMIZER_REPLACEMENT[platform].format(name=variant.split(" ")[0])
    if pattern == "discovered":
        return DISCOVERY_REPLACEMENT["compiled" if compiled else platform]
    return next(p.replacement[platform] for p in PATTERNS if p.key == pattern)


def findings(trace: TraceData) -> list[Finding]:
    """One finding per opportunity worth at least 0.2 % of step time, its saving modelled per step."""
    table = opportunities(trace)
    step = step_time(trace)
    occ = occurrences(trace)
    work = _device_work(trace.events)
    out = []
    for row in table.itertuples(index=False):
        if step.per_step_ns and row.saving_ns_per_step / step.per_step_ns < FINDING_MIN_SHARE:
            continue
        mine = occ[(occ["family"] == row.pattern) & (occ["variant"] == row.variant)]
        out.append(_finding(row, step, _claims(work, mine)))
    return out


def _device_work(ev: pd.DataFrame) -> pd.DataFrame:
    """The device work a fusion can remove: its row (index), rank, start, duration and causing ops; compute-bound
    kernels (GEMM, attention, convolution) are kept by a fusion (SAVING_MODEL), so they are not among it."""
    rows = np.flatnonzero(ev["kind"].isin(WORK_KINDS).to_numpy())
    removable = rows[~per_text(ev["name"], rows, finds(COMPUTE_BOUND), bool)]
    return ev.iloc[removable][["rank", "ts", "dur", "op", "top_op"]]


def _claims(work: pd.DataFrame, occ: pd.DataFrame) -> Claims:
    """The device work of the occurrences' entries (launched by an entry op, or inside one)."""
    rows = np.unique(
        np.concatenate([np.asarray(r, dtype=np.int64) for r in occ["entry_rows"]] or [np.empty(0, np.int64)])
    )
    mine = np.isin(work["op"].to_numpy(), rows) | np.isin(work["top_op"].to_numpy(), rows)
    return claims_of(work[mine | np.isin(work.index.to_numpy(), rows)])


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


def section(trace: TraceData, options: Options) -> Section | None:
    """The report's fusion section: the model, the bandwidth assumption and the ranked opportunities."""
    table = opportunities(trace)
    if not len(table):
        return None
    _, source = devices.bandwidth(trace.meta)
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
