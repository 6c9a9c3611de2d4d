"""Page layouts. Each page formats and draws the analyzers' data of one View; nothing here computes a finding."""

from __future__ import annotations

import pandas as pd
from dash import dcc, html
from traceanalyzer.dashboards import tables
from traceanalyzer.dashboards.views import View

from traceanalyzer import humanize
from traceanalyzer.analyzers import compare as comparing
from traceanalyzer.analyzers.hotspots import Level
from traceanalyzer.renderers import figures

PAGES = {
    "/": "Overview",
    "/hotspots": "Hotspots",
    "/timeline": "Timeline",
    "/distributed": "Distributed",
    "/fusion": "Fusion",
    "/memory": "Memory",
    "/compare": "Compare",
}
"""URL path → page title, in menu order."""

FINDING_PAGE = {
    "hotspots": "/hotspots",
    "health": "/timeline",
    "distributed": "/distributed",
    "fusion": "/fusion",
    "memory": "/memory",
}
"""Which page shows the evidence of an analyzer's findings."""

ALL = "all"
DETAIL_LEVELS = (Level.KERNEL.value, Level.CPU_OP.value, Level.OP_DEVICE.value)
"""Hotspot levels whose rows name an op or kernel (they have kernels, shapes and a call stack)."""
PICK_HINT = "Click a name in the table or a bar in the chart: its kernels, CPU ops, shapes and call stack show here."
COMPARE_TOP = 15
HOTSPOT_ROWS = 20
LOADING_DELAY_MS = 300
"""Spinners show only for updates slower than this (a quick update would only flash)."""
FINDING_COLUMNS = ("severity", "title", "cost_ns", "step_share", "advice")
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


def render(path: str, views: list[View], view: View | None) -> list:
    """The content of one page for the selected trace."""
    if view is None:
        return [html.P("No trace loaded yet: open one above.", id="no-trace")]
    if path == "/compare":
        return compare(views, view)
    builder = _BUILDERS.get(path, overview)
    return [html.H2(f"{PAGES.get(path, 'Overview')} · {view.label}", className="page-title"), *builder(view)]


def unavailable(what: str, reason: str) -> html.Div:
    """The notice a page shows when an analysis has nothing for this trace."""
    return html.Div(
        [html.B(f"{what}: not available for this trace."), html.Span(f" ({reason})" if reason else "")],
        className="unavailable",
    )


def facts_list(pairs: dict, list_id: str | None = None) -> html.Dl:
    """Facts as a definition list."""
    items = []
    for key, value in tables.facts(pairs):
        items += [html.Dt(key), html.Dd(value)]
    return html.Dl(items, id=list_id or "", className="facts")


def overview(view: View) -> list:
    """Trace facts, the headline numbers, steps and the ranked findings."""
    report = view.report()
    t, s = report["trace"], report["summary"]
    trace_facts = {
        "platform": f"{t['platform']} ({t['source_format']} {t['format_version']})".strip(),
        "ranks": ", ".join(map(str, t["ranks"])),
        "devices": ", ".join(sorted({d["name"] for d in t["devices"] if d["name"]})) or "–",
        "window_ns": t["span_ns"],
        "events": t["events"],
    }
    return [
        html.Div([facts_list(trace_facts, "trace-facts"), facts_list(headline(view), "headline")], className="row"),
        html.H3("Findings, ranked by what they are worth"),
        findings_table(report["findings"]),
        html.H3("Steps"),
        dcc.Graph(id="step-chart", figure=figures.step_bars(report["steps"])),
        *[html.P(f"warning: {w}", className="warning") for w in [*t["warnings"], *view.notes]],
        html.P(f"device time by kind: {_kinds(s['time_by_kind'])}"),
    ]


def headline(view: View) -> dict:
    """Step time, device busy, exposed communication and peak memory, as the analyzers report them."""
    report = view.report()
    s = report["summary"]
    return {
        "steps": s["steps"],
        "step_wall_median_ns": s["step_wall_ns_median"],
        "device_busy_share": s["device_busy_share"],
        "kernel_ns_per_step": s["kernel_ns_per_step"],
        "communication_share": s["communication_share"],
        "exposed_communication_ns": _fact(report, "distributed", "comm_exposed_ns"),
        "peak_allocated_bytes": _fact(report, "memory", "peak_allocated_bytes"),
    }


def _fact(report: dict, section: str, key: str) -> object:
    return (report.get(section) or {}).get("facts", {}).get(key)


def _kinds(rows: list[dict]) -> str:
    return ", ".join(f"{r['kind']} {humanize.duration(r['total_ns'])}" for r in rows) or "–"


