"""The report as one self-contained HTML page: findings, every section's tables (sortable), the ``ta.plots`` figures.

plotly.js is inlined once and nothing is fetched, so the file opens offline and can be attached to an issue. Every
name from a trace is escaped; cells carry their raw value (``data-v``) so a click on a header sorts by number.
"""

from __future__ import annotations

import html
from numbers import Number

import pandas as pd
import plotly.graph_objects as go
import plotly.offline

from traceanalyzer.findings import Finding
from traceanalyzer.renderers.document import PER_SUFFIX, cell, fact_value, finding_lines, header, numeric
from traceanalyzer.report import Report
from traceanalyzer.section import Section, Table, Unit

STYLE = """
body{font:14px/1.45 system-ui,sans-serif;margin:0 auto;max-width:1200px;padding:0 16px 48px;color:#222}
h1{font-size:22px;overflow-wrap:anywhere}dd,h3{overflow-wrap:anywhere}
h2{font-size:18px;border-bottom:1px solid #ccc;padding-bottom:2px;margin-top:32px}
h3{font-size:15px;margin-bottom:4px}dl{display:grid;grid-template-columns:max-content auto;gap:2px 16px}
dt{color:#555}dd{margin:0}table{border-collapse:collapse;margin:4px 0 12px;font-size:13px}
th,td{padding:2px 8px;border-bottom:1px solid #eee;text-align:left;vertical-align:top}
th{cursor:pointer;background:#f4f4f4;user-select:none}td.num{text-align:right;white-space:nowrap}
td.name{word-break:break-all;max-width:560px}.note{color:#666;font-size:12px}
ol.findings li{margin-bottom:10px}.sev{font-weight:bold;text-transform:uppercase;font-size:11px;padding:1px 5px;
border-radius:3px;color:#fff}.sev-high{background:#c62828}.sev-medium{background:#ef6c00}.sev-low{background:#0277bd}
.sev-info{background:#757575}.figure{margin:12px 0}.scroll{overflow-x:auto;max-width:100%}
"""
SORT_JS = """
document.querySelectorAll('table.sortable th').forEach(function (th) {
  th.addEventListener('click', function () {
    var i = th.cellIndex, body = th.closest('table').tBodies[0], rows = Array.from(body.rows);
    var up = th.dataset.dir !== 'asc';
    th.dataset.dir = up ? 'asc' : 'desc';
    rows.sort(function (a, b) {
      var x = a.cells[i].dataset.v, y = b.cells[i].dataset.v, nx = parseFloat(x), ny = parseFloat(y);
      var order = (!isNaN(nx) && !isNaN(ny)) ? nx - ny : String(x).localeCompare(String(y));
      return up ? order : -order;
    });
    rows.forEach(function (r) { body.appendChild(r); });
  });
});
"""


def render(report: Report, figures: list[tuple[str, go.Figure]] = ()) -> str:
    """The whole page: trace facts, ledger and summary, ranked findings, figures, then every other section."""
    first = [s for s in report.sections if s.id in ("ledger", "summary")]
    rest = [s for s in report.sections if s.id not in ("ledger", "summary")]
    origin = int(report.trace["start_ns"])
    body = [_trace(report.trace), *(_section(s, origin) for s in first), _findings(report.findings)]
    body += [_figures(figures), *(_section(s, origin) for s in rest)]
    title = "traceanalyzer report: " + "; ".join(report.trace["paths"])
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{_e(title)}</title>'
        f"<style>{STYLE}</style><script>{plotly.offline.get_plotlyjs()}</script></head>\n<body>"
        f"<h1>{_e(title)}</h1>\n" + "\n".join(body) + f"\n<script>{SORT_JS}</script></body></html>\n"
    )


def _trace(t: dict) -> str:
    devices = ", ".join(sorted({d["name"] for d in t["devices"] if d["name"]})) or "–"
    facts = [
        ("platform", f"{t['platform']} ({t['source_format']} {t['format_version']})"),
        ("ranks", ", ".join(map(str, t["ranks"]))),
        ("devices", devices),
        ("events", f"{t['events']:,} (+{t['memory_events']:,} memory)"),
    ]
    facts += [("warning", w) for w in t["warnings"]]
    return "<h2>Trace</h2>" + _dl(facts)


def _dl(facts: list[tuple[str, str]]) -> str:
    return "<dl>" + "".join(f"<dt>{_e(k)}</dt><dd>{_e(v)}</dd>" for k, v in facts) + "</dl>"


def _findings(findings: list[Finding]) -> str:
    if not findings:
        return '<h2 id="findings">Findings</h2><p>no findings</p>'
    items = []
    for f in findings:
        sev = f.severity.value
        lines = "".join(f"<div>{_e(line)}</div>" for line in finding_lines(f))
        head = f'<span class="sev sev-{sev}">{sev}</span> <b class="finding-title">{_e(f.title)}</b>'
        items.append(f'<li data-id="{_e(f.id)}">{head}{lines}</li>')
    return (
        '<h2 id="findings">Findings (by estimated saving per step)</h2><ol class="findings">' + "".join(items) + "</ol>"
    )


def _figures(figures: list[tuple[str, go.Figure]]) -> str:
    parts = [
        f'<div class="figure"><h3>{_e(title)}</h3>'
        + fig.to_html(full_html=False, include_plotlyjs=False, div_id=f"figure-{i}", config={"responsive": True})
        + "</div>"
        for i, (title, fig) in enumerate(figures)
    ]
    return '<h2 id="figures">Figures</h2>' + "".join(parts) if parts else ""


def _section(section: Section, origin: int) -> str:
    facts = _dl([(f.title + PER_SUFFIX[f.per], fact_value(f)) for f in section.facts]) if section.facts else ""
    tables = "".join(_table(t, origin) for t in section.tables if len(t.frame))
    return f'<section id="{_e(section.id)}"><h2>{_e(section.title)}</h2>{facts}{tables}</section>'


def _table(t: Table, origin: int) -> str:
    """A sortable table: cells shown in their column's unit (instants from ``origin``, ns), raw values kept in
    ``data-v``."""
    columns = [str(c) for c in t.frame.columns]
    units = [t.unit(c) for c in columns]
    head = "".join(f'<th title="{_e(c)}">{_e(header(c, u))}</th>' for c, u in zip(columns, units, strict=True))
    rows = "".join(
        "<tr>" + "".join(_td(v, u, origin) for v, u in zip(row, units, strict=True)) + "</tr>"
        for row in t.frame.itertuples(index=False)
    )
    note = f'<div class="note">{_e(t.note)}</div>' if t.note else ""
    title = f'<h3 id="{_e(t.id)}">{_e(t.title + PER_SUFFIX[t.per])}</h3>'
    table = f'<table class="sortable"><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>'
    return f'{title}{note}<div class="scroll">{table}</div>'


def _td(value: object, unit: Unit, origin: int) -> str:
    number = isinstance(value, Number) and not isinstance(value, bool)
    raw = value if number and value == value else ("" if number or value is None or value is pd.NA else value)
    klass = "num" if numeric(unit) else "name"
    return f'<td class="{klass}" data-v="{_e(raw)}">{_e(cell(value, unit, origin))}</td>'


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)
