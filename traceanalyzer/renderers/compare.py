"""The comparison of two runs (``Comparison.to_dict()``) as text, Markdown or JSON. Computes nothing.

Text is the whole comparison; Markdown is the compact form for a pull-request comment (the gate's verdict line
first, what changed the step, the summary, the top changes and a link to the full report); JSON is the full result.
"""

from __future__ import annotations

from traceanalyzer import humanize
from traceanalyzer.renderers import json, markdown, text
from traceanalyzer.renderers.document import Block, table

COMPACT_ROWS = 5
"""Rows per table in the Markdown (pull-request) form."""
VERDICT_LABELS = {"fail": "FAIL", "pass": "pass", "inconclusive": "inconclusive"}
"""How each gate outcome opens its verdict line."""

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


def render(data: dict, fmt: str, link: str | None = None) -> str:
    """The comparison in one format: 'text', 'markdown' or 'json'; ``link``: the full report's address, linked at
    the end of the Markdown."""
    if fmt == "json":
        return json.dumps(data)
    if fmt == "markdown":
        return markdown.render_blocks(layout(data, compact=True, link=link))
    return text.render_blocks(layout(data))


def verdict_line(gate: dict) -> str:
    """The gate's verdict in one line: 'FAIL: …', 'pass: …' or 'inconclusive: …'."""
    return f"{VERDICT_LABELS[gate['outcome']]}: {gate['reason']}"


def layout(data: dict, compact: bool = False, link: str | None = None) -> list[Block]:
    """All blocks of a comparison, in reading order; ``compact``: the pull-request comment (its verdict line
    first, then a link to the full report when ``link`` is given)."""
    per = "per step" if data["per_step"] else "per rank, whole window"
    blocks = [Block("heading", "traceanalyzer compare: baseline → candidate", level=1)]
    if compact and data["gate"]:
        blocks = [Block("facts", facts=[("", "**" + verdict_line(data["gate"]) + "**")])] + blocks
    headline = _runs(data) + _gate(data) + _headline(data) + _generation(data) + _notes(data)
    blocks.append(Block("facts", facts=headline))
    rows = COMPACT_ROWS if compact else None
    blocks += _contributions(data, rows)
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
    blocks += _findings(data["findings"], rows) + _memory(data["memory"])
    if compact and link:
        blocks.append(Block("facts", facts=[("", f"[Full comparison report]({link})")]))
    return blocks


def _runs(data: dict) -> list[tuple[str, str]]:
    def steps(side: dict) -> str:
        if side["compared_steps"] is None:
            return "whole window"
        n = side["units"]
        return f"{n} step" + ("s" if n != 1 else "") + (" (rank, step)" if len(side["ranks"]) > 1 else "")

    facts = [
        (role, "; ".join(data[role]["paths"]) + f" ({_hardware(data[role])})") for role in ("baseline", "candidate")
    ]
    facts.append(("compared", f"{steps(data['baseline'])} → {steps(data['candidate'])}"))
    return facts + ([("rank", str(data["rank"]))] if data["rank"] is not None else [])


def _hardware(side: dict) -> str:
    """E.g. 'cuda, NVIDIA H200: 989 TFLOP/s bf16, 4.8 TB/s'."""
    parts = []
    for device in side["hardware"]:
        peaks = device["peak_tflops"]
        peak = f"{humanize.tflops(peaks['bf16'])} bf16" if "bf16" in peaks else ""
        bandwidth = humanize.bandwidth(device["bandwidth_bytes_per_s"], 2) if device["bandwidth_bytes_per_s"] else ""
        parts.append(
            device["name"] + (f": {', '.join(p for p in (peak, bandwidth) if p)}" if peak or bandwidth else "")
        )
    return f"{side['platform']}, " + ("; ".join(parts) or "device not recorded")


def _gate(data: dict) -> list[tuple[str, str]]:
    gate = data["gate"]
    if not gate:
        return []
    facts = [("gate", verdict_line(gate))]
    step = gate["step"]
    if step["detectable_share"] is not None:
        facts.append(
            (
                "detectable",
                f"with {step['steps'][0]} vs {step['steps'][1]} steps, changes below "
                f"{humanize.share(step['detectable_share'])} cannot be told from noise "
                f"({humanize.share(gate['confidence'], 0)} two-sided interval of the Hodges–Lehmann shift)",
            )
        )
    for work in gate["work"] + ([gate["host_time_per_op"]] if gate["host_time_per_op"] else []):
        facts.append((work["quantity"], _work(work, gate["confidence"])))
    for phase in gate.get("generation") or []:
        samples = f" ({phase['steps'][0]} vs {phase['steps'][1]} {phase['samples']})"
        facts.append((f"gate: {phase['quantity']}", _work(phase, gate["confidence"], "") + samples))
    return facts