def findings_table(findings: list[dict]) -> html.Table | html.P:
    """Findings with their worth, advice and a link to the page with the evidence."""
    if not findings:
        return html.P("No findings.", id="findings")
    header = html.Tr([html.Th(humanize.label(c)) for c in FINDING_COLUMNS] + [html.Th("details")])
    rows = [
        html.Tr(
            [html.Td(humanize.value(c, f.get(c))) for c in FINDING_COLUMNS]
            + [html.Td(dcc.Link(f"{f['analyzer']} →", href=FINDING_PAGE.get(f["analyzer"], "/")))],
            className=f"severity-{f['severity']}",
        )
        for f in findings
    ]
    return html.Table([html.Thead(header), html.Tbody(rows)], id="findings", className="findings")


def hotspots(view: View) -> list:
    """Filters, the hotspot table and chart (drawn for the default filter), and the selected op's details."""
    table = hotspot_table(view, Level.KERNEL.value)
    return [
        html.Div(
            [
                _dropdown("hs-level", [lv.value for lv in Level], Level.KERNEL.value, "level"),
                _dropdown("hs-step", [ALL, *view.steps()], ALL, "step"),
                _dropdown("hs-rank", [ALL, *view.ranks()], ALL, "rank"),
                _dropdown("hs-kind", [ALL, *view.kinds()], ALL, "kind (kernel level)"),
                html.Span(f"platform: {view.trace.meta.platform.value}", className="platform"),
            ],
            className="controls",
        ),
        html.Div(
            [
                html.Div(
                    dcc.Loading(tables.table("hs-table", table, page_size=HOTSPOT_ROWS), delay_show=LOADING_DELAY_MS),
                    className="col-wide",
                ),
                html.Div(
                    [
                        dcc.Graph(id="hs-bars", figure=figures.hotspot_bars(table)),
                        html.H3("Selected"),
                        dcc.Loading(html.Div(id="hs-details", children=html.P(PICK_HINT))),
                    ],
                    className="col-narrow",
                ),
            ],
            className="row",
        ),
    ]


def _dropdown(dropdown_id: str, values: list, value: object, label: str) -> html.Label:
    return html.Label(
        [
            label,
            dcc.Dropdown(
                id=dropdown_id, options=[{"label": str(v), "value": v} for v in values], value=value, clearable=False
            ),
        ],
        className="control",
    )


def hotspot_filter(value: object) -> object:
    """A dropdown value as an analyzer argument (``all`` → None)."""
    return None if value in (None, ALL) else value


def hotspot_table(view: View, level: str, step: object = ALL, rank: object = ALL, kind: object = ALL) -> pd.DataFrame:
    """The hotspot table for the pickers' values (the kind filter applies at the kernel level only)."""
    kind = hotspot_filter(kind) if level == Level.KERNEL.value else None
    return view.hotspots(level, hotspot_filter(step), hotspot_filter(rank), kind)


def details(info: dict) -> list:
    """A selected op or kernel: the kernels it runs, the ops that launch it, its shapes and call stack."""
    stack = [html.Li(f"[{f['kind']}] {f['name']} ({humanize.duration(f['dur_ns'])})") for f in info["stack"]]
    return [
        html.H4(info["name"], id="selected-name"),
        html.Div(
            [
                html.Div(
                    [html.H5("Kernels"), tables.table("det-kernels", info["kernels"], page_size=10)], className="col"
                ),
                html.Div([html.H5("CPU ops"), tables.table("det-ops", info["ops"], page_size=10)], className="col"),
            ],
            className="row",
        ),
        html.H5("Input shapes"),
        tables.table("det-shapes", info["shapes"], page_size=10) if info["shapes"] else html.P("no shapes recorded"),
        html.H5("Call stack of the longest instance (outermost first)"),
        html.Ol(stack, id="det-stack") if stack else html.P("no host frames linked"),
    ]


def timeline(view: View) -> list:
    """Step and rank pickers and the Gantt chart of that step."""
    steps = view.steps()
    if not steps:
        return [unavailable("Timeline", "the trace has no step markers")]
    return [
        html.Div(
            [
                _dropdown("tl-rank", view.ranks(), view.ranks()[0], "rank"),
                _dropdown("tl-step", steps, steps[0], "step"),
            ],
            className="controls",
        ),
        html.P(id="tl-note"),
        dcc.Loading(dcc.Graph(id="tl-graph", config={"scrollZoom": True})),
    ]


