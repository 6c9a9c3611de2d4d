"""``traceanalyze``: the report, ``traceanalyze compare`` for two runs, ``traceanalyze dashboard`` for the Dash app.

Exit codes: 0 ok, 2 bad input (one line naming the file and the problem), 1 internal error, 3 the compare gate
failed (``--fail-on-regression``: the candidate regressed), 4 the compare gate could not tell (inconclusive).
"""

from __future__ import annotations

import argparse
import math
import os
import re
import shutil
import sys
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from traceanalyzer import __version__, arguments, cluster, lazy, outputs
from traceanalyzer.errors import AnalyzerFailed, TraceError
from traceanalyzer.humanize import printable, seconds, size
from traceanalyzer.renderers import FORMATS, render
from traceanalyzer.schema import DEVICE
from traceanalyzer.tokens import CHARS_PER_TOKEN, DIGEST_BUDGET, LEAST_DIGEST_BUDGET

if TYPE_CHECKING:
    from traceanalyzer.classify import Rule
    from traceanalyzer.renderers.document import Display

# What the commands run is imported when one runs: --version and --help start without pandas (traceanalyzer.lazy).
allocator = lazy.Module("traceanalyzer.allocator")
cache = lazy.Module("traceanalyzer.cache")
classify = lazy.Module("traceanalyzer.classify")
comparison = lazy.Module("traceanalyzer.comparison")
compare_renderer = lazy.Module("traceanalyzer.renderers.compare")
document = lazy.Module("traceanalyzer.renderers.document")
export = lazy.Module("traceanalyzer.renderers.export")
loader = lazy.Module("traceanalyzer.trace")
loading = lazy.Module("traceanalyzer.loading")
perrank = lazy.Module("traceanalyzer.perrank")
progress_bars = lazy.Module("traceanalyzer.progress")

PROGRESS_AFTER_S = 1.0
"""Work that takes longer than this (s) says so on stderr."""
EXIT_OK, EXIT_INTERNAL, EXIT_BAD_INPUT = 0, 1, 2
EXIT_REGRESSION = 3
"""``traceanalyze compare --fail-on-regression``: the candidate regressed (see ``comparison.gate``)."""
EXIT_INCONCLUSIVE = 4
"""``traceanalyze compare --fail-on-regression``: the gate could not tell (too few steps, or host-bound steps whose
time changed with the same work); ``--inconclusive pass|fail`` exits 0 or 3 instead."""


def report_parser() -> argparse.ArgumentParser:
    """Arguments of the report command."""
    p = arguments.Parser(
        prog="traceanalyze",
        description="Where the time goes in a PyTorch (Kineto) or Ascend profiler trace. "
        "PATH is a trace file (.json/.json.gz), a run folder, or a folder of per-rank traces. "
        "'traceanalyze compare BASELINE CANDIDATE' compares two runs; "
        "'traceanalyze dashboard PATH' opens the interactive dashboard; "
        "'traceanalyze mcp [--allow DIR]' serves coding agents over MCP; "
        "'traceanalyze cache info|clear' shows or empties the cache of parsed traces; "
        "'traceanalyze export PATH --to parquet|csv|perfetto -o OUT' writes the tables or an annotated trace.",
    )
    p.add_argument("--version", action="version", version=f"traceanalyze {__version__}")
    p.add_argument("paths", nargs="+", metavar="PATH")
    p.add_argument("--top", type=positive, default=15, help="rows per hotspot table (default 15)")
    p.add_argument("--step", type=int, help="only this step (ProfilerStep number)")
    p.add_argument("--rank", type=int, help="only this rank")
    p.add_argument(
        "--kind",
        choices=DEVICE,
        help="only this kind of device work in the kernel table",
    )
    p.add_argument(
        "--comm-pattern",
        action="append",
        default=[],
        metavar="REGEX",
        help="also treat device work whose name matches REGEX as communication (repeatable)",
    )
    _cache_option(p)
    p.add_argument(
        "--per-rank",
        action="store_true",
        help="analyse each rank alone where it is parsed (a worker process, or a Dask worker with --scheduler) and "
        "keep only its summary: memory grows with the summaries, not with the traces; the same report (the default "
        "with a scheduler; HTML without figures)",
    )
    _output_options(p, "report", FORMATS)
    _keep_going_option(p)
    p.add_argument(
        "--budget",
        type=positive,
        default=DIGEST_BUDGET,
        metavar="TOKENS",
        help=f"tokens --format digest fits in, counted as characters/{CHARS_PER_TOKEN} (default {DIGEST_BUDGET:,})",
    )
    _display_options(p)
    return p


