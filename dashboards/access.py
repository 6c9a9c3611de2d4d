"""What the page may reach: paths under the files and folders the dashboard was started with, and requests whose
Host names the address it is bound to (no DNS rebinding)."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterable
from pathlib import Path

import psutil

REFUSED = (
    "not a readable trace inside the folders this dashboard may open (traceanalyze dashboard --allow DIR adds one)"
)
"""The one answer for a path outside the allowed set, unreadable, or not a trace: it says nothing of what is there."""

MAX_PATH_CHARS = 4096
"""A typed path longer than this (the system's PATH_MAX), or with a NUL byte, is refused as any other."""
SCAN_DEPTH = 6
SCAN_ENTRIES = 20_000
SCAN_S = 3.0
"""A folder opened from the page is scanned at most this deep, this many entries, this long."""

LOOPBACK_NAMES = {"localhost", "127.0.0.1", "::1"}
WILDCARD_ADDRESSES = {"0.0.0.0", "::", ""}


class Refused(Exception):
    """A path the page may not open; its message is the same whatever the reason."""


class Allowed:
    """The files and folders the page may open by path (resolved, so links and '..' cannot leave them)."""

    def __init__(self, paths: Iterable[str | os.PathLike] = (), refused: str = REFUSED) -> None:
        self.refused = refused  # the one answer for every refusal (the MCP server names its own --allow)
        self.files: set[Path] = set()
        self.folders: set[Path] = set()
        for path in paths:
            self.add(path)

    def add(self, path: str | os.PathLike) -> None:
        """Allow a file, or a folder and everything under it."""
        real = Path(os.path.realpath(path))
        (self.folders if real.is_dir() else self.files).add(real)

    def check(self, text: str | None) -> Path:
        """The resolved path the user typed, if the page may open it; else Refused (one message for every reason)."""
        if not text or not text.strip():
            raise Refused("enter the path of a trace file or run folder")
        if "\x00" in text or len(text) > MAX_PATH_CHARS:
            raise Refused(self.refused)
        real = Path(os.path.realpath(os.path.expanduser(text.strip())))
        if not self._covers(real):
            raise Refused(self.refused)
        try:
            if real.is_dir():
                bounded_scan(real, self.refused)
            elif not os.access(real, os.R_OK) or not real.is_file():
                raise Refused(self.refused)
        except OSError as e:
            raise Refused(self.refused) from e
        return real

    def _covers(self, real: Path) -> bool:
        return real in self.files or any(real == d or real.is_relative_to(d) for d in self.folders)


def bounded_scan(folder: Path, refused: str = REFUSED) -> int:
    """Count the entries of a folder tree; Refused if it is deeper, larger or slower to list than the scan limits."""
    deadline = time.monotonic() + SCAN_S
    pending, seen = [(folder, 0)], 0
    while pending:
        current, depth = pending.pop()
        with os.scandir(current) as entries:
            for entry in entries:
                seen += 1
                if seen > SCAN_ENTRIES or time.monotonic() > deadline:
                    raise Refused(f"{refused}; a folder to open must hold under {SCAN_ENTRIES:,} entries")
                if entry.is_dir(follow_symlinks=False):
                    if depth + 1 > SCAN_DEPTH:
                        raise Refused(f"{refused}; a folder to open must be at most {SCAN_DEPTH} levels deep")
                    pending.append((Path(entry.path), depth + 1))
    return seen


def host_names(bound: str) -> set[str]:
    """Host header names accepted for a server bound to this address (loopback; a wildcard adds this machine's
    names and the addresses of all its interfaces)."""
    names = {bound.strip("[]").lower(), *LOOPBACK_NAMES}
    if bound.strip("[]") in WILDCARD_ADDRESSES:
        machine = socket.gethostname().lower()
        names |= {machine, socket.getfqdn().lower(), *_resolved(machine), *interface_addresses()}
    return names - {""}


def interface_addresses() -> set[str]:
    """The IPv4 and IPv6 addresses of this machine's network interfaces (IPv6 without its %zone), lower-case."""
    families = {socket.AF_INET, socket.AF_INET6}
    return {
        a.address.split("%", 1)[0].lower()
        for addresses in psutil.net_if_addrs().values()
        for a in addresses
        if a.family in families
    }


def _resolved(name: str) -> list[str]:
    try:
        return socket.gethostbyname_ex(name)[2]
    except OSError:
        return []


def host_of(header: str) -> str:
    """The host name of a Host header, without port or IPv6 brackets, lower-case."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[1:].split("]", 1)[0]
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header
