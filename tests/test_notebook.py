"""Notebook views: reprs of every public result object, ``ta.pretty``, and examples/quickstart.ipynb run on a
real ipykernel (any cell error fails)."""

from __future__ import annotations

import pytest

import traceanalyzer as ta
from tests.conftest import REPO
from traceanalyzer import humanize

SAMPLES = REPO / "sample_traces"
NOTEBOOK = REPO / "examples" / "quickstart.ipynb"


@pytest.fixture(scope="module")
def unfused() -> ta.Trace:
    return ta.load(SAMPLES / "unfused_ops.json.gz")


def test_trace_shows_facts_ledger_steps_and_top_findings(unfused):
    short = repr(unfused)
    assert short.startswith("<Trace cuda kineto: 11,478 events") and len(short) < 200
    page = unfused._repr_html_()
    assert "What was analysed" in page and "Top findings" in page
    assert "21.67 ms" in page  # the median step's step time, as a duration
    assert unfused.findings()[0].title.split(":")[0] in page


def test_findings_comparison_and_memory_show_briefly(unfused):
    findings = unfused.findings()
    lines = [repr(f) for f in findings]
    assert all(len(line) < 300 and line.startswith("<Finding [") for line in lines)
    assert "/step" in lines[0] and findings[0].title in findings[0]._repr_html_()
    table = ta.findings_table(findings)
    assert table["title"].tolist() == [f.title for f in findings]
    assert table["saving_ns"].tolist() == [f.saving_ns for f in findings]
    memory = unfused.memory()
    assert "device peak 2.63 GiB" in repr(memory) and "Peaks per pool" in memory._repr_html_()
    diff = ta.compare(unfused, ta.load(SAMPLES / "fused_ops.json.gz"))
    assert repr(diff).startswith("<Comparison ") and "ms/step" in repr(diff) and len(repr(diff)) < 300
    assert "Summary" in diff._repr_html_()


def test_pretty_shows_durations_and_keeps_the_frame(unfused):
    steps = unfused.steps()
    shown = steps.pipe(ta.pretty)
    assert shown["step_ns"].tolist() == [humanize.duration(v) for v in steps["step_ns"]]
    assert shown["start_ns"].tolist() == steps["start_ns"].tolist()  # an instant stays ns
    assert steps["step_ns"].dtype.kind == "i"  # the original is untouched


def test_quickstart_notebook_runs_on_a_real_kernel():
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    client = nbclient.NotebookClient(
        notebook, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(REPO)}}
    )
    client.execute()
    outputs = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    html = [
        o["data"]["text/html"]
        for o in outputs
        if o.output_type == "execute_result" and "text/html" in o.get("data", {})
    ]
    assert any("What was analysed" in h for h in html)  # the Trace's own view
    assert any("application/vnd.plotly.v1+json" in o.get("data", {}) for o in outputs)
    printed = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert "229 kernels in step 3" in printed and "step time -" in printed