def compare_parser() -> argparse.ArgumentParser:
    """Arguments of the compare command."""
    p = arguments.Parser(
        prog="traceanalyze compare",
        description="Did my change make it faster, and where? Compares two runs per step: step time, device busy, "
        "time by kind, and kernels, CPU ops and launching ops by name (new, gone, faster, slower). Each path is "
        "anything 'traceanalyze' reads: a trace file, a run folder, or a folder of per-rank traces. "
        f"With --fail-on-regression(-ms) it is a CI gate: exit {EXIT_REGRESSION} when the whole confidence interval "
        "of the change in step time lies beyond the threshold, 0 when all of it lies within, "
        f"{EXIT_INCONCLUSIVE} when it cannot tell (too few steps; host-bound steps whose time changed with the same "
        "device work); 2 bad input.",
    )
    p.add_argument("baseline", metavar="BASELINE")
    p.add_argument("candidate", metavar="CANDIDATE")
    p.add_argument("--top", type=positive, default=15, help="rows per level table (default 15)")
    p.add_argument("--rank", type=int, help="only this rank (in both runs)")
    p.add_argument(
        "--fail-on-regression",
        type=float,
        metavar="PCT",
        help=f"exit {EXIT_REGRESSION} when the step time is more than PCT %% slower (its whole interval beyond)",
    )
    p.add_argument(
        "--fail-on-regression-ms",
        type=float,
        metavar="MS",
        help=f"exit {EXIT_REGRESSION} when it is more than MS ms per step slower (with PCT too: both must be exceeded)",
    )
    p.add_argument(
        "--confidence",
        type=float,
        metavar="PCT",
        help="confidence of the gate's two-sided interval, %% (default: the gate's DEFAULT_CONFIDENCE, 99)",
    )
    p.add_argument(
        "--inconclusive",
        choices=("exit", "pass", "fail"),
        default="exit",
        help=f"how an inconclusive gate exits: {EXIT_INCONCLUSIVE} (exit, the default), 0 (pass) or 3 (fail)",
    )
    p.add_argument(
        "--report-link",
        metavar="URL",
        help="with --format markdown: end the comment with a link to the full report at URL (a CI artifact)",
    )
    _cache_option(p)
    _output_options(p, "comparison", ("text", "json", "markdown"))
    return p


def export_parser() -> argparse.ArgumentParser:
    """Arguments of the export command."""
    p = arguments.Parser(
        prog="traceanalyze export",
        description="Write a trace's tables for other tools: 'parquet' or 'csv' into a folder (the event table, "
        "the memory table, every section's tables and a README.md of their columns), or 'perfetto': the trace's "
        "events plus a 'traceanalyzer findings' track as Chrome-trace JSON (.json or .json.gz) for ui.perfetto.dev.",
    )
    p.add_argument("paths", nargs="+", metavar="PATH")
    p.add_argument("--to", choices=export.TARGETS, required=True)
    p.add_argument("-o", "--output", required=True, help="the folder (parquet, csv) or the file (perfetto) to write")
    _force_option(p)
    _keep_going_option(p)
    p.add_argument("--top", type=positive, default=15, help="rows per hotspot table (default 15)")
    p.add_argument("--debug", action="store_true", help="show tracebacks of internal errors")
    _cache_option(p)
    return p


