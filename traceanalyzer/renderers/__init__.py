"""Presenters of the report data: one module per output format. None computes a finding."""

from __future__ import annotations

from traceanalyzer.renderers import json, markdown, text

RENDERERS = {"text": text.render, "json": json.render, "markdown": markdown.render}
