"""``traceanalyze export``: a trace's tables as Parquet or CSV files in a folder, or an annotated Perfetto trace.

The folder gets ``events``, ``memory_events`` and one file per section table (``<section>.<table>``), and a
README.md that says what every column holds and in what unit. Parquet keeps the event table exactly (categories,
int64 ns); CSV writes the same rows as text. Where it may be written is ``outputs``' rule (nothing inside or
beside an input, an existing folder or file only with ``--force``); the folder is marked as an export.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import orjson
import pandas as pd

from traceanalyzer import outputs
from traceanalyzer.errors import TraceError
from traceanalyzer.report import Report
from traceanalyzer.schema import EVENT_COLUMNS, MEMORY_COLUMNS, NO_ROW, Column
from traceanalyzer.section import Table

TARGETS = ("csv", "parquet", "perfetto")
"""What ``--to`` accepts, in the order ``--help`` lists it."""


def check_output(target: str, out: Path, inputs: list[outputs.Protected], force: bool = False) -> None:
    """Refuse (TraceError) an output that ``outputs`` refuses, a Perfetto file not named .json or .json.gz, or
    Parquet where pyarrow is not installed (an extra: pandas 3 imports it whenever it is installed)."""
    outputs.check(out, inputs, force, folder=target != "perfetto")
    if target == "perfetto" and not out.name.endswith((".json", ".json.gz")):
        raise TraceError(str(out), "(the -o output) must end in .json or .json.gz")
    if target == "parquet" and importlib.util.find_spec("pyarrow") is None:
        raise TraceError(str(out), f"cannot be written as Parquet without pyarrow: {PARQUET_INSTALL}")


PARQUET_INSTALL = "pip install 'traceanalyzer-hotspots[parquet]' (in a checkout: pip install '.[parquet]')"


def write(report: Report, loaded: dict[str, pd.DataFrame], target: str, out: Path) -> str:
    """Write the tables export (csv or parquet) to the folder ``out``: the ``loaded`` tables (events, memory
    events), every section table of ``report`` and a README.md of their columns; returns what was written."""
    tables = loaded | {f"{s.id}.{t.id}": _plain(t.frame) for s in report.sections for t in s.tables}
    with outputs.folder_replacing(out) as into:
        for name, frame in tables.items():
            _save(frame, into / f"{name}.{target}", target)
        (into / "README.md").write_text(readme(report, target), encoding="utf-8")
    return f"{len(tables)} {target} tables and README.md to {out}"


def _save(frame: pd.DataFrame, path: Path, target: str) -> None:
    try:
        if target == "parquet":
            frame.to_parquet(path, engine="pyarrow")
        else:
            frame.to_csv(path, index_label="row")
    except OSError as e:
        raise TraceError(str(path.name), f"cannot be written: {e.strerror or e}") from None


def _plain(frame: pd.DataFrame) -> pd.DataFrame:
    """A section table with nested values (lists, dicts) as JSON text, so every column has one type."""
    nested = [c for c in frame.columns if frame[c].map(lambda v: isinstance(v, list | dict | tuple)).any()]
    if not nested:
        return frame
    return frame.assign(
        **{
            c: frame[c].map(
                lambda v: (
                    orjson.dumps(v, option=orjson.OPT_SERIALIZE_NUMPY).decode()
                    if isinstance(v, list | dict | tuple)
                    else v
                )
            )
            for c in nested
        }
    )


def readme(report: Report, target: str) -> str:
    """README.md of an export folder: every file's columns, their types or units, and what they mean."""
    lines = [
        "# traceanalyzer export",
        "",
        f"Exported from {'; '.join(report.trace['paths'])} ({report.trace['platform']}, "
        f"{report.trace['source_format']}). Times are integer nanoseconds on each rank's time base; "
        f"{NO_ROW} means none in link, device, stream and step columns. Link columns (parent, launch, op, top_op, "
        "caller) hold row labels of the event table (the `row` index).",
        "",
        *_columns(f"events.{target}", "one row per event", EVENT_COLUMNS),
        *_columns(f"memory_events.{target}", "allocations and frees", MEMORY_COLUMNS),
    ]
    for section in report.sections:
        for table in section.tables:
            lines += _table(f"{section.id}.{table.id}.{target}", f"{section.title}: {table.title}", table)
    return "\n".join(lines) + "\n"


def _columns(name: str, what: str, columns: tuple[Column, ...]) -> list[str]:
    rows = [f"| {c.name} | {c.dtype} | {c.doc} |" for c in columns]
    return [f"## {name}", "", what, "", "| column | type | meaning |", "|---|---|---|", *rows, ""]


def _table(name: str, title: str, table: Table) -> list[str]:
    per = {"step": "per step", "total": "totals over the window", "": ""}[table.per.value]
    note = "; ".join(x for x in (per, table.note) if x)
    rows = [f"| {c} | {table.unit(str(c)).value} |" for c in table.frame.columns]
    return [f"## {name}", "", title + (f" ({note})" if note else ""), "", "| column | unit |", "|---|---|", *rows, ""]
