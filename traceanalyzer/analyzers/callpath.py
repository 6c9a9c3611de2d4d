"""Where a host event sits: its annotation/op path, nn.Module path and user Python stack, from ``parent`` links.

Every analysis that asks "where did this come from" (memory peaks, fusion locations, idle gaps, syncs, launch-bound
places, collective phases, compare) reads it here. The walk is the trace's ``calltree``, one pass per depth level,
each row's answer taken from its parent's; ``walk(trace)`` keeps it per trace.
"""

from __future__ import annotations

import functools

import numpy as np
import pandas as pd

from traceanalyzer import calltree
from traceanalyzer.memo import remember
from traceanalyzer.schema import CALL_TREE, Kind, category_text
from traceanalyzer.tracedata import TraceData
from traceanalyzer.vocabulary import LIBRARY_FRAME, MODULE_PREFIX

SEPARATOR = " › "
"""Joins the names along a path, outermost first."""

"""Kinds that name a path: user annotations (record_function) and CPU ops; step markers are left out."""

USER_FRAMES = 6
"""How many of the innermost user Python frames a stack keeps."""

COLUMNS = ["row", "path", "module", "stack", "step_marker", "full_path", "annotations", "annotation", "frame"]


def walk(trace: TraceData) -> Walk:
    """The walk of a (scoped) trace's event table, made once per trace."""
    return remember(trace, "callpath.walk", lambda: Walk(trace.events, tree=calltree.of(trace)))


def where_many(events: pd.DataFrame, rows) -> pd.DataFrame:
    """Context of several rows (each distinct row once), one row each: the ``COLUMNS`` (a walk of those rows and
    their ancestors only; ``walk(trace)`` shares one walk of every row)."""
    rows = np.asarray(rows, dtype=np.int64)
    return Walk(events, among=rows).where_many(rows)


class Chain:
    """Per row, the names of its ancestors (and itself) that pass a mask, outermost first, as a node of a trie of
    (parent node, name) pairs; node texts are the names joined by ``SEPARATOR``. Every array ends in a sentinel
    for -1 (no row, no node): node -1, up -1, label -1 (the name ''), text ''."""

    def __init__(self, node: np.ndarray, up: np.ndarray, label: np.ndarray, text: np.ndarray) -> None:
        self.node, self.up, self.label, self.text = node, up, label, text
        self.tails: dict[int, pd.api.extensions.ExtensionArray] = {}

    def joined(self, rows: np.ndarray) -> pd.api.extensions.ExtensionArray:
        """The whole chain of each row, as text ('' for none)."""
        return self._texts.take(self.node[rows])

    def innermost(self, rows: np.ndarray) -> np.ndarray:
        """The name code of the innermost name of each row's chain (-1 for none)."""
        return self.label[self.node[rows]]

    def last(self, rows: np.ndarray, count: int) -> pd.api.extensions.ExtensionArray:
        """The innermost ``count`` names of each row's chain, joined ('' for none)."""
        if count not in self.tails:
            self.tails[count] = self._tails(count)
        return self.tails[count].take(self.node[rows])

    @functools.cached_property
    def _texts(self) -> pd.api.extensions.ExtensionArray:
        return pd.array(self.text, dtype="str")

    def _tails(self, count: int) -> pd.api.extensions.ExtensionArray:
        """Per node: the text past the prefix ``count`` nodes up."""
        top = np.r_[np.arange(len(self.up) - 1), -1]
        for _ in range(count):
            top = self.up[top]
        cut = [len(t) + len(SEPARATOR) if n >= 0 else 0 for t, n in zip(self.text[top], top.tolist(), strict=True)]
        return pd.array([full[c:] for full, c in zip(self.text, cut, strict=True)], dtype="str")


