"""Page layouts. Each page formats and draws the analyzers' data of one View; nothing here computes a finding."""

from __future__ import annotations

from collections.abc import Collection

import pandas as pd
from dash import dcc, html
from traceanalyzer.dashboards import analyses, charts, inference_page, state, tables, timeline_page
from traceanalyzer.dashboards.blocks import (
    PER,
    dropdown,
    evidence_note,
    fact_pair,
    labelled,
    no_such,
    section_facts,
    section_tables,
    unavailable,
)
from traceanalyzer.dashboards.names import shortened
from traceanalyzer.dashboards.overview import headline, overview
from traceanalyzer.dashboards.views import View

from traceanalyzer import comparison as comparing
from traceanalyzer import humanize
from traceanalyzer.analyzers.hotspots import Level
from traceanalyzer.comparison.matching import Rule
from traceanalyzer.humanize import NS_PER_MS
from traceanalyzer.renderers import compare as compare_renderer
from traceanalyzer.renderers import figures

PAGES = {
    "/": "Overview",
    "/hotspots": "Hotspots",
    "/timeline": "Timeline",
    "/health": "Health",
    "/distributed": "Distributed",
    "/fusion": "Fusion",
    "/memory": "Memory",
    "/ascend": "Ascend",
    "/inference": "Inference",
    "/compare": "Compare",
}
"""URL path → page title, in menu order."""

ALL = "all"
DETAIL_LEVELS = (Level.KERNEL.value, Level.CPU_OP.value, Level.OP_DEVICE.value)
"""Hotspot levels whose rows name an op or kernel (they have kernels, shapes and a call stack)."""
PICK_HINT = "Click a name in the table or a bar in the chart: its kernels, CPU ops, shapes and call stack show here."
COMPARE_TOP = 15
HOTSPOT_ROWS = 20
LOADING_DELAY_MS = 300
"""Spinners show only for updates slower than this (a quick update would only flash)."""
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


def render(
    path: str, views: dict[str, View], key: str | None, query: dict[str, str], loading: Collection[str] = ()
) -> list:
    """The content of one page for the selected trace (key), with the picks the URL's query holds; for a key not
    loaded (a link from another session, a trace not opened here), a message saying so."""
    view = views.get(key or "")
    if view is None and key in loading:
        return [html.P(f"Trace {key} is still loading: its page shows once it is ready.", id="not-loaded")]
    if view is None and key:
        return [html.P(NOT_LOADED.format(key=key, count=len(views)), id="not-loaded", className="callout")]
    if view is None:
        return [html.P("No trace loaded yet: open one above.", id="no-trace")]
    if path == "/compare":
        return compare(views, key, query)
    builder = _BUILDERS.get(path, overview)
    return [html.H2(f"{PAGES.get(path, 'Overview')} · {view.label}", className="page-title"), *builder(view, query)]


NOT_LOADED = (
    "Trace {key} is not loaded here (a link names a trace by a hash of its contents; this dashboard holds {count} "
    "other trace(s)): open its file above, or pick a loaded trace in the menu."
)


