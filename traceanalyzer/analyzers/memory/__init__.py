"""Memory: what the allocator did (``analysis``), what to do about it (``advice``), and the report section
(``section``).

Contract: ``analyze(trace) -> MemoryAnalysis`` (memoised per trace; bytes in bytes, times in ns on the trace's time
base) is the one memory analysis; ``findings(trace)`` and ``section(trace, options)`` read only it.
"""

from __future__ import annotations

from traceanalyzer.analyzers.memory.advice import findings
from traceanalyzer.analyzers.memory.analysis import (
    GROUP,
    LEAK_MIN_BYTES_PER_STEP,
    LEAK_MIN_STEPS,
    MODULE_MEMORY,
    OUTSIDE_OP,
    MemoryAnalysis,
    analyze,
    module_memory,
)
from traceanalyzer.analyzers.memory.section import section

__all__ = [
    "GROUP",
    "LEAK_MIN_BYTES_PER_STEP",
    "LEAK_MIN_STEPS",
    "MODULE_MEMORY",
    "OUTSIDE_OP",
    "MemoryAnalysis",
    "analyze",
    "findings",
    "module_memory",
    "section",
]
