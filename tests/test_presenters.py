"""The terminal report: fits the width asked for, colour only on a terminal, names cut but distinct, options."""

from __future__ import annotations

import html as html_lib
import itertools
import json
import re
import subprocess
import sys
from argparse import Namespace
from pathlib import Path

import pandas as pd
import pytest

import traceanalyzer as ta
from tests.conftest import REPO, SAMPLE_COLLECTIONS
from traceanalyzer import cli, notebook, renderers
from traceanalyzer.findings import Basis
from traceanalyzer.renderers import digest, document, markdown, perfetto, text
from traceanalyzer.renderers import html as html_renderer
from traceanalyzer.renderers.document import Display
from traceanalyzer.section import Section, Table, Unit

SAMPLES = REPO / "sample_traces"
ANSI = re.compile(r"\x1b\[")


def _sample_paths() -> list:
    """Every sample job, and the first run of each folder of separate runs."""
    paths = [p for p in sorted(SAMPLES.iterdir()) if p.is_dir() or p.name.endswith(".json.gz")]
    return [sorted(p.rglob("*.json.gz"))[0] if p.name in SAMPLE_COLLECTIONS else p for p in paths]


@pytest.fixture(scope="module")
def reports() -> dict:
    """The report of every sample trace, built once."""
    return {p.name: ta.load(p).build_report() for p in _sample_paths()}


@pytest.fixture(scope="module")
def unfused() -> ta.Trace:
    return ta.load(SAMPLES / "unfused_ops.json.gz")


@pytest.mark.parametrize("width", [80, 100, 120])
def test_every_sample_report_fits_the_width(reports, width):
    assert len(reports) >= 10
    for name, report in reports.items():
        out = text.render(report, Display(width=width))
        widest = max(out.splitlines(), key=len)
        assert len(widest) <= width, f"{name} at {width}: {widest!r}"
        assert "Findings" in out and "What was analysed" in out, name
        assert not ANSI.search(out)


