"""The report as JSON: the stable schema documented in docs/report-schema.md (``schema_version`` 3)."""

from __future__ import annotations

import orjson

from traceanalyzer.report import SCHEMA_VERSION, Report


def data(report: Report) -> dict:
    """The report as plain data: schema version, trace, scope, findings (ranked) and sections by id."""
    return {
        "schema_version": SCHEMA_VERSION,
        "trace": report.trace,
        "scope": {"step": report.scope.step, "rank": report.scope.rank},
        "findings": [f.to_dict() for f in report.findings],
        "sections": {s.id: s.to_dict() for s in report.sections},
    }


def render(report: Report) -> str:
    """Pretty JSON text of the report."""
    return dumps(data(report))


def dumps(plain: dict) -> str:
    """Pretty JSON text of plain data (numpy scalars and integer keys allowed)."""
    options = orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS
    try:
        return orjson.dumps(plain, option=options).decode()
    except TypeError:  # a file name's undecodable bytes (surrogates), which JSON cannot hold: as escapes
        return orjson.dumps(_decodable(plain), option=options).decode()


def _decodable(value: object) -> object:
    """Plain data with every string's surrogates as backslash escapes."""
    if isinstance(value, str):
        return value.encode("utf-8", "backslashreplace").decode("utf-8")
    if isinstance(value, dict):
        return {_decodable(k): _decodable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_decodable(v) for v in value]
    return value
