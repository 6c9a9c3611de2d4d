"""The Dash app: a trace picker, an open/upload panel with load progress, and one page per analysis."""

from __future__ import annotations

import base64
import binascii
import json
import re
import tempfile
import threading
import uuid
from collections.abc import Callable
from pathlib import Path

import dash
import flask
from dash import ALL, Input, Output, State, dcc, html, no_update
from traceanalyzer.dashboards import access, charts, routing, state
from traceanalyzer.dashboards.blocks import LOADING_DELAY_MS
from traceanalyzer.dashboards.store import Store
from traceanalyzer.dashboards.views import View

from traceanalyzer import humanize

UPLOAD_LIMIT_BYTES = 200 * (1 << 20)
"""Largest trace file accepted by the upload box."""
UPLOAD_TOO_LARGE = (
    f"upload refused: the file is over the {humanize.size(UPLOAD_LIMIT_BYTES, 0)} upload limit "
    "(open a larger trace by path: traceanalyze dashboard PATH or --allow DIR)"
)
"""The one answer for an upload over the limit, from the browser (which then sends nothing) or the server."""

POLL_MS = 250
"""How often the page asks for load progress while a load runs (the poll stops once nothing loads): the lag
between a trace being ready and its first page."""
AHEAD_AFTER_S = 0.5
"""Once the Overview is drawn for a trace (this long after its page is sent, so as not to slow its drawing), what
the next page is likely to need is drawn in the background (routing.ahead)."""
PAGE_DRAWN = {"page": "children"}
"""What the page's spinner waits for (hiding the page meanwhile): the page drawn, not a chart or table of it
redrawn (each page's own spinners cover those, the rest of the page staying in view)."""
_SAFE_NAME = re.compile(r"[^A-Za-z0-9._-]")
_STYLE = {
    "fontFamily": "system-ui, sans-serif",
    "margin": "0 auto",
    "maxWidth": "1500px",
    "padding": "8px 16px",
}


def create_app(store: Store, hosts: set[str] | None = None) -> dash.Dash:
    """The dashboard app over the traces in store, answering only requests whose Host is one of hosts; Plotly's
    first-figure cost is paid in the background meanwhile (charts.warm_up), while the traces load."""
    threading.Thread(target=charts.warm_up, name="plotly-warm-up", daemon=True).start()
    app = dash.Dash(__name__, title="traceanalyzer", suppress_callback_exceptions=True, update_title=None)
    app.server.config["MAX_CONTENT_LENGTH"] = UPLOAD_LIMIT_BYTES * 4 // 3 + (1 << 20)
    app.server.before_request(lambda: _check_host(hosts or access.host_names("127.0.0.1")))
    app.server.before_request(lambda: _name_the_trace(store))
    app.layout = lambda: _layout(store)  # called per page load: each browser page gets its own session id
    _loading_callbacks(app, store)
    _poll_callbacks(app, store)
    _page_callbacks(app, store)
    headers = security_headers(app.csp_hashes())  # after every callback: their inline scripts are hashed
    app.server.after_request(lambda response: _with_headers(response, headers))
    return app


def security_headers(script_hashes: list[str]) -> dict[str, str]:
    """The headers of every response: no framing, no sniffing, and a CSP under which only the app's own files and
    the hashed inline scripts Dash writes (its renderer, the clientside callbacks) run."""
    csp = {
        "default-src": "'self'",
        "script-src": " ".join(["'self'", *script_hashes]),
        "style-src": STYLE_SRC,
        "img-src": "'self' data: blob:",
        "connect-src": "'self'",
        "object-src": "'none'",
        "base-uri": "'none'",
        "form-action": "'self'",
        "frame-ancestors": "'none'",
    }
    return {
        "X-Frame-Options": "DENY",
        "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": "no-referrer",
        "Content-Security-Policy": "; ".join(f"{k} {v}" for k, v in csp.items()),
    }


STYLE_SRC = "'self' 'unsafe-inline'"
"""Where styles may come from: Dash's components (dcc, its renderer, Plotly, React) write <style> elements and
style attributes at run time, unhashable; a style cannot run code, so scripts stay strict."""


def _with_headers(response: flask.Response, headers: dict[str, str]) -> flask.Response:
    response.headers.update(headers)
    return response


def _check_host(hosts: set[str]) -> None:
    """Refuse (403) a request whose Host header names another site: a DNS-rebinding page must not reach us."""
    if access.host_of(flask.request.host) not in hosts:
        flask.abort(403)


