"""The section contract: what an analyzer returns and only renderers turn into text, JSON, HTML or Dash.

A ``Section`` has a stable snake_case ``id``, a display ``title``, ``facts`` (single values) and ``tables``
(DataFrames), each with its own stable id and title, and every number with a declared ``Unit`` and whether it is
per step or a total (``Per``). Column units are declared per table; columns not declared get the unit their name
says (``*_ns`` time, ``*share`` fraction, ``*bytes`` size, else a plain number or text).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum

import pandas as pd

from traceanalyzer.findings import Finding
from traceanalyzer.records import plain, records

_ID = re.compile(r"^[a-z][a-z0-9_]*$")


class Unit(str, Enum):
    """The unit of a fact or column."""

    NS = "ns"  # a time in integer nanoseconds
    INSTANT = "instant"  # a point in time: integer ns on the trace's clock (presenters show it from a start)
    BYTES = "bytes"
    SHARE = "share"  # a fraction in [0, 1]
    COUNT = "count"
    ID = "id"  # a number that names something (a step number, rank, device): no unit, no thousands separator
    NUMBER = "number"
    TFLOPS = "TFLOP/s"
    GBPS = "GB/s"
    BYTES_PER_STEP = "bytes/step"
    TEXT = "text"


class Per(str, Enum):
    """Whether a number is per step (a median or mean over the steps analysed) or over the whole window."""

    STEP = "step"
    TOTAL = "total"
    NONE = ""  # not a time or size that accumulates (a count of ranks, a share, a name)


IDENTIFIER_COLUMNS = frozenset({"step", "rank", "device", "late_rank"})
"""Columns whose numbers name a step, rank or device (identifiers, not amounts)."""


def column_unit(name: str) -> Unit:
    """The unit a column's name says, for columns whose table does not declare one."""
    if name in IDENTIFIER_COLUMNS:
        return Unit.ID
    if name.endswith("_ns") or "_ns_" in name:
        return Unit.NS
    if name.endswith("share"):
        return Unit.SHARE
    if name.endswith("bytes"):
        return Unit.BYTES
    if name.endswith("tflops"):
        return Unit.TFLOPS
    if name.endswith("gbps"):
        return Unit.GBPS
    return Unit.NUMBER


@dataclass(frozen=True)
class Fact:
    """One value of a section, with its unit and basis."""

    id: str
    title: str
    value: object
    unit: Unit = Unit.TEXT
    per: Per = Per.NONE
    estimated: bool = False

    def __post_init__(self) -> None:
        _check_id(self.id)

    def to_dict(self) -> dict:
        """Plain data: ``{"id", "title", "value", "unit", "per", "estimated"}``."""
        return {
            "id": self.id,
            "title": self.title,
            "value": plain(self.value),
            "unit": self.unit.value,
            "per": self.per.value,
            "estimated": self.estimated,
        }


@dataclass(frozen=True)
class Table:
    """One table of a section: rows as a DataFrame, column units declared or taken from the column names."""

    id: str
    title: str
    frame: pd.DataFrame
    per: Per = Per.NONE
    units: Mapping[str, Unit] = field(default_factory=dict)
    note: str = ""

    def __post_init__(self) -> None:
        _check_id(self.id)

    def unit(self, column: str) -> Unit:
        """The unit of one column."""
        if column in self.units:
            return self.units[column]
        if column in self.frame and not pd.api.types.is_numeric_dtype(self.frame[column]):
            return Unit.TEXT
        return column_unit(column)

    def head(self, n: int) -> Table:
        """The same table with its first n rows."""
        return Table(self.id, self.title, self.frame.head(n), self.per, self.units, self.note)

    def to_dict(self) -> dict:
        """Plain data: id, title, per, note, the columns with their units, and the rows."""
        return {
            "id": self.id,
            "title": self.title,
            "per": self.per.value,
            "note": self.note,
            "columns": [{"name": str(c), "unit": self.unit(c).value} for c in self.frame.columns],
            "rows": records(self.frame),
        }


@dataclass
class Section:
    """What one analyzer has to say: facts, tables and findings under a stable id."""

    id: str
    title: str
    facts: list[Fact] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)

    def __post_init__(self) -> None:
        _check_id(self.id)

    def fact(self, fact_id: str) -> Fact:
        """The fact with this id (KeyError if there is none)."""
        return _by_id(self.facts, fact_id)

    def table(self, table_id: str) -> Table:
        """The table with this id (KeyError if there is none)."""
        return _by_id(self.tables, table_id)

    def to_dict(self) -> dict:
        """Plain data: id, title, facts and tables (findings are listed once, in the report's ranked list)."""
        return {
            "id": self.id,
            "title": self.title,
            "facts": [f.to_dict() for f in self.facts],
            "tables": [t.to_dict() for t in self.tables],
        }


def _by_id(items: Iterable, item_id: str):
    for item in items:
        if item.id == item_id:
            return item
    raise KeyError(item_id)


def _check_id(value: str) -> None:
    if not _ID.match(value):
        raise ValueError(f"section, fact and table ids are snake_case: {value!r}")
