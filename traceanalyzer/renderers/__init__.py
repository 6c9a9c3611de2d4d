"""Presenters of the report data: one module per output format. None computes a finding.

Each format's module is imported when it is first used (``traceanalyzer.lazy``): the command line lists the formats
without importing what draws them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from traceanalyzer import lazy
from traceanalyzer.tokens import DIGEST_BUDGET

if TYPE_CHECKING:
    from collections.abc import Sequence

    import plotly.graph_objects as go

    from traceanalyzer.renderers.document import Display
    from traceanalyzer.report import Report

FORMATS = ("text", "json", "markdown", "html", "digest")
"""The report formats, in the order ``--format`` lists them; each is the module ``traceanalyzer.renderers.<format>``."""
RENDERERS = {fmt: lazy.Module(f"{__name__}.{fmt}") for fmt in FORMATS}
__getattr__, __dir__ = lazy.attributes(globals(), {"Display": f"{__name__}.document.Display"})


def render(
    report: Report,
    fmt: str,
    display: Display | None = None,
    figures: Sequence[tuple[str, go.Figure]] = (),
    budget_tokens: int = DIGEST_BUDGET,
) -> str:
    """The report in one format: text at the display's width and detail (the default display when None), HTML with
    the titled ``figures`` (``Trace.figures``), the digest in ``budget_tokens``."""
    if fmt == "digest":
        return RENDERERS["digest"].render(report, budget_tokens)
    if fmt == "text":
        text = RENDERERS["text"]
        return text.render(report, display) if display else text.render(report)
    if fmt == "html":
        html = RENDERERS["html"]
        return html.render(report, list(figures))
    return RENDERERS[fmt].render(report)
