"""What the user picked (trace, step, rank, filters, zoom, selection) as the URL's query string: a reload, a shared
link or Back/Forward shows the same view. A pick is recorded (``record``) as a new history entry; a page drawing
its defaults replaces the entry it is on, so Forward still leads where it led."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from urllib.parse import parse_qsl, urlencode

from dash import Output

KEYS = (
    "trace",
    "step",
    "span",
    "rank",
    "level",
    "kind",
    "sel",
    "levels",
    "frames",
    "find",
    "zoom",
    "left",
    "right",
    "pct",
    "ms",
    "row",
    "at",
    "slice",
)
"""The query keys the pages read and write, in the order the URL lists them. ``trace``: a loaded trace's key (a
hash of its contents); ``span``: how many steps the Timeline draws from ``step`` on; ``sel``: the Hotspots page's
picked name; ``zoom``: the timeline's window and ``at``: the timeline place a finding's link shows, both
``start_ns-end_ns`` on the event table's clock (absolute ns, as ``ts``); ``pct``/``ms``: the Compare page's gate
threshold; ``row``: the evidence rows a finding's link highlights (JSON of column → value); ``slice``: the
Timeline's clicked slice (its event-table row: the details panel, the Selected line and its launch → kernel lines)."""
ALL = "all"
"""The pick of every step, rank or kind (Hotspots), or of every rank stacked on one time axis (Timeline)."""
URL = Output("record", "data", allow_duplicate=True)
"""The output every callback that records a pick writes to (``record``'s value; the browser writes the URL)."""


def parse(search: str | None) -> dict[str, str]:
    """The known keys of a query string (``?trace=t1&step=3``)."""
    return {k: v for k, v in parse_qsl((search or "").lstrip("?")) if k in KEYS}


def encode(query: Mapping[str, object]) -> str:
    """A query string of the known keys that have a value ('' when none)."""
    pairs = [(k, str(query[k])) for k in KEYS if query.get(k) not in (None, "")]
    return f"?{urlencode(pairs)}" if pairs else ""


def updated(search: str | None, **changes: object) -> str:
    """The query string with some keys set (None removes one)."""
    return encode({**parse(search), **changes})


def record(search: str, push: bool = True, render: bool = False) -> dict:
    """What the browser does with a view's query string: a new history entry (push) or the current one replaced, and
    (render) the page drawn again for it (another trace was picked)."""
    return {"search": search, "push": push, "render": render}


def recorded(search: str | None, defaults: dict[str, object], **changes: object) -> dict:
    """The record of the query string with some keys set, a pick equal to the page's default left out (a key the
    URL lacks is its default): a new history entry when that changes the view, else in place of the current one (a
    page drawn for a URL naming its defaults or nothing, as after Back)."""
    drawn = {k: str(v) for k, v in defaults.items() if v not in (None, "")}
    before, after = parse(search), parse(updated(search, **changes))
    shown = {k: v for k, v in after.items() if drawn.get(k) != v or k not in changes}
    return record(encode(shown), push={**drawn, **before} != {**drawn, **after})


def missing(query: dict[str, str], key: str, options: Sequence) -> str | None:
    """The value the query names for key when it is none of the options (a link to a step or rank the trace lacks),
    else None."""
    wanted = query.get(key)
    return wanted if wanted is not None and wanted not in {str(o) for o in options} else None


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
