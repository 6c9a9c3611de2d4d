"""The Dash dashboard, a presenter: ``traceanalyze dashboard`` (``cli``) serves the app (``app``) over the traces a
``store.Store`` loads, and each page (``pages``, one module per page; ``routing`` picks the page for a URL) draws the
analyzers' data of one loaded trace (``views.View``) and never computes a finding. What the user picked lives in the
URL's query string (``state``), so a reload or a shared link shows the same view."""
