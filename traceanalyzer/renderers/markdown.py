"""The report as Markdown (for issues, pull requests and notebooks)."""

from __future__ import annotations

from traceanalyzer.renderers.document import NAME_WIDTH, Block, layout, shorten_columns
from traceanalyzer.report import Report


def render(report: Report) -> str:
    """Markdown text of the report."""
    return render_blocks(layout(report))


def render_blocks(blocks: list[Block]) -> str:
    """Markdown text of laid-out blocks (headings, facts, tables)."""
    return "\n".join(line for block in blocks for line in _block(block)) + "\n"


def _block(b: Block) -> list[str]:
    if b.kind == "heading":
        return ["", "#" * b.level + " " + b.title, ""]
    if b.kind == "facts":
        return [f"- **{k}**: {_escape(v)}" if k else f"- {_escape(v)}" for k, v in b.facts]
    if b.kind == "list":
        return [
            line
            for i, (headline, texts) in enumerate(b.items, 1)
            for line in (f"{i}. **{_escape(headline)}**  ", *(f"   {_escape(t)}  " for t in texts))
        ]
    header = "| " + " | ".join(b.headers) + " |"
    rule = "|" + "|".join("---:" if num else "---" for num in b.numeric) + "|"
    cells = shorten_columns(b.rows, [NAME_WIDTH] * len(b.headers))
    rows = ["| " + " | ".join(_escape(c) for c in r) + " |" for r in cells]
    return ["", f"**{b.title}**", "", header, rule, *rows]


def _escape(text: str) -> str:
    return text.replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")
