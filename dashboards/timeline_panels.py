"""The Timeline's panels under the Gantt: the clicked slice's details and a selected range's totals and findings."""

from __future__ import annotations

import pandas as pd
from dash import html
from traceanalyzer.dashboards import slices, tables
from traceanalyzer.dashboards.blocks import labelled

from traceanalyzer import humanize
from traceanalyzer.humanize import NS_PER_MS
from traceanalyzer.schema import NO_ROW

DETAILS_HELP = (
    "Self time: the slice's duration less its direct children's on its thread (device work: its duration). Args: "
    "what the event table holds of it. The call stack runs from its step marker down to it (device work: to its "
    "launch)."
)
RANGE_HELP = (
    "Time inside the range: each event's time clipped to the range, summed (host events nest: an op and the ops "
    "inside it each count, so host kinds can add up to more than the range); all events of the drawn ranks and "
    "steps, whatever the host levels shown."
)


def details_panel(found: dict, origin: int) -> list:
    """The details panel of one slice (slices.details; times in ms from origin, the drawn axis's zero)."""
    step = "outside every step" if found["step"] == NO_ROW else str(found["step"])
    facts = [
        ("name", found["name"]),
        ("kind", found["kind"]),
        ("where", f"rank {found['rank']} · {found['where']} · step {step}"),
        ("start", f"{humanize.axis_ms(found['ts'] - origin)} on the axis"),
        ("duration", humanize.duration(found["dur_ns"])),
        ("self time", humanize.duration(found["self_ns"])),
        ("event row", str(found["row"])),
    ]
    args = [(key, str(value)) for key, value in found["args"].items()]
    out = [
        html.H3("Selected slice"),
        html.P(DETAILS_HELP, className="note"),
        labelled(facts, "tl-details-facts"),
        html.H4("Args"),
        labelled(args, "tl-details-args") if args else html.P("none recorded", id="tl-details-args"),
    ]
    if found["link"]:
        other = found["linked"].assign(
            start_ms=(found["linked"]["ts"] - origin) / NS_PER_MS, dur_ns=found["linked"]["dur"]
        )
        out += [
            html.H4(f"Launch link: {found['link']}"),
            tables.table("tl-details-link", other[["row", "name", "kind", "start_ms", "dur_ns"]], page_size=10),
        ]
    frames = [html.Li(f"{f['kind']} · {f['name']} · {humanize.duration(f['dur_ns'])}") for f in found["stack"]]
    out += [html.H4("Call stack (from the step marker)"), html.Ol(frames, id="tl-details-stack")]
    return out


def range_panel(lo: int, hi: int, hits: pd.DataFrame, found: pd.DataFrame) -> list:
    """A selected range's totals by kind and by name and the findings' marks inside it (lo, hi: ns on the axis;
    found: the drawn marks, ns on the axis)."""
    inside = found[(found["end_ns"] >= lo) & (found["start_ns"] <= hi)]
    said = (
        f"Range {humanize.axis_ms(lo)}–{humanize.axis_ms(hi)} ({humanize.duration(hi - lo)}): {len(hits):,} events "
        f"overlap it."
    )
    marks = [html.Li(f"{m.what}: {m.label}") for m in inside.itertuples()]
    return [
        html.H3("Selected range"),
        html.P(said, id="tl-range-said"),
        html.P(RANGE_HELP, className="note"),
        html.H4("Time inside the range by kind"),
        tables.table("tl-range-kinds", slices.by_kind(hits), page_size=15),
        html.H4(f"By name (the top {slices.TOP_NAMES})"),
        tables.table("tl-range-names", slices.by_name(hits), page_size=10),
        html.H4(f"Findings inside the range ({len(inside)})"),
        html.Ul(marks, id="tl-range-findings") if marks else html.P("none", id="tl-range-findings"),
    ]
