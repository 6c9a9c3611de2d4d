"""Page layouts. Each page formats and draws the analyzers' data of one View; nothing here computes a finding."""

from __future__ import annotations

import pandas as pd
from dash import dcc, html
from traceanalyzer.dashboards import analyses, charts, state, tables
from traceanalyzer.dashboards import timeline as timeline_lanes
from traceanalyzer.dashboards.blocks import facts_list, labelled, unavailable
from traceanalyzer.dashboards.names import shortened
from traceanalyzer.dashboards.views import View

from traceanalyzer import comparison as comparing
from traceanalyzer import humanize
from traceanalyzer.analyzers.hotspots import Level
from traceanalyzer.renderers import figures
from traceanalyzer.schema import DEVICE_KINDS, Kind

PAGES = {
    "/": "Overview",
    "/hotspots": "Hotspots",
    "/timeline": "Timeline",
    "/health": "Health",
    "/distributed": "Distributed",
    "/fusion": "Fusion",
    "/memory": "Memory",
    "/ascend": "Ascend",
    "/compare": "Compare",
}
"""URL path → page title, in menu order."""

FINDING_PAGE = {
    "hotspots": "/hotspots",
    "health": "/health",
    "gemm": "/health#gemm-throughput",
    "distributed": "/distributed",
    "fusion": "/fusion",
    "memory": "/memory",
    "ascend": "/ascend",
}
"""Which page shows the evidence of an analyzer's findings."""

HEALTH_EVIDENCE = (
    ("syncs", "syncs"),
    ("idle_before_ns", "launch-bound"),
    ("fp32_gemm_ns", "fp32-gemms"),
    ("ops_with_device_work", "dynamic-shapes"),
    ("large_gaps", "idle-gaps"),
)
"""Health findings by an evidence key only that check writes → the Health page table with their rows."""

ALL = "all"
DETAIL_LEVELS = (Level.KERNEL.value, Level.CPU_OP.value, Level.OP_DEVICE.value)
"""Hotspot levels whose rows name an op or kernel (they have kernels, shapes and a call stack)."""
PICK_HINT = "Click a name in the table or a bar in the chart: its kernels, CPU ops, shapes and call stack show here."
COMPARE_TOP = 15
HOTSPOT_ROWS = 20
LOADING_DELAY_MS = 300
"""Spinners show only for updates slower than this (a quick update would only flash)."""
FINDING_COLUMNS = {
    "severity": "severity",
    "title": "finding",
    "cost_ns": "cost (total over the steps)",
    "step_share": "share of step time",
    "advice": "advice",
}
"""Columns of the findings table and their headers."""
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


def render(path: str, views: dict[str, View], key: str | None, query: dict[str, str]) -> list:
    """The content of one page for the selected trace (key), with the picks the URL's query holds."""
    view = views.get(key or "")
    if view is None:
        return [html.P("No trace loaded yet: open one above.", id="no-trace")]
    if path == "/compare":
        return compare(views, key, query)
    builder = _BUILDERS.get(path, overview)
    return [html.H2(f"{PAGES.get(path, 'Overview')} · {view.label}", className="page-title"), *builder(view, query)]


def overview(view: View, query: dict[str, str]) -> list:
    """Trace facts, the headline numbers, the per-step breakdown and the ranked findings."""
    report = view.report()
    t, s = report["trace"], report["summary"]
    trace_facts = {
        "platform": f"{t['platform']} ({t['source_format']} {t['format_version']})".strip(),
        "ranks": ", ".join(map(str, t["ranks"])),
        "devices": ", ".join(sorted({d["name"] for d in t["devices"] if d["name"]})) or "–",
        "recorded_window_ns": t["span_ns"],
        "events": t["events"],
    }
    return [
        html.Div([facts_list(trace_facts, "trace-facts"), labelled(headline(view), "headline")], className="row"),
        html.H3("Findings, ranked by what they are worth"),
        findings_table(report["findings"], state.encode(query)),
        html.H3("Where each step's time goes (ms per step)"),
        dcc.Graph(id="step-chart", figure=_step_chart(view)),
        *[html.P(f"warning: {w}", className="warning") for w in [*t["warnings"], *view.notes]],
        html.P(f"Device time by kind (total over the recorded window): {_kinds(s['time_by_kind'])}", id="by-kind"),
    ]