def positive(text: str) -> int:
    """An argparse type: a whole number above zero."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def cache_parser() -> argparse.ArgumentParser:
    """Arguments of the cache command."""
    p = arguments.Parser(
        prog="traceanalyze cache",
        description="Parsed traces are kept in the user's cache folder (TRACEANALYZER_CACHE_DIR, else "
        "$XDG_CACHE_HOME/traceanalyzer, else the platform's: ~/.cache/traceanalyzer on Linux) so that opening one "
        "again is fast: 'info' lists the entries and the folder, 'clear' removes them all.",
    )
    p.add_argument("action", choices=("info", "clear"))
    return p


def _cache_option(p: argparse.ArgumentParser) -> None:
    """--no-cache and --scheduler: how the traces are loaded."""
    p.add_argument(
        "--no-cache",
        action="store_true",
        help="parse the traces again and keep nothing (default: reuse and keep parsed tables in the user's cache "
        "folder, see 'traceanalyze cache info')",
    )
    p.add_argument(
        "--scheduler",
        metavar="tcp://HOST:PORT",
        help="parse the ranks on this Dask cluster (default: TRACEANALYZER_SCHEDULER, else here); every worker needs "
        "traceanalyzer installed and the traces at the same path; needs the dask extra (pip install '.[dask]')",
    )


def _display_options(p: argparse.ArgumentParser) -> None:
    """--width, --wide and --full: how the text report is laid out."""
    p.add_argument(
        "--width",
        type=arguments.columns,
        help="columns of the text report (default: the terminal's width, 100 when piped or written to a file)",
    )
    p.add_argument("--wide", action="store_true", help="show names in full (default: cut in the middle to fit)")
    p.add_argument("--full", action="store_true", help="every row of every table (default: the first rows)")


def display(args: argparse.Namespace) -> Display:
    """The text layout the options ask for: colour only on a terminal and without NO_COLOR."""
    tty = args.output is None and sys.stdout.isatty()
    width = args.width or (shutil.get_terminal_size((100, 24)).columns if tty else 100)
    color = tty and not os.environ.get("NO_COLOR")
    return document.Display(width=width, color=color, wide=args.wide, full=args.full)


def _force_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--force", action="store_true", help="replace an existing -o file (or write into a folder)")


def _output_options(p: argparse.ArgumentParser, what: str, formats: Sequence[str]) -> None:
    """--format, -o and --debug, which every command has."""
    p.add_argument("--format", choices=formats, default="text")
    p.add_argument("-o", "--output", help=f"write the {what} to this file instead of stdout")
    _force_option(p)
    p.add_argument("--debug", action="store_true", help="show tracebacks of internal errors")


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console command."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "dashboard":
        lazy.keep_out("pyarrow")  # before the dashboard imports pandas: see _own_process
        from traceanalyzer.dashboards.cli import main as dashboard_main

        return dashboard_main(argv[1:])
    if argv and argv[0] == "mcp":
        return _mcp(argv[1:])
    if argv and argv[0] == "cache":
        return guarded(lambda: _cache(cache_parser().parse_args(argv[1:])))
    if argv and argv[0] == "export":
        args = export_parser().parse_args(argv[1:])
        return guarded(lambda: _export(args), debug=args.debug)
    if argv and argv[0] == "compare":
        args = compare_parser().parse_args(argv[1:])
        return guarded(lambda: _compare(args), debug=args.debug)
    args = report_parser().parse_args(argv)
    return guarded(lambda: _report(args), debug=args.debug)


def _mcp(argv: list[str]) -> int:
    """``traceanalyze mcp``: the MCP server, with the optional SDK loaded only here."""
    try:
        from traceanalyzer.agent.cli import main as mcp_main
    except ImportError as e:
        print(f"traceanalyze: error: mcp needs pip install 'traceanalyzer[mcp]' ({e})", file=sys.stderr)
        return EXIT_BAD_INPUT
    return mcp_main(argv)


def guarded(run: Callable[[], int], debug: bool = False) -> int:
    """Run a command; bad input and internal errors become one line on stderr and an exit code."""
    try:
        return run()
    except TraceError as e:
        print(f"traceanalyze: error: {printable(str(e), one_line=True)}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        return 130
    except Exception as e:
        if debug:
            raise
        print(
            f"traceanalyze: internal error: {type(e).__name__}: {printable(str(e), one_line=True)} (rerun with --debug "
            "for details)",
            file=sys.stderr,
        )
        return EXIT_INTERNAL


def _report(args: argparse.Namespace) -> int:
    _own_process(args)
    _check_options(args, args.paths)
    budget = _budget(args.budget)
    per_rank = _per_rank(args)
    named = ", ".join(args.paths)
    rules = tuple(classify.Rule(p) for p in args.comm_pattern)
    waiting = Waiting(f"analysing {named} rank by rank" if per_rank else f"loading {named}")
    with waiting, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loaded, report = (_job_report if per_rank else _trace_report)(args, rules)
    no_figures = per_rank and args.format == "html"
    figures = ["the HTML report of a job analysed rank by rank has no figures (they are drawn from the joined tables)"]
    _warn([str(w.message) for w in caught] + loaded.meta.warnings + (figures if no_figures else []))
    if _analyzer_failed(caught, args.keep_going):
        return EXIT_INTERNAL
    drawn = loaded.figures(report.scope) if args.format == "html" and not per_rank else []
    text = render(report, args.format, display(args), drawn, budget)
    return _write(text, args.output)


def _own_process(args: argparse.Namespace) -> None:
    """Before a report's or comparison's imports: the command owns its process, so its allocator maps large blocks
    (their transients fragment the heap otherwise) and pyarrow is kept out, which pandas 3 imports wherever it is
    installed and neither uses (nor does the dashboard): 50-60 MB and 0.1-0.2 s a report (bench/RESULTS.md). Not
    with a Dask scheduler, whose workers' tables may come back holding Arrow-backed text."""
    allocator.map_large_blocks()
    if cluster.scheduler_from(args.scheduler) is None:
        lazy.keep_out("pyarrow")


