"""The traces recorded with scripts/record/ ship with a complete meta (their measured truth) and load."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import traceanalyzer as ta

SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces"
TRACES = [
    "gpu_bound/gpu_bound",
    "cuda_graph_replay/cuda_graph_replay",
    "compiled/compiled",
    "cpu_bound/cpu_bound",
    "cnn_h200/alexnet_ddp",
    "memory_snapshot/train",
]
STEP_KEYS = [
    "step_body_ms_cuda_events",
    "step_body_ms_cuda_events_median_traced",
    "step_period_ms_cuda_events_median_traced",
    "step_host_wall_ms",
    "trace_holds_profiler_steps",
    "max_memory_allocated_B",
    "key_averages_top_self_device_ns",
    "trace_file",
    "torch",
    "device",
]
SNAPSHOT_KEYS = [
    "max_memory_allocated_at_dump_B",
    "memory_allocated_at_dump_B",
    "segments",
    "blocks",
    "active_allocated_blocks_size_B",
    "snapshot_file",
    "snapshot_raw_bytes",
    "snapshot_gzipped",
    "history_wrapped",
]
_LOADED: dict[str, ta.Trace] = {}


def meta(name: str) -> dict:
    """A recording's meta file."""
    return json.loads((SAMPLES / f"{name}.meta.json").read_text())


def trace(name: str) -> ta.Trace:
    """A recording's trace, loaded once per test session."""
    if name not in _LOADED:
        _LOADED[name] = ta.load(SAMPLES / f"{name}.json.gz")
    return _LOADED[name]


@pytest.mark.parametrize("name", TRACES)
def test_meta_holds_the_measured_step_truth(name):
    m = meta(name)
    assert not [k for k in STEP_KEYS if k not in m]
    assert "pattern" in m or "matches_ascend_sample" in m  # what was planted
    assert m["device"] == "NVIDIA H200"
    traced = m["step_body_ms_cuda_events"][-len(m["trace_holds_profiler_steps"]) :]
    assert m["step_body_ms_cuda_events_median_traced"] == pytest.approx(sorted(traced)[len(traced) // 2], rel=0.2)
    top = list(m["key_averages_top_self_device_ns"].values())
    assert top[0] > 0 and top == sorted(top, reverse=True)


@pytest.mark.parametrize("name", TRACES)
def test_trace_loads_with_the_profiled_steps(name):
    t = trace(name)
    assert len(t.steps()) == len(meta(name)["trace_holds_profiler_steps"])


def test_graph_replay_meta_counts_kernels_per_launch():
    m = meta("cuda_graph_replay/cuda_graph_replay")
    assert m["kernels_per_cudaGraphLaunch_in_trace"] == [49] * 5
    assert m["graph_node_types_in_debug_dump"]["KERNEL"] == 48  # + 1 MEMCPY node, replayed as kernel memcpy128
    assert (SAMPLES / "cuda_graph_replay" / "cuda_graph_replay.graph.dot.gz").exists()


@pytest.mark.parametrize("name", ["train", "oom"])
def test_snapshot_meta_is_complete_and_names_its_file(name):
    m = meta(f"memory_snapshot/{name}")
    assert not [k for k in SNAPSHOT_KEYS if k not in m]
    path = SAMPLES / "memory_snapshot" / m["snapshot_file"]
    assert path.stat().st_size == m["snapshot_raw_bytes"] and not m["snapshot_gzipped"]
    assert not m["history_wrapped"]
    assert m["active_allocated_blocks_size_B"] == m["memory_allocated_at_dump_B"]


def test_oom_snapshot_was_taken_at_a_real_oom():
    m = meta("memory_snapshot/oom")
    assert m["trace_actions"]["oom"] == 1
    assert m["oom_message"].startswith("CUDA out of memory")


def test_cnn_meta_names_the_ascend_sample_it_matches():
    m = meta("cnn_h200/alexnet_ddp")
    assert "level{0,1,2}/rank{0,1}_ascend_pt" in m["matches_ascend_sample"]
    assert m["same"] and m["differs"]
    assert m["ddp"].startswith("DistributedDataParallel, backend nccl")
