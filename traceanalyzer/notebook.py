"""How results show in Jupyter: ``_repr_html_`` and short ``__repr__`` texts of a trace, a finding, a list of
findings, a comparison and a memory analysis, and ``pretty`` for DataFrames (``df.pipe(ta.pretty)``).

The objects delegate here; this module reads their attributes and only formats (it depends on ``humanize`` alone,
so the model classes can use it without importing any presenter).
"""

from __future__ import annotations

import html
from collections.abc import Iterable

import pandas as pd

from traceanalyzer import humanize

TOP_FINDINGS = 5
"""Findings a trace's notebook view lists."""
INSTANTS = ("start_ns", "end_ns", "_ts")
"""Column endings of points in time, which ``pretty`` leaves as ns."""
_UNIT_KEY = {"ns": "_ns", "share": "share", "bytes": "bytes"}
_FINDING_COLUMNS = (
    "severity",
    "title",
    "saving_ns",
    "concerns_ns",
    "step_share",
    "basis",
    "analyzer",
    "covered_by",
    "cut",
    "advice",
)


def pretty(frame: pd.DataFrame) -> pd.DataFrame:
    """A copy for reading: ``*_ns`` durations as durations, ``*share`` as percentages, ``*bytes`` as sizes (text);
    instants (``ts``, ``*start_ns``, ``*end_ns``) stay ns. Keep the original for arithmetic; this is for display
    (``t.steps().pipe(ta.pretty)``)."""
    out = frame.copy()
    for column in frame.columns:
        key = str(column)
        if key == "ts" or key.endswith(INSTANTS) or not pd.api.types.is_numeric_dtype(frame[column]):
            continue
        if humanize.value(key, 1.5) != humanize.value("", 1.5):
            out[column] = [humanize.value(key, None if pd.isna(v) else v) for v in frame[column]]
    return out


def findings_table(findings: Iterable) -> pd.DataFrame:
    """Findings as one row each: severity, title, saving and concerned time per step (ns), share of the median
    step, basis, what covers or cut its saving, advice."""
    rows = [
        {
            "severity": f.severity.value,
            "title": f.title,
            "saving_ns": int(f.saving_ns),
            "concerns_ns": int(f.concerns_ns),
            "step_share": float(f.step_share),
            "basis": f.basis.value,
            "analyzer": f.analyzer,
            "covered_by": f.covered_by,
            "cut": f.cut,
            "advice": f.advice,
        }
        for f in findings
    ]
    return pd.DataFrame(rows, columns=list(_FINDING_COLUMNS))


def finding_repr(f) -> str:
    """One line: severity, title and what it is worth per step (``Finding.worth``)."""
    return f"<Finding [{f.severity.value}] {f.title} — {f.worth(model=False)}>"


def finding_html(f) -> str:
    """A finding as a small card: severity, title, what it is worth per step and on what basis, advice."""
    return f"<div><b>[{_e(f.severity.value)}] {_e(f.title)}</b><br>{_e(f.worth())}<br>{_e(f.advice)}</div>"


def findings_html(findings: list) -> str:
    """Findings as a table (``findings_table`` with readable times)."""
    return pretty(findings_table(findings)).to_html(index=False, escape=True)


def trace_repr(meta, events: int, scope) -> str:
    """One line of a trace (its meta, event rows and scope): platform, format, events, ranks, span and scope."""
    m = meta
    return (
        f"<Trace {m.platform.value} {m.source_format}: {events:,} events, ranks {m.ranks}, "
        f"{humanize.duration(m.span_ns)}, {scope}>"
    )


def job_repr(job) -> str:
    """One line for a job analysed rank by rank: platform, format, events summarized, ranks, span and scope."""
    m = job.meta
    return (
        f"<Job {m.platform.value} {m.source_format}: {job.events:,} events summarized rank by rank, ranks {m.ranks}, "
        f"{humanize.duration(m.span_ns)}, {job.scope}>"
    )


