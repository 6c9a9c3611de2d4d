"""The package's layers: imports point down, never in a circle, and never hide inside a function to dodge one.

The graph is read from the source (``ast``), the way Python resolves it: ``parsers/`` is ``traceanalyzer.parsers`` and
``dashboards/`` is ``traceanalyzer.dashboards`` (pyproject's package-dir mapping).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.conftest import REPO

PACKAGES = {
    "traceanalyzer": REPO / "traceanalyzer",
    "traceanalyzer.parsers": REPO / "parsers",
    "traceanalyzer.dashboards": REPO / "dashboards",
}

LAYERS = (
    # the vocabulary of the data: no import of ours but each other
    ("traceanalyzer.errors", "traceanalyzer.allocator", "traceanalyzer.schema", "traceanalyzer.intervals",
     "traceanalyzer.records", "traceanalyzer.humanize", "traceanalyzer.vocabulary", "traceanalyzer.devices",
     "traceanalyzer.options",
     "traceanalyzer.memo", "traceanalyzer.progress", "traceanalyzer.footprint", "traceanalyzer.notebook",
     "traceanalyzer.tables", "traceanalyzer.lazy", "traceanalyzer.checkout", "traceanalyzer.outputs",
     "traceanalyzer.tokens", "traceanalyzer.arguments", "traceanalyzer.groups"),
    ("traceanalyzer.findings", "traceanalyzer.section", "traceanalyzer.classify"),
    ("traceanalyzer.parsers",),
    ("traceanalyzer.linking", "traceanalyzer.cache", "traceanalyzer.cluster", "traceanalyzer.tracedata",
     "traceanalyzer.jobdata", "traceanalyzer.analyzer", "traceanalyzer.calltree"),
    ("traceanalyzer.loading",),
    ("traceanalyzer.analyzers",),
    ("traceanalyzer.report",),
    ("traceanalyzer.renderers",),
    ("traceanalyzer.trace", "traceanalyzer.perrank"),
    ("traceanalyzer.comparison",),
    ("traceanalyzer.cli", "traceanalyzer.dashboards", "traceanalyzer.agent", "traceanalyzer.training",
     "traceanalyzer"),
)  # fmt: skip
"""From the bottom up: a module may import its own layer's modules and those below, never those above."""

ON_DEMAND = {
    "traceanalyzer.cli": {
        "traceanalyzer.dashboards.cli",  # Dash (~0.4 s) only for `traceanalyze dashboard`
        "traceanalyzer.agent.cli",  # the optional mcp SDK only for `traceanalyze mcp`
    },
    "traceanalyzer.dashboards.cli": {"traceanalyzer.dashboards.app", "werkzeug.serving"},
    "traceanalyzer.cluster": {"distributed"},  # the optional Dask extra, only with --scheduler
    "traceanalyzer.footprint": {"psutil"},  # only where /proc/meminfo is missing
    "traceanalyzer.parsers.columns": {"traceanalyzer.parsers._scan"},  # the native reader, absent without a compiler
}
"""The function-level imports allowed: optional or heavy dependencies loaded on demand, never a cycle dodged."""


