"""Discovery: repeated chains of consecutive memory-bound kernels that no library pattern claimed.

Its input is ``Runs``: the op-stream entries a chain may be made of (runs of two or more consecutive memory-bound
entries of one region, ``matching.regions``), as columns, with what an occurrence of them is measured and placed
by and the device work a fusion of each removes. A rank's ``Runs`` is part of its fusion part; ``merge`` puts the
ranks' runs one after another (tokens numbered by first appearance, as in the joined op stream) and ``discover``
chooses the chains over all of them at once: a chain counts if it repeats at least once per (rank, step).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from traceanalyzer.analyzers.fusion.opstream import EntryWork, PackedWork
from traceanalyzer.analyzers.fusion.patterns import BACKWARD_SUFFIX
from traceanalyzer.intervals import narrow

MAX_CHAIN = 6
"""Longest chain of memory-bound kernels discovery considers."""

MAX_DISCOVERED = 8
"""How many distinct repeated chains discovery reports."""

CODED = ("token", "label", "place")
"""The columns of ``Runs`` that are codes into a vocabulary of texts."""

MEASURED = ("device_ns", "kernels", "in_bytes", "out_bytes")
"""The columns of ``Runs`` an occurrence is measured by (``matching.measured``), beside ``rank``, ``step``, ``ts``."""


@dataclass
class Runs:
    """Entries of memory-bound runs, as columns (one value per entry; runs one after another): ``token``,
    ``label`` and ``place`` (codes into ``vocab``), ``run`` (its run), ``rank``, ``step``, ``ts``, ``device_ns``,
    ``kernels``, ``in_bytes``, ``out_bytes`` and ``at`` (its position in its trace's op stream, left out of the
    ``packed`` form a part carries); ``work``: the device work of each entry; ``steps``: the (rank, step) pairs of
    the op stream. ``vocab["token"]`` holds every token of the work entries in order of first appearance, which
    orders chains of equal worth."""

    cols: dict[str, np.ndarray]
    vocab: dict[str, list[str]]
    work: EntryWork | PackedWork
    steps: int

    def packed(self) -> Runs:
        """The small form a part carries (``intervals.narrow``), without ``at``."""
        cols = {c: narrow(v) for c, v in self.cols.items() if c != "at"}
        return Runs(cols, self.vocab, self.work.packed(), self.steps)

    def widened(self) -> Runs:
        """The form discovery reads: int64 columns, the work unpacked."""
        work = self.work.unpacked() if isinstance(self.work, PackedWork) else self.work
        return Runs({c: v.astype(np.int64) for c, v in self.cols.items()}, self.vocab, work, self.steps)

    def __len__(self) -> int:
        return len(self.cols["run"])

    @staticmethod
    def empty() -> Runs:
        """No entries (a trace without an op stream)."""
        cols = {c: np.empty(0, dtype=np.int32) for c in (*CODED, "run", "rank", "step", "at")}
        cols.update({c: np.empty(0, dtype=np.int64) for c in ("ts", *MEASURED)})
        return Runs(cols, {c: [] for c in CODED}, EntryWork.empty(), 0)


@dataclass
class Chain:
    """One discovered occurrence: its variant, phase and entries (positions in the ``Runs`` it was found in)."""

    variant: str
    phase: str
    entries: np.ndarray


def merge(parts: list[Runs]) -> Runs:
    """The runs of several ranks one after another (``widened``), their codes into one vocabulary (first appearance
    in order)."""
    parts = [p.widened() for p in parts]
    if len(parts) == 1:
        return parts[0]
    vocab = {c: list(dict.fromkeys(t for p in parts for t in p.vocab[c])) for c in CODED}
    index = {c: {t: i for i, t in enumerate(v)} for c, v in vocab.items()}
    cols = {}
    for name in parts[0].cols:
        pieces = [p.cols[name] for p in parts]
        if name in CODED:
            pieces = [np.array([index[name][t] for t in p.vocab[name]], dtype=np.int64)[p.cols[name]] for p in parts]
        if name == "run":
            offsets = np.cumsum([0] + [int(p.cols["run"].max()) + 1 if len(p) else 0 for p in parts[:-1]])
            pieces = [piece + offset for piece, offset in zip(pieces, offsets.tolist(), strict=True)]
        cols[name] = np.concatenate(pieces)
    return Runs(cols, vocab, EntryWork.concat([p.work for p in parts]), sum(p.steps for p in parts))


def discover(runs: Runs) -> list[Chain]:
    """The repeated chains, best first (summed time × (1 - 1/length) over their repeats), each repeat once: up to
    ``MAX_DISCOVERED`` chains that repeat at least once per (rank, step) and at least twice."""
    codes, dur = runs.cols["token"], runs.cols["device_ns"]
    run = runs.cols["run"].copy()
    min_count = max(2, runs.steps)
    found, windows = [], _windows(codes, run, dur)
    for _ in range(MAX_DISCOVERED):
        best = _best_chain(windows, run, min_count)
        if best is None:
            break
        length, picks = best
        first = np.arange(picks[0], picks[0] + length)
        backward = all(runs.vocab["token"][c].endswith(BACKWARD_SUFFIX) for c in codes[first].tolist())
        labels = [runs.vocab["label"][c] for c in runs.cols["label"][first].tolist()]
        variant = ("backward: " if backward else "") + " → ".join(labels)
        spans = np.asarray(picks, dtype=np.int64)[:, None] + np.arange(length)
        found += [Chain(variant, "backward" if backward else "forward", span) for span in spans]
        run[spans.ravel()] = -1
    return found


def _windows(codes: np.ndarray, run: np.ndarray, dur: np.ndarray) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """Per chain length: the number of each window of that many consecutive entries of one run (in lexicographic
    order of their codes; -1 for a window across runs) and each window's summed time."""
    out = {}
    for length in range(2, min(MAX_CHAIN, len(codes)) + 1):
        runs = np.lib.stride_tricks.sliding_window_view(run, length)
        valid = np.flatnonzero((runs[:, 0] >= 0) & (runs == runs[:, :1]).all(axis=1))
        number = np.full(len(runs), -1, dtype=np.int64)
        windows = np.lib.stride_tricks.sliding_window_view(codes, length)[valid]
        number[valid] = np.unique(windows, axis=0, return_inverse=True)[1].ravel()
        out[length] = (number, np.convolve(dur, np.ones(length, dtype=np.int64), mode="valid"))
    return out


