"""Pieces the pages share: a notice for a missing analysis, facts lists (the headline facts among them), and a
section's tables with their basis."""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import pandas as pd
from dash import dcc, html
from traceanalyzer.dashboards import state, tables
from traceanalyzer.dashboards.views import View

from traceanalyzer.renderers.document import fact_value
from traceanalyzer.section import Fact, Per, Section, Table

PER = {Per.STEP: " (per step)", Per.TOTAL: " (total)", Per.NONE: ""}
"""What a section's number or table is, as a label suffix."""
LOADING_DELAY_MS = 300
"""Spinners show only for updates slower than this (a quick update would only flash)."""
HEADLINE = (
    ("summary", "steps"),
    ("summary", "step_ns"),
    ("summary", "bound"),
    ("summary", "device_busy_share"),
    ("summary", "kernel_ns"),
    ("summary", "communication_share"),
    ("distributed", "comm_exposed_ns"),
    ("memory", "peak_allocated_bytes"),
)
"""The (section id, fact id) pairs the Overview leads with (and Compare shows per run), in order; those a trace
lacks are left out."""


def unavailable(what: str, reason: str) -> html.Div:
    """The notice a page shows when an analysis has nothing for this trace."""
    return html.Div(
        [html.B(f"{what}: not available for this trace."), html.Span(f" ({reason})" if reason else "")],
        className="unavailable",
    )


def no_such(query: dict[str, str], choices: dict[str, list]) -> list:
    """A notice for each pick the URL names that the trace lacks (a step or rank of another trace), with a link to
    the page without it; none when every pick is there."""
    out = []
    for key, options in choices.items():
        wanted = state.missing(query, key, options)
        if wanted is not None:
            known = ", ".join(str(o) for o in options)
            out.append(
                html.Div(
                    [
                        html.B(f"No such {key} {wanted!r} in this trace"),
                        f" (the link names it; its {key}s: {known}). ",
                        dcc.Link(f"Show the page without a {key}", href=state.encode({**query, key: None}) or "?"),
                    ],
                    className="unavailable",
                    id=f"no-such-{key}",
                )
            )
    return out


def facts_list(pairs: dict, list_id: str | None = None) -> html.Dl:
    """Plain {key: value} facts as a definition list, formatted by the key's suffix."""
    return labelled(tables.facts(pairs), list_id)


def labelled(pairs: list[tuple[str, str]], list_id: str | None = None) -> html.Dl:
    """Label/text pairs as a definition list."""
    items = []
    for label, text in pairs:
        items += [html.Dt(label), html.Dd(text)]
    return html.Dl(items, id=list_id or "", className="facts")


def fact_pair(fact: Fact) -> tuple[str, str]:
    """A section fact's label, saying per step or total, and its value in its unit."""
    return fact.title + PER[fact.per], fact_value(fact)


def headline(view: View) -> list[tuple[str, str]]:
    """The headline facts, each labelled with its basis (per step or total) and shown in its unit."""
    return [fact_pair(f) for f in (view.fact(s, fid) for s, fid in HEADLINE) if f is not None]


def section_facts(section: Section, list_id: str) -> html.Dl:
    """A section's facts, each with its basis and unit."""
    return labelled([fact_pair(f) for f in section.facts], list_id)


def section_tables(section: Section, skip: tuple[str, ...] = (), evidence: dict | None = None) -> list:
    """A section's non-empty tables (except those in skip) under their titles, each saying per step or total, a
    finding's evidence rows highlighted."""
    out: list = []
    for t in section.tables:
        if len(t.frame) and t.id not in skip:
            title = t.title + PER[t.per] + (f" — {t.note}" if t.note else "")
            out += [html.H3(title), tables.section_table(f"{section.id}-{t.id}", t, evidence=evidence)]
    return out


def analysis(
    block_id: str,
    title: str,
    basis: str,
    table: Table | None,
    empty: str,
    rank: int | None = None,
    evidence: dict | None = None,
    links: list[str] | None = None,
) -> html.Section:
    """One section table under its title, with what its rows are, or why it is empty; filtered to one rank's rows
    when rank is given and the table has a rank column, a finding's evidence rows highlighted, links to the
    Timeline per row when given."""
    if table is not None and len(table.frame):
        body = tables.section_table(f"{block_id}-table", table, only={"rank": rank}, evidence=evidence, links=links)
    else:
        body = html.P(empty, className="empty")
    return html.Section([html.H3(title), html.P(basis, className="note"), body], id=block_id, className="analysis")


class Block(NamedTuple):
    """One table of a page: the section and table ids it shows, its anchor, what its rows are, when it is empty."""

    section: str
    table: str
    anchor: str
    basis: str
    empty: str


def block_section(
    view: View,
    block: Block,
    rank: int | None = None,
    evidence: dict | None = None,
    links: Callable[[pd.DataFrame], list[str]] | None = None,
) -> html.Section:
    """A block's section table under its title and basis (a finding's evidence rows highlighted; with links, each
    row's link from its rows), or why the section has none."""
    table = view.table(block.section, block.table)
    if table is None:
        reason = f"not available: the {block.section} analyzer had nothing to report for this trace"
        return analysis(block.anchor, block.table.replace("_", " "), block.basis, None, reason)
    rows = links(table.frame) if links is not None and len(table.frame) else None
    title = table.title + PER[table.per]
    return analysis(block.anchor, title, block.basis, table, block.empty, rank, evidence, rows)


def evidence_note(key: dict | None) -> list:
    """What the highlighted rows are, when a finding's link asked for some."""
    if not key:
        return []
    where = ", ".join(f"{k} {v}" for k, v in key.items())
    text = f"Highlighted: the rows of the finding you followed ({where})."
    return [html.P(text, id="evidence-note", className="note")]


def dropdown(dropdown_id: str, values: list, value: object, label: str, disabled: bool = False) -> html.Label:
    """A labelled dropdown of values with one picked."""
    options = [{"label": str(v), "value": v} for v in values]
    return html.Label(
        [label, dcc.Dropdown(id=dropdown_id, options=options, value=value, clearable=False, disabled=disabled)],
        className="control",
    )
