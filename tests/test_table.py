"""The common event table: columns, dtypes, links and steps, on real traces of several vintages."""

from __future__ import annotations

import numpy as np
import pytest

from tests.conftest import load_shared
from traceanalyzer import schema
from traceanalyzer.renderers import text
from traceanalyzer.schema import NO_ROW, Kind

LEGACY = "worker0.1623143089861.pt.trace.json.gz"
VINTAGES = [
    ("h200", "gpt_train", "gpt_train.json.gz"),  # 2026, ac2g flows, python stacks, ns digits
    ("public", "torch", "hta", "trace_diff", "test", "test.json.gz"),  # 2022, async_cpu_to_gpu flows
    # 2021, legacy categories and async flows
    ("public", "torch", "kineto_tb_plugin", "samples", "resnet50_num_workers_0", LEGACY),
]


@pytest.mark.parametrize("parts", VINTAGES, ids=lambda p: p[-1])
def test_table_has_the_schema_columns_and_dtypes(parts):
    t = load_shared(*parts)
    assert list(t.events.columns) == [c.name for c in schema.EVENT_COLUMNS]
    for col in schema.EVENT_COLUMNS:
        assert str(t.events[col.name].dtype) == col.dtype, col.name
    assert list(t.memory_events.columns) == [c.name for c in schema.MEMORY_COLUMNS]
    assert (t.events["dur"] >= 0).all()


@pytest.mark.parametrize("parts", VINTAGES, ids=lambda p: p[-1])
def test_device_work_links_to_its_launch_and_causing_op(parts):
    t = load_shared(*parts)
    ev = t.events
    kernels = ev[ev["kind"].isin([Kind.KERNEL.value, Kind.COMMUNICATION.value])]
    assert len(kernels) > 0
    recorded = kernels["correlation"].isin(ev.loc[ev["kind"] == Kind.RUNTIME.value, "correlation"])
    linked = kernels["launch"] != NO_ROW
    assert recorded.mean() > 0.9  # the rest were launched before the profiler started recording
    assert (linked == recorded).all()
    launches = ev.loc[kernels.loc[linked, "launch"]]
    assert (launches["kind"] == Kind.RUNTIME.value).all()
    assert (launches["correlation"].to_numpy() == kernels.loc[linked, "correlation"].to_numpy()).all()
    ops = kernels.loc[kernels["op"] != NO_ROW, "op"]
    assert (ev.loc[ops, "kind"] == Kind.CPU_OP.value).all()
    tops = ev.loc[kernels.loc[kernels["top_op"] != NO_ROW, "top_op"]]
    assert (tops["kind"] == Kind.CPU_OP.value).all()


def test_host_tree_nests_children_inside_parents(gpt_train):
    ev = gpt_train.events
    child = ev[ev["parent"] != NO_ROW]
    parent = ev.loc[child["parent"]]
    assert (parent["ts"].to_numpy() <= child["ts"].to_numpy()).all()
    assert (child["depth"].to_numpy() == parent["depth"].to_numpy() + 1).all()
    assert (parent["rank"].to_numpy() == child["rank"].to_numpy()).all()


def test_kernels_belong_to_the_step_of_their_launch(gpt_train):
    steps = gpt_train.steps()
    assert steps["step"].tolist() == [2, 3, 4]
    assert int(steps["kernels"].median()) == 1332
    assert steps["kernel_ns"].median() == pytest.approx(66.5e6, rel=0.01)


def test_timestamps_are_integer_ns_without_float_damage(gpt_train):
    # The raw file's first cpu_op starts at 5121672442924.936 µs and lasts 254.916 µs.
    first = gpt_train.events.loc[0]
    assert (first["ts"], first["dur"]) == (5121672442924936, 254916)


def test_trace_without_distributed_info_is_rank_0_and_says_so(gpt_train):
    assert gpt_train.meta.ranks == [0] and not gpt_train.meta.rank_known
    assert "1 (rank 0) of 1 (not recorded; assumed)" in text.render(gpt_train.build_report())


def test_memory_events_are_linked_to_their_op_and_step(gpt_train):
    mem = gpt_train.memory_events
    assert len(mem) == 8025
    in_op = mem[mem["op"] != NO_ROW]
    assert len(in_op) / len(mem) > 0.8
    assert (gpt_train.events.loc[in_op["op"], "kind"] == Kind.CPU_OP.value).all()
    assert set(np.unique(mem["step"])) >= {2, 3, 4}
