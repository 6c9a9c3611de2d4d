"""What a user asked a report to cover, apart from its scope (the scope is a scoped trace: ``TraceData.scoped``)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Options:
    """Report options every analyzer may read."""

    top: int = 15
    """Rows per ranked table."""
    kind: str | None = None
    """Restricts the kernel hotspot table to one event kind."""


DEFAULT = Options()
"""The options of a report nobody asked anything of."""
