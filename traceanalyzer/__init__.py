"""traceanalyzer: where the time goes in PyTorch (CUDA/ROCm) and Ascend (CANN) profiler traces.

import traceanalyzer as ta
t = ta.load("run.json.gz")
t.events          # the common event table (pandas)
t.hotspots()      # kernels ranked by total time
t.findings()      # what to do next, ranked by what it is worth
ta.compare(t, ta.load("after.json.gz"))   # baseline → candidate, per step
ta.load_job("job/").report()              # a job analysed rank by rank: only the ranks' parts kept
torch.profiler.profile(on_trace_ready=ta.on_trace_ready("profile_traces"))   # each window's trace and digest

The names below are imported on first use (``traceanalyzer.lazy``): ``import traceanalyzer`` loads no pandas.
"""

from traceanalyzer import checkout, lazy

checkout.use_installed(globals())

__version__ = "0.1.0"
__getattr__, __dir__ = lazy.attributes(
    globals(),
    {
        "Comparison": "traceanalyzer.comparison.Comparison",
        "Finding": "traceanalyzer.findings.Finding",
        "Job": "traceanalyzer.perrank.Job",
        "Kind": "traceanalyzer.schema.Kind",
        "Platform": "traceanalyzer.schema.Platform",
        "Rule": "traceanalyzer.classify.Rule",
        "Trace": "traceanalyzer.trace.Trace",
        "TraceError": "traceanalyzer.errors.TraceError",
        "compare": "traceanalyzer.comparison.compare",
        "findings_table": "traceanalyzer.notebook.findings_table",
        "load": "traceanalyzer.trace.load",
        "load_job": "traceanalyzer.perrank.load_job",
        "plots": "traceanalyzer.renderers.plots",
        "pretty": "traceanalyzer.notebook.pretty",
        "on_trace_ready": "traceanalyzer.training.on_trace_ready",
    },
)
__all__ = [
    "Comparison",
    "Finding",
    "Job",
    "Kind",
    "Platform",
    "Rule",
    "Trace",
    "TraceError",
    "compare",
    "findings_table",
    "load",
    "load_job",
    "on_trace_ready",
    "plots",
    "pretty",
    "__version__",
]
