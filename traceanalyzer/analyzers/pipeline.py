"""Pipeline parallelism: point-to-point transfers between ranks, the stages they connect, and the pipeline bubble.

A call is point-to-point when the trace says it is a send or a recv (collective args ``send`` / ``recv``; it, or the op
that launched it, is ``nccl:send`` / ``nccl:recv`` / ``c10d::send`` / ``batch_isend_irecv`` ...; HCCL ``hcom_send`` /
``hcom_receive`` / ``hcom_batchSendRecv``, msprof's point-to-point ops). A NCCL ``SendRecv`` kernel alone is not
enough: NCCL runs all-to-all and other grouped collectives on it too. Two ranks that exchange a matched point-to-point
call are in different pipeline stages. Time a stage spends in point-to-point calls beyond the transfer itself is the
**pipeline bubble**: it waits for the neighbouring stage to produce its activations or gradients, which the schedule
decides, not an imbalance between ranks. So do waits in a collective whose ranks lie in different stages (the
pipeline flush before a cross-stage all-reduce such as tied embeddings).

Per rank and step: ``bubble_ns`` = Σ over point-to-point calls of (exposed time − transfer time, at least 0), plus
Σ over cross-stage collectives of their wait for peers (at most their exposed time); ``bubble_share`` = bubble_ns /
the step span (the step as the device sees it, as in the overlap breakdown).
"""

from __future__ import annotations

import re
from collections.abc import Callable

import numpy as np
import pandas as pd

from traceanalyzer import humanize
from traceanalyzer.findings import Basis, Finding, StepTime, make
from traceanalyzer.schema import NO_ROW

P2P = frozenset({"send", "recv"})
"""Collectives that are point-to-point transfers."""
P2P_NAME = re.compile(
    r"^hcom_(?:send|receive|batchsendrecv)|nccl:(?:send|recv)|c10d::(?:send|recv)|batch_isend_irecv|\bi(?:send|recv)\b",
    re.I,
)
"""Names of point-to-point ops and kernels (the call's own name, or the op that launched it)."""
MIN_SHARE = 0.01
"""A bubble smaller than this share of the step is not reported."""
ANALYZER = "distributed"

ADVICE = (
    "The stages wait for each other in send/recv: this is the pipeline bubble of the schedule, not a slow rank. "
    "With p stages and m micro-batches, 1F1B idles each stage for about (p-1)/(m+p-1) of the step. Raise the number "
    "of micro-batches per step (smaller micro-batches, or more gradient accumulation), use an interleaved 1F1B "
    "schedule (virtual pipeline stages: Megatron --num-layers-per-virtual-pipeline-stage, "
    "torch.distributed.pipelining.ScheduleInterleaved1F1B), or a zero-bubble schedule (ZB-H1 / ZBV: "
    "ScheduleInterleavedZeroBubble, ScheduleZBVZeroBubble) that fills the bubble with weight-gradient work."
)

TABLE_COLUMNS = ["rank", "step", "span_ns", "p2p_calls", "p2p_ns", "cross_stage_wait_ns", "bubble_ns", "bubble_share"]


def p2p_rows(events: pd.DataFrame, comm: pd.DataFrame, collectives: np.ndarray) -> np.ndarray:
    """Per communication row: is it a point-to-point transfer, by its collective, its name or its launching ops?"""
    out = np.isin(collectives, list(P2P)) | comm["name"].astype(str).str.contains(P2P_NAME).to_numpy()
    for link in ("op", "top_op"):
        rows = comm[link].to_numpy()
        linked = rows != NO_ROW
        names = events["name"].reindex(rows[linked]).astype(str)
        out[linked] |= names.str.contains(P2P_NAME).to_numpy()
    return out


def is_p2p(calls: pd.DataFrame) -> np.ndarray:
    """Per call of a calls table: is it a point-to-point transfer?"""
    return calls["p2p"].to_numpy(dtype=bool)


def peer_pairs(calls: pd.DataFrame) -> set[tuple[int, int]]:
    """Pairs of ranks (low, high) that exchange matched point-to-point calls in every step they communicate in: they
    are in different pipeline stages (a send/recv now and then, outside a schedule, does not make a pipeline).
    Calls of no step (launched before the window, as when it starts mid-pipeline) decide nothing."""
    calls = calls[(calls["step"] != NO_ROW).to_numpy()]
    p2p = calls[is_p2p(calls) & (calls["match"] != NO_ROW).to_numpy()]
    seen: dict[tuple[int, int], set] = {}
    for steps, ranks in zip(p2p.groupby("match")["step"].unique(), p2p.groupby("match")["rank"].unique(), strict=True):
        ordered = sorted(int(r) for r in ranks)
        for pair in ((a, b) for i, a in enumerate(ordered) for b in ordered[i + 1 :]):
            seen.setdefault(pair, set()).update(int(s) for s in steps)
    active = {int(rank): {int(s) for s in steps} for rank, steps in calls.groupby("rank")["step"].unique().items()}
    return {pair for pair, steps in seen.items() if steps >= active[pair[0]] | active[pair[1]]}


def _in_steps(calls: pd.DataFrame) -> pd.DataFrame:
    """The calls of a step (all calls where none has a step: a trace without step markers)."""
    stepped = (calls["step"] != NO_ROW).to_numpy()
    return calls[stepped] if stepped.any() else calls


