"""The report as a digest for a coding agent: what matters first, every section named by its id, in a token budget.

Reading order: the trace line, the ledger in one paragraph, step time and bound, each pushed finding in three lines
(cause, saving per step, fix, where its evidence is), the top kernel hotspots, one line per section (its id, facts
and tables) so that an agent can ask for more, and a last line saying what was left out. The digest is cut to fit
``budget_tokens``: the hotspot rows go first, then the section lines' contents, the ledger paragraph, each fix's text
after its first sentence, and last the findings, from the last; what a cut removes is named in the last line, never
dropped silently.

Tokens are counted as ``traceanalyzer.tokens.tokens``: characters / 3, rounded up, an over-estimate on the common
tokenizers (see that module).

Names from the trace are data: every text taken from it is shown with its control characters escaped (a kernel
name cannot start a line of its own) and within backticks, cut in the middle to ``NAME_WIDTH``.
"""

from __future__ import annotations

from dataclasses import dataclass

from traceanalyzer import humanize
from traceanalyzer.findings import Finding
from traceanalyzer.renderers.document import fact_value, middle
from traceanalyzer.report import Report
from traceanalyzer.section import Per, Section
from traceanalyzer.tokens import CHARS_PER_TOKEN, tokens
from traceanalyzer.tokens import DIGEST_BUDGET as DEFAULT_BUDGET
from traceanalyzer.tokens import LEAST_DIGEST_BUDGET as LEAST_BUDGET

NAME_WIDTH = 60
"""Longest name from the trace a digest line shows (cut in the middle)."""
HOTSPOTS = 5
"""Kernel hotspot rows a digest shows at most."""
LEDGER_FACTS = ("scope", "window_ns", "steps", "ranks", "missing_ranks", "device_ns", "outside_steps_ns")
"""Ledger facts the digest's ledger paragraph shows (the rest are in section ``ledger``)."""