def _name_the_trace(store: Store) -> flask.Response | None:
    """A page asked for without a trace (``/``, ``/hotspots?step=3``) once one is loaded: redirected to the same
    page naming the first loaded trace, as the page would then name it itself; so it is drawn once, for the URL it
    keeps (not once for no trace and again when the browser writes the trace into the URL)."""
    request = flask.request
    ready = store.ready()
    if request.method != "GET" or request.path not in routing.PAGES or "trace" in request.args or not ready:
        return None
    return flask.redirect(request.path + state.updated(request.query_string.decode(), trace=ready[0].key))


def _options(store: Store) -> list[dict]:
    """The trace picker's options: the loaded traces, in the order they were opened."""
    return [{"label": j.label, "value": j.key} for j in store.ready()]


def _layout(store: Store) -> html.Div:
    """The page frame, with a fresh id of this browser page's session (its failed opens are its own), the traces
    loaded so far in the picker and the loads' status: a page opened once they are loaded is drawn at once, with no
    poll round trip to wait for (the poll runs only while a load does)."""
    session, loading = uuid.uuid4().hex, store.busy()  # asked first: once idle, the lists below are final
    nav = [
        dcc.Link(title, href=path, id=f"nav-{title.lower()}", className="nav") for path, title in routing.PAGES.items()
    ]
    open_panel = html.Details(
        [
            html.Summary("Open another trace"),
            dcc.Input(id="open-path", placeholder="path to a trace file or run folder", style={"width": "50%"}),
            html.Button("Open", id="open-btn"),
            dcc.Upload(
                id="upload",
                children=html.Span(
                    f"… or drop / pick a trace file: .json, .json.gz or a memory snapshot .pickle "
                    f"(up to {humanize.size(UPLOAD_LIMIT_BYTES, 0)})"
                ),
                max_size=UPLOAD_LIMIT_BYTES,
                style={"border": "1px dashed #999", "padding": "6px", "marginTop": "4px"},
            ),
            html.Div(id="upload-limit", **{"data-limit": str(UPLOAD_LIMIT_BYTES), "data-message": UPLOAD_TOO_LARGE}),
            html.Div(id="open-msg", className="message"),
        ]
    )
    return html.Div(
        [
            dcc.Location(id="url", refresh=False),
            dcc.Store(id="record"),  # a view's query string for the browser to write (state.record)
            dcc.Store(id="shown"),  # the location the page shows, and whether it waits for its trace to load
            dcc.Store(id="asked"),  # a location the page is to be drawn for (PAGE_ASKED)
            dcc.Store(id="session", data=session),
            dcc.Store(id="scrolled"),
            dcc.Interval(id="poll", interval=POLL_MS, disabled=not loading),
            html.Div(
                [
                    html.B("traceanalyzer", style={"marginRight": "12px"}),
                    html.Div(
                        dcc.Dropdown(id="trace", options=_options(store), clearable=False, placeholder="loading…"),
                        style={"width": "300px", "display": "inline-block", "verticalAlign": "middle"},
                    ),
                    html.Span([" ", *_spaced(nav)], style={"marginLeft": "12px"}),
                ]
            ),
            open_panel,
            html.Div(_status(store, session), id="load-status", className="status"),
            dcc.Loading(html.Div(id="page"), delay_show=LOADING_DELAY_MS, target_components=PAGE_DRAWN),
        ],
        style=_STYLE,
    )


def _spaced(items: list) -> list:
    out: list = []
    for item in items:
        out += [item, " · "]
    return out[:-1]


def _loading_callbacks(app: dash.Dash, store: Store) -> None:
    """Opening a trace by path or upload, and dismissing a failed one."""

    @app.callback(
        Output("open-msg", "children"),
        Output("poll", "disabled", allow_duplicate=True),
        Input("open-btn", "n_clicks"),
        State("open-path", "value"),
        State("session", "data"),
        prevent_initial_call=True,
    )
    def open_path(clicks, path, session):
        if not clicks:
            return no_update, no_update
        if not path or not path.strip():
            return "enter the path of a trace file or run folder", no_update
        known = store.view(store.open_requested(path, owner=session))
        return (f"already open as {known.label}: pick it in the menu" if known else ""), False

    @app.callback(
        Output("open-msg", "children", allow_duplicate=True),
        Output("poll", "disabled", allow_duplicate=True),
        Input("upload", "contents"),
        State("upload", "filename"),
        State("session", "data"),
        prevent_initial_call=True,
    )
    def upload(contents, filename, session):
        try:
            path = save_upload(contents, filename)
        except ValueError as e:
            return str(e), no_update
        store.open([str(path)], label=f"{path.name} (uploaded)", owner=session, temporary=path.parent)
        return f"opening uploaded {Path(path).name} …", False

    @app.callback(
        Output("load-status", "children", allow_duplicate=True),
        Input({"dismiss": ALL}, "n_clicks"),
        State("session", "data"),
        prevent_initial_call=True,
    )
    def dismiss(clicks, session):
        if not any(clicks):
            return no_update
        store.dismiss(dash.ctx.triggered_id["dismiss"])
        return _status(store, session)


