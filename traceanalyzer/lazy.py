"""Start-up: modules imported on their first use, so that what does not need them does not pay for them.

``traceanalyze --version`` and ``--help`` and a bare ``import traceanalyzer`` must start in a fraction of a second,
while importing pandas, numpy, pyarrow, plotly and dash takes 0.6-1.5 s; and a report imports only what its trace
needs (no Ascend parser nor analyzer for a Kineto trace). The public API, the command line and the registries name
what they offer at the top of their module; this module is the one place where the import of what serves it is
put off until it is used (not a way around an import cycle: the layers still point down).
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping, MutableMapping
from typing import Any

_UNSET = object()


class Module:
    """A stand-in for module ``name``: the first attribute asked of it imports the module, then every attribute is
    the module's own (thread-safe: ``importlib.import_module`` holds the import lock)."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attr: str) -> Any:
        return getattr(importlib.import_module(self._name), attr)

    def __repr__(self) -> str:
        return f"<module {self._name!r}, imported on first use>"


class Function:
    """A stand-in for the function a dotted path names (``pkg.module.name``): calling it imports the module (once),
    then calls the function; it pickles as its path."""

    def __init__(self, path: str) -> None:
        self._path = path

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return resolve(self._path)(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<function {self._path!r}, imported on first call>"


def attributes(
    namespace: MutableMapping[str, Any], where: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """A package's ``__getattr__`` and ``__dir__`` (PEP 562): attribute ``name`` is ``where[name]`` (a dotted path to
    a module or to a name in one), imported on first access and then kept in ``namespace``."""

    def __getattr__(name: str) -> Any:
        if name not in where:
            raise AttributeError(f"module {namespace['__name__']!r} has no attribute {name!r}")
        namespace[name] = value = resolve(where[name])
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *where})

    return __getattr__, __dir__


def resolve(path: str) -> Any:
    """The object a dotted path names: a name in a module (``pkg.module.name``) or a module itself."""
    module, _, name = path.rpartition(".")
    value = getattr(importlib.import_module(module), name, _UNSET)
    return importlib.import_module(path) if value is _UNSET else value


def keep_out(name: str) -> bool:
    """Make module ``name`` unimportable in this process unless it is imported already; True if it is kept out. For
    the command, which owns its process: pandas 3 imports pyarrow wherever it is installed, which a report does not
    use; a library caller's process is left as it is."""
    if name in sys.modules:
        return sys.modules[name] is None
    sys.modules[name] = None  # type: ignore[assignment]  # the import system's own mark of a blocked module
    return True