def hotspots(view: View, query: dict[str, str]) -> list:
    """Filters (from the URL), the hotspot table and chart drawn for them, and the selected op's details."""
    levels = [lv.value for lv in Level]
    wrong = no_such(query, {"step": [ALL, *view.steps()], "rank": [ALL, *view.ranks()], "level": levels})
    if wrong:
        return wrong
    picks = {
        "level": state.choice(query, "level", levels, HOTSPOT_DEFAULTS["level"]),
        "step": state.choice(query, "step", [ALL, *view.steps()], ALL),
        "rank": state.choice(query, "rank", [ALL, *view.ranks()], ALL),
        "kind": state.choice(query, "kind", [ALL, *view.kinds()], ALL),
    }
    table = hotspot_table(view, **picks)
    kernel_only = picks["level"] != Level.KERNEL.value
    key = state.evidence(query)
    content = hotspot_content(table, picks["level"])
    content = tables.marked(content, tables.matching_rows(table, key or {}), HOTSPOT_ROWS)
    grid = tables.grid("hs-table", content, page_size=HOTSPOT_ROWS)
    return [
        html.Div(
            [
                dropdown("hs-level", levels, picks["level"], "level"),
                dropdown("hs-step", [ALL, *view.steps()], picks["step"], "step"),
                dropdown("hs-rank", [ALL, *view.ranks()], picks["rank"], "rank"),
                dropdown("hs-kind", [ALL, *view.kinds()], picks["kind"], "kind (kernel level)", kernel_only),
                html.Span(f"platform: {view.trace.meta.platform.value}", className="platform"),
            ],
            className="controls",
        ),
        html.P(HOTSPOT_BASIS, className="note"),
        *evidence_note(key),
        dcc.Loading(grid, delay_show=LOADING_DELAY_MS),
        html.Div(
            [
                html.Div(dcc.Graph(id="hs-bars", figure=charts.hotspot_bars(table)), className="col-wide"),
                html.Div(
                    [
                        html.H3("Selected"),
                        dcc.Store(id="hs-selected", data=query.get("sel")),
                        dcc.Loading(html.Div(id="hs-details", children=_picked(view, picks, query.get("sel")))),
                    ],
                    className="col-narrow",
                ),
            ],
            className="row",
        ),
    ]


def _picked(view: View, picks: dict, name: str | None) -> list:
    """The details of the name the URL picked (the hint when none)."""
    if not name:
        return [html.P(PICK_HINT)]
    return selection(view, picks["level"], name, picks["step"], picks["rank"])


HOTSPOT_BASIS = (
    "Times are totals over the steps and ranks picked (all: the whole recorded window); share is of the table's "
    "total, cumulative share down the ranking."
)
HOTSPOT_NAME_WIDTH = "350px"
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
    content["style_cell_conditional"] = [  # the short names whole: 48 characters of monospace
        {**c, "maxWidth": HOTSPOT_NAME_WIDTH} if c["if"]["column_id"] == "name" else c
        for c in content["style_cell_conditional"]
    ]
    content["columns"] = [{**c, "name": headers.get(c["id"], c["name"])} for c in content["columns"]]
    for row, tip, name in zip(content["data"], content["tooltip_data"], full, strict=True):
        tip.pop("name", None)
        if row["name"] != name:  # cut: the row keeps its full name for a click, the tooltip shows it
            row["full_name"] = tip["name"] = name
    return content


HOTSPOT_DEFAULTS = {"level": Level.KERNEL.value, "step": ALL, "rank": ALL, "kind": ALL}


def hotspot_picks_changed(query: dict[str, str], picks: dict[str, object]) -> bool:
    """Whether the filters differ from those the URL holds (the user changed one since the page opened)."""
    return any(str(v) != query.get(k, HOTSPOT_DEFAULTS[k]) for k, v in picks.items())


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


SINGLE_RANK = "One rank: no cross-rank views (late rank, waits across ranks)."


def distributed(view: View, query: dict[str, str]) -> list:
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


def fusion(view: View, query: dict[str, str]) -> list:
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


def memory(view: View, query: dict[str, str]) -> list:
    """Allocated/reserved over time with the peak marked, and the memory section's facts and tables."""
    found, section = view.optional("memory"), view.section("memory")
    if found.data is None or section is None:
        return [unavailable("Memory", found.reason or "no memory events")]
    result = found.data
    return [
        dcc.Graph(id="memory-graph", figure=_memory_chart(view, result.timeline, result.peaks)),
        section_facts(section, "memory-facts"),
        *evidence_note(state.evidence(query)),
        *section_tables(section, evidence=state.evidence(query)),
    ]


