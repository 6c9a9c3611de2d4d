"""The one parent walk (``callpath``): its columnar answers equal a plain walk up each row's ``parent`` links."""

from __future__ import annotations

import numpy as np
import pytest

from tests.conftest import call_tree_scopes, load_shared
from traceanalyzer.analyzers import callpath, collective_calls
from traceanalyzer.schema import NO_ROW, PATH, Kind
from traceanalyzer.vocabulary import LIBRARY_FRAME, MODULE_PREFIX


def _columns(events) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """An event table's parent links, names and kinds as plain arrays (text as ``str`` gives it), for ``_walked``."""
    return events["parent"].to_numpy(), events["name"].astype(str).to_numpy(), events["kind"].astype(str).to_numpy()


def _walked(columns: tuple[np.ndarray, np.ndarray, np.ndarray], row: int) -> dict:
    """The documented contract, one row at a time: the chain from the outermost ancestor down to the row."""
    parent, names, kinds = columns
    chain = []
    while row != NO_ROW:
        chain.append(row)
        row = int(parent[row])
    path, modules, user, annotations, step = [], [], [], [], ""
    for r in reversed(chain):
        name, kind = names[r], kinds[r]
        if kind == Kind.STEP.value:
            step = name
        elif kind in PATH:
            path.append(name)
            annotations += [name] if kind == Kind.ANNOTATION.value else []
        elif kind == Kind.PYTHON.value and name.startswith(MODULE_PREFIX):
            modules.append(name.removeprefix(MODULE_PREFIX))
        elif kind == Kind.PYTHON.value and not LIBRARY_FRAME.search(name):
            user.append(name)
    join = callpath.SEPARATOR.join
    return {
        "path": join(path),
        "module": join(modules),
        "stack": join(user[-callpath.USER_FRAMES :]),
        "step_marker": step,
        "full_path": join(p for p in (step, join(path)) if p),
        "annotations": join(annotations),
        "annotation": annotations[-1] if annotations else "",
        "frame": user[-1] if user else "",
    }


@pytest.fixture(scope="module")
def scopes():
    return call_tree_scopes()


@pytest.mark.parametrize("name", ["dynamic_shapes", "dynamic_shapes step 4", "ddp rank 1", "ascend"])
def test_every_row_has_the_context_a_walk_up_its_parents_gives(scopes, name):
    trace = scopes[name]
    events = trace.events
    rng = np.random.default_rng(0)
    host = np.flatnonzero(events["parent"].to_numpy() != NO_ROW)
    rows = np.r_[rng.choice(host, min(len(host), 1500), replace=False), rng.integers(0, len(events), 200), NO_ROW]
    table = callpath.walk(trace).where_many(rows).set_index("row")
    columns = _columns(events)
    for row in rows.tolist():
        expected = _walked(columns, row) if row != NO_ROW else dict.fromkeys(callpath.COLUMNS[1:], "")
        assert table.loc[row].to_dict() == expected, row
    assert table["stack"].str.len().max() > 0  # the sample rows do reach user frames
    alone = callpath.where_many(events, rows[:300]).set_index("row")  # a walk of those rows and their ancestors
    assert alone.equals(table.loc[alone.index])


def test_stacks_keep_the_innermost_user_frames_and_no_library_frame(scopes):
    trace = scopes["dynamic_shapes"]
    where = callpath.walk(trace).where_many(np.arange(len(trace.events)))
    stacks = where.loc[where["stack"] != "", ["stack", "frame"]]
    frames = stacks["stack"].str.split(callpath.SEPARATOR)
    assert frames.str.len().max() == callpath.USER_FRAMES
    assert (frames.str[-1] == stacks["frame"]).all()
    assert not any(LIBRARY_FRAME.search(f) for f in set(frames.explode()))


def test_context_repeats_rows_and_locate_agrees_with_it(scopes):
    trace = scopes["dynamic_shapes"]
    events = trace.events
    launches = events.loc[events["launch"] != NO_ROW, "launch"].to_numpy()
    walk = callpath.walk(trace)
    ctx = walk.context(launches)
    assert len(ctx) == len(launches) and (ctx.index.to_numpy() == launches).all()
    names = walk.innermost_names(launches)
    assert (names["annotation"].to_numpy() == ctx["annotation"].to_numpy()).all()
    assert (names["frame"].to_numpy() == ctx["frame"].to_numpy()).all()


def test_collective_phase_is_the_innermost_optimizer_or_autograd_op_around_the_launch():
    trace = load_shared("h200", "ddp_overlap")
    events = trace.events
    comm = events[events["kind"] == Kind.COMMUNICATION.value]
    phase = collective_calls.phases(trace, comm)
    for row, got in zip(comm["launch"].tolist(), phase, strict=True):
        names = []
        while row != NO_ROW:
            names.append(str(events["name"].iat[row]))
            row = int(events["parent"].iat[row])
        marked = [n for n in names if collective_calls.OPTIMIZER_OP.search(n) or collective_calls.BACKWARD_OP.search(n)]
        if marked:
            assert got == ("optimizer" if collective_calls.OPTIMIZER_OP.search(marked[0]) else "backward")
    assert set(phase) == {"forward", "backward"}  # DDP's bucket all-reduces run inside autograd
