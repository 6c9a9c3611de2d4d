"""Presenters of the report data: one module per output format. None computes a finding."""

from __future__ import annotations

from traceanalyzer.renderers import html, json, markdown, text
from traceanalyzer.renderers.document import Display
from traceanalyzer.report import Report

RENDERERS = {"text": text.render, "json": json.render, "markdown": markdown.render, "html": html.render}
FORMATS = tuple(RENDERERS)
"""The report formats, in the order ``--format`` lists them."""


def render(report: Report, fmt: str, display: Display = Display(), trace=None) -> str:  # noqa: B008 - frozen
    """The report in one format: text at the display's width and detail, HTML with the figures of ``trace``."""
    if fmt == "text":
        return text.render(report, display)
    if fmt == "html":
        return html.render(report, html.report_figures(trace, report.scope) if trace is not None else [])
    return RENDERERS[fmt](report)
