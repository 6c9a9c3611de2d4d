"""The dashboard's pages, one module per page, named for it (``hotspots.py`` is the Hotspots page at /hotspots).

A page module provides ``TITLE`` (its name in the menu and its heading), ``layout`` (its content for a loaded trace's
View and the URL's query; the Compare page's for every loaded View and the selected key) and, where the page has
interactions, ``register(app, store)``, which adds its callbacks to the app: a page's whole behaviour is in its
module. Pages format and draw the analyzers' data and never compute a finding; they import the dashboard's lower
modules (views, tables, charts, blocks, state, names), never each other or the router (``dashboards.routing``).
"""
