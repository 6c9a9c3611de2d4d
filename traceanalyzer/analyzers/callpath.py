"""Where a host event sits: its annotation/op path, nn.Module path and user Python stack, from ``parent`` links."""

from __future__ import annotations

import re
from dataclasses import dataclass

import pandas as pd

from traceanalyzer.schema import NO_ROW, Kind

SEPARATOR = " › "
"""Joins the names along a path, outermost first."""

MODULE_PREFIX = "nn.Module: "
"""How torch.profiler names a Python frame that is an nn.Module call (with_modules / with_stack)."""

LIBRARY_FRAME = re.compile(
    r"^<built-in|^nn\.Module: |(^|/)(torch|torch_npu|transformers|accelerate|deepspeed|megatron|triton|site-packages|"
    r"dist-packages|threading|contextlib|runpy|multiprocessing)/|^<frozen |^<string>|^\.\.\./"
)
"""Python frames that belong to libraries or the interpreter, not to the user's code."""

PATH_KINDS = frozenset({Kind.ANNOTATION.value, Kind.CPU_OP.value})
"""Kinds that name a path: user annotations (record_function) and CPU ops; step markers are left out."""

USER_FRAMES = 6
"""How many of the innermost user Python frames a stack keeps."""


@dataclass(frozen=True)
class Where:
    """The context of one host event: annotation/op path, module path, user stack and enclosing step marker."""

    path: str
    module: str
    stack: str
    step_marker: str

    @property
    def full_path(self) -> str:
        """The path with its step marker in front, as a profiler viewer shows it."""
        return SEPARATOR.join(p for p in (self.step_marker, self.path) if p)


def where(events: pd.DataFrame, row: int) -> Where:
    """Context of an event-table row, from the outermost ancestor down to the row itself."""
    return _where(_Columns(events), row)


def where_many(events: pd.DataFrame, rows) -> pd.DataFrame:
    """Context of several rows (each distinct row walked once): row, path, module, stack, step_marker, full_path."""
    distinct = pd.unique(pd.Series(list(rows), dtype="int64"))
    columns = _Columns(events)
    found = [_where(columns, int(r)) for r in distinct]
    return pd.DataFrame(
        {
            "row": distinct,
            "path": [w.path for w in found],
            "module": [w.module for w in found],
            "stack": [w.stack for w in found],
            "step_marker": [w.step_marker for w in found],
            "full_path": [w.full_path for w in found],
        }
    )


class _Columns:
    """What a walk up the ``parent`` links reads, taken out of the table once (names and kinds as codes)."""

    def __init__(self, events: pd.DataFrame) -> None:
        self.parent = events["parent"].to_numpy()
        name, kind = events["name"].array, events["kind"].array
        self.name_codes, self.names = name.codes, [str(n) for n in name.categories] + [""]  # code -1: missing
        self.kind_codes, self.kinds = kind.codes, [str(k) for k in kind.categories] + [""]

    def ancestors(self, row: int) -> list[int]:
        """The row and its enclosing host events, outermost first."""
        chain = []
        while row != NO_ROW:
            chain.append(row)
            row = int(self.parent[row])
        return chain[::-1]

    def name(self, row: int) -> str:
        return self.names[self.name_codes[row]]

    def kind(self, row: int) -> str:
        return self.kinds[self.kind_codes[row]]


def _where(columns: _Columns, row: int) -> Where:
    if row == NO_ROW:
        return Where("", "", "", "")
    chain = [(columns.name(r), columns.kind(r)) for r in columns.ancestors(row)]
    path = [name for name, kind in chain if kind in PATH_KINDS]
    frames = [name for name, kind in chain if kind == Kind.PYTHON.value]
    modules = [f.removeprefix(MODULE_PREFIX) for f in frames if f.startswith(MODULE_PREFIX)]
    user = [f for f in frames if not LIBRARY_FRAME.search(f)]
    steps = [name for name, kind in chain if kind == Kind.STEP.value]
    return Where(
        path=SEPARATOR.join(path),
        module=SEPARATOR.join(modules),
        stack=SEPARATOR.join(user[-USER_FRAMES:]),
        step_marker=steps[-1] if steps else "",
    )
