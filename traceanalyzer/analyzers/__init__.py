"""Analyzers: functions of a Trace that return data. Each module may add findings and a report section.

A finder is ``findings(trace) -> list[Finding]``; a section builder is ``section(trace, options) -> dict | None``
returning plain data: ``{"title": str, "facts": {label: value}, "tables": {name: [row dicts]}}`` plus any
other keys. Renderers show facts and tables generically (``*_ns`` columns as times, ``*share`` as %,
``*bytes`` as sizes), so a new analyzer needs no renderer change.
"""

from __future__ import annotations

import importlib
import warnings

from traceanalyzer.findings import Finding, ranked

MODULES = ("hotspots", "gemm", "health", "distributed", "fusion", "memory", "ascend")
"""Analyzer modules, in report order; each may define ``findings`` and ``section``."""


def _module(name: str):
    return importlib.import_module(f"traceanalyzer.analyzers.{name}")


def all_findings(trace) -> list[Finding]:
    """Findings of every analyzer, ranked; an analyzer that fails is reported as a warning, not a crash."""
    found: list[Finding] = []
    for name in MODULES:
        finder = getattr(_module(name), "findings", None)
        if finder is None:
            continue
        try:
            found.extend(finder(trace))
        except Exception as e:  # one analyzer's bug must not hide the others' findings
            warnings.warn(f"analyzer {name} failed: {type(e).__name__}: {e}", stacklevel=2)
    return ranked(found)


def sections(trace, options) -> dict[str, dict]:
    """Report sections of every analyzer that has something to say about this trace."""
    out = {}
    for name in MODULES:
        builder = getattr(_module(name), "section", None)
        if builder is None:
            continue
        try:
            section = builder(trace, options)
        except Exception as e:  # keep the rest of the report
            warnings.warn(f"analyzer {name} failed: {type(e).__name__}: {e}", stacklevel=2)
            continue
        if section:
            out[name] = section
    return out