def _budget(tokens: int) -> int:
    """The digest's budget; one under the least a digest needs is bad input."""
    if tokens < LEAST_DIGEST_BUDGET:
        raise TraceError("--budget", f"a digest needs at least {LEAST_DIGEST_BUDGET} tokens, not {tokens}")
    return tokens


def _trace_report(args: argparse.Namespace, rules: tuple[Rule, ...]):
    """The trace loaded (its ranks joined) and its report."""
    cache = False if args.no_cache else None
    trace = loader.load(args.paths, rules=rules, progress=progress_bars.Stderr(), cache=cache, scheduler=args.scheduler)
    return trace, trace.build_report(top=args.top, step=args.step, rank=args.rank, kind=args.kind)


def _job_report(args: argparse.Namespace, rules: tuple[Rule, ...]):
    """The job analysed rank by rank (only the ranks' parts come back) and its report."""
    cache = False if args.no_cache else None
    job = perrank.load_job(args.paths, rules, progress_bars.Stderr(), cache, args.scheduler, args.step, args.top)
    return job, job.build_report(top=args.top, kind=args.kind)


def _per_rank(args: argparse.Namespace) -> bool:
    """Whether the report is analysed rank by rank: asked, or a scheduler given (not for one --rank, which needs
    that rank's table)."""
    if args.per_rank and args.rank is not None:
        raise TraceError("--per-rank", "analyses every rank; for one rank give --rank without --per-rank")
    return args.per_rank or (args.rank is None and cluster.scheduler_from(args.scheduler) is not None)


def _export(args: argparse.Namespace) -> int:
    export.check_output(args.to, Path(args.output), loading.read_from(args.paths), args.force)
    with Waiting(f"loading {', '.join(args.paths)}"), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trace = loader.load(
            args.paths,
            progress=progress_bars.Stderr(),
            cache=False if args.no_cache else None,
            scheduler=args.scheduler,
        )
        written = trace.export(args.to, Path(args.output), top=args.top)
    _warn([str(w.message) for w in caught] + trace.meta.warnings)
    _write(f"wrote {written}\n", None)
    return EXIT_INTERNAL if _analyzer_failed(caught, args.keep_going) else EXIT_OK


def _compare(args: argparse.Namespace) -> int:
    _own_process(args)
    _check_options(args, [args.baseline, args.candidate])
    threshold = _threshold(args)
    confidence = comparison.DEFAULT_CONFIDENCE if args.confidence is None else args.confidence / 100
    if not 0.5 <= confidence < 1:
        raise TraceError(
            "--confidence", f"the confidence must be at least 50 and below 100 (%), not {args.confidence:g}"
        )
    with Waiting(f"loading {args.baseline}, {args.candidate}"), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        traces = [
            loader.load(
                path, progress=progress_bars.Stderr(), cache=False if args.no_cache else None, scheduler=args.scheduler
            )
            for path in (args.baseline, args.candidate)
        ]
        data = comparison.compare(*traces, rank=args.rank).to_dict(
            top=args.top, threshold=threshold, confidence=confidence
        )
    _warn([str(w.message) for w in caught] + [w for t in traces for w in t.meta.warnings] + data["warnings"])
    _write(compare_renderer.render(data, args.format, link=args.report_link), args.output)
    return _gate_exit(data["gate"], args.inconclusive)