def _poll_callbacks(app: dash.Dash, store: Store) -> None:
    """The load poll (progress, errors, the trace picker) and the URL's trace and nav links."""

    @app.callback(
        Output("load-status", "children"),
        Output("trace", "options"),
        Output("poll", "disabled"),
        Input("poll", "n_intervals"),
        State("trace", "options"),
        State("session", "data"),
        prevent_initial_call=True,  # the layout holds the first answer: the page waits for no poll
    )
    def poll(_n, options, session):
        idle = not store.busy()  # asked first: once idle, the lists below are final, so polling can stop
        ready = _options(store)
        return _status(store, session), no_update if ready == (options or []) else ready, idle

    app.clientside_callback(  # in the browser: a URL's change redraws the menu with no round trip
        NAV_LINKS.replace("KEYS", json.dumps(state.KEYS)).replace("PATHS", json.dumps(list(routing.PAGES))),
        *[Output(f"nav-{t.lower()}", "href") for t in routing.PAGES.values()],
        Input("url", "search"),
    )


NAV_LINKS = r"""function (search) {
    const keys = KEYS;
    const kept = {};
    for (const [k, v] of new URLSearchParams(search || '')) { if (keys.includes(k) && v !== '') kept[k] = v; }
    delete kept.row; delete kept.at;
    const hex = (c) => '%' + c.charCodeAt(0).toString(16).toUpperCase();
    const quoted = (v) => encodeURIComponent(v).replace(/[!'()*]/g, hex).replace(/%20/g, '+');
    const query = keys.filter((k) => k in kept).map((k) => k + '=' + quoted(kept[k])).join('&');
    return PATHS.map((path) => path + (query ? '?' + query : ''));
}"""
"""Browser side of the menu: each page's link keeps the URL's picks (state.updated's query string: the known keys in
their order, quoted as urlencode does), less a finding's rows and place, which belong to the page it linked."""


def _status(store: Store, session: str) -> list[html.Div]:
    """The status lines a browser session sees: the loads running and the failed opens, its own and the command
    line's."""
    return [_status_line(j) for j in store.pending(session)]


def _status_line(job) -> html.Div:
    """A job's progress, or its error with a button that dismisses it."""
    if job.state == "error":
        dismiss = html.Button("×", id={"dismiss": job.key}, title="dismiss", className="dismiss")
        return html.Div([f"could not open {_shown(job.label)}: {job.message} ", dismiss], className="error")
    return html.Div(
        f"loading {_shown(job.label)}: {job.message} … {humanize.seconds(job.elapsed_s())}", className="progress"
    )


def _shown(label: str, most: int = 200) -> str:
    """A job's label (what the user typed) as the page shows it: cut in the middle beyond ``most`` characters."""
    return label if len(label) <= most else f"{label[: most // 2]}…{label[-most // 2 :]}"


def save_upload(contents: str | None, filename: str | None) -> Path:
    """Write an uploaded file (a data URL) to a private temp folder; refuse empty or oversized ones (ValueError
    with the message the page shows)."""
    if not contents or "," not in contents:
        raise ValueError("upload refused: the upload is empty")
    try:
        data = base64.b64decode(contents.split(",", 1)[1], validate=True)
    except (binascii.Error, ValueError) as e:
        raise ValueError("upload refused: the upload is not valid base64") from e
    if len(data) > UPLOAD_LIMIT_BYTES:
        raise ValueError(UPLOAD_TOO_LARGE)
    name = _SAFE_NAME.sub("_", Path(filename or "upload.json").name) or "upload.json"
    path = Path(tempfile.mkdtemp(prefix="traceanalyzer-upload-")) / name
    path.write_bytes(data)
    return path


