"""The comparison of two runs (``Comparison.to_dict()``) as text, Markdown or JSON. Computes nothing."""

from __future__ import annotations

from traceanalyzer import humanize
from traceanalyzer.analyzers.compare import DIFF_COLUMNS
from traceanalyzer.renderers import json, markdown, text
from traceanalyzer.renderers.document import Block, table

_VALUES = [c for c in DIFF_COLUMNS if c not in ("name", "kind")]
_LEVEL_TITLES = {
    "kernel": ("Device kernels", "kernels"),
    "cpu_op": ("CPU ops (self host time)", "CPU ops"),
    "op_device": ("Device time by launching op", "launching ops"),
}
_SUMMARY_LABELS = {
    "step_ns": "step time",
    "device_busy_ns": "device busy",
    "comm_exposed_ns": "exposed communication",
    "comm_hidden_ns": "hidden communication",
}


def render(data: dict, fmt: str) -> str:
    """The comparison in one format: 'text', 'markdown' or 'json'."""
    if fmt == "json":
        return json.render(data)
    return {"text": text.render_blocks, "markdown": markdown.render_blocks}[fmt](layout(data))


def layout(data: dict) -> list[Block]:
    """All blocks of a comparison, in reading order."""
    per = "per step" if data["per_step"] else "per rank, whole window"
    blocks = [Block("heading", "traceanalyzer compare: baseline → candidate", level=1)]
    blocks.append(Block("facts", facts=_runs(data) + _headline(data) + [("note", n) for n in data["notes"]]))
    blocks.append(table(f"Device time by kind ({per})", data["time_by_kind"], ["kind", *_VALUES]))
    for level, (title, noun) in _LEVEL_TITLES.items():
        rows = data["levels"][level]
        if rows:
            blocks.append(Block("heading", f"{title}: biggest changes ({per})"))
            blocks.append(Block("facts", facts=_changes(noun, data["changes"][level])))
            blocks.append(table(title, rows, ["name", *_VALUES]))
    return blocks


def _runs(data: dict) -> list[tuple[str, str]]:
    def steps(side: dict) -> str:
        if side["compared_steps"] is None:
            return "whole window"
        n = len(side["compared_steps"])
        return f"{n} step" + ("s" if n != 1 else "")

    facts = [(role, "; ".join(data[role]["paths"])) for role in ("baseline", "candidate")]
    facts.append(("compared", f"{steps(data['baseline'])} → {steps(data['candidate'])}"))
    return facts + ([("rank", str(data["rank"]))] if data["rank"] is not None else [])


def _headline(data: dict) -> list[tuple[str, str]]:
    labels = _SUMMARY_LABELS if data["per_step"] else {**_SUMMARY_LABELS, "step_ns": "window"}
    return [
        (labels[row["metric"]], _before_after(row))
        for row in data["summary"]
        if row["baseline_ns"] or row["candidate_ns"]
    ]


def _before_after(row: dict) -> str:
    change = _signed(row["delta_ns"])
    if row["delta_share"] is not None:
        change += f", {'+' if row['delta_share'] > 0 else ''}{humanize.share(row['delta_share'])}"
    return f"{humanize.duration(row['baseline_ns'])} → {humanize.duration(row['candidate_ns'])} ({change})"


def _changes(noun: str, counts: dict) -> list[tuple[str, str]]:
    return [
        (f"new {noun}", f"{counts['new']} ({_signed(counts['new_ns'])} per step)"),
        (f"gone {noun}", f"{counts['gone']} ({_signed(-counts['gone_ns'] or 0.0)} per step)"),
        ("faster / slower / same", f"{counts['faster']} / {counts['slower']} / {counts['same']}"),
    ]


def _signed(ns: float) -> str:
    return ("+" if ns > 0 else "") + humanize.duration(ns)
