"""The MCP tools as plain functions of a ``Workspace``: each answer states its unit and scope and fits its budget.

Findings are named ``F1``, ``F2``, ... by their place in the ranked list of a scope's report (as in the digest).
Times are integer nanoseconds; a key ending ``_per_step`` is per step (mean over the steps analysed), every other
time is a total over the scope's window unless the answer's ``unit`` says otherwise. Nothing here presents: the
numbers come from the report, the trace's tables and the comparison as they are.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from traceanalyzer import intervals
from traceanalyzer.agent import answers, sql
from traceanalyzer.agent.answers import ANSWER_BUDGET, paged
from traceanalyzer.agent.workspace import OpenTrace, Workspace
from traceanalyzer.comparison import Threshold, compare
from traceanalyzer.records import records
from traceanalyzer.renderers import digest
from traceanalyzer.report import Report
from traceanalyzer.schema import EVENT_COLUMNS
from traceanalyzer.tokens import DIGEST_BUDGET, tokens

HOTSPOT_KINDS = ("kernel", "cpu_op", "op_device", "category")
"""What ``hotspots`` ranks: device work by name, CPU ops, device time per launching op, categories."""
MOST_TOP = 100
"""The most rows ``hotspots`` ranks."""
TIMELINE_EVENTS = 20
"""The longest events of a window ``timeline`` lists (never more raw events than this)."""
TIMELINE_NAMES = 3
"""Names per lane ``timeline`` gives (by time in the window)."""
COMPARE_TOP = 10
"""Rows per level (kernel, cpu_op, op_device) and findings ``compare`` lists, by the size of the change."""
DEFAULT_GATE_PCT = 5.0
"""The regression gate's threshold when ``compare`` is not given one: +5 % of the baseline's step time."""
OPEN_HEAD = 600
"""Tokens the answer of ``open_trace`` may take beyond its digest's budget (handle, scope, warnings)."""
TIMES = (
    "ns (integer nanoseconds); *_per_step: per step (mean over the steps analysed); other times: total over the scope"
)


def open_trace(ws: Workspace, path: str, budget_tokens: int = DIGEST_BUDGET) -> dict:
    """Open a trace (file or run folder under the allowed folders): its handle and digest."""
    opened, closed = ws.open_path(path)
    text = digest.render(opened.report(), budget_tokens)
    return {
        "tool": "open_trace",
        "handle": opened.handle,
        "scope": _scope(opened),
        "unit": "the digest states each number's unit; times per step unless marked total",
        "digest": text,
        "digest_tokens": tokens(text),
        "digest_budget_tokens": budget_tokens,
        "budget_tokens": budget_tokens + OPEN_HEAD,
        "warnings": answers.cut_texts(opened.warnings[:10])[0],
        "warnings_total": len(opened.warnings),
        "closed_handles": closed,
    }


def findings(ws: Workspace, handle: str, step: int | None = None, rank: int | None = None, page: int = 1) -> dict:
    """The ranked findings of a scope, one row each (id, severity, saving per step, title, where)."""
    opened = ws.get(handle)
    report = opened.report(step, rank)
    rows = [
        {
            "id": digest.finding_id(n),
            "kind": f.id,
            "severity": f.severity.value,
            "pushed": f.pushed,
            "saving_ns_per_step": f.saving_ns,
            "concerns_ns_per_step": f.concerns_ns,
            "step_share": round(f.step_share, 4),
            "basis": f.basis.value,
            "title": f.title,
            "covered_by": f.covered_by,
            "where": f.where,
        }
        for n, f in enumerate(report.findings, 1)
    ]
    head = {"tool": "findings", "scope": _scope(opened, step, rank), "unit": f"{TIMES}; step_share: fraction"}
    head["note"] = "pushed findings' savings add up to at most the step time; finding(handle, id) has one whole"
    return paged(head, rows, page)


def finding(
    ws: Workspace, handle: str, id: str, step: int | None = None, rank: int | None = None, page: int = 1
) -> dict:
    """One finding whole: advice, model, where, evidence, the section holding its tables, and the device intervals
    it claims (paged)."""
    opened = ws.get(handle)
    report = opened.report(step, rank)
    f = report.findings[_finding_number(id, report) - 1]
    claimed = [[int(r), int(s), int(e)] for r, ivs in f.claims.items() for s, e in zip(*ivs, strict=True)]
    per_rank = [
        {"rank": int(r), "intervals": len(ivs[0]), "claimed_ns": int(intervals.length(ivs))}
        for r, ivs in f.claims.items()
    ]
    head = {
        "tool": "finding",
        "scope": _scope(opened, step, rank),
        "unit": f"{TIMES}; intervals: [rank, start_ns, end_ns] on the trace's time base",
        "id": id.upper(),
        "finding": answers.cut_texts(f.to_dict(), 400)[0],
        "evidence_section": _evidence(report, f.analyzer),
        "claimed_by_rank": per_rank,
    }
    return paged(head, claimed, page, key="intervals")