def _best_chain(windows: dict[int, tuple[np.ndarray, np.ndarray]], run: np.ndarray, min_count: int):
    """The chain (length, non-overlapping starts) worth most: summed time × (1 - 1/length) over its repeats, of the
    ``windows`` whose entries are all still in their run (``run``: -1 where an entry is taken)."""
    best, best_score = None, 0.0
    for length, (number, time) in windows.items():
        runs = np.lib.stride_tricks.sliding_window_view(run, length)
        valid = np.flatnonzero((runs[:, 0] >= 0) & (runs == runs[:, :1]).all(axis=1))
        if len(valid) < min_count:
            continue
        inverse = number[valid]
        score = np.bincount(inverse, weights=time[valid]) * (1 - 1 / length)
        score[np.bincount(inverse) < min_count] = 0
        top = int(np.argmax(score))
        if score[top] > best_score:
            picks = _non_overlapping(valid[inverse == top], length)
            if len(picks) >= min_count:
                best, best_score = (length, picks), float(score[top])
    return best


def _non_overlapping(starts: np.ndarray, length: int) -> list[int]:
    picks, edge = [], -1
    for s in starts.tolist():
        if s > edge:
            picks.append(s)
            edge = s + length - 1
    return picks


def run_ids(lanes: np.ndarray, ok: np.ndarray) -> np.ndarray:
    """Run id of each work entry: consecutive memory-bound entries of one lane (or region) share one; -1 elsewhere."""
    new = np.ones(len(ok), dtype=bool)
    new[1:] = (lanes[1:] != lanes[:-1]) | ~ok[:-1]
    ids = np.cumsum(new)
    return np.where(ok, ids, -1)


def in_runs(run: np.ndarray) -> np.ndarray:
    """Which entries belong to a run of two or more (a chain needs two)."""
    ids, counts = np.unique(run[run >= 0], return_counts=True)
    return np.isin(run, ids[counts >= 2])


def coded(values: np.ndarray) -> tuple[np.ndarray, list[str]]:
    """Codes (int32) of texts and the texts, in order of first appearance."""
    codes, texts = pd.factorize(values)
    return codes.astype(np.int32), [str(t) for t in texts]
