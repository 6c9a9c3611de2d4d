"""The router: which page a URL path shows (the menu, in order), the page drawn for the selected trace, and every
page's callbacks added to the app."""

from __future__ import annotations

from collections.abc import Collection

import dash
from dash import html
from traceanalyzer.dashboards.pages import (
    ascend,
    compare,
    distributed,
    fusion,
    health,
    hotspots,
    inference,
    memory,
    overview,
    timeline,
)
from traceanalyzer.dashboards.store import Store
from traceanalyzer.dashboards.views import View

ROUTES = {
    "/": overview,
    "/hotspots": hotspots,
    "/timeline": timeline,
    "/health": health,
    "/distributed": distributed,
    "/fusion": fusion,
    "/memory": memory,
    "/ascend": ascend,
    "/inference": inference,
    "/compare": compare,
}
"""URL path → page module (see dashboards.pages), in menu order."""
PAGES = {path: page.TITLE for path, page in ROUTES.items()}
"""URL path → page title, in menu order."""
INTERACTIVE = (hotspots, timeline, compare)
"""The pages with callbacks of their own."""
NOT_LOADED = (
    "Trace {key} is not loaded here (a link names a trace by a hash of its contents; this dashboard holds {count} "
    "other trace(s)): open its file above, or pick a loaded trace in the menu."
)


def render(
    path: str, views: dict[str, View], key: str | None, query: dict[str, str], loading: Collection[str] = ()
) -> list:
    """The content of one page for the selected trace (key), with the picks the URL's query holds; for a key not
    loaded (a link from another session, a trace not opened here), a message saying so."""
    view = views.get(key or "")
    if view is None and key in loading:
        return [html.P(f"Trace {key} is still loading: its page shows once it is ready.", id="not-loaded")]
    if view is None and key:
        return [html.P(NOT_LOADED.format(key=key, count=len(views)), id="not-loaded", className="callout")]
    if view is None or key is None:
        return [html.P("No trace loaded yet: open one above.", id="no-trace")]
    if path == "/compare":
        return compare.layout(views, key, query)
    page = ROUTES.get(path, overview)
    return [html.H2(f"{page.TITLE} · {view.label}", className="page-title"), *page.layout(view, query)]


def ahead(view: View) -> None:
    """Draw ahead what the next page asked for is likely to need: the Timeline's chart of the first step (the
    largest figure a page draws)."""
    timeline.prepare(view)


def register(app: dash.Dash, store: Store) -> None:
    """Add every page's callbacks to app."""
    for page in INTERACTIVE:
        page.register(app, store)
