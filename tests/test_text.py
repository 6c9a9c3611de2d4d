"""The text report reads exactly as rich drew it, plain and in colour: every character of real reports at the widths
a user asks for, and of random blocks (long cells, wide East Asian characters, newlines, empty tables); cell widths
as rich's. rich is only the reference here (the test extra)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, reject, settings
from hypothesis import strategies as st

import traceanalyzer as ta
from tests.conftest import H200, PUBLIC_ASCEND, REPO
from traceanalyzer import cli
from traceanalyzer.renderers import cells, text
from traceanalyzer.renderers.document import Block, Display, layout

rich_cells = pytest.importorskip("rich.cells", reason="rich (the reference the text is compared with: the test extra)")
rich_reference = pytest.importorskip("tests.rich_reference", reason="rich (the test extra)")
SAMPLES = REPO / "sample_traces"
REPORTS = {
    "unfused_ops": SAMPLES / "unfused_ops.json.gz",
    "gpu_bound": SAMPLES / "gpu_bound",
    "fsdp": SAMPLES / "fsdp",
    "inference": SAMPLES / "inference" / "eager_dynamic.json.gz",
    "gpt_train": H200 / "gpt_train",
    "ddp_overlap": H200 / "ddp_overlap",
    "ascend_qwen3": PUBLIC_ASCEND / "msinsight" / "st_level2_qwen3_4rank",
}
WIDTHS = (80, 100, 120, 200)
FUZZ = settings(
    max_examples=200, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow], database=None
)


def _rich(blocks: list[Block], display: Display) -> str:
    """What rich draws of the blocks without colour: the reference."""
    return str(rich_reference.render_blocks(blocks, display))


@pytest.fixture(scope="module", params=sorted(REPORTS))
def report_blocks(request) -> dict[bool, list[Block]]:
    """A real report's blocks, compact and full."""
    path = REPORTS[request.param]
    if not path.exists():
        pytest.skip(f"{path} is not in this checkout (../shared/traces holds the recorded traces)")
    report = ta.load(path).build_report()
    return {full: layout(report, Display(full=full)) for full in (False, True)}


@pytest.mark.parametrize("color", [False, True], ids=["plain", "colour"])
@pytest.mark.parametrize("wide", [False, True], ids=["cut", "wide"])
@pytest.mark.parametrize("full", [False, True], ids=["compact", "full"])
def test_real_reports_read_as_rich_drew_them(report_blocks, full, wide, color):
    for width in WIDTHS:
        display = Display(width=width, color=color, wide=wide, full=full)
        assert text.render_blocks(report_blocks[full], display) == _rich(report_blocks[full], display), width


def test_the_command_line_report_reads_as_rich_drew_it(capsys, tmp_path):
    path = SAMPLES / "unfused_ops.json.gz"
    out = tmp_path / "report.txt"
    assert cli.main([str(path), "--width", "120", "-o", str(out)]) == 0
    report = ta.load(path).build_report()
    assert out.read_text() == _rich(layout(report, Display(width=120)), Display(width=120))


_CHARS = [*"abcdefgh xyz 0123456789.,:-_/()[]%", "  ", "\n", "\t", "中", "文字", "ア", "é", "e\u0301", "…", "–", "😀"]
_TEXT = st.lists(st.sampled_from(_CHARS), max_size=30).map("".join)
_LONG = st.one_of(_TEXT, st.lists(st.sampled_from(_CHARS), min_size=60, max_size=200).map("".join))


@st.composite
def _table(draw: st.DrawFn) -> Block:
    columns = draw(st.integers(0, 6))
    row = st.lists(_LONG, min_size=columns, max_size=columns)
    return Block(
        "table",
        draw(_TEXT),
        headers=draw(st.lists(_TEXT, min_size=columns, max_size=columns)),
        rows=draw(st.lists(row, max_size=6)),
        numeric=draw(st.lists(st.booleans(), min_size=columns, max_size=columns)),
        more=draw(st.sampled_from([0, 0, 3, 12345])),
    )


def _findings(items: list[tuple[str, list[str], str]]) -> Block:
    return Block("list", items=[(head, texts) for head, texts, _ in items], severities=[s for _, _, s in items])


_SEVERITY = st.sampled_from(["high", "medium", "low", "info"])
_BLOCK = st.one_of(
    st.builds(Block, st.just("heading"), _LONG, level=st.sampled_from([1, 2])),
    st.builds(Block, st.just("facts"), facts=st.lists(st.tuples(_LONG, _LONG), max_size=5)),
    st.lists(st.tuples(_LONG, st.lists(_LONG, max_size=3), _SEVERITY), max_size=4).map(_findings),
    st.builds(Block, st.just("list"), items=st.lists(st.tuples(_LONG, st.lists(_LONG, max_size=1)), max_size=2)),
    _table(),
)


@FUZZ
@given(st.lists(_BLOCK, min_size=1, max_size=4), st.integers(20, 220), st.booleans(), st.booleans())
def test_random_blocks_read_as_rich_drew_them(blocks, width, wide, color):
    display = Display(width=width, color=color, wide=wide)
    if color and "\\t" in repr(blocks):
        reject()  # the same look, but rich restarts a style at each tab stop: other escape bytes
    try:
        want = _rich(blocks, display)
    except ValueError:  # rich folds a word into pieces of no width when a column has none left
        reject()
    assert text.render_blocks(blocks, display) == want


_MORE_CHARS = [*_CHARS, "가", "한", "\u200b", "\u00ad", "ｗ", "α", "Ж", "→"]


@FUZZ
@given(st.lists(st.sampled_from(_MORE_CHARS), max_size=40).map("".join))
def test_cell_widths_are_rich_s(line):
    assert cells.width(line) == rich_cells.cell_len(line)
    for n in (0, 1, 5, 17):
        assert cells.fit(line, n) == rich_cells.set_cell_size(line, n)


@pytest.mark.parametrize("name", ["中文字", "カーネル", "ｗｉｄｅ", "한국어", "naïve", "e\u0301", "😀"])
def test_wide_and_combining_characters_take_the_cells_rich_gives_them(name):
    assert cells.width(name) == rich_cells.cell_len(name)
