"""The one error type a user sees for bad input: the file and the problem, on one line."""

from __future__ import annotations


class TraceError(Exception):
    """Bad input: names the file and says what is wrong with it."""

    def __init__(self, path: object, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = str(path)
        self.problem = problem


class AnalyzerFailed(UserWarning):
    """An analyzer raised (our bug): its section or findings are missing. The command line exits 1 on it unless
    ``--keep-going``."""
