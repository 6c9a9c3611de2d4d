"""The Distributed page: the late rank, exposed communication per rank and step, the distributed section, and every
collective call."""

from __future__ import annotations

from dash import dcc, html
from traceanalyzer.dashboards import state, tables
from traceanalyzer.dashboards.blocks import evidence_note, fact_pair, section_facts, section_tables, unavailable
from traceanalyzer.dashboards.views import View

from traceanalyzer.renderers import figures

TITLE = "Distributed"
EXPOSED_COMM = "comm_exposed_ns"
COLLECTIVE_COLUMNS = [
    "rank",
    "step",
    "collective",
    "name",
    "bytes",
    "phase",
    "dur_ns",
    "exposed_ns",
    "wait_ns",
    "transfer_ns",
    "late_rank",
    "busbw_gbps",
]
"""Columns of the collectives table the Distributed page shows."""
COLLECTIVE_ROWS = 15
SINGLE_RANK = "One rank: no cross-rank views (late rank, waits across ranks)."


def layout(view: View, query: dict[str, str]) -> list:
    """The late rank, exposed communication per rank and step, the distributed section, every collective."""
    overlap, collectives = view.optional("overlap"), view.optional("collectives")
    section, key = view.section("distributed"), state.evidence(query)
    out: list = [_late_rank(view), *evidence_note(key)]
    if len(view.ranks()) < 2:
        listed = " Its collectives are listed below." if collectives.data is not None else ""
        out.append(html.P(SINGLE_RANK + listed, id="single-rank", className="note"))
    elif overlap.data is None:
        out.append(unavailable("Overlap", overlap.reason))
    else:
        title = "Exposed communication per rank and step (ms per step)"
        out.append(dcc.Graph(id="overlap-heatmap", figure=figures.heatmap(overlap.data, EXPOSED_COMM, title)))
    if section is not None:
        out += [section_facts(section, "distributed-facts"), *section_tables(section, evidence=key)]
    if collectives.data is None:
        out.append(unavailable("Collectives", collectives.reason))
    else:
        calls = collectives.data[[c for c in COLLECTIVE_COLUMNS if c in collectives.data]]
        props = tables.marked(tables.content(calls), tables.matching_rows(calls, key or {}), COLLECTIVE_ROWS)
        out += [
            html.H3("Every collective call (each one call)"),
            tables.grid("collectives-table", props, page_size=COLLECTIVE_ROWS),
        ]
    return out


def _late_rank(view: View) -> html.Div:
    """The rank the others waited for, as the distributed section names it."""
    late, wait = view.fact("distributed", "late_rank"), view.fact("distributed", "late_rank_caused_wait_ns")
    if late is None or late.value is None or wait is None:
        return html.Div()
    arrivals = view.table("distributed", "late_arrivals")
    cause = ""
    if arrivals is not None and len(arrivals.frame):
        worst = arrivals.frame.iloc[0]
        cause = f"; longest wait in step {worst['step']}: {worst['cause']} ({worst['detail']})"
    label, value = fact_pair(wait)
    return html.Div(
        f"Late rank: rank {late.value}; {label}: {value}{cause}",
        id="late-rank",
        className="callout",
    )
