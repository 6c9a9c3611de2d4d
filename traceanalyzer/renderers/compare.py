"""The comparison of two runs (``Comparison.to_dict()``) as text, Markdown or JSON. Computes nothing.

Text is the whole comparison; Markdown is the compact form for a pull-request comment (the gate's verdict, what
got slower, the summary and the top changes); JSON is the full result.
"""

from __future__ import annotations

from traceanalyzer import humanize
from traceanalyzer.renderers import json, markdown, text
from traceanalyzer.renderers.document import Block, table

COMPACT_ROWS = 5
"""Rows per table in the Markdown (pull-request) form."""

_VALUES = ["status", "match", "baseline_ns", "candidate_ns", "delta_ns", "delta_share", "noise"]
_COUNTS = ["baseline_count", "candidate_count"]
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
    "idle_ns": "device idle",
}


def render(data: dict, fmt: str) -> str:
    """The comparison in one format: 'text', 'markdown' or 'json'."""
    if fmt == "json":
        return json.dumps(data)
    if fmt == "markdown":
        return markdown.render_blocks(layout(data, compact=True))
    return text.render_blocks(layout(data))


def layout(data: dict, compact: bool = False) -> list[Block]:
    """All blocks of a comparison, in reading order; ``compact``: the pull-request comment."""
    per = "per step" if data["per_step"] else "per rank, whole window"
    blocks = [Block("heading", "traceanalyzer compare: baseline → candidate", level=1)]
    blocks.append(Block("facts", facts=_runs(data) + _gate(data) + _headline(data) + _notes(data)))
    blocks += _culprits(data)
    rows = COMPACT_ROWS if compact else None
    blocks += _platforms(data["platforms"], per, rows)
    if not compact:
        blocks.append(table(f"Device time by kind ({per})", data["time_by_kind"], ["kind", *_VALUES, *_COUNTS]))
    for level, (title, noun) in _LEVEL_TITLES.items():
        if data["levels"][level] and not (compact and level == "cpu_op"):
            blocks.append(Block("heading", f"{title}: biggest changes ({per})"))
            blocks.append(Block("facts", facts=_changes(noun, data["changes"][level])))
            columns = ["name", *_VALUES] + ([] if compact else _COUNTS)
            labelled = [{**row, "name": row["label"]} for row in data["levels"][level][:rows]]
            blocks.append(table(title, labelled, columns))
    return blocks + _findings(data["findings"], rows) + _memory(data["memory"])


def _runs(data: dict) -> list[tuple[str, str]]:
    def steps(side: dict) -> str:
        if side["compared_steps"] is None:
            return "whole window"
        n = side["units"]
        return f"{n} step" + ("s" if n != 1 else "") + (" (rank, step)" if len(side["ranks"]) > 1 else "")

    facts = [(role, "; ".join(data[role]["paths"])) for role in ("baseline", "candidate")]
    facts.append(("compared", f"{steps(data['baseline'])} → {steps(data['candidate'])}"))
    return facts + ([("rank", str(data["rank"]))] if data["rank"] is not None else [])


def _gate(data: dict) -> list[tuple[str, str]]:
    gate = data["gate"]
    if not gate:
        return []
    return [("gate", ("FAIL" if gate["failed"] else "pass") + f": {gate['reason']}")]


def _headline(data: dict) -> list[tuple[str, str]]:
    labels = _SUMMARY_LABELS if data["per_step"] else {**_SUMMARY_LABELS, "step_ns": "window"}
    steps = (data["baseline"]["units"], data["candidate"]["units"])
    return [
        (labels[row["metric"]], _before_after(row, steps))
        for row in data["summary"]
        if row["baseline_ns"] or row["candidate_ns"]
    ]


