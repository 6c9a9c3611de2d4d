"""What the user picked (trace, step, rank, filters) as the URL's query string: a reload or a shared link keeps it."""

from __future__ import annotations

import json
from collections.abc import Sequence
from urllib.parse import parse_qsl, urlencode

from dash import Output

KEYS = (
    "trace", "step", "span", "rank", "level", "kind", "levels", "frames", "find", "left", "right", "pct", "ms", "row",
    "at",
)  # fmt: skip
"""The query keys the pages read and write, in the order the URL lists them. ``span``: how many steps the Timeline
draws from ``step`` on; ``pct``/``ms``: the Compare page's
gate threshold; ``row``: the evidence rows a finding's link highlights (JSON of column → value); ``at``: the
timeline place a finding's link shows, ``start_ns-end_ns`` on the event table's clock (absolute ns, as ``ts``)."""
URL = Output("url", "search", allow_duplicate=True)
"""The output every callback that records a pick writes to."""


def parse(search: str | None) -> dict[str, str]:
    """The known keys of a query string (``?trace=t1&step=3``)."""
    return {k: v for k, v in parse_qsl((search or "").lstrip("?")) if k in KEYS}


def encode(query: dict[str, object]) -> str:
    """A query string of the known keys that have a value ('' when none)."""
    pairs = [(k, str(query[k])) for k in KEYS if query.get(k) not in (None, "")]
    return f"?{urlencode(pairs)}" if pairs else ""


def updated(search: str | None, **changes: object) -> str:
    """The query string with some keys set (None removes one)."""
    return encode({**parse(search), **changes})


def choice(query: dict[str, str], key: str, options: Sequence, default: object) -> object:
    """The option the query names for key (compared as text), else default: a stale or edited URL falls back."""
    wanted = query.get(key)
    return next((o for o in options if str(o) == wanted), default)


def evidence(query: dict[str, str]) -> dict | None:
    """The evidence rows a finding's link asks for (column → value), or None when absent or not a JSON object."""
    try:
        key = json.loads(query.get("row") or "null")
    except ValueError:
        return None
    return key if isinstance(key, dict) and key else None


def evidence_key(where: dict) -> str:
    """A finding's ``where`` as the URL's ``row`` value."""
    return json.dumps(where, default=str, separators=(",", ":"))