def _step_chart(view: View):
    overlap = view.optional("overlap")
    if overlap.data is None:
        return figures.step_bars(view.report()["steps"])
    return charts.step_breakdown(overlap.data)


def headline(view: View) -> list[tuple[str, str]]:
    """Step time, device busy, kernel time, communication and peak memory as the report has them, each saying
    whether it is per step or a total, in its unit."""
    report = view.report()
    s = report["summary"]
    multi = len(view.ranks()) > 1
    pairs = [
        ("steps profiled" + (" (rank × step)" if multi else ""), humanize.value("steps", s["steps"])),
        ("step time (median per step)", humanize.duration(s["step_wall_ns_median"])),
        ("device busy (share of the recorded window)", humanize.share(s["device_busy_share"])),
        ("kernel time (median per step)", humanize.duration(s["kernel_ns_per_step"])),
        ("communication (share of kernel time, total)", humanize.share(s["communication_share"])),
    ]
    exposed = _fact(report, "distributed", "comm_exposed_ns")
    if multi and exposed is not None:
        pairs.append(("exposed communication (total over ranks and steps)", humanize.duration(exposed)))
    peak = _fact(report, "memory", "peak_allocated_bytes")
    if peak is not None:
        pairs.append(("peak allocated memory (highest rank)", humanize.size(peak)))
    return pairs


def _fact(report: dict, section: str, key: str) -> object:
    """A fact of a report section by its id (sections as records or as a plain mapping)."""
    facts = (report.get(section) or {}).get("facts", {})
    if isinstance(facts, list):
        return next((f["value"] for f in facts if f["id"] == key), None)
    return facts.get(key)


DEVICE_WORK = {k.value for k in DEVICE_KINDS} | {Kind.COMM_TASK.value}
"""Kinds that are device work (the by-kind line leaves host time out)."""


def _kinds(rows: list[dict]) -> str:
    device = [r for r in rows if r["kind"] in DEVICE_WORK]
    return ", ".join(f"{r['kind']} {humanize.duration(r['total_ns'])}" for r in device) or "–"


def finding_link(finding: dict, search: str) -> str:
    """The page (and table on it) that holds a finding's evidence, keeping the URL's picks."""
    page = FINDING_PAGE.get(finding["analyzer"], "/")
    if finding["analyzer"] == "health":
        anchor = next((a for key, a in HEALTH_EVIDENCE if key in finding.get("evidence", {})), "")
        page += f"#{anchor}" if anchor else ""
    path, _, anchor = page.partition("#")
    return f"{path}{search}" + (f"#{anchor}" if anchor else "")


def findings_table(findings: list[dict], search: str = "") -> html.Table | html.P:
    """Findings with their worth, advice and a link to the page with the evidence."""
    if not findings:
        return html.P("No findings.", id="findings")
    header = html.Tr([html.Th(title) for title in FINDING_COLUMNS.values()] + [html.Th("evidence")])
    rows = [
        html.Tr(
            [html.Td(humanize.value(c, f.get(c))) for c in FINDING_COLUMNS]
            + [html.Td(dcc.Link(f"{f['analyzer']} →", href=finding_link(f, search)))],
            className=f"severity-{f['severity']}",
        )
        for f in findings
    ]
    return html.Table([html.Thead(header), html.Tbody(rows)], id="findings", className="findings")


def hotspots(view: View, query: dict[str, str]) -> list:
    """Filters (from the URL), the hotspot table and chart drawn for them, and the selected op's details."""
    levels = [lv.value for lv in Level]
    picks = {
        "level": state.choice(query, "level", levels, Level.KERNEL.value),
        "step": state.choice(query, "step", [ALL, *view.steps()], ALL),
        "rank": state.choice(query, "rank", [ALL, *view.ranks()], ALL),
        "kind": state.choice(query, "kind", [ALL, *view.kinds()], ALL),
    }
    table = hotspot_table(view, **picks)
    kernel_only = picks["level"] != Level.KERNEL.value
    grid = tables.grid("hs-table", hotspot_content(table, picks["level"]), page_size=HOTSPOT_ROWS)
    return [
        html.Div(
            [
                _dropdown("hs-level", levels, picks["level"], "level"),
                _dropdown("hs-step", [ALL, *view.steps()], picks["step"], "step"),
                _dropdown("hs-rank", [ALL, *view.ranks()], picks["rank"], "rank"),
                _dropdown("hs-kind", [ALL, *view.kinds()], picks["kind"], "kind (kernel level)", kernel_only),
                html.Span(f"platform: {view.trace.meta.platform.value}", className="platform"),
            ],
            className="controls",
        ),
        html.P(HOTSPOT_BASIS, className="note"),
        dcc.Loading(grid, delay_show=LOADING_DELAY_MS),
        html.Div(
            [
                html.Div(dcc.Graph(id="hs-bars", figure=charts.hotspot_bars(table)), className="col"),
                html.Div(
                    [
                        html.H3("Selected"),
                        dcc.Store(id="hs-selected"),
                        dcc.Loading(html.Div(id="hs-details", children=html.P(PICK_HINT))),
                    ],
                    className="col",
                ),
            ],
            className="row",
        ),
    ]


