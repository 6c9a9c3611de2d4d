"""Large inputs made from real traces, for the scale benchmarks (issue #14). Writes under /tmp only.

    python3 bench/gen_large.py single ../shared/traces/h200/big/big.json.gz --size 1G /tmp/ta_large/big_1g.json
    python3 bench/gen_large.py ranks ../shared/traces/h200/ddp_overlap --ranks 64 /tmp/ta_large/ddp_64

``single``: one rank's trace replicated end to end until the JSON reaches --size: copy k is shifted by k times the
trace's span (plus a gap) and gets fresh ids (External id, correlation, flow ids, Python ids, Ev Idx, Sequence
number, all offset by their largest value) and step numbers (ProfilerStep#N continues), so it links and splits
into steps as a longer recording of the same job would. Metadata events appear once.

``ranks``: a job of --ranks ranks made from a real job's per-rank traces (rank r is a copy of source rank r mod n,
with distributedInfo rank/world_size and the default process group's ranks rewritten), each rank's clock shifted by
a seeded random offset of up to --jitter-us, so the waits between ranks that the source recorded (its stragglers)
stay as they were and the clock alignment has real offsets to find. Written gzip-compressed (--plain: JSON).
"""

from __future__ import annotations

import argparse
import gzip
import random
import re
import shutil
import sys
from pathlib import Path

import orjson

ID_ARGS = ("External id", "correlation", "Python id", "Python parent id", "Ev Idx", "Sequence number")
"""Integer args that identify or link events within one rank's trace."""
STEP = re.compile(r"^ProfilerStep#(\d+)$")
GAP_US = 1000.0
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}


def read(path: Path) -> dict:
    """A trace document (gzip or plain JSON)."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as f:
        return orjson.loads(f.read())


def strides(events: list[dict]) -> tuple[dict[str, int], int, int]:
    """How far each copy moves: the largest value of each id, the largest flow id, and the step-number span."""
    top = dict.fromkeys(ID_ARGS, 0)
    flow = 0
    steps = [int(m.group(1)) for e in events if (m := STEP.match(e.get("name", "")))]
    for e in events:
        args = e.get("args")
        if args:
            for k in ID_ARGS:
                v = args.get(k)
                if type(v) is int and v > top[k]:
                    top[k] = v
        v = e.get("id")
        if type(v) is int and v > flow:
            flow = v
    span = max(steps) - min(steps) + 1 if steps else 0
    return {k: v + 1 for k, v in top.items()}, flow + 1, span


def span_us(events: list[dict]) -> float:
    """From the first event's start to the last one's end, in µs."""
    timed = [e for e in events if e.get("ph") != "M" and "ts" in e]
    return max(e["ts"] + e.get("dur", 0) for e in timed) - min(e["ts"] for e in timed)


def advance(events: list[dict], shift_us: float, ids: dict[str, int], flow: int, steps: int) -> None:
    """Move every event to the next copy in place: later by shift_us, ids and step numbers past the last copy's."""
    for e in events:
        if "ts" in e:
            e["ts"] += shift_us
        args = e.get("args")
        if args:
            for k, stride in ids.items():
                v = args.get(k)
                if type(v) is int and v > 0:
                    args[k] = v + stride
        v = e.get("id")
        if type(v) is int and v > 0:
            e["id"] = v + flow
        if steps and (m := STEP.match(e.get("name", ""))):
            e["name"] = f"ProfilerStep#{int(m.group(1)) + steps}"


def write_document(out, header: dict, chunks) -> None:
    """Write ``{header..., "traceEvents": [chunk, chunk, ...]}``; each chunk is a serialized list of events."""
    head = orjson.dumps(header)
    out.write(head[:-1] + (b',"traceEvents":[' if len(header) else b'"traceEvents":['))
    first = True
    for chunk in chunks:
        body = chunk[1:-1]
        if body:
            out.write(body if first else b"," + body)
            first = False
    out.write(b"]}")


