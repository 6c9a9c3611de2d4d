"""Python started in the repository's root finds the source folder ``traceanalyzer/`` before the installed package.

The source tree keeps the design card's top-level folders (``parsers/`` and ``dashboards/`` beside
``traceanalyzer/``); the install maps them into the package as ``traceanalyzer.parsers`` and
``traceanalyzer.dashboards``. Imported from the checkout without that mapping (after a plain ``pip install .``,
Python started in the repository root), the package takes its modules from the installed copy, built C reader
included, so that the README's examples run from wherever they are typed.
"""

from __future__ import annotations

import sys
from importlib.machinery import PathFinder
from importlib.util import find_spec
from pathlib import Path
from typing import Any

MAPPED = ("parsers", "dashboards")
"""The top-level folders of the source tree that the install maps into the package."""


def use_installed(package: dict[str, Any]) -> None:
    """Point the package imported from the checkout (its globals) at the installed copy when the checkout lacks the
    mapping of ``MAPPED``; with no installed copy either, an ImportError saying what to run."""
    if find_spec(f"{package['__name__']}.{MAPPED[0]}") is not None:
        return
    here = Path(package["__file__"]).resolve().parent
    installed = installed_copy(package["__name__"], here)
    if installed is None:
        raise ImportError(
            f"traceanalyzer is being imported from the repository's source folder {here}, where its parsers/ and "
            "dashboards/ subpackages are not mapped in, and no installed copy was found: run `pip install .` (or "
            "`pip install -e .` to work on it) in the repository, or start Python in another folder"
        )
    package["__path__"][:] = [str(installed)]
    package["__file__"] = str(installed / "__init__.py")


def installed_copy(name: str, source: Path) -> Path | None:
    """The folder of package ``name`` installed elsewhere on ``sys.path`` (one that has the mapped subpackages)."""
    elsewhere = [p for p in sys.path if Path(p or ".").resolve() != source.parent]
    spec = PathFinder.find_spec(name, elsewhere)
    locations = list(spec.submodule_search_locations or []) if spec else []
    for location in map(Path, locations):
        if location.resolve() != source and all((location / m / "__init__.py").is_file() for m in MAPPED):
            return location
    return None
