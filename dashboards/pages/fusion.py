"""The Fusion page: the fusion section's facts and its opportunities, ranked by estimated saving per step."""

from __future__ import annotations

from dash import html
from traceanalyzer.dashboards import state, tables
from traceanalyzer.dashboards.blocks import PER, evidence_note, section_facts, unavailable
from traceanalyzer.dashboards.views import View

TITLE = "Fusion"


def layout(view: View, query: dict[str, str]) -> list:
    """The fusion section's facts and its opportunities, ranked by estimated saving per step."""
    section, table = view.section("fusion"), view.table("fusion", "opportunities")
    if section is None or table is None or not len(table.frame):
        return [unavailable("Fusion", "the fusion analyzer found no opportunity in this trace")]
    frame, key = table.frame, state.evidence(query)
    breakdown = [str(c) for c in frame if c not in FUSION_FIRST]
    columns = [c for c in FUSION_FIRST if c in frame] + breakdown
    return [
        section_facts(section, "fusion-facts"),
        html.H3(table.title + PER[table.per]),
        html.P(FUSION_BASIS, className="note"),
        *evidence_note(key),
        tables.section_table("fusion-table", table, columns, 25, evidence=key, hidden=breakdown),
    ]


FUSION_FIRST = (
    "pattern",
    "saving_ns_per_step",
    "where",
    "replacement",
    "current_ns_per_step",
    "occurrences",
    "variant",
)
"""Fusion columns shown: what, what it saves, where and with what; the breakdown of the estimate is hidden until
the user shows it."""
FUSION_BASIS = (
    "Savings are estimates: what fusing would remove (see the model above). The estimate's breakdown (kernels, "
    "kept time, traffic, launches per step) is in the columns that Toggle Columns shows."
)
