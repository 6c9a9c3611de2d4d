"""Units are formatted once, in ``traceanalyzer.humanize``: no f-string elsewhere in the package makes a share
(``:.0%``) or writes a number followed by its unit (``f"{x:.1f} ms"``) by hand."""

from __future__ import annotations

import ast
import re

import pytest

from tests.test_layers import MODULES
from traceanalyzer import humanize

HOME = "traceanalyzer.humanize"
UNIT_AFTER = re.compile(r"^ (ns|µs|us|ms|s|B|KB|MB|GB|TB|KiB|MiB|GiB|GB/s|TB/s)\b")
"""A literal that starts with a unit, right after a formatted value: the value's unit written by hand."""


def _hand_made(tree: ast.AST) -> list[str]:
    """Lines of f-strings that format a share with ``%`` or put a unit after a formatted value."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.JoinedStr):
            continue
        parts = node.values
        for i, part in enumerate(parts):
            if not isinstance(part, ast.FormattedValue):
                continue
            spec = ast.unparse(part.format_spec) if part.format_spec else ""
            after = parts[i + 1] if i + 1 < len(parts) else None
            literal = after.value if isinstance(after, ast.Constant) and isinstance(after.value, str) else ""
            if spec.rstrip("'\"").endswith("%") or UNIT_AFTER.match(literal):
                found.append(f"line {node.lineno}: {ast.unparse(node)[:80]}")
    return found


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m != HOME))
def test_no_unit_is_formatted_by_hand(module):
    hand_made = _hand_made(ast.parse(MODULES[module].read_text()))
    assert not hand_made, f"{module} formats units by hand (use traceanalyzer.humanize): {hand_made}"


def test_the_unit_check_fails_on_hand_made_units():
    source = 'a = f"{x:.0%} of it"\nb = f"took {t / 1e6:.1f} ms"\nc = f"{n:,} B"\nd = f"{x} steps, {y:.1%}"\n'
    assert len(_hand_made(ast.parse(source))) == 4
    assert not _hand_made(ast.parse('e = f"{humanize.share(x, 0)} of it, {name} step {n}"\n'))


def test_humanize_writes_what_the_hand_made_formats_did():
    assert humanize.share(0.25, 0) == "25%" and humanize.share(0.1234) == "12.3%"
    assert humanize.bandwidth(4.8e12, 2) == "4.80 TB/s" and humanize.bandwidth(64e9) == "64 GB/s"
    assert humanize.byte_count(3_404_640_768) == "3,404,640,768 B"
    assert humanize.axis_ms(1_234_567) == "1.2346 ms"
    assert humanize.amount_of(12_400_000, 340_000_000, "B") == "12 of 340 MB"
    assert humanize.amount_of(3, 8, "ranks") == "3 of 8 ranks"
