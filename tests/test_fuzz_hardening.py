"""Fuzz families of the writers, the cache and the inputs that size the work: export and -o onto, into and beside
inputs, damaged cache entries, a trace edited in place under its cache entry, hostile memory-snapshot pickles,
special files, and extreme values in a trace.

Every case runs the command line in a child process (so a crash is seen as one) and checks the promises: exit 0
or a one-line refusal (exit 2), never a traceback; the input tree byte-identical afterwards; peak memory within
10x the input + 500 MB. CI runs a fixed small slice (``derandomize``); ``TRACEANALYZER_FUZZ_CASES=N`` runs N
cases per family (the long run).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import pickle
import shutil
import socket
import struct
import subprocess
import sys
from pathlib import Path

from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

from tests.conftest import REPO

SAMPLE = REPO / "sample_traces" / "sync_stalls.json.gz"
SNAPSHOT = REPO / "sample_traces" / "memory_snapshot" / "oom.snapshot.pickle"
CASES = int(os.environ.get("TRACEANALYZER_FUZZ_CASES", "1"))
MEMORY_BOUND = 500 << 20
TIMEOUT_S = 120
FUZZ = settings(
    max_examples=CASES,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],  # no shrinking: each case is a child process
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
_RUN = (
    "import resource, sys\n"
    "from traceanalyzer.cli import main\n"
    "try:\n"
    "    code = main(sys.argv[1:])\n"
    "except SystemExit as e:\n"
    "    code = e.code\n"
    # ru_maxrss survives execve, so a child of a big test worker would report the worker's peak: VmHWM is this
    # process image's own (Linux); its children's peak as ru_maxrss
    "own = [int(l.split()[1]) for l in open('/proc/self/status') if l.startswith('VmHWM:')]\n"
    "own = own or [resource.getrusage(resource.RUSAGE_SELF).ru_maxrss]\n"
    "peak = max(own[0], resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
    "sys.stderr.write(f'\\nPEAK_KB {peak}\\n')\n"
    "sys.exit(code)\n"
)


def digest(root: Path) -> dict[str, str]:
    """Every entry under root (links not followed): a file's SHA-256, 'dir', or a link's target."""
    out = {}
    for entry in sorted(root.rglob("*")):
        key = str(entry.relative_to(root))
        if entry.is_symlink():
            out[key] = "-> " + os.readlink(entry)
        elif entry.is_file():
            out[key] = hashlib.sha256(entry.read_bytes()).hexdigest()
        else:
            out[key] = "dir" if entry.is_dir() else "special"
    return out


def cli(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> tuple[int, list[str], int]:
    """The command line in a child process: its exit code, its stderr lines (without the peak) and peak RSS."""
    run = subprocess.run(
        [sys.executable, "-c", _RUN, *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        errors="backslashreplace",
        timeout=TIMEOUT_S,
        env={**os.environ, "TRACEANALYZER_CACHE": "0", **(env or {})},
    )
    lines = [line for line in run.stderr.splitlines() if line.strip()]
    peaks = [int(line.split()[1]) for line in lines if line.startswith("PEAK_KB ")]
    return run.returncode, [line for line in lines if not line.startswith("PEAK_KB ")], (peaks or [0])[0] << 10


def check(code: int, err: list[str], peak: int, input_bytes: int) -> None:
    """The promises every case keeps: exit 0 or a one-line refusal; no traceback; the memory bound."""
    assert code in (0, 2), (code, err[-5:])
    assert not any("Traceback" in line for line in err), err[-10:]
    if code == 2:
        assert len([line for line in err if ": error:" in line]) == 1, err
    assert peak <= 10 * input_bytes + MEMORY_BOUND, f"peak {peak >> 20} MiB for {input_bytes} input bytes"


OUTPUTS = ("fresh", "symlink", "hardlink", "dotdot", "inside", "beside", "existing", "existing-forced", "folder")


def _output(box: Path, kind: str) -> tuple[str, list[str]]:
    """An -o path of the kind asked (made where it needs a file), and the extra options it needs."""
    if kind == "symlink":
        os.symlink("in/trace.json.gz", box / "link.json.gz")
        return "link.json.gz", ["--force"]
    if kind == "hardlink":
        os.link(box / "in" / "trace.json.gz", box / "hard.json.gz")
        return "hard.json.gz", ["--force"]
    if kind == "dotdot":
        return "a/../in/trace.json.gz", ["--force"]
    if kind == "inside":
        return "in/out.json", []
    if kind == "beside":
        return "in", []
    if kind.startswith("existing"):
        (box / "a" / "old.json").write_text("mine")
        return "a/old.json", ["--force"] if kind.endswith("forced") else []
    if kind == "folder":
        return "a", []
    return "a/out.json", []


@FUZZ
@given(
    command=st.sampled_from(["perfetto", "csv", "parquet", "report-json", "report-html"]),
    kind=st.sampled_from(OUTPUTS),
)
def test_fuzz_outputs_never_touch_an_input(tmp_path_factory, command, kind):
    box = tmp_path_factory.mktemp("out")
    (box / "in").mkdir()
    (box / "a").mkdir()
    shutil.copy(SAMPLE, box / "in" / "trace.json.gz")
    out, extra = _output(box, kind)
    before = digest(box / "in")
    given = "in" if kind == "inside" else "in/trace.json.gz"  # a file inside an input folder
    if command.startswith("report"):
        args = [given, "--format", command.split("-")[1], "-o", out, *extra]
    else:
        args = ["export", given, "--to", command, "-o", out, *extra]
    code, err, peak = cli(args, box)
    check(code, err, peak, SAMPLE.stat().st_size)
    assert digest(box / "in") == before, (kind, command)
    if kind in ("symlink", "hardlink", "dotdot", "inside", "beside") or kind == "existing":
        assert code == 2, (kind, command, err)
    if kind == "existing" and code == 2:
        assert (box / "a" / "old.json").read_text() == "mine"


CACHE_DAMAGE = ("truncate", "flip", "huge-header", "fifo", "folder", "empty", "garbage")


def _damage(entry: Path, how: str, data: bytes) -> None:
    if how in ("fifo", "folder"):
        entry.unlink()
        os.mkfifo(entry) if how == "fifo" else entry.mkdir()
        return
    changed = {
        "truncate": data[: len(data) // 3],
        "flip": data[:64] + bytes([data[64] ^ 0xFF]) + data[65:],
        "huge-header": data[:8] + struct.pack("<Q", 1 << 62) + data[16:],
        "empty": b"",
        "garbage": os.urandom(len(data) // 2),
    }[how]
    entry.write_bytes(changed)


@FUZZ
@given(how=st.sampled_from(CACHE_DAMAGE))
def test_fuzz_a_damaged_cache_entry_is_rebuilt_with_a_warning(tmp_path_factory, how):
    box = tmp_path_factory.mktemp("cache")
    shutil.copy(SAMPLE, box / "trace.json.gz")
    env = {"TRACEANALYZER_CACHE": "1", "XDG_CACHE_HOME": str(box / "xdg"), "TRACEANALYZER_CACHE_DIR": ""}
    code, err, _ = cli(["trace.json.gz", "--format", "json", "-o", "first.json"], box, env)
    assert code == 0, err
    (entry,) = (box / "xdg" / "traceanalyzer").glob("*.tacache")
    _damage(entry, how, entry.read_bytes())
    before = digest(box)
    before.pop("xdg/traceanalyzer/" + entry.name, None)
    code, err, peak = cli(["trace.json.gz", "--format", "json", "-o", "second.json"], box, env)
    check(code, err, peak, SAMPLE.stat().st_size)
    assert code == 0 and any("could not be read" in line for line in err), (how, err)
    for action in ("info", "clear"):
        assert cli(["cache", action], box, env)[0] == 0
    assert hashlib.sha256((box / "trace.json.gz").read_bytes()).hexdigest() == before["trace.json.gz"]


def _edited(value: object, step: int) -> object:
    """A number with the last digit of its JSON changed, ``step`` on or the next that JSON writes back with the same
    text (not a float's trailing 0): the file keeps its length."""
    text = json.dumps(value)
    edits = [text[:-1] + str((int(text[-1]) + k) % 10) for k in [*range(step, 10), *range(1, step)]]
    return json.loads(next(e for e in edits if json.dumps(json.loads(e)) == e))


@FUZZ
@given(which=st.floats(0, 1), step=st.integers(1, 9))
def test_fuzz_a_trace_edited_in_place_is_never_served_from_the_cache(tmp_path_factory, which, step):
    """A kernel's duration changed in place, the file's size and mtime kept (``cp -p``, ``rsync -t``): the cached
    run reports the edited trace, exactly as a run without the cache does."""
    box = tmp_path_factory.mktemp("edited")
    doc = json.loads(gzip.decompress(SAMPLE.read_bytes()))
    path = box / "trace.json"
    path.write_text(json.dumps(doc))
    env = {"TRACEANALYZER_CACHE": "1", "XDG_CACHE_HOME": str(box / "xdg"), "TRACEANALYZER_CACHE_DIR": ""}
    assert cli(["trace.json", "--format", "json", "-o", "first.json"], box, env)[0] == 0
    kernels = [e for e in doc["traceEvents"] if isinstance(e, dict) and e.get("cat") == "kernel" and "dur" in e]
    kernel = kernels[int(which * (len(kernels) - 1))]
    kernel["dur"] = _edited(kernel["dur"], step)
    info = path.stat()
    path.write_text(json.dumps(doc))
    os.utime(path, ns=(info.st_atime_ns, info.st_mtime_ns))
    assert path.stat().st_size == info.st_size and path.stat().st_mtime_ns == info.st_mtime_ns
    code, err, peak = cli(["trace.json", "--format", "json", "-o", "second.json"], box, env)
    check(code, err, peak, info.st_size)
    fresh = cli(["trace.json", "--format", "json", "-o", "fresh.json", "--no-cache"], box, env)
    assert code == 0 and fresh[0] == 0, (err, fresh[1])
    first, second, uncached = (json.loads((box / f"{n}.json").read_text()) for n in ("first", "second", "fresh"))
    device_ns = [
        [f["value"] for f in r["sections"]["ledger"]["facts"] if f["id"] == "device_ns"] for r in (first, second)
    ]
    assert device_ns[0] != device_ns[1], "the edit is seen"
    assert second == uncached


def _nested(depth: int, kind: str) -> bytes:
    """A pickle whose tuples nest ``depth`` deep, as a dict key, in a frozenset or as a value."""
    chain = b")" + b"\x85" * depth
    return {
        "key": b"\x80\x04}" + chain + b"K\x01s.",
        "frozenset": b"\x80\x04(" + chain + b"\x91.",
        "value": b"\x80\x04}\x8c\x08segments" + chain + b"s.",
    }[kind]


@FUZZ
@given(
    family=st.sampled_from(["nested", "memo", "shared", "mutated", "negative"]),
    depth=st.integers(min_value=1, max_value=1_000_000),
    kind=st.sampled_from(["key", "frozenset", "value"]),
    index=st.integers(min_value=0, max_value=(1 << 32) - 1),
    repeat=st.integers(min_value=1, max_value=3000),
    flips=st.lists(st.tuples(st.floats(0, 1), st.integers(0, 255)), min_size=1, max_size=20),
)
def test_fuzz_hostile_snapshots_are_refused_or_read(tmp_path_factory, family, depth, kind, index, repeat, flips):
    box = tmp_path_factory.mktemp("snap")
    if family == "nested":
        data = _nested(depth, kind)
    elif family == "memo":
        data = b"\x80\x04K\x01r" + struct.pack("<I", index) + b"."
    elif family == "shared":
        entry = {"action": "alloc", "addr": 1, "size": 512, "time_us": 1}
        data = pickle.dumps({"segments": [], "device_traces": [[entry] * repeat] * repeat}, protocol=4)
    elif family == "negative":
        doc = pickle.loads(SNAPSHOT.read_bytes())
        for s in doc["segments"]:
            s["total_size"], s["device"] = -s["total_size"], index
        data = pickle.dumps(doc, protocol=4)
    else:
        raw = bytearray(SNAPSHOT.read_bytes())
        for where, value in flips:
            raw[int(where * (len(raw) - 1))] = value
        data = bytes(raw)
    path = box / "fuzz.pickle"
    path.write_bytes(data)
    before = digest(box)
    code, err, peak = cli([str(path)], box)
    check(code, err, peak, len(data))
    assert digest(box) == before


SPECIAL = ("fifo-file", "fifo-in-folder", "zero-link", "socket-in-folder", "zero-info")


@FUZZ
@given(kind=st.sampled_from(SPECIAL))
def test_fuzz_special_files_are_refused_up_front(tmp_path_factory, kind):
    box = tmp_path_factory.mktemp("special")
    job = box / "job"
    job.mkdir()
    shutil.copy(SAMPLE, job / "rank0.json.gz")
    target = job
    if kind == "fifo-file":
        os.mkfifo(box / "trace.json")
        target = box / "trace.json"
    elif kind == "fifo-in-folder":
        os.mkfifo(job / "rank1.json")
    elif kind == "zero-link":
        os.symlink("/dev/zero", box / "zero.json")
        target = box / "zero.json"
    elif kind == "socket-in-folder":
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(job / "rank1.json"))
        sock.close()
    else:
        run = job / "rank0_ascend_pt"
        (run / "ASCEND_PROFILER_OUTPUT").mkdir(parents=True)
        os.symlink("/dev/zero", run / "profiler_info_0.json")
        (run / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv").write_text("Name,Type\n")
        target = run
    before = digest(box)
    code, err, peak = cli([str(target)], box)
    check(code, err, peak, SAMPLE.stat().st_size)
    assert code == 2 and any("not a regular file" in line for line in err), (kind, err)
    assert digest(box) == before


def _extreme(doc: dict, field: str, value: int) -> dict:
    events = doc["traceEvents"]
    if field == "world_size":
        doc["distributedInfo"] = {"rank": 0, "world_size": value}
    elif field == "rank":
        doc["distributedInfo"] = {"rank": value, "world_size": 2}
    elif field == "Input Dims":
        shaped = [e for e in events if isinstance(e, dict) and (e.get("args") or {}).get(field)]
        for e in shaped[::7]:
            dims = e["args"][field]
            dims[0] = [value, *dims[0][1:]] if isinstance(dims[0], list) and dims[0] else [value]
    else:
        for i, e in enumerate(events):
            if i % 7 == 0 and isinstance(e, dict) and (field in e or field in e.get("args", {})):
                (e if field in e else e["args"])[field] = value
    return doc


@FUZZ
@example(field="dur", value=10**9)  # the long run's broken promise: busy share 3.0 (busy not clipped to the step)
@given(
    field=st.sampled_from(
        ["ts", "dur", "world_size", "rank", "device", "Bytes", "Total Allocated", "In msg nelems", "Input Dims"]
    ),
    value=st.one_of(
        st.sampled_from([-1, -(1 << 63), (1 << 63) - 1, 1 << 64, 10**9, 10**18, 0]),
        st.integers(min_value=-(1 << 70), max_value=1 << 70),
    ),
)
def test_fuzz_extreme_values_stay_bounded_and_shares_in_range(tmp_path_factory, field, value):
    box = tmp_path_factory.mktemp("values")
    doc = _extreme(json.loads(gzip.decompress(SAMPLE.read_bytes())), field, value)
    path = box / "trace.json"
    path.write_text(json.dumps(doc))
    before = digest(box)
    code, err, peak = cli([str(path), "--format", "json", "-o", str(box / "r.json")], box)
    check(code, err, peak, path.stat().st_size)
    before["r.json"] = digest(box).get("r.json", "")
    assert digest(box) == before
    if code == 0:
        report = json.loads((box / "r.json").read_text())
        assert not _shares_out_of_range(report), (field, value, _shares_out_of_range(report)[:5])
        for section in report["sections"].values():
            for table in section["tables"]:
                assert not _negative_counts(table), (field, value, section["id"], table["id"], _negative_counts(table))


def _shares_out_of_range(report: dict) -> list[tuple[str, str, float]]:
    """Every share in a JSON report (a fact's value or a table cell whose unit is share) outside [0, 1]: its
    section, fact or column, and value."""
    shares = []
    for section in report["sections"].values():
        shares += [(section["id"], f["id"], f["value"]) for f in section["facts"] if f.get("unit") == "share"]
        for table in section["tables"]:
            columns = [c["name"] for c in table["columns"] if c["unit"] == "share"]
            shares += [(section["id"], f"{table['id']}.{c}", row.get(c)) for row in table["rows"] for c in columns]
    return [s for s in shares if isinstance(s[2], int | float) and not -1e-9 <= s[2] <= 1 + 1e-9]


def _negative_counts(table: dict) -> list[tuple[str, float]]:
    """The cells of a report table's counts and byte sizes (GEMM dims and FLOPs, message sizes) that are negative."""
    counts = [c["name"] for c in table["columns"] if c["unit"] in ("bytes", "number")]
    return [(c, row[c]) for row in table["rows"] for c in counts if isinstance(row.get(c), int | float) and row[c] < 0]