def single(source: Path, size: int, out_path: Path) -> None:
    """Replicate one rank's trace until its JSON holds at least ``size`` bytes."""
    doc = read(source)
    events = doc.pop("traceEvents")
    meta = [e for e in events if e.get("ph") == "M"]
    timed = [e for e in events if e.get("ph") != "M"]
    ids, flow, steps = strides(timed)
    shift = span_us(timed) + GAP_US
    written = 0

    def copies():
        nonlocal written
        yield orjson.dumps(meta)
        k = 0
        while written < size:
            if k:
                advance(timed, shift, ids, flow, steps)
            chunk = orjson.dumps(timed)
            written += len(chunk)
            k += 1
            print(f"copy {k}: {written / 1e6:,.0f} MB", file=sys.stderr, flush=True)
            yield chunk

    with open(out_path, "wb") as out:
        write_document(out, doc, copies())


def ranks(source: Path, count: int, out_dir: Path, jitter_us: float, plain: bool, seed: int) -> None:
    """A job of ``count`` ranks from the per-rank traces in ``source`` (sorted by name: rank order)."""
    files = sorted(p for p in source.iterdir() if p.name.endswith((".json", ".json.gz")) and ".meta." not in p.name)
    docs = [read(p) for p in files]
    offsets = [0.0] * len(docs)
    rng = random.Random(seed)
    out_dir.mkdir(parents=True, exist_ok=True)
    for rank in range(count):
        i = rank % len(docs)
        offset = rng.uniform(-jitter_us, jitter_us) if rank >= len(docs) else 0.0
        advance(docs[i]["traceEvents"], offset - offsets[i], {}, 0, 0)
        offsets[i] = offset
        _set_rank(docs[i], rank, count)
        name = f"rank{rank}.json" + ("" if plain else ".gz")
        data = orjson.dumps(docs[i])
        with open(out_dir / name, "wb") if plain else gzip.open(out_dir / name, "wb", compresslevel=1) as f:
            f.write(data)
        print(f"rank {rank} (from {files[i].name}, clock {offset:+.1f} µs)", file=sys.stderr, flush=True)


def _set_rank(doc: dict, rank: int, world: int) -> None:
    info = doc.get("distributedInfo")
    if not isinstance(info, dict):
        return
    info["rank"], info["world_size"] = rank, world
    for group in info.get("pg_config") or []:
        if group.get("pg_desc") == "default_pg" or group.get("pg_name") == "0":
            group["ranks"], group["pg_size"] = list(range(world)), world


def _size(text: str) -> int:
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([kmg]?)", text.strip().lower())
    if not m:
        raise argparse.ArgumentTypeError(f"not a size: {text} (e.g. 1G, 500M)")
    return int(float(m.group(1)) * _UNITS[m.group(2)])


def _under_tmp(text: str) -> Path:
    path = Path(text).resolve()
    if not path.is_relative_to("/tmp"):
        raise argparse.ArgumentTypeError(f"{text}: outputs go under /tmp only")
    return path


def main(argv: list[str] | None = None) -> int:
    """Command line: ``single`` or ``ranks``."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="mode", required=True)
    one = sub.add_parser("single", help="one rank's trace replicated to a size")
    one.add_argument("source", type=Path)
    one.add_argument("--size", type=_size, required=True, help="at least this much JSON (e.g. 1G, 4G)")
    one.add_argument("out", type=_under_tmp)
    many = sub.add_parser("ranks", help="a job of many ranks from a real multi-rank job")
    many.add_argument("source", type=Path, help="folder of the real job's per-rank traces")
    many.add_argument("--ranks", type=int, required=True)
    many.add_argument("--jitter-us", type=float, default=500.0, help="largest clock offset of a copied rank (µs)")
    many.add_argument("--seed", type=int, default=14)
    many.add_argument("--plain", action="store_true", help="write JSON, not gzip")
    many.add_argument("out", type=_under_tmp, help="folder to write rank{r}.json.gz into")
    args = p.parse_args(argv)
    free = shutil.disk_usage("/tmp").free
    print(f"/tmp has {free / (1 << 30):.1f} GiB free", file=sys.stderr)
    if args.mode == "single":
        args.out.parent.mkdir(parents=True, exist_ok=True)
        single(args.source, args.size, args.out)
    else:
        ranks(args.source, args.ranks, args.out, args.jitter_us, args.plain, args.seed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
