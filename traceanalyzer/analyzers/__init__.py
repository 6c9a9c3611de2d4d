"""Analyzers: functions of a (scoped) ``TraceData`` that return data; none prints, none imports a presenter.

Each module in ``MODULES`` may define ``findings(trace) -> list[Finding]`` and
``section(trace, options) -> Section | None`` (``traceanalyzer.section``). ``report`` collects them: every
section, and every finding ranked once over all analyzers (``findings.rank``), so savings add up.
"""

from __future__ import annotations

import warnings

from traceanalyzer.analyzers import ascend, distributed, fusion, gemm, health, hotspots, ledger, memory, steps
from traceanalyzer.findings import Finding, rank
from traceanalyzer.options import Options
from traceanalyzer.section import Section
from traceanalyzer.tracedata import TraceData

MODULES = (steps, hotspots, gemm, health, distributed, fusion, memory, ascend)
"""Analyzer modules, in report order (the ledger comes first and always)."""


def all_findings(trace: TraceData) -> list[Finding]:
    """Findings of every analyzer, ranked; an analyzer that fails is reported as a warning, not a crash."""
    found: list[Finding] = []
    for module in MODULES:
        finder = getattr(module, "findings", None)
        if finder is None:
            continue
        try:
            found.extend(finder(trace))
        except Exception as e:  # one analyzer's bug must not hide the others' findings
            warnings.warn(f"analyzer {module.__name__} failed: {type(e).__name__}: {e}", stacklevel=2)
    return rank(found)


def sections(trace: TraceData, options: Options) -> list[Section]:
    """The ledger, then the section of every analyzer that has something to say about this trace."""
    out = [ledger.section(trace, options)]
    for module in MODULES:
        try:
            section = module.section(trace, options)
        except Exception as e:  # keep the rest of the report
            warnings.warn(f"analyzer {module.__name__} failed: {type(e).__name__}: {e}", stacklevel=2)
            continue
        if section is not None:
            out.append(section)
    return out
