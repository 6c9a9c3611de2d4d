"""The report as JSON (the stable schema documented in the README)."""

from __future__ import annotations

import orjson


def render(report: dict) -> str:
    """Pretty JSON text of the report."""
    return orjson.dumps(report, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY).decode()