def data(text: object, width: int = NAME_WIDTH) -> str:
    """Text from a trace shown as data: control characters escaped, backticks replaced, cut in the middle."""
    escaped = "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(text)).replace("`", "'")
    return f"`{middle(escaped, width)}`"


def plain(text: object) -> str:
    """Report text that may quote trace names (titles, advice): control characters escaped, on one line."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(text))


@dataclass(frozen=True)
class Cut:
    """How much of the report a digest keeps: pushed findings shown, hotspot rows, the sections' facts and tables,
    the ledger paragraph, each fix whole or its first sentence."""

    findings: int
    hotspots: int
    section_detail: bool = True
    ledger: bool = True
    whole_fixes: bool = True


def render(report: Report, budget_tokens: int = DEFAULT_BUDGET) -> str:
    """The digest of a report in at most ``budget_tokens`` tokens (``tokens()``); ValueError under ``LEAST_BUDGET``."""
    if budget_tokens < LEAST_BUDGET:
        raise ValueError(f"a digest needs a budget of at least {LEAST_BUDGET} tokens, not {budget_tokens}")
    for cut in _cuts(sum(f.pushed for f in report.findings), len(_hotspot_rows(report))):
        text = _digest(report, cut, budget_tokens)
        if tokens(text) <= budget_tokens:
            return text
    return text  # the smallest cut: LEAST_BUDGET is chosen so that it fits


def _cuts(findings: int, hotspots: int):
    """Ever smaller digests, in the order of the module docstring."""
    for h in range(hotspots, -1, -1):
        yield Cut(findings, h)
    yield Cut(findings, 0, section_detail=False)
    yield Cut(findings, 0, section_detail=False, ledger=False)
    for f in range(findings, -1, -1):
        yield Cut(f, 0, section_detail=False, ledger=False, whole_fixes=False)


def _digest(report: Report, cut: Cut, budget: int) -> str:
    lines = [f"# traceanalyzer digest (budget {budget:,} tokens, counted as characters/{CHARS_PER_TOKEN})"]
    ledger = _ledger_line(report) if cut.ledger else "Ledger: left out (the budget); section ledger has it."
    lines += [_trace_line(report.trace), ledger, _step_line(report), ""]
    lines += _findings_lines(report.findings, cut)
    lines += _hotspot_lines(report, cut.hotspots)
    lines += ["", "## Sections (ask for one by its id)"]
    lines += [_section_line(s, cut.section_detail) for s in report.sections]
    lines += ["", _left_out(report, cut)]
    body = "\n".join(lines) + "\n"
    used = tokens(body)
    return body.replace(f"budget {budget:,} tokens,", f"budget {budget:,} tokens, {used:,} used,", 1)


def _trace_line(t: dict) -> str:
    files = t["paths"]
    named = data(files[0]) + (f" and {len(files) - 1} more file(s)" if len(files) > 1 else "")
    devices = ", ".join(sorted({d["name"] for d in t["devices"] if d["name"]})) or "no device"
    version = f" {t['format_version']}" if t["format_version"] else ""
    return (
        f"Trace: {named}; {t['platform']} ({t['source_format']}{version}); {len(t['ranks'])} rank(s) of world "
        f"{t['world_size']}; {plain(devices)}; {t['events']:,} events; span {humanize.duration(t['span_ns'])} (total)"
        + (f"; {len(t['warnings'])} warning(s) (section ledger)" if t["warnings"] else "")
    )


def _ledger_line(report: Report) -> str:
    ledger = report.section("ledger")
    parts = [f"{f.title}{_per(f.per)}: {plain(fact_value(f))}" for f in ledger.facts if f.id in LEDGER_FACTS]
    return "Ledger: " + "; ".join(parts) + "."


def _step_line(report: Report) -> str:
    summary = {f.id: f for f in report.section("summary").facts}
    parts = []
    for fact_id, label in (("step_ns", "step time"), ("host_step_ns", "host step"), ("device_busy_share", "busy")):
        if fact_id in summary and summary[fact_id].value is not None:
            parts.append(f"{label} {fact_value(summary[fact_id])}{_per(summary[fact_id].per)}")
    bound = summary.get("bound")
    bound_text = f"; bound: {plain(bound.value)}" if bound is not None and bound.value else ""
    steps = summary.get("steps")
    counted = f" over {steps.value} step(s)" if steps is not None else ""
    return f"Step{counted}: " + ", ".join(parts or ["no step time"]) + bound_text + "."


def _per(per: Per) -> str:
    return {Per.STEP: " per step", Per.TOTAL: " total", Per.NONE: ""}[per]


def _findings_lines(findings: list[Finding], cut: Cut) -> list[str]:
    pushed = [(i, f) for i, f in enumerate(findings, 1) if f.pushed]
    head = f"## Pushed findings ({len(pushed)} of {len(findings)}; saving per step, estimated)"
    lines = [head] if pushed else ["## Pushed findings: none (every finding is under 5% of the step time)"]
    for number, f in pushed[: cut.findings]:
        lines += finding_digest(number, f, cut.whole_fixes)
    return lines


def finding_id(number: int) -> str:
    """The id a finding goes by in a digest and in the MCP tools: its place in the ranked list (``F1``, ``F2``)."""
    return f"F{number}"


def finding_digest(number: int, f: Finding, whole_fix: bool = True) -> list[str]:
    """A finding in three lines: its cause, its saving per step and the fix (whole, or its first sentence), and where
    its evidence is."""
    return [
        f"{finding_id(number)} [{f.severity.value}] {plain(f.title)}",
        f"   {plain(f.worth(model=False))}. Fix: {plain(f.advice if whole_fix else _first_sentence(f.advice))}",
        f"   Evidence: finding {finding_id(number)} ({f.id}), section {f.analyzer}",
    ]


def _first_sentence(text: str) -> str:
    """The text up to its first full stop followed by a space, with '…' when there was more."""
    head, dot, rest = text.partition(". ")
    return head + (". …" if dot and rest else "")


def _hotspot_rows(report: Report) -> list[dict]:
    try:
        table = report.section("hotspots").table("kernel")
    except KeyError:
        return []
    return table.frame.head(HOTSPOTS).to_dict("records")


def _hotspot_lines(report: Report, shown: int) -> list[str]:
    rows = _hotspot_rows(report)[:shown]
    if not rows:
        return []
    table = report.section("hotspots").table("kernel")
    lines = ["", f"## Top kernels (device time{_per(table.per) or ' over the window'}; section hotspots, table kernel)"]
    for i, r in enumerate(rows, 1):
        lines.append(
            f"{i}. {data(r['name'])} {humanize.duration(r['total_ns'])} ({humanize.share(r['share'])}), "
            f"{int(r['count']):,} calls"
        )
    return lines


def _section_line(s: Section, detail: bool) -> str:
    if not detail:
        return f"- {s.id}: {plain(s.title)}"
    tables = ", ".join(f"{t.id} ({len(t.frame):,} rows)" for t in s.tables if len(t.frame))
    return f"- {s.id}: {plain(s.title)}; {len(s.facts)} facts" + (f"; tables {tables}" if tables else "")


def _left_out(report: Report, cut: Cut) -> str:
    pushed = sum(f.pushed for f in report.findings)
    hotspots = len(_hotspot_rows(report))
    gone = [f"{len(report.findings) - pushed} findings not pushed"] if len(report.findings) > pushed else []
    if cut.findings < pushed:
        gone.append(f"{pushed - cut.findings} pushed findings (the budget)")
    if cut.hotspots < hotspots:
        gone.append(f"{hotspots - cut.hotspots} of the top {hotspots} kernels (the budget)")
    if not cut.section_detail:
        gone.append("the sections' facts and tables (the budget)")
    if not cut.ledger:
        gone.append("the ledger paragraph (the budget)")
    if not cut.whole_fixes:
        gone.append("each fix after its first sentence (the budget)")
    gone.append("every table's rows and every fact's value beyond those above")
    return "Left out: " + "; ".join(gone) + ". The JSON report (--format json) or the MCP tools have them."
