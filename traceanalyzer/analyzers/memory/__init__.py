"""Memory: what the allocator did (``analysis``), what to do about it (``advice``), and the report section
(``section``: ``job_section``).

Contract: ``analyze(trace) -> MemoryAnalysis`` (memoised per trace; bytes in bytes, times in ns on the trace's time
base) is the one memory analysis, its job part a ``MemoryJobPart``.
A job analysed rank by rank: ``rank_part(trace) -> MemoryPart`` per rank; ``merge(parts, job)`` combines them as
``analyze`` combines the joined trace's, and ``job_section(part, job, options)``, ``job_findings(part, job)`` read
the merged part.
"""

from __future__ import annotations

from traceanalyzer.analyzers.memory.advice import job_findings
from traceanalyzer.analyzers.memory.analysis import (
    GROUP,
    LEAK_MIN_BYTES_PER_STEP,
    LEAK_MIN_STEPS,
    OUTSIDE_OP,
    MemoryAnalysis,
    MemoryJobPart,
    MemoryPart,
    analyze,
    combine,
    compact_module_memory,
    merge,
    module_memory,
    rank_part,
)
from traceanalyzer.analyzers.memory.section import job_section

__all__ = [
    "GROUP",
    "LEAK_MIN_BYTES_PER_STEP",
    "LEAK_MIN_STEPS",
    "OUTSIDE_OP",
    "MemoryAnalysis",
    "MemoryPart",
    "MemoryJobPart",
    "analyze",
    "combine",
    "job_findings",
    "job_section",
    "merge",
    "compact_module_memory",
    "module_memory",
    "rank_part",
]