def _page_callbacks(app: dash.Dash, store: Store) -> None:
    """The page for the URL and trace, its scroll to a linked table, and each page's interactions."""

    app.clientside_callback(  # in the browser: a location the page shows already asks the server for nothing
        PAGE_ASKED,
        Output("asked", "data"),
        Input("url", "pathname"),
        Input("url", "search"),
        Input("trace", "options"),
        State("shown", "data"),
    )

    @app.callback(
        Output("page", "children"),
        Output("shown", "data"),
        Input("asked", "data"),
        State("url", "pathname"),
        State("url", "search"),
    )
    def page(_asked, path, search):
        """The page for the location (asked for by PAGE_ASKED)."""
        here = f"{path or '/'}{search or ''}"
        views = {j.key: j.view for j in store.ready()}
        query = state.parse(search)
        key = query.get("trace") or next(iter(views), None)
        loading = {j.key for j in store.jobs() if j.state == "loading"}
        if key in views and routing.ROUTES.get(path or "/") is routing.overview:
            _in_background(AHEAD_AFTER_S, routing.ahead, views[key])
        return routing.render(path or "/", views, key, query, loading), {"at": here, "waiting": key not in views}

    app.clientside_callback(  # one callback: the URL and the trace picker set each other (no cycle across two)
        LOCATION,
        Output("url", "search", allow_duplicate=True),
        Output("url", "href", allow_duplicate=True),
        Output("shown", "data", allow_duplicate=True),
        Output("trace", "value"),
        Input("record", "data"),
        Input("url", "search"),
        Input("trace", "value"),
        Input("trace", "options"),
        State("shown", "data"),
        prevent_initial_call="initial_duplicate",
    )
    app.clientside_callback(SCROLL_TO_ANCHOR, Output("scrolled", "data"), Input("page", "children"))
    routing.register(app, store)


def _in_background(after_s: float, work: Callable[[View], None], view: View) -> None:
    """Run work(view) in a daemon thread after some seconds (an exit does not wait for it)."""
    timer = threading.Timer(after_s, work, (view,))
    timer.daemon = True
    timer.start()


PAGE_ASKED = """function (path, search, options, shown) {
    const here = (path || '/') + (search || '');
    const keys = (options || []).map((o) => o.value);
    const key = new URLSearchParams(search || '').get('trace') || keys[0];
    const drawn = shown && shown.at === here && !(shown.waiting && keys.includes(key));
    return drawn ? window.dash_clientside.no_update : here;
}"""
"""Browser side of the page: the page is drawn again only when the location is not the one it shows (Back, Forward,
a link, another trace picked) or when the trace it waited for has loaded; a location recorded for the view it shows
(a pick, a zoom) sends no request."""

LOCATION = r"""function (record, _search, value, options, shown) {
    const none = window.dash_clientside.no_update;
    const fired = window.dash_clientside.callback_context.triggered.map(t => t.prop_id);
    const keys = (options || []).map(o => o.value);
    const params = new URLSearchParams(window.location.search);
    const named = params.get('trace');
    const traceFirst = (key) => '?' + new URLSearchParams(
        [['trace', key], ...Array.from(params).filter(([k]) => k !== 'trace')]).toString();
    let go = null;
    if (fired.includes('record.data') && record) {
        go = record;
    } else if (fired.includes('trace.value') && value && value !== named) {
        go = {search: traceFirst(value), push: named !== null, render: named !== null};
    } else if (named === null && keys.length) {
        go = {search: traceFirst(keys[0]), push: false, render: false};  // the page shows the first by default
    }
    const path = window.location.pathname;
    let search = window.location.search;
    let seen = none;
    if (go) {
        const drawn = shown && shown.at === path + search;  // else the page is still being drawn: let it redraw
        if (go.search !== search) {
            const url = path + go.search + window.location.hash;
            if (go.push) { window.history.pushState({}, '', url); } else { window.history.replaceState({}, '', url); }
        }
        search = go.search;
        if (!go.render && drawn) { seen = Object.assign({}, shown, {at: path + search}); }
    }
    const wanted = new URLSearchParams(search).get('trace');
    const pick = wanted ? (keys.includes(wanted) ? wanted : null) : (keys[0] || null);
    return [go ? search : none, go ? window.location.href : none, seen, pick === value ? none : pick];
}"""
"""Browser side of the URL: a record (state.record) becomes a new history entry or replaces the current one, and
the URL's component then agrees with the address bar, search and href (so it pushes nothing itself); the page,
told it shows this location already (when it was drawn for the one before), is drawn again only when asked
(render). A trace picked in the menu is a new entry and its page; the menu shows the URL's trace (none for a key
not loaded: the page says so), the first one when the URL names none."""

SCROLL_TO_ANCHOR = """function (_children) {
    const target = window.location.hash && document.getElementById(window.location.hash.slice(1));
    if (target) { target.scrollIntoView(); }
    return window.location.hash;
}"""
"""A link to a table on a page (a finding's evidence) scrolls to it once the page is drawn."""
