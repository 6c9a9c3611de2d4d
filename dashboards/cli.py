"""``traceanalyze dashboard PATH [PATH ...]``: load the traces in the background and serve the app."""

from __future__ import annotations

import argparse
import contextlib
import logging
import sys
from collections.abc import Sequence

from traceanalyzer.dashboards.store import Store
from werkzeug.serving import BaseWSGIServer, make_server

LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1"}


def parser() -> argparse.ArgumentParser:
    """Arguments of the dashboard command."""
    p = argparse.ArgumentParser(
        prog="traceanalyze dashboard",
        description="Interactive dashboard. Each PATH (a trace file, a run folder, or a folder of per-rank traces) "
        "becomes one entry of the trace picker; more can be opened from the page.",
    )
    p.add_argument("paths", nargs="*", metavar="PATH")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1, this machine only)")
    p.add_argument("--port", type=int, default=8050, help="port (default 8050)")
    return p


def serve(store: Store, host: str, port: int) -> BaseWSGIServer:
    """A threaded HTTP server of the app over store (call serve_forever, or shutdown)."""
    from traceanalyzer.dashboards.app import create_app

    return make_server(host, port, create_app(store).server, threaded=True)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: start loading, print the URL, serve until interrupted."""
    args = parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # not one line per request (the page polls)
    store = Store()
    for path in args.paths:
        store.open([path])
    if args.host not in LOCAL_HOSTS:
        print(
            f"traceanalyze: warning: serving on {args.host}: anyone who can reach this machine can read the traces "
            "and open files by path",
            file=sys.stderr,
        )
    try:
        server = serve(store, args.host, args.port)
    except SystemExit:  # werkzeug exits when the port is taken, after saying so
        return 2
    except OSError as e:
        print(f"traceanalyze: error: cannot listen on {args.host}:{args.port}: {e.strerror or e}", file=sys.stderr)
        return 2
    print(f"traceanalyze dashboard: http://{args.host}:{args.port}/  (Ctrl-C to stop)", flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        server.serve_forever()
    return 0
