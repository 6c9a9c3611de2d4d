"""A unit of parsing: one rank's trace and the parser function that reads it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from traceanalyzer.schema import TraceMeta

Parse = Callable[[Path], tuple[pd.DataFrame, pd.DataFrame, TraceMeta]]
"""A parser: ``parse(path) -> (events, memory events, meta)``; a module-level function, so a Unit pickles."""


@dataclass(frozen=True)
class Unit:
    """One rank's trace and the parser that reads it."""

    parse_with: Parse
    path: Path

    def parse(self) -> tuple[pd.DataFrame, pd.DataFrame, TraceMeta]:
        """Run the parser on the path."""
        return self.parse_with(self.path)
