"""Lay the report data out as a sequence of blocks (headings, facts, tables) that text and Markdown share."""

from __future__ import annotations

from dataclasses import dataclass, field

from traceanalyzer import units

NAME_WIDTH = 70
_CORE_KEYS = {"schema_version", "trace", "summary", "hotspots", "findings", "steps"}
_HOTSPOT_TITLES = {
    "kernel": ("Top device kernels", ["name", "kind", "count", "total_ns", "mean_ns", "share", "cum_share"]),
    "cpu_op": (
        "Top CPU ops (self time)",
        ["name", "count", "total_ns", "inclusive_ns", "device_self_ns", "share", "cum_share"],
    ),
    "op_device": ("Device time by launching op", ["name", "count", "kernels", "total_ns", "mean_ns", "share"]),
    "category": ("Device time by op category", ["name", "count", "total_ns", "share"]),
}


@dataclass
class Block:
    """A heading (level 1/2), a list of facts, a table, or a numbered list of items (a headline and its text)."""

    kind: str
    title: str = ""
    level: int = 2
    facts: list[tuple[str, str]] = field(default_factory=list)
    headers: list[str] = field(default_factory=list)
    rows: list[list[str]] = field(default_factory=list)
    items: list[tuple[str, list[str]]] = field(default_factory=list)


def layout(report: dict) -> list[Block]:
    """All blocks of a report, in reading order."""
    blocks = [Block("heading", "traceanalyzer report", level=1)]
    blocks += _trace(report["trace"])
    blocks += _summary(report["summary"], report.get("steps", []))
    blocks += _findings(report["findings"])
    for level, (title, cols) in _HOTSPOT_TITLES.items():
        rows = report["hotspots"].get(level) or []
        if rows:
            blocks.append(table(title, rows, cols))
    for key, section in report.items():
        if key not in _CORE_KEYS and isinstance(section, dict):
            blocks += _section(key, section)
    return blocks


def _trace(t: dict) -> list[Block]:
    devices = ", ".join(sorted({d["name"] for d in t["devices"] if d["name"]})) or "–"
    facts = [
        ("file", "; ".join(t["paths"])),
        ("platform", f"{t['platform']} ({t['source_format']} {t['format_version']})".strip()),
        (
            "ranks",
            f"{', '.join(map(str, t['ranks']))} of {t['world_size']}"
            + ("" if t["rank_known"] else " (not recorded; assumed)"),
        ),
        ("devices", devices),
        ("window", units.duration(t["span_ns"])),
        ("events", f"{t['events']:,} (+{t['memory_events']:,} memory)"),
    ]
    facts += [("warning", w) for w in t["warnings"]]
    return [Block("heading", "Trace"), Block("facts", facts=facts)]


def _summary(s: dict, steps: list[dict]) -> list[Block]:
    facts = [
        ("steps", str(s["steps"])),
        ("step time (median)", units.duration(s["step_wall_ns_median"])),
        ("device busy per step (median)", units.duration(s["device_busy_ns_per_step"])),
        ("kernel time per step (median)", units.duration(s["kernel_ns_per_step"])),
        ("kernels per step (median)", units.value("kernels", s["kernels_per_step"])),
        ("device busy (whole window)", units.share(s["device_busy_share"])),
        ("communication share of kernel time", units.share(s["communication_share"])),
    ]
    blocks = [Block("heading", "Summary"), Block("facts", facts=facts)]
    if s["time_by_kind"]:
        blocks.append(table("Time by kind", s["time_by_kind"], ["kind", "count", "total_ns", "device_share"]))
    if steps:
        blocks.append(
            table(
                "Steps",
                steps,
                ["rank", "step", "wall_ns", "device_busy_ns", "kernels", "kernel_ns", "communication_ns", "memcpy_ns"],
            )
        )
    return blocks


def _findings(findings: list[dict]) -> list[Block]:
    if not findings:
        return [Block("heading", "Findings"), Block("facts", facts=[("", "no findings")])]
    items = [(f"[{f['severity']}] {f['title']}", [_cost(f), f["advice"]]) for f in findings]
    return [Block("heading", "Findings (by what they are worth)"), Block("list", items=items)]


def _cost(finding: dict) -> str:
    if not finding["cost_ns"]:
        return "cost: not estimated"
    return f"cost: {units.duration(finding['cost_ns'])} ({units.share(finding['step_share'])} of step time)"


def _section(key: str, section: dict) -> list[Block]:
    blocks = [Block("heading", section.get("title", key.title()))]
    facts = section.get("facts") or {}
    if facts:
        blocks.append(Block("facts", facts=[(units.label(k), units.value(k, v)) for k, v in facts.items()]))
    for name, rows in (section.get("tables") or {}).items():
        if rows:
            blocks.append(table(name, rows, list(rows[0].keys())))
    return blocks


def table(title: str, rows: list[dict], columns: list[str]) -> Block:
    """A table block of the given columns, values formatted by their key."""
    columns = [c for c in columns if any(c in r for r in rows)]
    body = [[_cell(c, r.get(c)) for c in columns] for r in rows]
    return Block("table", title, headers=[units.label(c) for c in columns], rows=body)


def _cell(key: str, v: object) -> str:
    text = units.value(key, v)
    return text if len(text) <= NAME_WIDTH else text[: NAME_WIDTH - 1] + "…"