def _memory_chart(view: View, timeline: pd.DataFrame, peaks: pd.DataFrame):
    """The memory lines, one colour per rank and device, on the tables' clock: ms from the trace's start, as the
    section's at_ns columns count."""
    fig = charts.pools_coloured(figures.memory_lines(timeline, peaks))
    if not len(timeline):
        return fig
    shift = (int(timeline["ts"].min()) - view.trace.meta.start_ns) / NS_PER_MS
    for trace in fig.data:
        trace.x = [x + shift for x in trace.x]
    fig.update_layout(xaxis_title="ms from the trace's start (the tables' 'at' times count from there too)")
    return fig


COMPARE_HINT = (
    "Pick the baseline and the candidate among the loaded traces (open a second one above); picking one trace on "
    "both sides compares it with itself."
)
GATE_HINT = (
    "Enter a threshold to see the verdict of the CI gate (traceanalyze compare BASELINE CANDIDATE "
    "--fail-on-regression PCT [--fail-on-regression-ms MS])."
)
MATCHED = ("match", "label", "baseline_names", "candidate_names")
"""Columns of the table of kernels matched across the runs by a rule other than the exact name."""


def compare(views: dict[str, View], key: str, query: dict[str, str]) -> list:
    """Pickers for two loaded traces (the one selected as the baseline; the candidate only as the user picks it, in
    the page or the URL: no pair is compared unasked) and the gate's threshold; the comparison fills in below."""
    options = [{"label": v.label, "value": k} for k, v in views.items()]
    left = state.choice(query, "left", list(views), key)
    right = state.choice(query, "right", list(views), None)
    return [
        html.H2(f"Compare · {views[key].label}", className="page-title"),
        html.Div(
            [
                html.Label(
                    ["baseline", dcc.Dropdown(id="cmp-a", options=options, value=left)],
                    className="control control-wide",
                ),
                html.Label(
                    ["candidate", dcc.Dropdown(id="cmp-b", options=options, value=right)],
                    className="control control-wide",
                ),
                _number("cmp-pct", "fail on regression over (% of step time)", query.get("pct")),
                _number("cmp-ms", "… and over (ms per step, optional)", query.get("ms")),
            ],
            className="controls",
        ),
        html.Div(id="cmp-body"),
    ]


def _number(input_id: str, label: str, value: str | None) -> html.Label:
    """A labelled number box (empty: not given)."""
    box = dcc.Input(id=input_id, type="number", min=0, step="any", value=value, debounce=True, className="number")
    return html.Label([label, box], className="control control-wide")


def threshold(pct: object, ms: object) -> comparing.Threshold | None | str:
    """The gate's threshold from the page's boxes (percent, ms per step): None when neither is given, a message
    when one is not a number of zero or more (as the CLI refuses)."""
    given = {"percent": pct, "ms": ms}
    values = {}
    for what, value in given.items():
        if value in (None, ""):
            continue
        try:
            values[what] = float(value)
        except (TypeError, ValueError):
            return f"the {what} threshold must be a number"
        if values[what] < 0:
            return f"the {what} threshold must be zero or more"
    if not values:
        return None
    share, ns = values.get("percent"), values.get("ms")
    return comparing.Threshold(share=None if share is None else share / 100, ns=None if ns is None else ns * NS_PER_MS)


def comparison(left: View, right: View, diff: comparing.Comparison, limit: object = None) -> list:
    """The comparison of the left trace with the right one as the CLI's ``traceanalyze compare`` lays it out (the
    gate's verdict for the threshold, what got slower, each change with its noise verdict and the steps behind it,
    the rule that matched each kernel, the GPU ↔ NPU categories), then both runs' top kernels side by side."""
    data = diff.to_dict(top=COMPARE_TOP, threshold=limit if isinstance(limit, comparing.Threshold) else None)
    for role, view in (("baseline", left), ("candidate", right)):
        data[role] = {**data[role], "paths": [view.label]}  # the picker's name, not the server's path
    return [
        html.H3(f"What changed: {left.label} → {right.label}"),
        _gate(data["gate"], limit),
        *_blocks(compare_renderer.layout(data)[1:]),
        *_matched(diff.levels[Level.KERNEL.value]),
        html.Div(
            [html.Div(_compared(v, side), className="col") for v, side in ((left, "a"), (right, "b"))], className="row"
        ),
    ]


