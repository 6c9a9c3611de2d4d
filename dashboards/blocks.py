"""Pieces every page uses: a notice for a missing analysis, facts lists, and a section's tables with their basis."""

from __future__ import annotations

from dash import dcc, html
from traceanalyzer.dashboards import state, tables

from traceanalyzer.renderers.document import fact_value
from traceanalyzer.section import Fact, Per, Section, Table

PER = {Per.STEP: " (per step)", Per.TOTAL: " (total)", Per.NONE: ""}
"""What a section's number or table is, as a label suffix."""


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
