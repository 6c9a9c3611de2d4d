"""The names the analyses recognise, defined once: runtime calls that launch or sync, graph replays, data loading.

Each is matched against event names of either platform; an analysis asks here rather than keeping its own list.
"""

from __future__ import annotations

import re

GRAPH_LAUNCH = re.compile(r"^(cuda|hip|cu)GraphLaunch")
"""Runtime calls that replay a captured graph: the kernels they launch were captured, their ops not recorded."""

GRAPH_REPLAYED = "graph-replayed (ops not recorded)"
"""How op tables name device work replayed from a graph whose ops the trace does not record."""
