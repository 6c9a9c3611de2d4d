"""``traceanalyze mcp``: the MCP server for coding agents, over stdio (or streamable HTTP on localhost)."""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence

from traceanalyzer import arguments
from traceanalyzer.agent.server import build

LOCALHOST = "127.0.0.1"


def parser() -> argparse.ArgumentParser:
    """Arguments of the mcp command (a mistake is one line and exit 2)."""
    p = arguments.Parser(
        prog="traceanalyze mcp",
        description="Serve traceanalyzer to a coding agent over the Model Context Protocol (stdio by default): "
        "open_trace gives a handle and a digest, the other tools drill down in small, paged answers. Only traces "
        "under the --allow folders (default: the current folder) can be opened; nothing is written.",
    )
    p.add_argument(
        "--allow",
        action="append",
        default=[],
        metavar="DIR",
        help="a folder (or file) whose traces may be opened (repeatable; default: the current folder)",
    )
    p.add_argument(
        "--http",
        type=arguments.port,
        metavar="PORT",
        help=f"serve streamable HTTP on {LOCALHOST}:PORT/mcp instead of stdio (only this machine can reach it)",
    )
    return p


def main(argv: Sequence[str]) -> int:
    """Run the server until its client goes away."""
    args = parser().parse_args(argv)
    missing = [d for d in args.allow if not os.path.exists(d)]
    if missing:
        parser().error(f"--allow {missing[0]}: no such file or folder")
    server = build(args.allow or [os.getcwd()])
    if args.http is None:
        server.run("stdio")
    else:
        server.run("streamable-http", host=LOCALHOST, port=args.http)
    return 0
