"""Bounded capture of a sandboxed process's output, and spotting blocked-access attempts in it.

Untrusted code may print without end; everything here keeps memory bounded and never
writes the output to disk, so a process cannot exhaust the orchestrator's memory or disk.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import IO

STDERR_TAIL_BYTES = 64 * 1024
MAX_LINE_BYTES = 1 << 20  # a longer stdout line is garbage: dropped, never held whole
READ_CHUNK = 65536
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


@dataclass
class StreamStats:
    """What a bounded reader saw of one stream and what it left out (recorded with the step)."""

    bytes: int = 0  # everything read
    lines: int = 0  # lines handed on
    long_lines: int = 0  # lines over the length bound, dropped unread
    long_bytes: int = 0  # their bytes
    dropped_lines: int = 0  # lines a caller did not keep (e.g. past its count or byte cap)

    def record(self) -> dict:
        return asdict(self)


def bounded_lines(stream: IO[str], stats: StreamStats, max_line_bytes: int = MAX_LINE_BYTES) -> Iterator[str]:
    """The lines of a sandboxed process's stdout, read in chunks straight from the pipe.

    Memory stays under about `max_line_bytes` + one chunk whatever the process prints: a line
    past the bound is skipped to its end and only counted (`stats.long_lines`). Bytes that are
    not UTF-8 are replaced, so a caller always gets text. Reading the file descriptor (not the
    text wrapper, which would buffer a whole line) is why the caller must not mix other reads of
    the same stream; a stream without one (a test's StringIO) is read line by line with a limit.
    """
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):
        yield from _bounded_text_lines(stream, stats, max_line_bytes)
        return
    partial = bytearray()
    skipping = False
    while True:
        try:
            chunk = os.read(fd, READ_CHUNK)
        except (OSError, ValueError):
            break
        if not chunk:
            break
        stats.bytes += len(chunk)
        start = 0
        while start < len(chunk):
            end = chunk.find(b"\n", start)
            piece = chunk[start:] if end < 0 else chunk[start : end + 1]
            start += len(piece)
            if skipping:
                stats.long_bytes += len(piece)
                skipping = end < 0
                continue
            partial += piece
            if len(partial) > max_line_bytes:  # too long: drop what we hold, skip to its end
                stats.long_lines += 1
                stats.long_bytes += len(partial)
                partial.clear()
                skipping = end < 0
                continue
            if end >= 0:
                stats.lines += 1
                yield partial.decode("utf-8", "replace")
                partial.clear()
    if partial:
        stats.lines += 1
        yield partial.decode("utf-8", "replace")


def _bounded_text_lines(stream: IO[str], stats: StreamStats, max_line_bytes: int) -> Iterator[str]:
    skipping = False
    while True:
        try:
            line = stream.readline(max_line_bytes + 1)
        except (OSError, ValueError):
            return
        if not line:
            return
        stats.bytes += len(line)
        whole = line.endswith("\n")
        if skipping or len(line) > max_line_bytes:
            if not skipping:
                stats.long_lines += 1
            stats.long_bytes += len(line)
            skipping = not whole
            continue
        stats.lines += 1
        yield line
