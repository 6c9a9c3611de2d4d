"""The trace cache on real traces: a reopened trace is the same tables as a fresh parse, in the user's cache folder
only; a changed source, a truncated or corrupt entry is found out and rebuilt; --no-cache, the size cap and
`traceanalyze cache info|clear`."""

from __future__ import annotations

import dataclasses
import gzip
import os
import shutil
import struct

import pandas.testing as pdt
import pytest

import traceanalyzer as ta
from tests.conftest import REPO, shared_path
from traceanalyzer import cache, loading
from traceanalyzer.cli import main

FSDP = REPO / "sample_traces" / "fsdp"
FUSED = REPO / "sample_traces" / "fused_ops.json.gz"
UNFUSED = REPO / "sample_traces" / "unfused_ops.json.gz"


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    """A fresh, empty cache folder for one test, with the cache on by default."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("TRACEANALYZER_CACHE", "1")
    monkeypatch.delenv("TRACEANALYZER_CACHE_SIZE", raising=False)
    return tmp_path / "xdg" / "traceanalyzer"


@pytest.fixture
def builds(monkeypatch):
    """Counts the ranks actually parsed (not read from the cache) in this process."""
    count = {"n": 0}
    build = loading._build

    def counting(unit, rules):
        count["n"] += 1
        return build(unit, rules)

    monkeypatch.setattr(loading, "_build", counting)
    return count


def assert_same(cold: ta.Trace, cached: ta.Trace) -> None:
    """Every column with its dtype (categories and their order, int64 ns), the index, and the whole meta."""
    pdt.assert_frame_equal(cold.events, cached.events, check_exact=True, check_categorical=True)
    pdt.assert_frame_equal(cold.memory_events, cached.memory_events, check_exact=True, check_categorical=True)
    plain = {k: v for k, v in dataclasses.asdict(cold.meta).items() if k != "side_tables"}
    assert plain == {k: v for k, v in dataclasses.asdict(cached.meta).items() if k != "side_tables"}
    assert cold.meta.side_tables.keys() == cached.meta.side_tables.keys()
    for name, table in cold.meta.side_tables.items():
        pdt.assert_frame_equal(table, cached.meta.side_tables[name], check_exact=True)


def _copy(src, tmp_path):
    dst = tmp_path / "user" / src.name
    dst.parent.mkdir(exist_ok=True)
    (shutil.copytree if src.is_dir() else shutil.copy2)(src, dst)
    return dst


@pytest.mark.parametrize(
    "parts",
    [
        ("h200", "gpt_train", "gpt_train.json.gz"),
        ("h200", "memory_peak", "memory_peak.json.gz"),  # memory events
        ("public", "ascend", "msinsight", "pytorch_text", "level1", "rank0_ascend_pt"),  # side tables
        ("public", "ascend", "msinsight", "pytorch_db", "level1", "rank0_ascend_pt"),
    ],
    ids=["kineto", "kineto-memory", "ascend-text", "ascend-db"],
)
def test_reopened_trace_equals_fresh_parse(cache_dir, builds, parts):
    path = shared_path(*parts)
    cold = ta.load(path, cache=False)
    assert not cache_dir.exists(), "cache=False keeps nothing"
    first = ta.load(path)
    assert builds["n"] == 2 and len(cache.entries()) == 1
    again = ta.load(path)
    assert builds["n"] == 2, "the second load came from the cache"
    assert_same(cold, first)
    assert_same(cold, again)


def test_multi_rank_job_is_cached_per_rank(cache_dir, monkeypatch):
    cold = ta.load(FSDP, cache=False)
    ta.load(FSDP)  # ranks parsed in forked workers, each keeps its entry
    assert sorted(e.source for e in cache.entries()) == sorted(str(p) for p in FSDP.glob("*.json.gz"))

    def no_parse(unit, rules):
        raise AssertionError(f"{unit.path} parsed again")

    monkeypatch.setattr(loading, "_build", no_parse)
    cached = ta.load(FSDP)
    assert_same(cold, cached)
    assert cached.meta.ranks == [0, 1]


def test_entry_is_in_the_cache_folder_never_beside_the_trace(cache_dir, tmp_path):
    trace = _copy(FUSED, tmp_path)
    ta.load(trace)
    assert os.listdir(trace.parent) == [trace.name]
    assert [p.suffix for p in cache_dir.iterdir()] == [".tacache"], "no temporary file is left"


def test_changed_file_is_parsed_again(cache_dir, tmp_path):
    trace = _copy(FUSED, tmp_path)
    before = ta.load(trace)
    shutil.copy(UNFUSED, trace)
    after = ta.load(trace)
    assert_same(ta.load(trace, cache=False), after)
    assert len(after.events) != len(before.events)
    assert len(cache.entries()) == 1, "the stale entry is replaced"


def test_same_size_and_mtime_but_other_bytes_is_stale(cache_dir, tmp_path, builds):
    """A copy that kept size and mtime (cp -p of an edited file) is told apart by the hash of its content."""
    trace = _copy(FUSED, tmp_path)
    ta.load(trace)
    stat = trace.stat()
    data = bytearray(trace.read_bytes())
    data[-9] ^= 0xFF  # inside the gzip trailer's CRC: the same size, a different file
    trace.write_bytes(bytes(data))
    os.utime(trace, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    with pytest.raises(ta.TraceError):  # a fresh parse checks the CRC and fails: the stale entry was not used
        ta.load(trace)
    assert builds["n"] == 2


@pytest.mark.parametrize("damage", ["truncate", "flip body byte", "flip header byte", "empty"])
def test_damaged_entry_is_rebuilt(cache_dir, builds, damage):
    cold = ta.load(FUSED, cache=False)
    ta.load(FUSED)
    (entry,) = cache.entries()
    data = bytearray(entry.path.read_bytes())
    if damage == "truncate":
        data = data[: len(data) // 2]
    elif damage == "flip body byte":
        data[len(data) * 3 // 4] ^= 0x55
    elif damage == "flip header byte":
        data[40] ^= 0x01
    else:
        data = bytearray()
    entry.path.write_bytes(bytes(data))
    rebuilt = ta.load(FUSED)
    assert builds["n"] == 3, "the damaged entry was not used"
    (said,) = rebuilt.meta.warnings
    assert said.startswith(f"{entry.path}: the cache entry of {FUSED} could not be read"), said
    rebuilt.meta.warnings = []
    assert_same(cold, rebuilt)
    assert_same(cold, ta.load(FUSED))
    assert builds["n"] == 3, "and was written again, whole"


def test_comm_pattern_has_its_own_entry(cache_dir):
    rules = (ta.Rule("gemm|nvjet"),)
    plain = ta.load(FUSED)
    classified = ta.load(FUSED, rules=rules)
    assert len(cache.entries()) == 2
    assert (ta.load(FUSED, rules=rules).events["kind"] == "communication").sum() > 0
    assert_same(classified, ta.load(FUSED, rules=rules))
    assert_same(plain, ta.load(FUSED))


def test_warnings_of_the_first_load_are_kept_and_name_the_path_given_now(cache_dir, tmp_path, builds):
    """A run folder without trace_view.json warns, naming the folder; from the cache the warning comes back, naming
    the folder as given this time (reached by another path)."""
    source = shared_path("public", "ascend", "msinsight", "pytorch_text", "level1", "rank0_ascend_pt")
    out = tmp_path / "run_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
    out.mkdir(parents=True)
    shutil.copy(source / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv", out)
    first = ta.load(tmp_path / "run_ascend_pt")
    (warning,) = [w for w in first.meta.warnings if "trace_view.json" in w]
    assert warning.startswith(str(out))
    other_name = tmp_path / "run_ascend_pt" / ".." / "run_ascend_pt"
    again = ta.load(other_name)
    assert builds["n"] == 1
    assert again.meta.warnings == ta.load(other_name, cache=False).meta.warnings
    assert again.meta.paths == [str(other_name / "ASCEND_PROFILER_OUTPUT")]


def test_least_recently_used_entries_are_evicted_beyond_the_cap(cache_dir, monkeypatch):
    stalls = REPO / "sample_traces" / "sync_stalls.json.gz"
    for path in (FUSED, UNFUSED, stalls):
        ta.load(path)
    size = {e.source: e.size for e in cache.entries()}
    cache.clear()
    monkeypatch.setenv("TRACEANALYZER_CACHE_SIZE", str(sum(size.values()) - 1))  # two fit, three do not
    ta.load(FUSED)
    ta.load(UNFUSED)
    now = {e.source: e for e in cache.entries()}
    for age, path in ((200, FUSED), (100, UNFUSED)):  # FUSED used longest ago ...
        used = now[str(path)].used_ns - age * 10**9
        os.utime(now[str(path)].path, ns=(used, used))
    ta.load(FUSED)  # ... until it is used again, from the cache: now UNFUSED is the least recently used
    ta.load(stalls)
    assert sorted(e.source for e in cache.entries()) == sorted([str(FUSED), str(stalls)])


def test_entry_larger_than_the_cap_is_not_kept(cache_dir, monkeypatch):
    monkeypatch.setenv("TRACEANALYZER_CACHE_SIZE", "10k")
    assert cache.size_limit() == 10 * 1024
    ta.load(FUSED)
    assert cache.entries() == []


def _cli(capsys, *args):
    code = main([str(a) for a in args])
    return code, capsys.readouterr().out


def test_cli_no_cache_keeps_nothing_and_cache_info_and_clear(cache_dir, capsys):
    assert _cli(capsys, FUSED, "--no-cache")[0] == 0
    assert cache.entries() == []
    assert _cli(capsys, FUSED)[0] == 0
    code, info = _cli(capsys, "cache", "info")
    assert code == 0 and str(cache_dir) in info and str(FUSED) in info and "entries: 1," in info
    code, cleared = _cli(capsys, "cache", "clear")
    assert code == 0 and "removed 1 entries" in cleared
    assert "entries: 0," in _cli(capsys, "cache", "info")[1]


def test_environment_turns_the_cache_off(cache_dir, monkeypatch):
    monkeypatch.setenv("TRACEANALYZER_CACHE", "0")
    ta.load(FUSED)
    assert cache.entries() == []
    ta.load(FUSED, cache=True)
    assert len(cache.entries()) == 1


def test_ascend_database_given_alone_is_judged_by_the_files_beside_it_only(cache_dir, tmp_path, builds):
    """A .db given on its own may sit in any folder: its entry depends on the files beside it, not on subfolders."""
    source = shared_path("public", "ascend", "msinsight", "pytorch_db", "level1", "rank0_ascend_pt")
    db = source / "ASCEND_PROFILER_OUTPUT" / "ascend_pytorch_profiler_0.db"
    folder = tmp_path / "downloads"
    (folder / "other").mkdir(parents=True)
    shutil.copy(db, folder)
    ta.load(folder / db.name)
    (folder / "other" / "notes.txt").write_text("unrelated")
    ta.load(folder / db.name)
    assert builds["n"] == 1, "a subfolder's file does not make the entry stale"
    (folder / "beside.txt").write_text("beside")
    ta.load(folder / db.name)
    assert builds["n"] == 2, "a file beside it does"


def test_an_edit_in_the_middle_with_size_and_mtime_kept_is_parsed_again(cache_dir, tmp_path):
    """rsync -t / cp -p of a trace edited in the middle: the whole content is hashed, so the old tables are not
    served."""
    trace = tmp_path / "trace.json"
    raw = gzip.decompress(FUSED.read_bytes())
    trace.write_bytes(raw)
    ta.load(trace)
    kernel = raw.index(b'"cat": "kernel"', len(raw) // 2)
    at = raw.index(b'"name": "', kernel) + len(b'"name": "')
    stat = trace.stat()
    trace.write_bytes(raw[:at] + b"QQQQ" + raw[at + 4 :])
    os.utime(trace, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert trace.stat().st_size == stat.st_size
    assert any(str(n).startswith("QQQQ") for n in ta.load(trace).events["name"].cat.categories)


UNREADABLE = {
    "a header length beyond the file": lambda p: p.write_bytes(p.read_bytes()[:8] + struct.pack("<Q", 1 << 62)),
    "a FIFO": lambda p: p.unlink() or os.mkfifo(p),
    "a folder": lambda p: p.unlink() or p.mkdir(),
}


@pytest.mark.parametrize("damage", UNREADABLE.values(), ids=UNREADABLE.keys())
def test_an_unreadable_entry_is_removed_with_a_warning_and_cache_clear_works(cache_dir, capsys, damage):
    assert _cli(capsys, FUSED)[0] == 0
    (entry,) = cache.entries()
    damage(entry.path)
    assert _cli(capsys, "cache", "info")[0] == 0
    assert main([str(FUSED), "--format", "json", "-o", os.devnull]) == 0
    err = capsys.readouterr().err
    assert f"{entry.path}: the cache entry of {FUSED} could not be read" in err, err
    assert _cli(capsys, "cache", "clear")[0] == 0
    assert cache.entries() == []


@pytest.mark.parametrize("where", ["a file", "relative"])
def test_a_cache_folder_that_cannot_be_used_means_no_cache_with_one_warning(tmp_path, monkeypatch, capsys, where):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TRACEANALYZER_CACHE", "1")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    if where == "a file":
        (tmp_path / "xdg").write_text("not a folder")
        monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    else:
        monkeypatch.setenv("XDG_CACHE_HOME", "relative-cache")
    assert main([str(FUSED), "--format", "json", "-o", "r.json"]) == 0
    warned = [line for line in capsys.readouterr().err.splitlines() if "cache folder" in line]
    if where == "a file":
        assert len(warned) == 1 and "parsed without it" in warned[0], warned
    else:
        assert warned == [] and not (tmp_path / "relative-cache").exists()
        assert cache.folder() == tmp_path / "home" / ".cache" / "traceanalyzer"
        assert len(cache.entries()) == 1


def _bytes_read() -> int:
    """Bytes this process has read through read system calls so far (Linux's /proc/self/io rchar)."""
    with open("/proc/self/io") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("rchar:"))


@pytest.mark.skipif(not os.path.exists("/proc/self/io"), reason="needs Linux's /proc/self/io to count bytes read")
@pytest.mark.parametrize("stored", ["plain", "gzip"])
def test_a_cold_cached_load_reads_the_trace_once(cache_dir, builds, tmp_path, stored):
    """The cache key's content hash is taken while the parser reads the file (a gzip file's compressed bytes): a
    cold load with the cache on reads the trace once, not once more per hash, and its entry serves the next load."""
    data = gzip.decompress((REPO / "sample_traces" / "inference" / "batched.json.gz").read_bytes())
    path = tmp_path / ("trace.json" if stored == "plain" else "trace.json.gz")
    path.write_bytes(data if stored == "plain" else gzip.compress(data, mtime=0))
    loading._code()  # the digest of the code, once per process: not the trace's reading
    before = _bytes_read()
    cold = ta.load(path)
    read = _bytes_read() - before
    size = path.stat().st_size
    assert size <= read < 1.5 * size + (1 << 20), f"{read:,} bytes read for a {size:,}-byte trace"
    assert_same(cold, ta.load(path))
    assert builds["n"] == 1, "the second load is served by the entry written while the first read"