HOTSPOT_BASIS = (
    "Times are totals over the steps and ranks picked (all: the whole recorded window); share is of the table's "
    "total, cumulative share down the ranking."
)
HOTSPOT_FIRST = ("name", "kind", "total_ns", "share", "cum_share")
"""Hotspot columns shown first, so share and cumulative share sit beside the total at any width."""
HOTSPOT_HEADERS = {
    Level.CPU_OP.value: {
        "total_ns": "self time (ms)",
        "inclusive_ns": "inclusive time (ms)",
        "device_self_ns": "device time launched (ms)",
    },
    Level.OP_DEVICE.value: {"total_ns": "device time (ms)"},
}
"""Headers that say which time a level's total is (a CPU op's total is its self host time)."""


def hotspot_content(table: pd.DataFrame, level: str) -> dict:
    """The hotspot grid's props: names cut in the middle (full name on hover and in each row's full_name), share
    and cumulative share beside the total."""
    columns = [c for c in HOTSPOT_FIRST if c in table] + [c for c in table if c not in HOTSPOT_FIRST]
    full = [str(n) for n in table["name"]] if len(table) else []
    shown = table.assign(name=shortened(full)) if len(table) else table
    content = tables.content(shown, columns)
    headers = HOTSPOT_HEADERS.get(level, {})
    content["columns"] = [{**c, "name": headers.get(c["id"], c["name"])} for c in content["columns"]]
    for row, tip, name in zip(content["data"], content["tooltip_data"], full, strict=True):
        tip.pop("name", None)
        if row["name"] != name:  # cut: the row keeps its full name for a click, the tooltip shows it
            row["full_name"] = tip["name"] = name
    return content


def _dropdown(dropdown_id: str, values: list, value: object, label: str, disabled: bool = False) -> html.Label:
    options = [{"label": str(v), "value": v} for v in values]
    return html.Label(
        [label, dcc.Dropdown(id=dropdown_id, options=options, value=value, clearable=False, disabled=disabled)],
        className="control",
    )


def hotspot_filter(value: object) -> object:
    """A dropdown value as an analyzer argument (``all`` → None)."""
    return None if value in (None, ALL) else value


def hotspot_table(view: View, level: str, step: object = ALL, rank: object = ALL, kind: object = ALL) -> pd.DataFrame:
    """The hotspot table for the pickers' values (the kind filter applies at the kernel level only)."""
    kind = hotspot_filter(kind) if level == Level.KERNEL.value else None
    return view.hotspots(level, hotspot_filter(step), hotspot_filter(rank), kind)


def selection(view: View, level: str, name: str, step: object, rank: object) -> list:
    """The details of a picked name for the step and rank picked, or why there are none."""
    if level not in DETAIL_LEVELS:
        return [html.P(f"{name}: pick the kernel, cpu_op or op_device level to see kernels, shapes and stacks.")]
    where = ", ".join(f"{k} {v}" for k, v in (("step", step), ("rank", rank)) if v not in (None, ALL)) or "all steps"
    info = view.details(level, name, hotspot_filter(step), hotspot_filter(rank))
    if not info["kernels"] and not info["ops"]:
        return [html.H4(name, id="selected-name"), html.P(f"Nothing of this name in {where}.", id="selected-none")]
    return [html.P(f"in {where} (times are totals there)", className="note"), *details(info)]


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


