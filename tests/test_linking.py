"""The vectorised host call tree equals a plain stack walk (the specification) on real traces of several vintages.

Kineto does not always nest properly (a record_function range opened inside a Python frame outlives it, starts
tie), so the traces below were picked because they hold such events; the walk defines what the tree is then.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from tests.conftest import load_shared
from traceanalyzer.schema import HOST_KINDS, NO_ROW, Kind

LEAK = ("h200", "memory_leak", "memory_leak.json.gz")
TRACES = {
    "h200 memory_leak (with_stack, 264 children outliving their parent)": LEAK,
    "MTIA inference (HTA sample)": ("public", "torch", "hta", "mtia_inference_trace", "mtia_inference_rank_0.json.gz"),
    "DLRM 2023 (tied starts)": (
        "public", "torch", "param", "dlrm_kineto_8rank", "worker0_step_12.1694128201545.pt.trace.json.gz",
    ),
    "HTA alexnet (2023)": (
        "public", "torch", "hta", "critical_path", "alexnet", "benchmark_result_2869224_1695835535_trace.json.gz",
    ),
    "Ascend torch_npu text level1": ("public", "ascend", "msinsight", "pytorch_text", "level1", "rank0_ascend_pt"),
    "Ascend torch_npu db level1": ("public", "ascend", "msinsight", "pytorch_db", "level1", "rank0_ascend_pt"),
}  # fmt: skip


def stack_walk(events: pd.DataFrame) -> pd.DataFrame:
    """Reference: per (pid, tid), in (start, -end) order, pop the innermost open event while this one starts at or
    after its end, then push; parent = innermost open event, op = innermost CPU op on the stack, top_op = outermost."""
    host = events[events["kind"].isin([k.value for k in HOST_KINDS])]
    frame = pd.DataFrame(
        {
            "row": host.index,
            "lane": list(zip(host["pid"].astype(str), host["tid"].astype(str), strict=True)),
            "ts": host["ts"].to_numpy(),
            "end": (host["ts"] + host["dur"]).to_numpy(),
            "is_op": (host["kind"] == Kind.CPU_OP.value).to_numpy(),
        }
    )
    frame["neg_end"] = -frame["end"]
    out = {}
    for _, lane in frame.groupby("lane", sort=False):
        stack: list[tuple[int, int, int, int]] = []
        for row, ts, end, is_op in lane.sort_values(["ts", "neg_end", "row"])[["row", "ts", "end", "is_op"]].itertuples(
            index=False
        ):
            while stack and ts >= stack[-1][0]:
                stack.pop()
            parent, up_op, up_top = (stack[-1][1], stack[-1][2], stack[-1][3]) if stack else (NO_ROW, NO_ROW, NO_ROW)
            op = row if is_op else up_op
            top = up_top if up_top != NO_ROW else (row if is_op else NO_ROW)
            out[row] = (parent, len(stack), op, top)
            stack.append((end, row, op, top))
    return pd.DataFrame.from_dict(out, orient="index", columns=["parent", "depth", "op", "top_op"])


@pytest.mark.parametrize("parts", list(TRACES.values()), ids=list(TRACES))
def test_host_tree_is_the_stack_walk(parts):
    trace = load_shared(*parts)
    reference = stack_walk(trace.events)
    got = trace.events.loc[reference.index, ["parent", "depth", "op", "top_op"]]
    pd.testing.assert_frame_equal(got.astype(np.int64), reference.astype(np.int64), check_names=False)


@pytest.mark.parametrize("parts", list(TRACES.values()), ids=list(TRACES))
def test_device_work_takes_the_op_of_its_launch(parts):
    events = load_shared(*parts).events
    device = events[events["launch"] != NO_ROW]
    assert len(device)
    launch = device["launch"].to_numpy()
    assert (events["correlation"].to_numpy()[launch] == device["correlation"].to_numpy()).all()
    assert (events["op"].to_numpy()[launch] == device["op"].to_numpy()).all()
    assert (events["top_op"].to_numpy()[launch] == device["top_op"].to_numpy()).all()


def test_memory_events_take_the_innermost_op_open_at_their_time():
    trace = load_shared(*LEAK)
    events, memory = trace.events, trace.memory_events
    assert (memory["op"] != NO_ROW).mean() > 0.5  # most allocations happen inside an op
    linked = memory[memory["op"] != NO_ROW]
    op = events.loc[linked["op"].to_numpy()]
    assert (op["kind"] == Kind.CPU_OP.value).all()
    assert (op["ts"].to_numpy() <= linked["ts"].to_numpy()).all()
    assert (linked["ts"].to_numpy() < (op["ts"] + op["dur"]).to_numpy()).all()
