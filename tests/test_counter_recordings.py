"""Our own counter recordings (sample_traces/counters, issue 27): NVML GPM samples taken on the H200 while
torch.profiler ran a GEMM-bound and a memory-bound program, written into the trace as counter tracks
(scripts/record/gpm.py). Each is read, counted in the ledger and attributed to the kernel that ran, and the
attributed values agree with Nsight Compute's per-kernel measurement of the same program (``ncu_truth`` in each
``.meta.json``, measured in a separate run): the GEMM keeps its tensor pipe busy and DRAM mostly idle, the
elementwise kernel the reverse; the efficiency view and the GEMM finding say the basis is measured.
"""

from __future__ import annotations

import gzip
import json

import pytest

import traceanalyzer as ta
from tests.conftest import REPO, facts, rows
from traceanalyzer.analyzers import counters

FOLDER = REPO / "sample_traces" / "counters"
PROGRAMS = ("gemm_bound", "memory_bound")
TRACK = "GPU 0 GPM"


def _meta(program: str) -> dict:
    return json.loads((FOLDER / f"{program}.meta.json").read_text())


def _track_samples(program: str) -> list[dict]:
    """The file's counter events, read here apart from the parser."""
    events = json.loads(gzip.decompress((FOLDER / f"{program}.json.gz").read_bytes()))["traceEvents"]
    return [e for e in events if e.get("ph") == "C"]


@pytest.fixture(scope="module", params=PROGRAMS)
def recorded(request):
    trace = ta.load(FOLDER / f"{request.param}.json.gz", cache=False)
    return request.param, trace, trace.report()


def _ncu_kernel(truth: dict, kernels) -> str:
    """The kernel of the trace ncu measured: ncu names it without namespaces, so match its function's name."""
    ident = truth["kernel"].split("<")[0].split()[-1]
    (name,) = {k for k in kernels if ident in k}
    return name


def _per_kernel(report, series: str) -> dict[str, float]:
    """The hot kernel's mean of one GPM series (percent) from the report's per-kernel table."""
    table = [r for r in rows(report, "counters", "per_kernel") if r["name"] == f"{TRACK}.{series}" and r["kernel"]]
    return {r["kernel"]: r["value"] for r in table}


def test_every_gpm_value_is_one_counter_sample_in_the_ledger(recorded):
    program, trace, report = recorded
    values = sum(len(e["args"]) for e in _track_samples(program))
    assert values == facts(report, "ledger")["counter_samples"] == facts(report, "counters")["counter_samples"]
    assert values >= 6 * 15  # six series, some 20 intervals of 100 ms inside the window
    samples = counters.counter_rows(trace)
    assert set(samples["unit"].astype(str)) == {"percent"}


def test_the_hot_kernel_carries_the_counters_ncu_measured_for_it(recorded):
    """Tensor-pipe and DRAM shares attributed to the hot kernel are within a few points of ncu's."""
    program, _, report = recorded
    truth = _meta(program)["ncu_truth"]
    tensor = _per_kernel(report, "any_tensor_util_pct")
    dram = _per_kernel(report, "dram_bw_util_pct")
    kernel = _ncu_kernel(truth, tensor)
    hot = rows(report, "counters", "efficiency")[0]["kernel"]
    assert kernel == hot
    assert tensor[kernel] == pytest.approx(truth["tensor_hmma_active_pct"], abs=5)
    assert dram[kernel] == pytest.approx(truth["dram_throughput_pct"], abs=3)


def test_efficiency_view_says_measured_and_which_unit_bounds_the_kernel(recorded):
    program, _, report = recorded
    truth = _meta(program)["ncu_truth"]
    table = {r["kernel"]: r for r in rows(report, "counters", "efficiency")}
    hot = table[_ncu_kernel(truth, table)]
    assert hot["basis"] == "measured (Kineto counter track)"
    assert hot["bound"] == ("compute" if program == "gemm_bound" else "memory")
    busiest = truth["tensor_hmma_active_pct"] if program == "gemm_bound" else truth["dram_throughput_pct"]
    assert hot["achieved_share"] == pytest.approx(busiest / 100, abs=0.05)


def test_a_saturated_gemm_is_not_pushed_on_the_spec_sheet_peak():
    """The GEMM runs at about two thirds of the H200's dense bf16 peak by FLOPs, but its tensor pipe is busy 97 % of
    the time (ncu): the finding is judged on the measured share, so it promises no saving the kernel cannot give."""
    trace = ta.load(FOLDER / "gemm_bound.json.gz", cache=False)
    finding = next(f for f in trace.findings() if f.analyzer == "hotspots" and f.where.get("category") == "gemm")
    assert finding.evidence["efficiency_basis"] == "measured (Kineto counter track)"
    assert finding.evidence["bound"] == "compute" and finding.evidence["achieved_share"] > 0.85
    assert finding.saving_ns == 0 and "its efficiency measured (Kineto counter track)" in finding.model