def timeline(view: View, query: dict[str, str]) -> list:
    """Step and rank pickers, how many host levels to show (Python frames collapsed or not), and the step's Gantt."""
    steps = view.steps()
    if not steps:
        return [unavailable("Timeline", "the trace has no step markers")]
    levels = state.choice(query, "levels", timeline_lanes.LEVEL_CHOICES, timeline_lanes.LEVEL_CHOICES[0])
    frames = ["python"] if query.get("frames") == "python" else []
    return [
        html.Div(
            [
                _dropdown("tl-rank", view.ranks(), state.choice(query, "rank", view.ranks(), view.ranks()[0]), "rank"),
                _dropdown("tl-step", steps, state.choice(query, "step", steps, steps[0]), "step"),
                _dropdown("tl-levels", list(timeline_lanes.LEVEL_CHOICES), levels, "host levels per thread"),
                dcc.Checklist(
                    id="tl-python",
                    options=[
                        {"label": " show Python frames", "value": "python", "disabled": not view.has_python_frames()}
                    ],
                    value=frames,
                    className="control",
                ),
            ],
            className="controls",
        ),
        html.P(TIMELINE_BASIS, className="note"),
        html.P(id="tl-note"),
        dcc.Loading(dcc.Graph(id="tl-graph", config={"scrollZoom": True})),
    ]


TIMELINE_BASIS = (
    "One step of one rank, ms from the step's first event. Each host thread has lanes per call level, counted in "
    "that thread; Python frames are collapsed unless shown, and deeper levels expand with 'host levels'."
)


def timeline_figure(
    view: View, rank: int, step: int, levels: int, python: bool, window: tuple[int, int] | None = None
) -> tuple:
    """The Gantt of one step and the note saying how many events it draws as how many segments."""
    seg = view.segments(rank, step, levels, python, window)
    merged = int(seg["count"].sum()) if len(seg) else 0
    note = f"{merged:,} events drawn as {len(seg):,} segments (near-adjacent ones of one lane and colour merged"
    note += "; zoom in to split them)." if merged > len(seg) else ")."
    fig = figures.gantt(seg, (rank, step, levels, python))
    found = view.marks(rank, seg)
    fig.update_layout(shapes=[_shade(mark) for mark in found.itertuples()])
    counts = found["what"].value_counts()
    if len(counts):
        shaded = ", ".join(f"{n} {what}{'s' if n > 1 else ''} ({MARK_NAMES[what]})" for what, n in counts.items())
        note += f" Shaded from the Health page: {shaded}."
    return fig, note


def _shade(mark) -> dict:
    """A finding's place on the timeline: a band across every lane."""
    return {
        "type": "rect",
        "xref": "x",
        "yref": "paper",
        "x0": mark.start_ns / 1e6,
        "x1": mark.end_ns / 1e6,
        "y0": 0,
        "y1": 1,
        "fillcolor": MARK_COLOURS[mark.what],
        "opacity": 0.18,
        "line": {"width": 0},
        "layer": "below",
        "name": f"{mark.what}: {figures.text(mark.label)}",
    }


MARK_COLOURS = {"idle gap": "#ff7f0e", "host sync": "#d62728"}
MARK_NAMES = {"idle gap": "orange", "host sync": "red"}


SINGLE_RANK = "One rank: no cross-rank views (late rank, waits across ranks); its collectives are listed below."


def distributed(view: View, query: dict[str, str]) -> list:
    """Exposed communication per rank and step, the late rank, and every collective with wait vs transfer."""
    overlap, collectives = view.optional("overlap"), view.optional("collectives")
    out: list = [_late_rank(view)]
    if len(view.ranks()) < 2:
        out.append(html.P(SINGLE_RANK, id="single-rank", className="note"))
    elif overlap.data is None:
        out.append(unavailable("Overlap", overlap.reason))
    else:
        title = "Exposed communication per rank and step (ms per step)"
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


def fusion(view: View, query: dict[str, str]) -> list:
    """Fusion opportunities ranked by estimated saving."""
    found = view.optional("fusion")
    facts = _section(view, "fusion", with_tables=False)
    if found.data is None:
        return [*facts, unavailable("Fusion", found.reason)]
    table = found.data
    columns = [c for c in FUSION_FIRST if c in table] + [c for c in table if c not in FUSION_FIRST]
    return [
        *facts,
        html.H3("Opportunities"),
        html.P(FUSION_BASIS, className="note"),
        tables.table("fusion-table", table, columns),
    ]