def _work(work: dict, confidence: float, per: str = " per step") -> str:
    """E.g. '16.59 ms → 16.60 ms per step (+0.1%, 99% interval -0.2% … +0.3%): pass'."""
    value = humanize.duration if work["unit"] == "ns" else (lambda n: f"{n:,.0f}")
    per_op = work["quantity"].startswith("host time")
    text = f"{value(work['baseline'])} → {value(work['baseline'] + work['estimate'])}" + ("" if per_op else per)
    if work["estimate_share"] is not None:
        text += f" ({_signed_share(work['estimate_share'])}"
        if work["low_share"] is not None:
            low, high = _signed_share(work["low_share"]), _signed_share(work["high_share"])
            text += f", {humanize.share(confidence, 0)} interval {low} … {high}"
        text += ")"
    return text + ("" if per_op else f": {work['outcome']}")


def _signed_share(share: float) -> str:
    return ("+" if share > 0 else "") + humanize.share(share)


def _headline(data: dict) -> list[tuple[str, str]]:
    labels = _SUMMARY_LABELS if data["per_step"] else {**_SUMMARY_LABELS, "step_ns": "window"}
    steps = (data["baseline"]["units"], data["candidate"]["units"])
    return [
        (labels[row["metric"]], _before_after(row, steps))
        for row in data["summary"]
        if row["baseline_ns"] or row["candidate_ns"]
    ]


_GENERATION_LABELS = {
    "ttft_ns": ("time to first token", "requests"),
    "tpot_p50_ns": ("time per output token, p50", "tokens"),
    "tpot_p90_ns": ("time per output token, p90", "tokens"),
}


def _generation(data: dict) -> list[tuple[str, str]]:
    """TTFT and TPOT before → after, when both runs are generation; their noise counted in requests or tokens."""
    out = []
    for row in data.get("inference") or []:
        label, samples = _GENERATION_LABELS[row["metric"]]
        text = _before_after(row, (row["baseline_samples"], row["candidate_samples"]), samples)
        out.append((label, text))
    return out


def _before_after(row: dict, steps: tuple[int, int], samples: str = "steps") -> str:
    change = _signed(row["delta_ns"])
    if row["delta_share"] is not None:
        change += f", {'+' if row['delta_share'] > 0 else ''}{humanize.share(row['delta_share'])}"
    noise = row["noise"]
    if row["p_value"] is not None:
        noise += f", p = {row['p_value']:.2g}"
    noise += f", {steps[0]} vs {steps[1]} {samples}"
    return f"{humanize.duration(row['baseline_ns'])} → {humanize.duration(row['candidate_ns'])} ({change}; {noise})"


def _notes(data: dict) -> list[tuple[str, str]]:
    noise, steps = data["noise"], (data["baseline"]["units"], data["candidate"]["units"])
    test = f"{noise['test']}: {steps[0]} vs {steps[1]} steps, beyond noise at p ≤ {noise['alpha']:g}"
    if min(steps) < noise["min_steps"]:
        test += f" (needs {noise['min_steps']} per run: too few steps)"
    return [("noise", test)] + [("note", n) for n in data["notes"]] + [("warning", w) for w in data["warnings"]]


def _contributions(data: dict, rows: int | None) -> list[Block]:
    """What changed the step: the decomposition of the mean step change, biggest first; the compact form names the
    biggest rows and sums the others into one, so it still adds up."""
    table_rows = [r for r in data["contributions"] if r["delta_ns"]]
    if not table_rows:
        return []
    if rows is not None and len(table_rows) > rows:
        rest = table_rows[rows:]
        other = {"what": "", "name": f"{len(rest)} smaller rows", "delta_ns": sum(r["delta_ns"] for r in rest)}
        other["change_share"] = sum(r["change_share"] or 0.0 for r in rest)
        table_rows = [*table_rows[:rows], other]
    total = sum(r["delta_ns"] for r in data["contributions"])
    per = "per step, means" if data["per_step"] else "per rank, whole window"
    title = f"What changed the step ({per}; adds up to {_signed(total)})"
    return [table(title, table_rows, ["what", "name", "baseline_ns", "candidate_ns", "delta_ns", "change_share"])]


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
