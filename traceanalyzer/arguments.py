"""The command line's parser: a usage mistake is one line on stderr and exit 2, like every other refusal; and the
types of options whose values are bounded."""

from __future__ import annotations

import argparse
from typing import NoReturn

from traceanalyzer.humanize import printable

MAX_WIDTH = 10_000
"""Columns of a text report at most (``--width``): every line is laid out to the width."""


class Parser(argparse.ArgumentParser):
    """argparse that says a usage mistake in one line (what is wrong, and where help is), exit 2."""

    def error(self, message: str) -> NoReturn:
        """Print ``prog: error: message (see prog --help)`` and exit 2 (a path's control characters and undecodable
        bytes shown as escapes)."""
        shown = printable(message, one_line=True)
        self.exit(2, f"{self.prog}: error: {shown} (see {self.prog} --help)\n")


def bounded(low: int, high: int, what: str):
    """An argparse type: a whole number in [low, high]."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text[:40]!r} is not a whole number") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{what} must be from {low} to {high:,}, not {value:,}")
        return value

    parse.__name__ = what  # argparse names the type in its message
    return parse


columns = bounded(1, MAX_WIDTH, "the width")
port = bounded(1, 65535, "the port")
