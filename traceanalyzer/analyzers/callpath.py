"""Where a host event sits: its annotation/op path, nn.Module path and user Python stack, from ``parent`` links.

The one walk up ``parent`` links in the package: every analysis that asks "where did this come from" (memory peaks,
fusion locations, idle gaps, syncs, launch-bound places, compare) reads it here. Each ancestor is walked once per
call, however many rows share it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from traceanalyzer.schema import NO_ROW, Kind
from traceanalyzer.vocabulary import LIBRARY_FRAME, MODULE_PREFIX

SEPARATOR = " › "
"""Joins the names along a path, outermost first."""

PATH_KINDS = frozenset({Kind.ANNOTATION.value, Kind.CPU_OP.value})
"""Kinds that name a path: user annotations (record_function) and CPU ops; step markers are left out."""

USER_FRAMES = 6
"""How many of the innermost user Python frames a stack keeps."""

COLUMNS = ["row", "path", "module", "stack", "step_marker", "full_path", "annotations", "annotation", "frame"]


@dataclass(frozen=True)
class Where:
    """The context of one host event: annotation/op path, module path, user stack and enclosing step marker."""

    path: str
    module: str
    stack: str
    step_marker: str
    annotations: str = ""  # the user annotations only, outermost first
    annotation: str = ""  # the innermost annotation
    frame: str = ""  # the innermost user Python frame

    @property
    def full_path(self) -> str:
        """The path with its step marker in front, as a profiler viewer shows it."""
        return SEPARATOR.join(p for p in (self.step_marker, self.path) if p)


_NOWHERE = Where("", "", "", "")


def where(events: pd.DataFrame, row: int) -> Where:
    """Context of an event-table row, from the outermost ancestor down to the row itself."""
    return _Walker(events).where(int(row))


def where_many(events: pd.DataFrame, rows) -> pd.DataFrame:
    """Context of several rows (each distinct row once), one row each: the ``COLUMNS``."""
    distinct = pd.unique(np.asarray(list(rows), dtype=np.int64))
    walker = _Walker(events)
    found = [walker.where(int(r)) for r in distinct]
    frame = pd.DataFrame([w.__dict__ for w in found], columns=COLUMNS[1:5] + COLUMNS[6:])
    frame.insert(0, "row", distinct)
    frame.insert(5, "full_path", [w.full_path for w in found])
    return frame


def context(events: pd.DataFrame, rows) -> pd.DataFrame:
    """``where_many`` aligned to ``rows`` (one output row per input row, repeats included), indexed by row."""
    rows = np.asarray(rows, dtype=np.int64)
    return where_many(events, rows).set_index("row").reindex(rows)


@dataclass(frozen=True)
class _State:
    """What the chain from the outermost ancestor down to a row holds (tuples: shared by every descendant)."""

    path: tuple[str, ...] = ()
    modules: tuple[str, ...] = ()
    user: tuple[str, ...] = ()
    annotations: tuple[str, ...] = ()
    step: str = ""


class _Walker:
    """The walk up ``parent`` links, each row's chain state computed once from its parent's."""

    def __init__(self, events: pd.DataFrame) -> None:
        self.parent = events["parent"].to_numpy()
        name, kind = events["name"].array, events["kind"].array
        self.name_codes, self.names = name.codes, [str(n) for n in name.categories] + [""]  # code -1: missing
        self.kind_codes, self.kinds = kind.codes, [str(k) for k in kind.categories] + [""]
        self.states: dict[int, _State] = {NO_ROW: _State()}

    def where(self, row: int) -> Where:
        if row == NO_ROW:
            return _NOWHERE
        s = self.state(row)
        return Where(
            path=SEPARATOR.join(s.path),
            module=SEPARATOR.join(s.modules),
            stack=SEPARATOR.join(s.user[-USER_FRAMES:]),
            step_marker=s.step,
            annotations=SEPARATOR.join(s.annotations),
            annotation=s.annotations[-1] if s.annotations else "",
            frame=s.user[-1] if s.user else "",
        )

    def state(self, row: int) -> _State:
        pending = []
        while row not in self.states:
            pending.append(row)
            row = int(self.parent[row])
        state = self.states[row]
        for r in reversed(pending):
            state = self._step(state, r)
            self.states[r] = state
        return state

    def _step(self, s: _State, row: int) -> _State:
        name, kind = self.names[self.name_codes[row]], self.kinds[self.kind_codes[row]]
        if kind == Kind.STEP.value:
            return _State(s.path, s.modules, s.user, s.annotations, name)
        if kind in PATH_KINDS:
            annotations = s.annotations + (name,) if kind == Kind.ANNOTATION.value else s.annotations
            return _State(s.path + (name,), s.modules, s.user, annotations, s.step)
        if kind != Kind.PYTHON.value:
            return s
        if name.startswith(MODULE_PREFIX):
            return _State(s.path, s.modules + (name.removeprefix(MODULE_PREFIX),), s.user, s.annotations, s.step)
        if LIBRARY_FRAME.search(name):
            return s
        return _State(s.path, s.modules, s.user + (name,), s.annotations, s.step)