def _modules() -> dict[str, Path]:
    found = {}
    for package, folder in PACKAGES.items():
        for path in folder.rglob("*.py"):
            parts = list(path.relative_to(folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            if package == "traceanalyzer" and parts and parts[0] in ("parsers", "dashboards"):
                continue
            found[".".join([package, *parts])] = path
    return found


MODULES = _modules()


def _imported(node: ast.AST) -> list[str]:
    """Our modules (or third-party names) an import statement reads."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
        return [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in MODULES else node.module for a in node.names]
    return [_module_of(path) for path in _lazy_paths(node)]


def _lazy_paths(node: ast.AST) -> list[str]:
    """The dotted paths a call of traceanalyzer.lazy names (``lazy.Module("m")``, ``lazy.attributes(ns, {..})``):
    imports put off to first use are imports all the same."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
        return []
    if not (isinstance(node.func.value, ast.Name) and node.func.value.id == "lazy"):
        return []
    given = [v for a in node.args for v in (a.values if isinstance(a, ast.Dict) else [a])]
    return [v.value for v in given if isinstance(v, ast.Constant) and isinstance(v.value, str)]


def _module_of(path: str) -> str:
    """The longest prefix of a dotted path that is one of our modules (the path itself otherwise)."""
    parts = path.split(".")
    return next((".".join(parts[:i]) for i in range(len(parts), 0, -1) if ".".join(parts[:i]) in MODULES), path)


def _graph() -> dict[str, set[str]]:
    edges = {}
    for name, path in MODULES.items():
        tree = ast.parse(path.read_text())
        edges[name] = {m for node in ast.walk(tree) for m in _imported(node) if m in MODULES and m != name}
    return edges


def _layer(module: str) -> int:
    best = None
    for i, layer in enumerate(LAYERS):
        for prefix in layer:
            if (module == prefix or module.startswith(prefix + ".")) and (best is None or len(prefix) > best[1]):
                best = (i, len(prefix))
    assert best is not None, f"{module} is in no layer: add it to LAYERS"
    return best[0]


def _parent_packages(module: str) -> set[str]:
    parts = module.split(".")
    return {".".join(parts[:i]) for i in range(1, len(parts))}


def test_every_import_points_down_or_sideways():
    upward = [
        f"{a} (layer {_layer(a)}) imports {b} (layer {_layer(b)})"
        for a, targets in _graph().items()
        for b in targets
        if _layer(b) > _layer(a) and b not in _parent_packages(a)
    ]
    assert not upward, "\n".join(upward)


def test_no_import_cycle():
    edges = _graph()
    state: dict[str, int] = {}
    cycles: list[list[str]] = []

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(edges[node]):
            if nxt in _parent_packages(node):
                continue  # a submodule importing a name its own package re-exports is resolved by Python in order
            if state.get(nxt) == 1:
                cycles.append(path[path.index(nxt) :] + [nxt])
            elif nxt not in state:
                visit(nxt, [*path, nxt])
        state[node] = 2

    for module in sorted(edges):
        if module not in state:
            visit(module, [module])
    assert not cycles, "\n".join(" → ".join(c) for c in cycles)


def _function_imports(tree: ast.AST) -> list[tuple[int, str]]:
    found = []
    for func in ast.walk(tree):
        if isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef):
            for node in ast.walk(func):
                if isinstance(node, ast.Import | ast.ImportFrom):
                    names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                    found += [(node.lineno, n) for n in names]
    return found


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_function_level_import_but_optional_dependencies(module):
    tree = ast.parse(MODULES[module].read_text())
    allowed = ON_DEMAND.get(module, set())
    hidden = [f"line {line}: {name}" for line, name in _function_imports(tree) if name not in allowed]
    assert not hidden, f"{module} imports inside a function: {hidden}"


def test_the_layer_test_sees_the_package():
    assert {"traceanalyzer.trace", "traceanalyzer.parsers.kineto", "traceanalyzer.dashboards.app"} <= set(MODULES)
    edges = _graph()
    assert "traceanalyzer.schema" in edges["traceanalyzer.parsers.kineto"]


PRESENTERS = ("traceanalyzer.renderers", "traceanalyzer.notebook")
"""The modules that present: they receive values (a ``Report``, tables, figures), never a ``Trace``."""
_TRACE_TYPES = {"Trace", "TraceData", "Job", "JobData"}


def _takes_a_trace(tree: ast.AST) -> list[str]:
    """The module-level functions with a parameter named ``trace`` or annotated as a Trace (or its data, or a job)."""
    found = []
    for node in getattr(tree, "body", []):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            args = node.args.posonlyargs + node.args.args + node.args.kwonlyargs
            annotated = {n.id for a in args if a.annotation for n in ast.walk(a.annotation) if isinstance(n, ast.Name)}
            if any(a.arg == "trace" for a in args) or annotated & _TRACE_TYPES:
                found.append(node.name)
    return found


def test_no_presenter_takes_a_trace():
    taking = {
        f"{name}.{function}"
        for name, path in MODULES.items()
        if name.startswith(PRESENTERS)
        for function in _takes_a_trace(ast.parse(path.read_text()))
    }
    assert not taking, f"presenters that take a trace (give them values the facade computed): {sorted(taking)}"


def test_the_presenter_check_fails_on_a_presenter_that_takes_a_trace(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text(
        "from traceanalyzer.trace import Trace\n\n"
        "def render(t: Trace) -> str:\n    return str(t.findings())\n\n"
        "def table(trace) -> str:\n    return ''\n\n"
        "def fine(report, figures: list) -> str:\n    return ''\n"
    )
    assert _takes_a_trace(ast.parse(bad.read_text())) == ["render", "table"]