def section(
    ws: Workspace, handle: str, id: str, page: int = 1, step: int | None = None, rank: int | None = None
) -> dict:
    """A section (``health``): its facts and its tables' columns and sizes; a table (``health.largest_gaps``): its
    rows, paged."""
    opened = ws.get(handle)
    report = opened.report(step, rank)
    section_id, _, table_id = id.partition(".")
    try:
        found = report.section(section_id)
    except KeyError:
        known = ", ".join(s.id for s in report.sections)
        raise ValueError(f"no section {section_id!r} in this report (sections: {known})") from None
    head = {"tool": "section", "scope": _scope(opened, step, rank), "section": found.id, "title": found.title}
    if not table_id:
        head["unit"] = "each fact and column says its unit and whether it is per step or a total (per)"
        head["tables"] = [_table_meta(t) for t in found.tables]
        return paged(head, [f.to_dict() for f in found.facts], page, key="facts")
    try:
        table = found.table(table_id)
    except KeyError:
        known = ", ".join(t.id for t in found.tables)
        raise ValueError(f"no table {table_id!r} in section {section_id!r} (tables: {known})") from None
    head.update(_table_meta(table))
    head["unit"] = "each column's unit is in columns; per says whether times are per step or totals"
    return paged(head, records(table.frame), page)


def hotspots(
    ws: Workspace,
    handle: str,
    kind: str = "kernel",
    top: int = 10,
    step: int | None = None,
    rank: int | None = None,
    page: int = 1,
) -> dict:
    """The top ``top`` by total time: device work by name (kernel), CPU ops (cpu_op), device time per launching op
    (op_device) or categories (category)."""
    if kind not in HOTSPOT_KINDS:
        raise ValueError(f"kind must be one of {', '.join(HOTSPOT_KINDS)}, not {kind!r}")
    opened = ws.get(handle)
    table = opened.trace.hotspots(kind, step=step, rank=rank, top=max(1, min(int(top), MOST_TOP)))
    head = {
        "tool": "hotspots",
        "scope": _scope(opened, step, rank),
        "kind": kind,
        "unit": "ns, totals over the scope's window (not per step); share, cum_share: fraction of the kind's total",
    }
    return paged(head, records(table), page)


def timeline(
    ws: Workspace,
    handle: str,
    start_ns: int,
    end_ns: int,
    lanes: list[str] | None = None,
    rank: int | None = None,
    page: int = 1,
) -> dict:
    """A window of the trace summarised per lane (``rank/pid/tid``): events, time covered, the names that took
    most of it; and the window's longest events (at most ``TIMELINE_EVENTS``)."""
    if end_ns <= start_ns:
        raise ValueError(f"end_ns ({end_ns}) must be after start_ns ({start_ns})")
    opened = ws.get(handle)
    ev = opened.trace.events
    inside = ev[(ev["ts"] < end_ns) & (ev["ts"] + ev["dur"] > start_ns)]
    if rank is not None:
        inside = inside[inside["rank"] == rank]
    lane = inside["rank"].astype(str) + "/" + inside["pid"].astype(str) + "/" + inside["tid"].astype(str)
    if lanes:
        inside, lane = inside[lane.isin(lanes)], lane[lane.isin(lanes)]
    starts = np.maximum(inside["ts"].to_numpy(np.int64), start_ns)
    ends = np.minimum((inside["ts"] + inside["dur"]).to_numpy(np.int64), end_ns)
    clipped = inside.assign(lane=lane.to_numpy(), start=starts, end=ends, clipped_ns=ends - starts)
    rows = [_lane(name, group) for name, group in clipped.groupby("lane", sort=True)]
    longest = clipped.nlargest(TIMELINE_EVENTS, "dur")
    head = {
        "tool": "timeline",
        "scope": {**_scope(opened, None, rank), "start_ns": int(start_ns), "end_ns": int(end_ns)},
        "unit": "ns on the trace's time base; covered_ns: union of the lane's events clipped to the window",
        "trace_window": {"start_ns": opened.trace.meta.start_ns, "end_ns": opened.trace.meta.end_ns},
        "events_in_window": len(clipped),
        "longest_events": [
            {"name": r.name, "kind": r.kind, "lane": r.lane, "ts": int(r.ts), "dur": int(r.dur), "step": int(r.step)}
            for r in longest.itertuples()
        ],
    }
    head = answers.cut_texts(head, 120)[0]
    return paged(head, rows, page, key="lanes")


def _lane(name: str, group: pd.DataFrame) -> dict:
    covered = intervals.length(intervals.union(group["start"].to_numpy(), group["end"].to_numpy()))
    by_name = group.groupby("name", observed=True)["clipped_ns"].sum().nlargest(TIMELINE_NAMES)
    return {
        "lane": name,
        "kinds": sorted(group["kind"].astype(str).unique().tolist()),
        "events": len(group),
        "covered_ns": int(covered),
        "top_names": [{"name": str(n), "ns": int(v)} for n, v in by_name.items()],
    }


