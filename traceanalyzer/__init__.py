"""traceanalyzer: where the time goes in PyTorch (CUDA/ROCm) and Ascend (CANN) profiler traces.

import traceanalyzer as ta
t = ta.load("run.json.gz")
t.events          # the common event table (pandas)
t.hotspots()      # kernels ranked by total time
t.findings()      # what to do next, ranked by what it is worth
ta.compare(t, ta.load("after.json.gz"))   # baseline → candidate, per step
ta.load_job("job/").report()              # a job analysed rank by rank: only the ranks' summaries kept
"""

from importlib.util import find_spec

if find_spec("traceanalyzer.parsers") is None:  # the source tree's traceanalyzer/ without the installed mapping
    raise ImportError(
        "traceanalyzer is being imported from the repository's source folder, where its parsers/ and dashboards/ "
        "subpackages are not mapped in: run `pip install -e .` in the repository, or start Python in another folder"
    )

from traceanalyzer.classify import Rule  # noqa: E402
from traceanalyzer.comparison import Comparison, compare
from traceanalyzer.errors import TraceError
from traceanalyzer.findings import Finding
from traceanalyzer.notebook import findings_table, pretty
from traceanalyzer.perrank import Job, load_job
from traceanalyzer.renderers import plots
from traceanalyzer.schema import Kind, Platform
from traceanalyzer.trace import Trace, load

__version__ = "0.1.0"
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
    "plots",
    "pretty",
    "__version__",
]