def _gate_exit(gate: dict | None, inconclusive: str) -> int:
    """The exit code of a gate's verdict (``EXIT_OK`` without a gate)."""
    outcome = gate["outcome"] if gate else comparison.Outcome.PASS.value
    if outcome == comparison.Outcome.INCONCLUSIVE.value:
        return {"pass": EXIT_OK, "fail": EXIT_REGRESSION}.get(inconclusive, EXIT_INCONCLUSIVE)
    return EXIT_REGRESSION if outcome == comparison.Outcome.FAIL.value else EXIT_OK


def _threshold(args: argparse.Namespace):
    """The gate's threshold from --fail-on-regression(-ms); None without either. Negative ones are bad input."""
    given = {"--fail-on-regression": args.fail_on_regression, "--fail-on-regression-ms": args.fail_on_regression_ms}
    for option, value in given.items():
        if value is not None and not value >= 0:
            raise TraceError(option, f"the threshold must be a number >= 0, not {value:g}")
    if args.fail_on_regression is None and args.fail_on_regression_ms is None:
        return None
    share = None if args.fail_on_regression is None else args.fail_on_regression / 100
    ns = None if args.fail_on_regression_ms is None else args.fail_on_regression_ms * 1e6
    return comparison.Threshold(share=share, ns=ns)


def _cache(args: argparse.Namespace) -> int:
    if args.action == "clear":
        removed = cache.clear()
        freed = size(sum(e.size for e in removed), 1)
        return _write(f"removed {len(removed)} entries ({freed}) from {cache.folder()}\n", None)
    return _write(cache.describe(), None)


def _check_options(args: argparse.Namespace, inputs: list[str]) -> None:
    """Before any analysis: a --comm-pattern that is not a regex, or an -o that cannot be written or would overwrite
    an input, is bad input (one line, exit 2)."""
    for pattern in getattr(args, "comm_pattern", ()):
        try:
            re.compile(pattern, re.IGNORECASE)
        except re.error as e:
            raise TraceError("--comm-pattern", f"{pattern!r} is not a regular expression ({e})") from None
    if args.output:
        outputs.check(args.output, loading.read_from(inputs), args.force)


def _analyzer_failed(caught: list[warnings.WarningMessage], keep_going: bool) -> bool:
    """Did an analyzer fail (our bug)? Said in one line unless ``--keep-going`` (the ledger names the section)."""
    failed = [str(w.message) for w in caught if issubclass(w.category, AnalyzerFailed)]
    if failed and not keep_going:
        print(
            f"traceanalyze: internal error: {failed[0]}: rerun with --keep-going for the report without it "
            "(the ledger names what is missing), --debug for details",
            file=sys.stderr,
        )
    return bool(failed) and not keep_going


def _keep_going_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--keep-going",
        action="store_true",
        help="when an analyzer fails (our bug), write the report without its section (named in the ledger) and "
        "exit 0 (default: exit 1)",
    )


def _warn(messages: list[str]) -> None:
    for message in messages:
        print(f"traceanalyze: warning: {printable(message, one_line=True)}", file=sys.stderr)


def _write(text: str, output: str | None) -> int:
    """Write to -o (through the output guard) or stdout; a file name's undecodable bytes as escapes."""
    data = text.encode("utf-8", "backslashreplace")
    if output:
        with outputs.replacing(output) as f:
            f.write(data)
    else:
        sys.stdout.write(data.decode("utf-8"))
    return EXIT_OK


class Waiting:
    """Tell the user on stderr what is happening when it takes more than a second."""

    def __init__(self, what: str, after_s: float | None = None) -> None:
        self.what = what
        self.after_s = PROGRESS_AFTER_S if after_s is None else after_s
        self._done = threading.Event()
        self._shown = False
        self._start = 0.0

    def __enter__(self) -> Waiting:
        self._start = time.monotonic()
        if math.isfinite(self.after_s):  # an infinite wait means never (Event.wait cannot take it)
            threading.Thread(target=self._tick, daemon=True).start()
        return self

    def _tick(self) -> None:
        if not self._done.wait(self.after_s):
            self._shown = True
            print(f"traceanalyze: {printable(self.what, one_line=True)} …", file=sys.stderr, flush=True)

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        if self._shown:
            print(f"traceanalyze: done in {seconds(time.monotonic() - self._start)}", file=sys.stderr, flush=True)
