"""Bounded capture of a sandboxed process's output, and spotting blocked-access attempts in it.

Untrusted code may print without end; everything here keeps memory bounded and never
writes the output to disk, so a process cannot exhaust the orchestrator's memory or disk.
"""

from __future__ import annotations

import os
import threading
from typing import IO

STDERR_TAIL_BYTES = 64 * 1024
MAX_DENIALS = 200
MAX_DENIAL_CHARS = 500

# Error texts that mean the sandbox stopped something (a file outside the mounts, a read-only
# mount, the missing network). Listed in run records so attempts are visible.
DENIAL_MARKERS = (
    b"Permission denied",
    b"Read-only file system",
    b"No such file or directory",
    b"Network is unreachable",
    b"Connection refused",
    b"Operation not permitted",
    b"Cannot assign requested address",
    b"Temporary failure in name resolution",
    b"Name or service not known",
)


def is_denial(line: bytes) -> bool:
    return any(m in line for m in DENIAL_MARKERS)


class StderrCollector:
    """Drains a pipe in a thread: keeps the last 64 KiB and every denial line (up to a cap)."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._tail = bytearray()
        self._partial = b""
        self.denials: list[str] = []
        self._thread = threading.Thread(target=self._drain, name="vtb-sandbox-stderr", daemon=True)
        self._thread.start()

    def _drain(self) -> None:
        try:
            while chunk := os.read(self._fd, 65536):
                self._tail += chunk
                if len(self._tail) > 2 * STDERR_TAIL_BYTES:
                    del self._tail[:-STDERR_TAIL_BYTES]
                self._scan(chunk)
        except OSError:
            pass
        finally:
            self._scan(b"\n")
            os.close(self._fd)

    def _scan(self, chunk: bytes) -> None:
        lines = (self._partial + chunk).split(b"\n")
        self._partial = lines.pop()[-4096:]  # a line without end is judged by its last 4 KiB
        for line in lines:
            if len(self.denials) < MAX_DENIALS and is_denial(line):
                text = line.decode("utf-8", "replace").strip()
                self.denials.append(text[:MAX_DENIAL_CHARS])

    def result(self, timeout: float = 5.0) -> str:
        """The stderr tail once the pipe is closed (or what arrived within `timeout`)."""
        self._thread.join(timeout)
        return bytes(self._tail[-STDERR_TAIL_BYTES:]).decode("utf-8", "replace")


def read_bounded(stream: IO[str], max_chars: int) -> str:
    """Read a text stream to EOF, keeping its head and tail when it exceeds `max_chars`."""
    half = max_chars // 2
    head: list[str] = []
    head_len = 0
    tail: list[str] = []
    tail_len = dropped = 0
    while chunk := stream.read(65536):
        if head_len < half:
            take = chunk[: half - head_len]
            head.append(take)
            head_len += len(take)
            chunk = chunk[len(take) :]
        if not chunk:
            continue
        tail.append(chunk)
        tail_len += len(chunk)
        while tail_len - len(tail[0]) >= half:
            tail_len -= len(tail[0])
            dropped += len(tail.pop(0))
    if dropped:
        head.append(f"\n[vtb: {dropped} characters of output dropped]\n")
    return "".join(head) + "".join(tail)
