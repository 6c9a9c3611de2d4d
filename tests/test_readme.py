"""The README's Python examples run as written, from the repository root, and give the values they state."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.DOTALL)
STATED = re.compile(r"^(?P<expr>\S.*?)\s+#\s+(?P<value><.*>|\[.*\]|[-+]?\d+\.\d+ ms per step)")
"""An example line that states its value: ``expr  # <repr>``, ``expr  # [list]`` or ``expr  # -1.23 ms per step``
(a time in ns, to two decimals of ms)."""


def _checked(block: str) -> str:
    """The block with each line that states its value turned into a check of that value, where it runs."""
    return "\n".join(
        f"_stated({m['expr']}, {m['value']!r}, {m['expr']!r})" if (m := STATED.match(line)) else line
        for line in block.splitlines()
    )


def _stated(value: object, stated: str, expr: str) -> None:
    if stated.endswith("ms per step"):
        shown = f"{value / 1e6:.2f} ms per step"
    else:
        shown = repr(value) if stated.startswith("<") else str(value)
    _STATED.append((expr, shown, stated))


_STATED: list[tuple[str, str, str]] = []


@pytest.fixture(scope="module")
def executed() -> tuple[dict, str]:
    """Every block run in order in one namespace (stated values recorded where they run), and what was printed."""
    if any("../shared" in b for b in BLOCKS) and not (README.parent.parent / "shared").exists():
        pytest.skip("an example reads ../shared/traces, which is absent here")
    printed: list[str] = []
    namespace: dict = {"_stated": _stated, "print": lambda *a, **k: printed.append(" ".join(map(str, a)))}
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(README.parent)
        for block in BLOCKS:
            exec(compile(_checked(block), str(README), "exec"), namespace)  # noqa: S102 - our own documentation
    return namespace, "\n".join(printed)


def test_readme_has_python_examples():
    assert len(BLOCKS) >= 3
    stated = [line for b in BLOCKS for line in b.splitlines() if STATED.match(line)]
    assert len(stated) >= 3


def test_readme_python_examples_run_in_order(executed):
    namespace, printed = executed
    assert printed.count(" -> ") == 5  # the five top findings
    summary = {f["id"]: f["value"] for f in namespace["report"]["sections"]["summary"]["facts"]}
    assert summary["kernels"] == 229  # unfused_ops ground truth


def test_readme_values_are_what_the_examples_give(executed):
    assert len(_STATED) >= 3
    for expr, shown, stated in _STATED:
        assert shown == stated, expr