def test_piped_report_is_100_columns_plain_and_compact(capsys, monkeypatch):
    monkeypatch.setenv("NO_COLOR", "")
    assert cli.main([str(SAMPLES / "unfused_ops.json.gz")]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= 100
    assert not ANSI.search(out)
    assert out.index("What was analysed") < out.index("Findings") < out.index("Hotspots")
    assert "more rows (--full shows every row)" in out
    assert cli.main([str(SAMPLES / "unfused_ops.json.gz"), "--full"]) == 0
    full = capsys.readouterr().out
    assert "more rows" not in full and len(full.splitlines()) > len(lines)


def test_colour_and_severity_marks_only_on_a_terminal(reports, monkeypatch):
    report = reports["unfused_ops.json.gz"]
    coloured = text.render(report, Display(color=True))
    assert ANSI.search(coloured) and "▲" in coloured  # the high finding's mark
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    args = Namespace(output=None, width=None, wide=False, full=False)
    monkeypatch.delenv("NO_COLOR", raising=False)
    assert cli.display(args).color
    monkeypatch.setenv("NO_COLOR", "1")
    assert not cli.display(args).color
    assert not cli.display(Namespace(output="x.txt", width=None, wide=False, full=False)).color


def test_long_names_are_cut_in_the_middle_and_stay_distinct(unfused):
    names = [str(n) for n in unfused.hotspots("kernel", top=40)["name"]]
    assert max(map(len, names)) > 100  # templated kernels
    for limit in (20, 40, 70):
        cut = document.shorten_columns([[n] for n in names], [limit])
        shown = [row[0] for row in cut]
        assert len(set(shown)) == len(set(names))
        assert any("…" in s for s in shown)
        for short, full in zip(shown, names, strict=True):
            if "…" in short:
                head, tail = short.split("…")[0], short.split("…")[-1]
                assert full.startswith(head) and full.endswith(tail)


def test_wide_shows_full_names_and_default_does_not(capsys, unfused):
    longest = max((str(n) for n in unfused.hotspots("kernel", top=15)["name"]), key=len)
    path = str(SAMPLES / "unfused_ops.json.gz")
    assert cli.main([path, "--width", "2000", "--wide"]) == 0
    assert longest in capsys.readouterr().out
    assert cli.main([path]) == 0
    assert longest not in capsys.readouterr().out


def test_version_top_and_choices(capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["--version"])
    assert exit_.value.code == 0 and ta.__version__ in capsys.readouterr().out
    for top in ("0", "-3"):
        with pytest.raises(SystemExit) as exit_:
            cli.main([str(SAMPLES / "unfused_ops.json.gz"), "--top", top])
        assert exit_.value.code == 2
        assert "--top: must be at least 1" in capsys.readouterr().err
    command = [str(Path(sys.executable).parent / "traceanalyze"), "--help"]  # this interpreter's, not PATH's
    helps = {subprocess.run(command, capture_output=True, text=True, check=True).stdout for _ in range(2)}
    (help_text,) = helps  # the same on every run: choices in a fixed order
    assert "{communication,kernel,memcpy,memset,sync}" in help_text
    assert "{text,json,markdown,html,digest}" in help_text


def test_compare_text_fits_and_names_stay_on_one_line(capsys):
    base, cand = str(SAMPLES / "unfused_ops.json.gz"), str(SAMPLES / "fused_ops.json.gz")
    assert cli.main(["compare", base, cand]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert max(len(line) for line in lines) <= 100
    start = lines.index("Device kernels")
    rule = next(i for i in range(start, len(lines)) if lines[i].lstrip().startswith("──"))
    status = re.compile(r"  (gone|new|faster|slower|same) ")
    rows = list(itertools.takewhile(lambda row: status.search(row), lines[rule + 1 :]))
    after = lines[rule + 1 + len(rows)]
    assert len(rows) == 15 and (not after.strip() or "baseline" in after)  # no name folded onto a second line


_BEFORE_CUT = (
    "saving_before_step_budget_ns_per_step",
    "saving_before_overlap_ns_per_step",
    "saving_before_critical_path_ns_per_step",
)
HOST_BOUND_FIRST = "the step turns host-bound first"
"""The cut of a device-time saving no other device-time finding shares: nothing to name."""


@pytest.fixture(scope="module")
def fsdp():
    return ta.load(SAMPLES / "fsdp")


@pytest.fixture(scope="module")
def fsdp_report(fsdp):
    return fsdp.build_report()


def test_a_cut_saving_says_why_in_every_presenter(fsdp_report):
    """On the FSDP sample the late rank's finding claims rank 0's idle: each finding whose saving was cut names the
    findings that took it by place, in the JSON, the text, the markdown, the HTML and the notebook views alike."""
    findings = fsdp_report.findings
    cut = [f for f in findings if f.cut]
    assert cut, [f.title for f in findings]
    for f in cut:
        taken = [findings[int(n) - 1] for n in re.findall(r"#(\d+)", f.cut)]
        assert (taken or f.cut == HOST_BOUND_FIRST) and all(t.pushed and t.saving_ns > 0 for t in taken)
        if f.cut.startswith("counted under"):
            assert f.covered_by == taken[0].title and f.saving_ns == 0
        else:
            assert max(f.evidence.get(k, 0) for k in _BEFORE_CUT) > f.saving_ns
    first = cut[0]
    shown = {
        "json": json.loads(renderers.render(fsdp_report, "json"))["findings"][findings.index(first)]["cut"],
        "text": text.render(fsdp_report, Display(width=400)),
        "markdown": markdown.render(fsdp_report),
        "html": html_renderer.render(fsdp_report).replace("&#x27;", "'"),
        "notebook": repr(first) + ta.findings_table(findings).to_string(),
    }
    assert all(first.cut in page for page in shown.values()), [k for k, v in shown.items() if first.cut not in v]


def test_every_finding_is_a_share_of_the_median_step_the_summary_shows(fsdp_report):
    summary = {f.id: f.value for f in fsdp_report.section("summary").facts}
    whole_job = [f for f in fsdp_report.findings if "rank" not in f.where]
    assert whole_job and all(f.step_ns == int(summary["step_ns"]) for f in whole_job)


def test_tables_align_by_their_declared_units_in_text_markdown_and_html():
    """A text column whose names look like numbers stays text, a declared time column is a number: the text report
    aligns the one left and the other right, Markdown marks the time column right-aligned, HTML classes it ``num``."""
    frame = pd.DataFrame({"shape": ["8", "1024"], "total_ns": [1_500_000, 20_000], "note": ["12 ms", "3"]})
    table = Table("shapes", "Shapes", frame, units={"note": Unit.TEXT})
    section = Section("toy", "Toy", tables=[table])
    blocks = document.section_blocks(section, 0)
    assert blocks[-1].numeric == [False, True, False]
    lines = text.render_blocks(blocks, Display(width=100)).splitlines()
    first, second = (next(line for line in lines if line.lstrip().startswith(s + " ")) for s in ("8", "1024"))
    assert first.index("8") == second.index("1024")  # names left-aligned
    assert first.index("ms") == second.index("µs")  # times right-aligned, unit under unit
    assert "|---|---:|---|" in markdown.render_blocks(blocks)
    cells = re.findall(r'<td class="(\w+)"', html_renderer._section(section, 0))
    assert cells == ["name", "num", "name"] * 2


def test_every_presenter_words_a_finding_with_finding_worth(fsdp, fsdp_report):
    """``Finding.worth`` is the one wording of what a finding is worth: the text, Markdown, HTML, notebook, digest,
    Perfetto and dashboard presenters show its words for every finding (covered, not estimated or estimated)."""
    absent = "the dashboard extra (dash) is absent"
    overview = pytest.importorskip("traceanalyzer.dashboards.pages.overview", reason=absent)
    findings = fsdp_report.findings
    kinds = {"covered" if f.covered_by else f.basis for f in findings}
    assert {"covered", Basis.NONE} <= kinds and len(kinds) > 2, kinds
    pages = {
        "text": text.render(fsdp_report, Display(width=400)),
        "markdown": markdown.render(fsdp_report),
        "html": html_renderer.render(fsdp_report).replace("&#x27;", "'"),
    }
    slices = perfetto.finding_slices(fsdp.annotated(), 0)
    perfetto_worth = {s["args"]["finding"]: s["args"]["worth"] for s, _ in slices}
    for number, f in enumerate(findings, 1):
        worth = f.worth()
        assert all(worth in page for page in pages.values()), (worth, [k for k, v in pages.items() if worth not in v])
        assert html_lib.escape(worth) in notebook.finding_html(f) and f.worth(model=False) in repr(f)
        assert f.worth(model=False) in "\n".join(digest.finding_digest(number, f))
        assert perfetto_worth[f.id] in {g.worth() for g in findings if g.id == f.id}
        if f.covered_by or f.basis is Basis.NONE:
            assert worth in [str(getattr(c, "children", c)) for c in overview._finding_cells(f)]
