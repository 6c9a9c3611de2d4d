"""Communication is recognised from every signal the trace carries, and users can add their own rules."""

from __future__ import annotations

import json

import traceanalyzer as ta
from tests.conftest import load_shared, shared_path
from traceanalyzer.cli import main
from traceanalyzer.schema import Kind


def _comm(trace: ta.Trace):
    return trace.events[trace.events["kind"] == Kind.COMMUNICATION.value]


def test_deepep_kernels_are_communication_by_name():
    comm = _comm(load_shared("public", "torch", "deepseek_profile_data", "train.json"))
    names = comm["name"].astype(str)
    assert names.str.contains("dpsk::ep::internode::dispatch").any()
    assert names.str.contains("dpsk::ep::internode::combine").any()
    assert not names.str.contains("nccl", case=False).any()


def test_symmetric_memory_all_reduce_is_communication_with_its_collective():
    comm = _comm(load_shared("public", "torch", "tracelens", "b200", "eager_trace.json.gz"))
    multimem = comm[comm["name"].astype(str).str.contains("multimem_all_reduce")]
    assert len(multimem) == 73
    assert set(multimem["collective"].astype(str)) == {"allreduce"}


def test_nccl_kernels_inherit_collective_group_and_size_from_record_param_comms():
    comm = _comm(load_shared("public", "torch", "hta", "nccl_parser_config", "nccl_data.json.gz"))
    linked = comm[comm["op"] >= 0]
    assert len(linked) > 0
    assert (linked["collective"].astype(str) != "").all()
    assert (linked["group"].astype(str) == "0").mean() > 0.9
    assert (linked["bytes"] > 0).mean() > 0.9


def test_user_rules_add_communication_kernels(tmp_path, capsys):
    path = shared_path("h200", "gpt_train", "gpt_train.json.gz")
    trace = ta.load(path, rules=[ta.Rule(r"multi_tensor_apply_kernel")])
    comm = _comm(trace)
    assert len(comm) > 0 and comm["name"].astype(str).str.contains("multi_tensor_apply").all()
    out = tmp_path / "report.json"
    assert main([str(path), "--format", "json", "-o", str(out), "--comm-pattern", "multi_tensor_apply_kernel"]) == 0
    report = json.loads(out.read_text())
    share = next(f["value"] for f in report["sections"]["summary"]["facts"] if f["id"] == "communication_share")
    assert share > 0 and len(_comm(load_shared("h200", "gpt_train", "gpt_train.json.gz"))) == 0