def _before_after(row: dict, steps: tuple[int, int]) -> str:
    change = _signed(row["delta_ns"])
    if row["delta_share"] is not None:
        change += f", {'+' if row['delta_share'] > 0 else ''}{humanize.share(row['delta_share'])}"
    noise = row["noise"]
    if row["p_value"] is not None:
        noise += f", p = {row['p_value']:.2g}"
    noise += f", {steps[0]} vs {steps[1]} steps"
    return f"{humanize.duration(row['baseline_ns'])} → {humanize.duration(row['candidate_ns'])} ({change}; {noise})"


def _notes(data: dict) -> list[tuple[str, str]]:
    noise, steps = data["noise"], (data["baseline"]["units"], data["candidate"]["units"])
    test = f"{noise['test']}: {steps[0]} vs {steps[1]} steps, beyond noise at p ≤ {noise['alpha']:g}"
    if min(steps) < noise["min_steps"]:
        test += f" (needs {noise['min_steps']} per run: too few steps)"
    return [("noise", test)] + [("note", n) for n in data["notes"]]


def _culprits(data: dict) -> list[Block]:
    gate = data["gate"]
    if not gate or not gate["culprits"]:
        return []
    return [table("What got slower (per step)", gate["culprits"], ["what", "name", "delta_ns", "status", "noise"])]


def _changes(noun: str, counts: dict) -> list[tuple[str, str]]:
    matched = ", ".join(f"{n} {rule}" for rule, n in counts["matched"].items() if n and rule != "none")
    return [
        (f"new {noun}", f"{counts['new']} ({_signed(counts['new_ns'])} per step)"),
        (f"gone {noun}", f"{counts['gone']} ({_signed(-counts['gone_ns'] or 0.0)} per step)"),
        ("faster / slower / same", f"{counts['faster']} / {counts['slower']} / {counts['same']}"),
        ("matched by", matched or "–"),
    ]


def _platforms(view: dict | None, per: str, top: int | None) -> list[Block]:
    """The GPU ↔ NPU view: categories, then the framework ops and modules that differ most."""
    if not view:
        return []
    columns = ["name", "baseline_ns", "candidate_ns", "delta_ns", "baseline_share", "candidate_share", "more"]
    blocks = [Block("heading", f"GPU ↔ NPU: where each platform spends its step ({per})")]
    blocks.append(table("By category (share: of the run's step time)", view["categories"], [*columns, *_COUNTS]))
    blocks.append(table("Framework ops that differ most", view["ops"][:top], columns))
    if view["modules"]:
        blocks.append(table("nn.Module paths that differ most", view["modules"][:top], columns))
    if view["mapped"]:
        blocks.append(Block("facts", facts=[(op, f"compared as {label}") for op, label in view["mapped"].items()]))
    return blocks


def _findings(rows: list[dict], top: int | None) -> list[Block]:
    changed = [r for r in rows if r["status"] in ("new", "gone")][:top]
    if not changed:
        return []
    columns = ["status", "analyzer", "title", "baseline_ns", "candidate_ns"]
    return [table("Findings new and gone (cost per step, estimated)", changed, columns)]


def _memory(memory: dict) -> list[Block]:
    sides = [memory[role] for role in ("baseline", "candidate")]
    if not any(sides):
        return []
    facts = [(f"peak ({role})", _peak(side)) for role, side in zip(("baseline", "candidate"), sides, strict=True)]
    if memory["delta_bytes"] is not None:
        change = ("+" if memory["delta_bytes"] > 0 else "") + humanize.size(memory["delta_bytes"])
        facts.append(("change", change + (", reached elsewhere" if memory["moved"] else ", same place")))
    return [Block("heading", "Peak memory"), Block("facts", facts=facts)]


def _peak(side: dict | None) -> str:
    if not side:
        return "no memory records"
    where = side["path"] or side["op"] or "?"
    size = humanize.size(side["peak_allocated_bytes"])
    return f"{size} allocated on rank {side['rank']} device {side['device']}, in {where}"


def _signed(ns: float) -> str:
    return ("+" if ns > 0 else "") + humanize.duration(ns)
