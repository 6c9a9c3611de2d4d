"""``traceanalyze dashboard PATH [PATH ...]``: load the traces in the background and serve the app."""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
from collections.abc import Sequence

from traceanalyzer.dashboards.access import LOOPBACK_NAMES, Allowed, host_names
from traceanalyzer.dashboards.store import Store

from traceanalyzer import arguments

INSTALL = 'pip install "dash>=2.14"'


def parser() -> argparse.ArgumentParser:
    """Arguments of the dashboard command."""
    p = arguments.Parser(
        prog="traceanalyze dashboard",
        description="Interactive dashboard. Each PATH (a trace file, a run folder, or a folder of per-rank traces) "
        "becomes one entry of the trace picker; more can be opened from the page.",
    )
    p.add_argument("paths", nargs="*", metavar="PATH")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1, this machine only)")
    p.add_argument("--port", type=arguments.port, default=8050, help="port (default 8050)")
    p.add_argument(
        "--allow",
        action="append",
        default=[],
        metavar="DIR",
        help="a folder whose traces the page may open by path (repeatable); the PATHs given are allowed too",
    )
    return p


class MissingDependency(Exception):
    """A package the dashboard needs is not installed; the message says what to install."""


def serve(store: Store, host: str, port: int):
    """A threaded HTTP server (werkzeug) of the app over store, answering only requests for host (call
    serve_forever, or shutdown); MissingDependency if Dash is not installed."""
    try:  # loaded on demand: the report and compare commands work without Dash
        from traceanalyzer.dashboards.app import create_app
        from werkzeug.serving import make_server
    except ModuleNotFoundError as e:
        raise MissingDependency(f"the dashboard needs Dash, and {e.name} is not installed: {INSTALL}") from e
    return make_server(host, port, create_app(store, host_names(host)).server, threaded=True)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: start loading, print the URL, serve until interrupted."""
    args = parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # not one line per request (the page polls)
    missing = [d for d in args.allow if not os.path.isdir(d)]
    if missing:
        print(f"traceanalyze: error: --allow {missing[0]}: not a folder", file=sys.stderr)
        return 2
    store = Store(Allowed([*args.paths, *args.allow]))
    for path in args.paths:
        store.open([path])
    if args.host not in LOOPBACK_NAMES:
        print(
            f"traceanalyze: warning: serving on {args.host}: anyone who can reach this machine can read the traces "
            "and open the allowed files by path; the page answers only when reached by one of these names: "
            + ", ".join(sorted(host_names(args.host))),
            file=sys.stderr,
        )
    try:
        server = serve(store, args.host, args.port)
    except MissingDependency as e:
        print(f"traceanalyze: error: {e}", file=sys.stderr)
        return 2
    except SystemExit:  # werkzeug exits when the port is taken, after saying so
        return 2
    except OSError as e:
        print(f"traceanalyze: error: cannot listen on {args.host}:{args.port}: {e.strerror or e}", file=sys.stderr)
        return 2
    print(f"traceanalyze dashboard: http://{args.host}:{args.port}/  (Ctrl-C to stop)", flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        server.serve_forever()
    return 0
