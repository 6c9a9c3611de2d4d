"""The process's C allocator (glibc's malloc; nothing is done elsewhere): freed heap pages given back to the system,
and large blocks mapped apart, so that a big trace's peak memory is what its tables need rather than what the heap
kept of their transients."""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
from collections.abc import Iterator

LARGE_BLOCK_BYTES = 8 << 20
"""Blocks of this size and more are mapped from the system and unmapped when freed, once ``map_large_blocks`` ran."""
KEPT_FOR_REUSE = 16 << 20
"""Freed space at the top of a heap kept for reuse inside ``reusing`` (a trace's chunks read, its frames built and
linked)."""
_TRIM_THRESHOLD_BYTES = 128 << 10  # glibc's default M_TRIM_THRESHOLD, which a fixed M_MMAP_THRESHOLD keeps
_M_TRIM_THRESHOLD = -1  # glibc's mallopt parameters
_M_MMAP_THRESHOLD = -3
_large_blocks_mapped = False
"""True once ``map_large_blocks`` set this process's allocator (the command's)."""


def give_back() -> None:
    """Return freed heap pages to the system (glibc's malloc_trim): a parse's columns are many blocks of a few
    hundred kB whose space the joined columns cannot reuse, so without it the process would hold both."""
    if _LIBC is not None:
        _LIBC.malloc_trim(0)


def map_large_blocks() -> None:
    """From now on this process maps blocks of ``LARGE_BLOCK_BYTES`` and more from the system (a fixed
    M_MMAP_THRESHOLD). glibc otherwise raises the threshold to the largest block freed (up to 32 MiB), and the
    transient columns of a few MiB that the imports and a report make then stay in the heap, fragmenting it (the
    full report of big: peak RSS 222 -> 212.5 MiB, 5 % more CPU for the pages mapped again). For the command line,
    which owns its process, before its imports; a library caller's allocator is left as it is."""
    global _large_blocks_mapped
    if _LIBC is not None:
        _LIBC.mallopt(_M_MMAP_THRESHOLD, LARGE_BLOCK_BYTES)
        _large_blocks_mapped = True


@contextlib.contextmanager
def reusing() -> Iterator[None]:
    """While the block runs, freed space at the top of each heap is kept for reuse, up to ``KEPT_FOR_REUSE``.
    With ``map_large_blocks``'s fixed M_MMAP_THRESHOLD glibc's trim threshold stays at 128 KiB, so freed blocks of
    a few MiB (a chunk's, or a transient column's) would be returned and faulted in again by the next (big: reading
    the chunks 109k -> 63k minor faults, 0.94x the CPU; building the frames and linking 63k -> 43k). The block must
    not free the reader threads' columns: a thread's heap top is trimmed only when one of its blocks is freed at a
    low threshold (``malloc_trim`` trims only the main heap's). Only where ``map_large_blocks`` ran: setting a
    threshold would also stop a library caller's glibc from adjusting its own."""
    owned = _LIBC if _large_blocks_mapped else None
    if owned is not None:
        owned.mallopt(_M_TRIM_THRESHOLD, KEPT_FOR_REUSE)
    try:
        yield
    finally:
        if owned is not None:
            owned.mallopt(_M_TRIM_THRESHOLD, _TRIM_THRESHOLD_BYTES)


def _libc() -> ctypes.CDLL | None:
    """glibc, or None where the C library is another (no malloc_trim or mallopt)."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None
    return libc if hasattr(libc, "malloc_trim") and hasattr(libc, "mallopt") else None


_LIBC = _libc()