def _gate(gate: dict | None, limit: object) -> html.Div:
    """The gate's verdict as the CLI gives it, or what to enter for one."""
    if isinstance(limit, str):
        return html.Div(f"gate: {limit}", id="cmp-gate", className="callout")
    if gate is None:
        return html.P(GATE_HINT, id="cmp-gate", className="note")
    return html.Div(
        [html.B(f"Gate: {compare_renderer.VERDICT_LABELS[gate['outcome']]}"), f" — {gate['reason']}"],
        id="cmp-gate",
        className="callout callout-pass" if gate["outcome"] == comparing.Outcome.PASS.value else "callout",
    )


def _blocks(blocks: list) -> list:
    """The compare renderer's blocks as page parts: headings, facts lists and tables (their cells as it formats
    them); a table's id is cmp- and its title's words, a facts list's those of its heading and -facts."""
    out: list = []
    heading = ""
    for block in blocks:
        if block.kind == "heading":
            heading = block.title
            out.append(html.H4(block.title))
        elif block.kind == "facts":
            out.append(labelled(block.facts, _slug(heading, "facts")))
        elif block.kind == "table":
            rows = [dict(zip(block.headers, row, strict=True)) for row in block.rows]
            out += [html.H4(block.title), tables.table(_slug(block.title), rows, block.headers, COMPARE_TOP)]
    return out


def _slug(title: str, suffix: str = "") -> str:
    """cmp-, the words of a title before its parenthesis, lower-case and dashed, and a suffix (an element's id)."""
    words = "".join(c if c.isalnum() else " " for c in title.split(" (")[0].split(":")[0].lower()).split()
    return "-".join(["cmp", *words, *([suffix] if suffix else [])])


def _matched(kernels: pd.DataFrame) -> list:
    """The kernels matched across the runs by a normalised name or their launching op, with the names behind each
    match on both sides."""
    rows = kernels[kernels["match"].isin([Rule.NORMALISED.value, Rule.OP.value])]
    if not len(rows):
        return []
    shown = rows[list(MATCHED)].assign(
        baseline_names=rows["baseline_names"].map("; ".join), candidate_names=rows["candidate_names"].map("; ".join)
    )
    return [
        html.H4("Kernels matched by a rule other than the exact name (the names behind each match)"),
        tables.table("cmp-matched", shown, list(MATCHED), COMPARE_TOP),
    ]


SIDE_COLUMNS = ["name", "total_ns", "share", "count"]
"""Columns of each run's top kernels and CPU ops beside the other's (half the page's width each)."""


def _top(view: View, level: Level) -> pd.DataFrame:
    """The top rows of a level's hotspot table (long names cut to the column, whole on hover)."""
    return view.hotspots(level.value).head(COMPARE_TOP)


def _compared(view: View, side: str) -> list:
    return [
        html.H3(view.label),
        labelled(headline(view), f"cmp-{side}-facts"),
        html.H4("Top kernels (total over the recorded window)"),
        tables.table(f"cmp-{side}-kernels", _top(view, Level.KERNEL), SIDE_COLUMNS, COMPARE_TOP),
        html.H4("Top CPU ops (self time, total over the recorded window)"),
        tables.table(f"cmp-{side}-ops", _top(view, Level.CPU_OP), SIDE_COLUMNS, COMPARE_TOP),
    ]


_BUILDERS = {
    "/": overview,
    "/hotspots": hotspots,
    "/timeline": timeline_page.timeline,
    "/health": analyses.health,
    "/distributed": distributed,
    "/fusion": fusion,
    "/memory": memory,
    "/ascend": analyses.ascend,
    "/inference": inference_page.inference,
}