class Walk:
    """Every row's place in its call tree, all rows at once: chains and innermost ancestors of one table (of the
    rows ``among`` and their ancestors where given; other rows then read as if they had no ancestor), walked by its
    ``tree`` (made here unless given). Row arrays end in a sentinel for NO_ROW (-1), so a missing parent or ancestor
    indexes it."""

    def __init__(
        self, events: pd.DataFrame, among: np.ndarray | None = None, tree: calltree.CallTree | None = None
    ) -> None:
        self.names = category_text(events["name"])  # code -1 (missing): ''
        self.codes = np.r_[np.asarray(events["name"].array.codes, dtype=np.int64), -1]
        kinds, kind_codes = category_text(events["kind"]), events["kind"].array.codes
        self.kind = {k: (kinds == k)[kind_codes] for k in CALL_TREE}
        codes = self.codes[:-1]
        is_module = np.array([n.startswith(MODULE_PREFIX) for n in self.names], dtype=bool)[codes]
        library = np.array([bool(LIBRARY_FRAME.search(n)) for n in self.names], dtype=bool)[codes]
        python = self.kind[Kind.PYTHON.value]
        self.module_frame, self.user_frame = python & is_module, python & ~is_module & ~library
        self.tree = tree if tree is not None else calltree.CallTree.of(events, among)

    def innermost(self, mask: np.ndarray) -> np.ndarray:
        """Per row (and the sentinel: NO_ROW): the innermost of itself and its ancestors where ``mask`` holds
        (NO_ROW if none)."""
        return self.tree.innermost(mask)

    def chain(self, mask: np.ndarray, names: np.ndarray) -> Chain:
        """The ``Chain`` of the rows where ``mask`` holds, named by ``names`` (indexed by name code, '' last)."""
        node = np.full(len(mask) + 1, -1, dtype=np.int64)
        up, label = np.empty(len(mask) + 1, np.int64), np.empty(len(mask) + 1, np.int64)
        width, made = len(names) + 1, [0]  # nodes are made level by level: a node's parent is made before it

        def visit(rows: np.ndarray, parents: np.ndarray) -> None:
            base = node[parents]
            node[rows] = base
            adds = mask[rows]
            if not adds.any():
                return
            keys, at = np.unique((base[adds] + 1) * width + self.codes[rows[adds]] + 1, return_inverse=True)
            new = slice(made[-1], made[-1] + len(keys))
            up[new], label[new] = keys // width - 1, keys % width - 1
            node[rows[adds]] = made[-1] + at.reshape(-1)
            made.append(made[-1] + len(keys))

        self.tree.down(visit)
        count = made[-1]
        up[count], label[count] = -1, -1
        text = np.full(count + 1, "", dtype=object)
        for lo, hi in zip(made[:-1], made[1:], strict=True):
            text[lo:hi] = np.where(up[lo:hi] >= 0, text[up[lo:hi]] + SEPARATOR, "") + names[label[lo:hi]]
        return Chain(node, up[: count + 1].copy(), label[: count + 1].copy(), text)

    @functools.cached_property
    def paths(self) -> Chain:
        """Annotations and CPU ops."""
        return self.chain(self.kind[Kind.ANNOTATION.value] | self.kind[Kind.CPU_OP.value], self.names)

    @functools.cached_property
    def annotations(self) -> Chain:
        """User annotations (record_function)."""
        return self.chain(self.kind[Kind.ANNOTATION.value], self.names)

    @functools.cached_property
    def modules(self) -> Chain:
        """nn.Module frames, named without their prefix."""
        stripped = np.array([n.removeprefix(MODULE_PREFIX) for n in self.names], dtype=object)
        return self.chain(self.module_frame, stripped)

    @functools.cached_property
    def user(self) -> Chain:
        """User Python frames (not a library's, not an nn.Module's)."""
        return self.chain(self.user_frame, self.names)

    @functools.cached_property
    def step(self) -> np.ndarray:
        """Per row: the name code of its enclosing step marker (-1 if none)."""
        return self.codes[self.innermost(self.kind[Kind.STEP.value])]

    @functools.cached_property
    def _names(self) -> pd.api.extensions.ExtensionArray:
        return pd.array(self.names, dtype="str")

    def innermost_names(self, rows) -> pd.DataFrame:
        """Per row (repeats included; '' for NO_ROW): innermost annotation and user Python frame, indexed by row."""
        rows = np.asarray(rows, dtype=np.int64)
        annotation, frame = self.annotations.innermost(rows), self.user.innermost(rows)
        return pd.DataFrame({"annotation": self._names.take(annotation), "frame": self._names.take(frame)}, index=rows)

    def where_many(self, rows) -> pd.DataFrame:
        """Context of several rows (each distinct row once, in first-seen order), one row each: the ``COLUMNS``."""
        at = pd.unique(np.asarray(rows, dtype=np.int64))
        columns = {
            "row": at,
            "path": self.paths.joined(at),
            "module": self.modules.joined(at),
            "stack": self.user.last(at, USER_FRAMES),
            "step_marker": self._names.take(self.step[at]),
            "full_path": self._full_paths(at),
            "annotations": self.annotations.joined(at),
            "annotation": self._names.take(self.annotations.innermost(at)),
            "frame": self._names.take(self.user.innermost(at)),
        }
        return pd.DataFrame(columns)

    def _full_paths(self, rows: np.ndarray) -> pd.api.extensions.ExtensionArray:
        """The path with its step marker in front, as a profiler viewer shows it (each distinct pair joined once)."""
        pairs = (self.step[rows] + 1) * len(self.paths.text) + self.paths.node[rows] + 1
        distinct, at = np.unique(pairs, return_inverse=True)
        step = self.names[distinct // len(self.paths.text) - 1]
        path = self.paths.text[distinct % len(self.paths.text) - 1]
        joined = [SEPARATOR.join(p for p in pair if p) for pair in zip(step, path, strict=True)]
        return pd.array(joined, dtype="str").take(at.reshape(-1))

    def context(self, rows) -> pd.DataFrame:
        """``where_many`` aligned to ``rows`` (one output row per input row, repeats included), indexed by row."""
        rows = np.asarray(rows, dtype=np.int64)
        return self.where_many(rows).set_index("row").reindex(rows)