def distributed(view: View) -> list:
    """Exposed communication per rank and step, the late rank, and every collective with wait vs transfer."""
    overlap, collectives = view.optional("overlap"), view.optional("collectives")
    out: list = [_late_rank(view)]
    if overlap.data is None:
        out.append(unavailable("Overlap", overlap.reason))
    else:
        title = "Exposed communication per rank and step (ms)"
        out.append(dcc.Graph(id="overlap-heatmap", figure=figures.heatmap(overlap.data, EXPOSED_COMM, title)))
    out += _section(view, "distributed")
    if collectives.data is None:
        out.append(unavailable("Collectives", collectives.reason))
    else:
        calls = collectives.data[[c for c in COLLECTIVE_COLUMNS if c in collectives.data]]
        out += [html.H3("Every collective call"), tables.table("collectives-table", calls, page_size=15)]
    return out


def _late_rank(view: View) -> html.Div:
    """The rank the others waited for, as the distributed analyzer names it."""
    facts = (view.report().get("distributed") or {}).get("facts", {})
    if facts.get("late_rank") is None:
        return html.Div()
    late = view.optional("late_arrivals").data
    cause = ""
    if isinstance(late, pd.DataFrame) and len(late):
        worst = late.iloc[0]
        cause = f"; longest wait in step {worst['step']}: {worst['cause']} ({worst['detail']})"
    wait = humanize.duration(facts.get("late_rank_caused_wait_ns"))
    return html.Div(
        f"Late rank: rank {facts['late_rank']}, its peers waited {wait} for it{cause}",
        id="late-rank",
        className="callout",
    )


def fusion(view: View) -> list:
    """Fusion opportunities ranked by estimated saving."""
    found = view.optional("fusion")
    facts = _section(view, "fusion", with_tables=False)
    if found.data is None:
        return [*facts, unavailable("Fusion", found.reason)]
    return [*facts, html.H3("Opportunities"), tables.table("fusion-table", found.data)]


def memory(view: View) -> list:
    """Allocated/reserved over time with the peak marked, blocks live at the peak, per-op stats and leak trend."""
    found = view.optional("memory")
    if found.data is None:
        return [unavailable("Memory", found.reason)]
    result = found.data
    return [
        dcc.Graph(id="memory-graph", figure=figures.memory_lines(result.timeline, result.peaks)),
        *_section(view, "memory"),
    ]


def _section(view: View, name: str, with_tables: bool = True) -> list:
    """An analyzer's report section: its facts and (optionally) tables, formatted generically."""
    section = view.report().get(name)
    if not section:
        return []
    out: list = [facts_list(section.get("facts", {}), f"{name}-facts")]
    for i, (key, rows) in enumerate(section.get("tables", {}).items() if with_tables else ()):
        if rows:
            out += [html.H3(key), tables.table(f"{name}-section-{i}", rows, page_size=10)]
    return out


def compare(views: list[View], view: View) -> list:
    """Pickers for two loaded traces; the comparison fills in below."""
    options = [{"label": v.label, "value": i} for i, v in enumerate(views)]
    other = next((i for i, v in enumerate(views) if v is not view), 0)
    return [
        html.H2(f"Compare · {view.label}", className="page-title"),
        html.Div(
            [
                html.Label(
                    ["left", dcc.Dropdown(id="cmp-a", options=options, value=views.index(view))], className="control"
                ),
                html.Label(["right", dcc.Dropdown(id="cmp-b", options=options, value=other)], className="control"),
            ],
            className="controls",
        ),
        html.Div(id="cmp-body"),
    ]


def comparison(left: View, right: View) -> list:
    """What changed per step from the left trace to the right one, then their summaries and top kernels side by side."""
    diff = comparing.compare(left.trace, right.trace)
    return [
        html.H3(f"What changed per step: {left.label} → {right.label}"),
        *(html.P(note, className="note") for note in diff.notes),
        tables.table("cmp-summary", diff.summary, page_size=len(diff.summary) or 1),
        html.H4("Kernels by change (new, gone, faster, slower)"),
        tables.table("cmp-changes", diff.levels[Level.KERNEL.value].head(COMPARE_TOP), page_size=COMPARE_TOP),
        html.Div(
            [html.Div(_compared(v, side), className="col") for v, side in ((left, "a"), (right, "b"))], className="row"
        ),
    ]


def _compared(view: View, side: str) -> list:
    return [
        html.H3(view.label),
        facts_list(headline(view), f"cmp-{side}-facts"),
        html.H4("Top kernels"),
        tables.table(f"cmp-{side}-kernels", view.hotspots(Level.KERNEL.value).head(COMPARE_TOP), page_size=COMPARE_TOP),
        html.H4("Top CPU ops (self time)"),
        tables.table(f"cmp-{side}-ops", view.hotspots(Level.CPU_OP.value).head(COMPARE_TOP), page_size=COMPARE_TOP),
    ]


_BUILDERS = {
    "/": overview,
    "/hotspots": hotspots,
    "/timeline": timeline,
    "/distributed": distributed,
    "/fusion": fusion,
    "/memory": memory,
}