def compare_traces(
    ws: Workspace,
    base: str,
    candidate: str,
    threshold_pct: float | None = DEFAULT_GATE_PCT,
    threshold_ms: float | None = None,
    rank: int | None = None,
    page: int = 1,
) -> dict:
    """Baseline against candidate (handles or paths): the gate's verdict, the summary per step, and the largest
    changes of kernels, CPU ops and launching ops (paged)."""
    runs = [ws.open[x] if x in ws.open else ws.open_path(x)[0] for x in (base, candidate)]
    for value, name in ((threshold_pct, "threshold_pct"), (threshold_ms, "threshold_ms")):
        if value is not None and not value >= 0:
            raise ValueError(f"{name} must be a number >= 0, not {value}")
    share = None if threshold_pct is None else threshold_pct / 100
    ns = None if threshold_ms is None else threshold_ms * 1e6
    threshold = Threshold(share=share, ns=ns) if share is not None or ns is not None else None
    data = compare(runs[0].trace, runs[1].trace, rank=rank).to_dict(top=COMPARE_TOP, threshold=threshold)
    rows = [{"level": level, **row} for level, table in data["levels"].items() for row in table]
    rows = [{k: v for k, v in r.items() if k not in ("baseline_names", "candidate_names", "label")} for r in rows]
    rows += [{"level": "finding", **row} for row in data["findings"]]
    gate = dict(data["gate"] or {})
    rows = [{"level": "culprit", **row} for row in gate.pop("culprits", [])] + rows
    head = {
        "tool": "compare",
        "scope": {"base": runs[0].handle, "candidate": runs[1].handle, "rank": rank},
        "unit": "ns per step (medians per (rank, step) in summary; totals / steps in rows); *_share: fraction",
        "per_step": data["per_step"],
        "notes": data["notes"],
        "gate": gate or None,
        "summary": data["summary"],
        "changes": {level: {k: v for k, v in c.items() if k != "matched"} for level, c in data["changes"].items()},
        "rows_are": f"the gate's culprits (what grew, biggest first), then the {COMPARE_TOP} largest changes per level "
        "(kernel, cpu_op, op_device) and of findings",
    }
    head = answers.cut_texts(head)[0]
    return paged(head, rows, page)


def query(ws: Workspace, handle: str, sql_text: str, max_rows: int = 100) -> dict:
    """One read-only SELECT over the trace's event table ``events``; rows paged by ``max_rows`` and the budget."""
    opened = ws.get(handle)
    result = sql.run(opened.trace.events, sql_text, max_rows)
    head = {
        "tool": "query",
        "scope": _scope(opened),
        "unit": "the event table's units: ts and dur in ns on the trace's time base (resource traceanalyzer://schema/events)",
        "columns": result["columns"],
        "more_rows": result["more_rows"],
        "elapsed_s": result["elapsed_s"],
    }
    rows = result["rows"]
    answer = paged({**head, "note": _cut_note(len(rows), len(rows))}, rows, 1)  # room for the note kept
    if answer["pages"] > 1:
        answer["note"] = _cut_note(answer["rows_total"], len(answer["rows"]))
    else:
        del answer["note"]
    return answer


def _cut_note(fetched: int, shown: int) -> str:
    """What a query answer says when only its first ``shown`` of ``fetched`` rows fit the budget."""
    return (
        f"{fetched} rows were fetched; the first {shown} fit the answer's budget ({ANSWER_BUDGET:,} tokens): "
        "aggregate, select fewer columns or add LIMIT/OFFSET"
    )


def event_schema() -> str:
    """The event table's columns (name, dtype, meaning) as Markdown: what ``query`` can select."""
    lines = ["# The event table (`events`)", "", "| column | dtype | meaning |", "|---|---|---|"]
    lines += [f"| `{c.name}` | {c.dtype} | {c.doc} |" for c in EVENT_COLUMNS]
    return "\n".join(lines) + "\n"


def _finding_number(id: str, report: Report) -> int:
    """The place of finding ``F<n>`` in a report's ranked list; ValueError names the valid ids."""
    text = id.strip().upper().removeprefix("F")
    if not text.isdigit() or not 1 <= int(text) <= len(report.findings):
        raise ValueError(f"no finding {id!r}: this scope has F1 to F{len(report.findings)}")
    return int(text)


def _evidence(report: Report, analyzer: str) -> dict:
    """The section a finding's analyzer writes, with its tables (ids and rows): where the evidence is."""
    try:
        found = report.section(analyzer)
    except KeyError:
        return {}
    return {"section": found.id, "tables": [{"id": t.id, "rows": len(t.frame)} for t in found.tables if len(t.frame)]}


def _table_meta(table) -> dict:
    return {
        "table": table.id,
        "title": table.title,
        "per": table.per.value,
        "note": table.note,
        "rows_total": len(table.frame),
        "columns": [{"name": str(c), "unit": table.unit(c).value} for c in table.frame.columns],
    }


def _scope(opened: OpenTrace, step: int | None = None, rank: int | None = None) -> dict:
    return {"handle": opened.handle, "path": str(opened.path), "step": step, "rank": rank}
