"""The call tree's one home (``calltree``): its columnar and given-row walks equal a plain walk up each row's
``parent`` links on real traces, and no other module walks ``parent`` links in a loop of its own."""

from __future__ import annotations

import ast

import numpy as np
import pytest

from tests.conftest import REPO, call_tree_scopes
from traceanalyzer import calltree
from traceanalyzer.schema import NO_ROW, Kind


def _up(parent: np.ndarray, row: int) -> list[int]:
    """The row's ancestors, innermost first, one parent link at a time."""
    chain = []
    while row != NO_ROW and parent[row] != NO_ROW:
        row = int(parent[row])
        chain.append(row)
    return chain


@pytest.fixture(scope="module")
def scopes():
    return call_tree_scopes()


def _sample(trace, count: int = 1500) -> np.ndarray:
    rng = np.random.default_rng(0)
    nested = np.flatnonzero(trace.events["parent"].to_numpy() != NO_ROW)
    return np.r_[rng.choice(nested, min(len(nested), count), replace=False), rng.integers(0, len(trace.events), 100)]


@pytest.mark.parametrize("name", ["dynamic_shapes", "dynamic_shapes step 4", "ddp rank 1", "ascend"])
def test_the_level_walks_equal_a_walk_up_each_rows_parents(scopes, name):
    trace = scopes[name]
    events = trace.events
    parent = events["parent"].to_numpy()
    kind = events["kind"].to_numpy()
    mask = (kind == Kind.CPU_OP.value) | (kind == Kind.ANNOTATION.value)
    reset, add = kind == Kind.STEP.value, (kind == Kind.PYTHON.value).astype(np.int32)
    tree = calltree.of(trace)
    innermost, outermost, accumulated = tree.innermost(mask), tree.outermost(mask), tree.accumulated(add, reset)
    rows = _sample(trace)
    for row in rows.tolist():
        chain = [row, *_up(parent, row)]
        marked = [r for r in chain if mask[r]]
        assert innermost[row] == (marked[0] if marked else NO_ROW), row
        assert outermost[row] == (marked[-1] if marked else NO_ROW), row
        counted = next((i for i, r in enumerate(chain[1:]) if reset[r]), len(chain) - 1)
        assert accumulated[row] == sum(add[r] for r in chain[1 : counted + 1]), row
    assert innermost[NO_ROW] == outermost[NO_ROW] == NO_ROW and accumulated[NO_ROW] == 0
    assert (outermost[rows] != innermost[rows]).any() and accumulated[rows].max() > 0  # the samples do nest
    few = calltree.CallTree.of(events, among=rows[:300])  # the tree of those rows and their ancestors only
    assert (few.innermost(mask)[rows[:300]] == innermost[rows[:300]]).all()


@pytest.mark.parametrize("name", ["dynamic_shapes", "ddp rank 1", "ascend"])
def test_the_given_row_walks_equal_a_walk_up_each_rows_parents(scopes, name):
    events = scopes[name].events
    parent = events["parent"].to_numpy()
    stop = (events["kind"] == Kind.STEP.value).to_numpy()
    rows = np.r_[_sample(scopes[name], 400), NO_ROW]
    at, up = calltree.ancestors(parent, rows)
    cut_at, cut_up = calltree.ancestors(parent, rows, stop=stop)
    near = calltree.nearest(parent, rows, stop)
    for i, row in enumerate(rows.tolist()):
        chain = _up(parent, row)
        assert up[at == i].tolist() == chain, row
        cut = next((k + 1 for k, r in enumerate(chain) if stop[r]), len(chain))
        assert cut_up[cut_at == i].tolist() == chain[:cut], row
        marked = [r for r in ([row] if row != NO_ROW else []) + chain if stop[r]]
        assert near[i] == (marked[0] if marked else NO_ROW), row
    assert (near != NO_ROW).any()
    walked = {r for row in rows.tolist() if row != NO_ROW for r in [row, *_up(parent, row)]}
    assert calltree.with_ancestors(parent, rows).tolist() == sorted(walked)


HOME = REPO / "traceanalyzer" / "calltree.py"
BUILDER = REPO / "traceanalyzer" / "linking.py"  # makes the parent links (and op/top_op from them): no walk of them
FOLDERS = (REPO / "traceanalyzer", REPO / "parsers", REPO / "dashboards")


def parent_loops(source: str) -> list[int]:
    """The lines of the ``for``/``while`` loops of a module's source that walk the call tree: that read the
    ``parent`` column, a name with "parent" in it, or a tree's ``levels``."""
    found = set()
    for loop in ast.walk(ast.parse(source)):
        if not isinstance(loop, ast.For | ast.While):
            continue
        if isinstance(loop, ast.For) and isinstance(loop.iter, ast.Attribute) and loop.iter.attr == "levels":
            found.add(loop.lineno)
        for node in ast.walk(loop):
            if (isinstance(node, ast.Name) and "parent" in node.id.lower()) or (
                isinstance(node, ast.Constant) and node.value == "parent"
            ):
                found.add(loop.lineno)
    return sorted(found)


def test_no_module_walks_parent_links_outside_the_home():
    found = {
        f"{path.relative_to(REPO)}:{line}"
        for folder in FOLDERS
        for path in sorted(folder.rglob("*.py"))
        if path not in (HOME, BUILDER)
        for line in parent_loops(path.read_text())
    }
    assert not found, f"parent walks of their own (use traceanalyzer.calltree): {sorted(found)}"


def test_the_check_fails_on_a_walk_of_its_own():
    planted = {
        "while up != NO_ROW:\n    up = parent[up]": [1],
        "for _ in range(9):\n    at = int(events.at[at, 'parent'])": [1],
        "for rows, parents in tree.levels:\n    out[rows] = out[parents]": [1],
        "for rows, up in self.levels:\n    out[rows] = out[up]": [1],
        "for p in paths:\n    p.parent.mkdir()\nparent = events['parent'].to_numpy()": [],
    }
    assert {source: parent_loops(source) for source in planted} == planted
    assert parent_loops(HOME.read_text()), "the check reads the home's own walks as walks"