def cross_stage(calls: pd.DataFrame, pairs: set[tuple[int, int]]) -> np.ndarray:
    """Per call: is it a matched collective (not point-to-point) whose ranks include two pipeline stages?"""
    out = np.zeros(len(calls), dtype=bool)
    if not pairs:
        return out
    matched = calls[(calls["match"] != NO_ROW).to_numpy() & ~is_p2p(calls)]
    spanning = {m for m, ranks in matched.groupby("match")["rank"].unique().items() if _spans(ranks, pairs)}
    return calls["match"].isin(spanning).to_numpy()


def _spans(ranks, pairs: set[tuple[int, int]]) -> bool:
    """Do any two of these ranks form one of the stage ``pairs`` (lower rank first)?"""
    ordered = sorted(int(r) for r in ranks)
    return any((a, b) in pairs for i, a in enumerate(ordered) for b in ordered[i + 1 :])


def bubble(calls: pd.DataFrame, spans: pd.DataFrame) -> pd.DataFrame:
    """Per rank and step of a pipeline (from its collective calls and the overlap breakdown's step spans):
    point-to-point time, cross-stage waits, the bubble and its share of the step."""
    pairs = peer_pairs(calls)
    if not pairs:
        return pd.DataFrame(columns=TABLE_COLUMNS)
    calls = _in_steps(calls)
    p2p = is_p2p(calls)
    exposed = calls["exposed_ns"].astype(float)
    p2p_wait = (exposed - calls["transfer_ns"].fillna(0)).clip(lower=0).where(p2p, 0.0)
    stage_wait = np.fmin(calls["wait_ns"].fillna(0), exposed).where(cross_stage(calls, pairs), 0.0)
    parts = pd.DataFrame(
        {
            "rank": calls["rank"],
            "step": calls["step"],
            "p2p_calls": p2p.astype(int),
            "p2p_ns": calls["dur_ns"].where(p2p, 0),
            "cross_stage_wait_ns": stage_wait,
            "bubble_ns": p2p_wait + stage_wait,
        }
    )
    table = parts.groupby(["rank", "step"], as_index=False).sum()
    table = table.merge(spans[["rank", "step", "span_ns"]], on=["rank", "step"], how="left")
    table["bubble_share"] = table["bubble_ns"] / table["span_ns"].where(table["span_ns"] > 0)
    for column in ("p2p_ns", "cross_stage_wait_ns", "bubble_ns"):
        table[column] = table[column].round().astype(np.int64)
    return table[TABLE_COLUMNS]


def finding_of(
    table: pd.DataFrame, calls: pd.DataFrame, computing: set[int], step_of: Callable[[int], StepTime]
) -> Finding | None:
    """The pipeline bubble of the rank that idles most in it, with the schedule advice; ranks whose compute is
    recorded (``computing``) are preferred (a rank loaded from its communication alone has no step span to share
    against); ``step_of(rank)``: the rank's step time."""
    table = _judged(table, computing)
    if not len(table):
        return None
    total = table.groupby("rank")["bubble_ns"].sum()
    rank = int(total.idxmax())
    ours = table[table["rank"] == rank]
    steps = max(len(ours), 1)
    per_step = total[rank] / steps
    share = float(ours["bubble_ns"].sum() / max(ours["span_ns"].sum(), 1))
    if share < MIN_SHARE:
        return None
    title = (
        f"Pipeline bubble: {humanize.duration(per_step, 1)} per step ({humanize.share(share, 0)} of the step) "
        f"on rank {rank}"
    )
    evidence = {
        "bubble_ns_per_step": int(per_step),
        "bubble_share": share,
        "p2p_ns_per_step": int(ours["p2p_ns"].sum() / steps),
        "cross_stage_wait_ns_per_step": int(ours["cross_stage_wait_ns"].sum() / steps),
        "stage_pairs": [list(p) for p in sorted(peer_pairs(calls))],
        "bubble_share_by_rank": {int(r): float(s) for r, s in _shares(table).items()},
    }
    return make(
        ANALYZER, "pipeline_bubble", title, ADVICE, step_of(rank), concerns_ns=int(total[rank]),
        saving_ns=int(total[rank]), basis=Basis.MEASURED, where={"rank": rank}, evidence=evidence,
        model="an upper bound: the stage's wait in send/recv beyond the transfer (a better schedule shrinks it)",
    )  # fmt: skip


def _judged(table: pd.DataFrame, computing: set[int]) -> pd.DataFrame:
    """The rows of ranks whose compute is recorded (all rows when none is)."""
    recorded = table["rank"].isin(computing)
    return table[recorded] if recorded.any() else table


def _shares(table: pd.DataFrame) -> pd.Series:
    """Per rank of a bubble table: its bubble summed over steps as a share of its span (NaN for an empty span)."""
    sums = table.groupby("rank")[["bubble_ns", "span_ns"]].sum()
    return sums["bubble_ns"] / sums["span_ns"].where(sums["span_ns"] > 0)


def facts(table: pd.DataFrame, calls: pd.DataFrame, computing: set[int]) -> dict:
    """Section facts of a pipeline: its stage pairs and the bubble per step (median over steps; the rank with the
    largest, among ranks whose compute is recorded: ``computing``)."""
    if not len(table):
        return {}
    per_rank = _judged(table, computing).groupby("rank")[["bubble_ns", "bubble_share"]].median()
    return {
        "pipeline_stage_pairs": ", ".join(f"{a}↔{b}" for a, b in sorted(peer_pairs(calls))),
        "pipeline_bubble_ns_per_step": int(per_rank["bubble_ns"].max()),
        "pipeline_bubble_share": float(per_rank["bubble_share"].max()),
    }
