"""The Compare page: two loaded traces picked as baseline and candidate, compared as ``traceanalyze compare`` lays
it out (the gate's verdict for a threshold, what changed the step, each change with its noise verdict), and both
runs' top kernels and CPU ops side by side."""

from __future__ import annotations

import dash
import pandas as pd
from dash import Input, Output, State, dcc, html
from traceanalyzer.dashboards import state, tables
from traceanalyzer.dashboards.blocks import headline, labelled
from traceanalyzer.dashboards.store import Store
from traceanalyzer.dashboards.views import View

from traceanalyzer import comparison as comparing
from traceanalyzer.analyzers.hotspots import Level
from traceanalyzer.comparison.matching import Rule
from traceanalyzer.humanize import NS_PER_MS
from traceanalyzer.renderers import compare as compare_renderer

TITLE = "Compare"
COMPARE_TOP = 15
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


def layout(views: dict[str, View], key: str, query: dict[str, str]) -> list:
    """Pickers for two loaded traces (the one selected as the baseline; the candidate only as the user picks it, in
    the page or the URL: no pair is compared unasked) and the gate's threshold; the comparison fills in below."""
    options = [{"label": v.label, "value": k} for k, v in views.items()]
    left = state.choice(query, "left", list(views), key)
    right = state.choice(query, "right", list(views), None)
    return [
        html.H2(f"{TITLE} · {views[key].label}", className="page-title"),
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


def threshold(pct: float | str | None, ms: float | str | None) -> comparing.Threshold | None | str:
    """The gate's threshold from the page's boxes (percent, ms per step): None when neither is given, a message
    when one is not a number of zero or more (as the CLI refuses)."""
    given = {"percent": pct, "ms": ms}
    values = {}
    for what, value in given.items():
        if value is None or value == "":
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


def _gate(gate: dict | None, limit: object) -> html.Div | html.P:
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


def register(app: dash.Dash, store: Store) -> None:
    """The comparison of the two picked traces and the gate's verdict for the threshold (written to the URL)."""

    @app.callback(
        Output("cmp-body", "children"),
        state.URL,
        Input("cmp-a", "value"),
        Input("cmp-b", "value"),
        Input("cmp-pct", "value"),
        Input("cmp-ms", "value"),
        State("url", "search"),
        State("trace", "value"),
        prevent_initial_call="initial_duplicate",  # compares when the page opens
    )
    def compare(left, right, pct, ms, search, key):
        search = state.recorded(search, {"left": key}, left=left, right=right, pct=pct, ms=ms)
        diff = store.comparison(left, right)
        if diff is None:
            return html.P(COMPARE_HINT, id="cmp-hint"), search
        return comparison(store.view(left), store.view(right), diff, threshold(pct, ms)), search
