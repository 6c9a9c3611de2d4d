"""The memory section: the job's highest peak and what holds it, live blocks at the peak, per-op allocation, step
levels, blocks never freed, CANN module memory, and the leak verdict."""

from __future__ import annotations

import numpy as np
import pandas as pd

from traceanalyzer.analyzers.memory.analysis import GROUP, LEAK_MIN_STEPS, MemoryJobPart
from traceanalyzer.humanize import size
from traceanalyzer.jobdata import JobData
from traceanalyzer.options import Options
from traceanalyzer.records import plain
from traceanalyzer.schema import MEMORY_OOM, MEMORY_SEGMENTS, TraceMeta
from traceanalyzer.section import Fact, Per, Section, Table, Unit


def job_section(part: MemoryJobPart, job: JobData, options: Options) -> Section | None:
    """The memory section of a job's merged part: the highest peak and what holds it, live blocks at the peak,
    per-op stats, leaks."""
    if not job.memory_events:
        return None
    return _section(part, job.meta, options)


def _section(m: MemoryJobPart, meta: TraceMeta, options: Options) -> Section | None:
    """The section of a memory job part (``meta``: the job's facts: time base, snapshot tables)."""
    peaks = _ranked_pools(m.peaks)
    if not len(peaks):
        return None
    top = peaks.sort_values("peak_allocated_bytes", ascending=False, kind="stable").iloc[0]
    start = meta.start_ns
    live = _ranked_pools(m.live_at_peak).head(options.top)
    tables = [
        Table("peaks", "Memory peak per device", _peak_rows(peaks, start)),
        Table(
            "live_at_peak",
            "Blocks live at the peak (largest first)",
            live.assign(allocated_at_ns=live["alloc_ts"] - start, step=_step_or_none(live["step"]))[
                ["rank", "device", "bytes", "allocated_at_ns", "step", "op_name", "path", "stack"]
            ],
        ),
        Table("per_op", "Allocations per op", m.per_op.head(options.top), Per.TOTAL),
        Table(
            "step_memory",
            "Allocated at step start and end",
            _ranked_pools(m.step_memory)[GROUP + ["step", "start_bytes", "end_bytes"]],
        ),
        Table(
            "never_freed",
            "Never freed (allocated in a step)",
            _ranked_pools(m.unfreed).head(options.top)[GROUP + ["op_name", "path", "blocks", "steps", "unfreed_bytes"]],
        ),
    ]
    modules = _ranked_pools(m.modules)
    if len(modules):
        tables.append(Table("cann_modules", "CANN modules: peak reserved (npu_module_mem)", modules))
    tables += snapshot_tables(meta, options.top)
    return Section("memory", "Memory", facts=_peak_facts(top, m), tables=tables)


def _peak_facts(top: pd.Series, m: MemoryJobPart) -> list[Fact]:
    """The facts of the job's highest peak (the pool with the most allocated bytes)."""
    reserved = None if np.isnan(top["peak_reserved_bytes"]) else float(top["peak_reserved_bytes"])
    facts = [
        Fact(
            "peak_allocated_bytes",
            "peak allocated (highest device of the job)",
            int(top["peak_allocated_bytes"]),
            Unit.BYTES,
        ),
        Fact(
            "peak_at",
            "peak at",
            f"rank {top['rank']}, device {top['device']}, "
            + (f"step {top['peak_step']}" if top["peak_step"] >= 0 else "outside every step")
            + f": {top['path'] or top['op']}",
        ),
        Fact("peak_module", "peak in module", top["module"] or "–"),
        Fact("peak_code", "peak in code", top["stack"] or "–"),
        Fact("peak_reserved_bytes", "peak reserved", reserved, Unit.BYTES),
        Fact(
            "allocated_before_trace_bytes",
            "allocated before the trace",
            plain(top["allocated_before_trace_bytes"]),
            Unit.BYTES,
        ),
        Fact(
            "baseline",
            "baseline",
            "known" if top["baseline_known"] else "unknown (totals rebuilt from Bytes; relative to the trace)",
        ),
        Fact("leak", "leak", _leak_verdict(_ranked_pools(m.leak))),
    ]
    return facts + [Fact(f"note_{i + 1}", "note", note) for i, note in enumerate(m.notes)]


def _ranked_pools(table: pd.DataFrame) -> pd.DataFrame:
    """Devices before the host."""
    order = (table["device"] < 0).to_numpy().argsort(kind="stable")
    return table.iloc[order]


def _peak_rows(peaks: pd.DataFrame, start: int) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "rank": peaks["rank"],
            "device": peaks["device"],
            "peak_allocated_bytes": peaks["peak_allocated_bytes"],
            "peak_reserved_bytes": peaks["peak_reserved_bytes"],
            "capacity_share": peaks["capacity_share"],
            "at_ns": peaks["peak_ts"] - start,
            "step": _step_or_none(peaks["peak_step"]),
            "op": peaks["op"],
            "path": peaks["path"],
        }
    )


def _step_or_none(steps: pd.Series) -> pd.Series:
    """Step numbers with none (pd.NA: every presenter shows it as absent, never as NO_ROW) where a block or peak
    falls outside every step (always in a memory snapshot, which records no steps)."""
    return steps.astype("Int64").mask(steps < 0)


def _leak_verdict(leak: pd.DataFrame) -> str:
    """One line: which pools leak and how fast, or why there is no verdict."""
    pools = leak[leak["device"] >= 0] if (leak["device"] >= 0).any() else leak
    if not len(pools) or pools["steps"].max() < LEAK_MIN_STEPS:
        return f"no verdict (needs at least {LEAK_MIN_STEPS} steps)"
    leaking = pools[pools["leak"]]
    if not len(leaking):
        worst = pools["growth_per_step_bytes"].abs().max()
        return f"none (allocated memory at step end changes by at most {size(worst)} per step)"
    return "; ".join(
        f"rank {r['rank']} device {r['device']} grows {size(r['growth_per_step_bytes'])} per step (r² {r['r2']:.2f})"
        for _, r in leaking.iterrows()
    )


def snapshot_tables(meta: TraceMeta, top: int) -> list[Table]:
    """A memory snapshot's out-of-memory errors and its segments (reserved − allocated each, at the peak, at each
    out-of-memory error and at the dump; the ``top`` most unused of each), of every rank, from the parser's
    side tables (``MEMORY_OOM``, ``MEMORY_SEGMENTS``)."""
    tables = []
    for declared, tid, title in (
        (MEMORY_OOM, "out_of_memory", "Out of memory (memory snapshot): requested and free"),
        (MEMORY_SEGMENTS, "segments", "Segments (memory snapshot): reserved − allocated per segment"),
    ):
        table = meta.side_table(declared)
        if len(table):
            if "ts" in table:
                table = table.drop(columns="ts").assign(at_ns=table["ts"] - meta.start_ns)  # (the meta's table kept)
            else:
                when = pd.Categorical(table["at"], categories=pd.unique(table["at"]))  # peak, errors, dump
                table = table.assign(when=when).sort_values(
                    ["rank", "when", "unused_bytes"], ascending=[True, True, False], kind="stable"
                )
                table = table.groupby(["rank", "at"], sort=False).head(top).drop(columns="when")
            tables.append(Table(tid, title, table, Per.TOTAL))
    return tables
