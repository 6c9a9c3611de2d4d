"""The README's Python examples run as written, from the repository root."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.DOTALL)


def test_readme_has_python_examples():
    assert len(BLOCKS) >= 3


def test_readme_python_examples_run_in_order(monkeypatch, capsys):
    monkeypatch.chdir(README.parent)
    namespace: dict = {}
    for block in BLOCKS:
        if "../shared" in block and not (README.parent.parent / "shared").exists():
            pytest.skip("an example reads ../shared/traces, which is absent here")
        exec(compile(block, str(README), "exec"), namespace)  # noqa: S102 - our own documentation
    printed = capsys.readouterr().out
    assert printed.count(" -> ") == 5  # the five top findings
    summary = {f["id"]: f["value"] for f in namespace["report"]["sections"]["summary"]["facts"]}
    assert summary["kernels"] == 229  # unfused_ops ground truth