FUSION_FIRST = ("pattern", "saving_ns_per_step", "where", "replacement", "current_ns_per_step", "occurrences")
"""Fusion columns shown first: what, what it saves, where and with what, before the breakdown of the estimate."""
FUSION_BASIS = "Times and bytes are per step (ms, MiB); savings are estimates: what fusing would remove."


def memory(view: View, query: dict[str, str]) -> list:
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


COMPARE_HINT = (
    "Pick two loaded traces (open a second one above); picking one trace on both sides compares it with itself."
)


COMPARE_METRICS = {
    "step_ns": "step time",
    "device_busy_ns": "device busy",
    "comm_exposed_ns": "exposed communication",
    "comm_hidden_ns": "hidden communication",
    "idle_ns": "device idle",
}
"""Human names of the comparison's summary metrics."""


def compare(views: dict[str, View], key: str, query: dict[str, str]) -> list:
    """Pickers for two loaded traces (the one selected on the left, another on the right); the comparison fills in
    below. A lone trace is not compared with itself unless the user picks it on both sides."""
    options = [{"label": v.label, "value": k} for k, v in views.items()]
    others = [k for k in views if k != key]
    left = state.choice(query, "left", list(views), key)
    right = state.choice(query, "right", list(views), others[0] if others else None)
    return [
        html.H2(f"Compare · {views[key].label}", className="page-title"),
        html.Div(
            [
                html.Label(["baseline", dcc.Dropdown(id="cmp-a", options=options, value=left)], className="control"),
                html.Label(["candidate", dcc.Dropdown(id="cmp-b", options=options, value=right)], className="control"),
            ],
            className="controls",
        ),
        html.Div(id="cmp-body"),
    ]


def comparison(left: View, right: View) -> list:
    """What changed per step from the left trace to the right one, then their summaries and top kernels side by side."""
    diff = comparing.compare(left.trace, right.trace)
    per = "median per step" if diff.per_step else "per rank, whole window"
    summary = diff.summary.assign(metric=[f"{COMPARE_METRICS.get(m, m)} ({per})" for m in diff.summary["metric"]])
    return [
        html.H3(f"What changed per step: {left.label} → {right.label}"),
        *(html.P(note, className="note") for note in diff.notes),
        tables.table("cmp-summary", summary, page_size=len(summary) or 1),
        html.H4("Kernels by change (new, gone, faster, slower), the rule that matched each and its noise verdict"),
        tables.table("cmp-changes", diff.levels[Level.KERNEL.value].head(COMPARE_TOP), COMPARE_COLUMNS, COMPARE_TOP),
        *_cross_platform(diff),
        html.Div(
            [html.Div(_compared(v, side), className="col") for v, side in ((left, "a"), (right, "b"))], className="row"
        ),
    ]


COMPARE_COLUMNS = [c for c in comparing.DIFF_COLUMNS if not c.endswith("_names")]
"""Columns of the kernel changes table (the matched names' lists stay in the JSON)."""


def _cross_platform(diff: comparing.Comparison) -> list:
    """GPU ↔ NPU: device time per step by category and the framework ops that differ most (nothing otherwise)."""
    if diff.platforms is None:
        return []
    categories, ops = diff.platforms.categories, diff.platforms.ops.head(COMPARE_TOP)
    return [
        html.H4("GPU ↔ NPU: device time per step by category (msprof-analyze compare taxonomy)"),
        tables.table("cmp-categories", categories, page_size=len(categories) or 1),
        html.H4("Framework ops that differ most"),
        tables.table("cmp-ops", ops, page_size=COMPARE_TOP),
    ]


def _compared(view: View, side: str) -> list:
    return [
        html.H3(view.label),
        labelled(headline(view), f"cmp-{side}-facts"),
        html.H4("Top kernels"),
        tables.table(f"cmp-{side}-kernels", view.hotspots(Level.KERNEL.value).head(COMPARE_TOP), page_size=COMPARE_TOP),
        html.H4("Top CPU ops (self time)"),
        tables.table(f"cmp-{side}-ops", view.hotspots(Level.CPU_OP.value).head(COMPARE_TOP), page_size=COMPARE_TOP),
    ]


_BUILDERS = {
    "/": overview,
    "/hotspots": hotspots,
    "/timeline": timeline,
    "/health": analyses.health,
    "/distributed": distributed,
    "/fusion": fusion,
    "/memory": memory,
    "/ascend": analyses.ascend,
}