def trace_html(meta, events: int, memory_events: int, ledger, steps: pd.DataFrame, findings: list) -> str:
    """A trace's facts (its meta and table sizes), the ledger of what was analysed (a ``Section``), the step table
    and the top findings (ranked)."""
    m = meta
    facts = [
        ("files", "; ".join(m.paths)),
        ("platform", f"{m.platform.value} ({m.source_format} {m.format_version})"),
        ("devices", ", ".join(sorted({d.name for d in m.devices if d.name})) or "–"),
        ("ranks", ", ".join(map(str, m.ranks))),
        ("events", f"{events:,} (+{memory_events:,} memory)"),
        ("window (total)", humanize.duration(m.span_ns)),
    ]
    parts = [
        "<h4>Trace</h4>" + _dl(facts),
        f"<h4>{_e(ledger.title)}</h4>" + section_facts_html(ledger.facts),
        "<h4>Steps (ns columns shown as durations)</h4>" + pretty(steps).to_html(index=False),
        f"<h4>Top findings (of {len(findings)})</h4>" + findings_html(findings[:TOP_FINDINGS]),
    ]
    return "<div>" + "".join(parts) + "</div>"


def section_facts_html(facts: Iterable) -> str:
    """A section's facts as a definition list, each value in its unit."""
    rows = []
    for fact in facts:
        per = {"step": " (per step)", "total": " (total)"}.get(fact.per.value, "")
        value = humanize.value(_UNIT_KEY.get(fact.unit.value, ""), fact.value)
        rows.append((fact.title + per, value + (" (estimated)" if fact.estimated else "")))
    return _dl(rows)


def comparison_repr(c) -> str:
    """One line: the two runs and the change of median step time."""
    step = c.summary.set_index("metric")["delta_ns"].get("step_ns") if len(c.summary) else None
    change = "" if step is None else f", step time {'+' if step >= 0 else ''}{humanize.duration(step)}/step"
    return f"<Comparison {_run(c.baseline)} → {_run(c.candidate)}{change}>"


def comparison_html(c) -> str:
    """The summary, device time by kind, the top kernel changes and the findings that changed."""
    parts = [
        f"<h4>{_e(_run(c.baseline))} → {_e(_run(c.candidate))}</h4>",
        "<h5>Summary</h5>" + pretty(c.summary).to_html(index=False),
        "<h5>Device time by kind</h5>" + pretty(c.by_kind).to_html(index=False),
    ]
    if "kernel" in c.levels:
        parts.append("<h5>Kernels (top 10 by |change|)</h5>" + pretty(c.levels["kernel"].head(10)).to_html(index=False))
    if len(c.findings):
        parts.append("<h5>Findings</h5>" + pretty(c.findings.head(10)).to_html(index=False))
    parts += [f"<p>{_e(n)}</p>" for n in c.notes]
    return "<div>" + "".join(parts) + "</div>"


def memory_repr(m) -> str:
    """One line: the highest device peak and how many pools leak."""
    peaks = m.device_peaks
    top = humanize.size(peaks["peak_allocated_bytes"].max()) if len(peaks) else "–"
    return f"<MemoryAnalysis: {len(m.peaks)} pools, device peak {top}, {len(m.leaking)} leaking>"


def memory_html(m) -> str:
    """Peaks per pool, the largest blocks live at the peak, the leak verdicts and notes."""
    parts = [
        "<h5>Peaks per pool</h5>" + pretty(m.peaks).to_html(index=False),
        "<h5>Largest blocks live at the peak</h5>" + pretty(m.live_at_peak.head(10)).to_html(index=False),
        "<h5>Leak trend per pool</h5>" + pretty(m.leak).to_html(index=False),
    ]
    parts += [f"<p>{_e(n)}</p>" for n in m.notes]
    return "<div>" + "".join(parts) + "</div>"


def _run(scope) -> str:
    """A compared run by its files."""
    return "; ".join(scope.trace.meta.paths)


def _dl(rows: list[tuple[str, str]]) -> str:
    body = "".join(f"<tr><th style='text-align:left'>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in rows)
    return f"<table>{body}</table>"


def _e(value: object) -> str:
    return html.escape(str(value))
