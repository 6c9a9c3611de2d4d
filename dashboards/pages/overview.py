"""The Overview page: what was loaded, the headline facts of the report's sections (each per step or total, in its
unit), the ranked findings with links to their evidence, and each step's device busy and idle."""

from __future__ import annotations

from dash import dcc, html
from traceanalyzer.dashboards import charts, state
from traceanalyzer.dashboards.blocks import facts_list, headline, labelled
from traceanalyzer.dashboards.names import middle
from traceanalyzer.dashboards.views import View

from traceanalyzer import humanize
from traceanalyzer.analyzers.health.causes import PAINTED
from traceanalyzer.findings import Basis, Finding
from traceanalyzer.schema import BUSY

TITLE = "Overview"
TITLE_CHARS = 160
HOVER_CHARS = 1_000
"""A finding's title is cut to TITLE_CHARS in the table (its hover and the advice to HOVER_CHARS): a name in a
title can be megabytes."""

FINDING_PAGE = {
    "hotspots": "/hotspots",
    "health": "/health",
    "gemm": "/health",
    "distributed": "/distributed",
    "fusion": "/fusion",
    "memory": "/memory",
    "ascend": "/ascend",
    "inference": "/inference",
}
"""Which page shows the evidence of an analyzer's findings."""

IDLE_CAUSE_FINDINGS = tuple(f"health.{c}" for c in PAINTED if c != "host_sync") + ("health.python_work",)
"""The idle-by-cause findings whose rows are idle gaps (host syncs and launch-bound places have tables of their own)."""

FINDING_ANCHOR = {
    "health.idle": "idle-gaps",
    **dict.fromkeys(IDLE_CAUSE_FINDINGS, "idle-gaps"),
    "health.sync": "syncs",
    "health.launch_bound": "launch-bound",
    "health.fp32_gemm": "fp32-gemms",
    "health.dynamic_shapes": "dynamic-shapes",
    "ascend.ai_cpu": "ai-cpu",
    "ascend.dynamic_shapes": "ascend-dynamic-shapes",
}
"""Finding id → the table on its page that holds its rows."""

EVIDENCE_COLUMNS = {"locations": "where"}
"""A finding's ``where`` key → the column of its page's table that holds the same text (others share the name)."""

FINDING_HEADERS = ("severity", "finding", "saving per step", "share of step time", "basis", "advice", "evidence")


def layout(view: View, query: dict[str, str]) -> list:
    """Trace facts, the headline facts, the ranked findings and the step chart."""
    report = view.report()
    t = report.trace
    trace_facts = {
        "platform": f"{t['platform']} ({' '.join(str(v) for v in (t['source_format'], t['format_version']) if v)})",
        "ranks": ", ".join(map(str, t["ranks"])),
        "devices": ", ".join(sorted({d["name"] for d in t["devices"] if d["name"]})) or "–",
        "recorded_window_ns": t["span_ns"],
        "events": t["events"],
    }
    steps = view.table("summary", "steps")
    return [
        html.Div([facts_list(trace_facts, "trace-facts"), labelled(headline(view), "headline")], className="row"),
        html.H3("Findings, ranked by their estimated saving per step"),
        findings_table(view, report.findings, state.encode(query)),
        html.H3("Each step's device time: busy and idle (ms per step)"),
        dcc.Graph(
            id="step-chart", figure=charts.step_breakdown(steps.frame if steps else None), className="drawn-later"
        ),  # the findings above are shown without waiting for Plotly's code (assets/whole_page.css)
        *[html.P(f"warning: {w}", className="warning") for w in [*t["warnings"], *view.notes]],
        html.P(f"Device work by kind (total): {_kinds(view)}", id="by-kind"),
    ]


def _kinds(view: View) -> str:
    """The summary's device time by kind: device work, then the streams' waits apart (they keep no device busy)."""
    table = view.table("summary", "time_by_kind")
    if table is None or not len(table.frame):
        return "–"
    busy = set(BUSY)
    rows = list(table.frame.itertuples())
    work = ", ".join(f"{r.kind} {humanize.duration(r.total_ns)}" for r in rows if r.kind in busy)
    waits = ", ".join(f"{r.kind} {humanize.duration(r.total_ns)}" for r in rows if r.kind not in busy)
    return (work or "–") + (f"; streams waiting (not work): {waits}" if waits else "")


def finding_link(view: View, finding: Finding, search: str) -> str:
    """The page (and table on it) that holds a finding's evidence, keeping the URL's picks, picking the rank the
    finding is about and asking for its rows (``row``: its ``where``) to be highlighted; a hotspot finding opens
    the level whose table holds its name (View.place)."""
    anchor = FINDING_ANCHOR.get(finding.id, "")
    where = {EVIDENCE_COLUMNS.get(k, k): v for k, v in finding.where.items()}
    changes: dict = {"row": state.evidence_key(where) if where else None}
    if "rank" in finding.where:  # the evidence of one rank: its page shows that rank's rows
        changes["rank"] = finding.where["rank"]
    level = view.place(finding).level
    if level is not None:
        changes["level"] = level
    search = state.updated(search, **changes)
    return FINDING_PAGE.get(finding.analyzer, "/") + search + (f"#{anchor}" if anchor else "")


def _links(view: View, finding: Finding, search: str) -> list:
    """The finding's links: its evidence rows on their page, and its place on the Timeline where it has one."""
    links: list = [dcc.Link(f"{finding.analyzer} →", href=finding_link(view, finding, search))]
    place = view.place(finding).timeline
    if place is not None:
        query = state.updated(search, row=None, step=place.get("step"), rank=place["rank"], at=place["at"])
        links += [html.Br(), dcc.Link("timeline →", href=f"/timeline{query}", className="timeline-link")]
    return links


def findings_table(view: View, findings: list[Finding], search: str = "") -> html.Table | html.P:
    """Findings with their saving per step, its basis, the advice and links to the evidence (rows, timeline)."""
    if not findings:
        return html.P("No findings.", id="findings")
    header = html.Tr([html.Th(h) for h in FINDING_HEADERS])
    rows = [
        html.Tr(
            [html.Td(cell) for cell in _finding_cells(f)] + [html.Td(_links(view, f, search))],
            className=f"severity-{f.severity.value}",
        )
        for f in findings
    ]
    return html.Table([html.Thead(header), html.Tbody(rows)], id="findings", className="findings")


def _finding_cells(f: Finding) -> list:
    """Severity, title, saving per step and share (or why there is none), basis (its model on hover), advice."""
    if f.covered_by or f.basis is Basis.NONE:
        saving, share, basis = "–", "–", f.worth()
    else:
        saving, share, basis = humanize.duration(f.saving_ns), humanize.share(f.step_share), f.basis.value
    title = html.Span(middle(f.title, TITLE_CHARS), title=middle(f.title, HOVER_CHARS))
    return [f.severity.value, title, saving, share, html.Span(basis, title=f.model), middle(f.advice, HOVER_CHARS)]
