"""One home each: every set of event kinds the product selects by is built once, in ``traceanalyzer/schema.py``, and
used by name (``schema.BUSY``, ``schema.HOST_WORK``...), so that "device lane" or "host work" means one thing.

The check reads the source (``ast``): outside schema.py, a list, tuple or set literal naming two kinds or more
(``[Kind.KERNEL.value, Kind.MEMCPY.value]``), a set built from a ``*_KINDS`` set (``DEVICE_KINDS | {...}``,
``HOST_KINDS - {...}``) or a comprehension over one (``[k.value for k in BUSY_KINDS]``) is a private kind set."""

from __future__ import annotations

import ast

from tests.conftest import REPO

FOLDERS = (REPO / "traceanalyzer", REPO / "parsers", REPO / "dashboards")
HOME = REPO / "traceanalyzer" / "schema.py"


def _is_kind(node: ast.AST) -> bool:
    """``Kind.X`` or ``Kind.X.value``."""
    if isinstance(node, ast.Attribute) and node.attr == "value":
        node = node.value
    return isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "Kind"


def _is_kind_set(node: ast.AST) -> bool:
    """A name of one of schema's sets of kinds (``DEVICE_KINDS``)."""
    name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""
    return name.endswith("_KINDS")


def _builds_kinds(node: ast.AST) -> bool:
    """Whether a node builds a set of kinds: a literal of two kinds or more, an operation on a ``*_KINDS`` set, or a
    comprehension over one."""
    if isinstance(node, ast.List | ast.Tuple | ast.Set):
        return sum(map(_is_kind, node.elts)) >= 2
    if isinstance(node, ast.BinOp):
        return _is_kind_set(node.left) or _is_kind_set(node.right)
    if isinstance(node, ast.ListComp | ast.SetComp | ast.GeneratorExp):
        return any(_is_kind_set(g.iter) for g in node.generators)
    return False


def private_kind_sets(source: str) -> list[int]:
    """The lines of a module's source that build a set of kinds of their own."""
    return sorted({node.lineno for node in ast.walk(ast.parse(source)) if _builds_kinds(node)})


def test_kind_sets_are_built_in_schema_only():
    found = {
        f"{path.relative_to(REPO)}:{line}"
        for folder in FOLDERS
        for path in sorted(folder.rglob("*.py"))
        if path != HOME
        for line in private_kind_sets(path.read_text())
    }
    assert not found, f"kind sets built outside schema.py (declare them there, use them by name): {sorted(found)}"


def test_the_check_fails_on_a_private_kind_set():
    planted = {
        "[Kind.KERNEL.value, Kind.MEMCPY.value]": [1],
        "x = (Kind.CPU_OP, Kind.PYTHON)": [1],
        "x = DEVICE_KINDS | {Kind.COMM_TASK}": [1],
        "x = sorted(k.value for k in schema.BUSY_KINDS)": [1],
        "x = kind.isin(BUSY)\ny = {Kind.KERNEL.value: 'kernel'}": [],
    }
    assert {source: private_kind_sets(source) for source in planted} == planted


def test_schema_builds_the_kind_sets():
    assert len(private_kind_sets(HOME.read_text())) >= 10, "the check reads schema.py's sets as kind sets"
