"""What a play's harness sent the model and what the model wrote back, in order (the written check).

A harness that writes the answer itself (a patch from its own solver, a tool call it composed)
scores with no help from the model, and on the environment domains nothing in the answer says
so. The model server (vtb/serve/server.py, `--transcript`) therefore appends each generation
request's prompts (as the harness sent them) and then the completions it returned, one JSON line
each, to a file in a folder of its own sandbox that no harness sees. After the play the
orchestrator reads it back (bounded: it is the server's output, read like any sandbox output) and
asks, for each line of each scored answer, where that text first appeared: in a completion (the
model wrote it), in a prompt (the harness had it before the model did: a hand-over), or nowhere
(the harness wrote it). vtb/provenance.py turns that into a verdict.

Text is compared after `normal` (whitespace collapsed, a leading diff marker dropped), and a
line counts as found where it occurs inside a record, so a model that writes its fix inside a
`sed` command or an edit line (`old => new`) is credited with it.
"""

from __future__ import annotations

import json
import os
import re
import stat
import threading
from pathlib import Path

MAX_BYTES = 16 << 20  # one server's transcript: past this, recording stops and the play is unverifiable
OVERFLOW = "overflow"

_SPACE = re.compile(r"\s+")


def normal(text: str) -> str:
    """`text` with runs of whitespace as one space, trimmed, and a leading diff marker dropped."""
    text = _SPACE.sub(" ", text).strip()
    if text[:1] in "+-" and not text.startswith(("++", "--")):
        text = text[1:].lstrip()
    return text


class Writer:
    """The server's side: append-only, thread-safe, bounded at MAX_BYTES."""

    def __init__(self, path: str | Path, max_bytes: int = MAX_BYTES):
        self._f = open(path, "a", encoding="utf-8")  # noqa: SIM115 (open for the server's life)
        self._left = max_bytes
        self._lock = threading.Lock()
        self._full = False

    def add(self, kind: str, texts: list[str]) -> None:
        """kind "prompt" or "completion"; one record per text, in the order the server met them."""
        with self._lock:
            for text in texts:
                if self._full:
                    return
                line = json.dumps({"k": kind, "t": normal(text)}) + "\n"
                if len(line) > self._left:
                    self._full = True
                    self._f.write(json.dumps({"k": OVERFLOW}) + "\n")
                else:
                    self._left -= len(line)
                    self._f.write(line)
            self._f.flush()


def read(path: Path, max_bytes: int = MAX_BYTES + 4096) -> tuple[list[tuple[str, str]], bool]:
    """The records (kind, normalized text) and whether the transcript is complete.

    Incomplete: missing, not a regular file (a link is not followed), over max_bytes, a line that
    is not a record of ours, or the server's own overflow mark."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return [], False
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > max_bytes:
            return [], False
        data = f.read(max_bytes + 1)
    if len(data) > max_bytes:
        return [], False
    records: list[tuple[str, str]] = []
    for raw in data.decode("utf-8", "replace").splitlines():
        try:
            rec = json.loads(raw)
        except ValueError:
            return records, False
        if not isinstance(rec, dict) or rec.get("k") not in ("prompt", "completion"):
            return records, False
        records.append((rec["k"], str(rec.get("t", ""))))
    return records, True


def first_source(line: str, records: list[tuple[str, str]]) -> str | None:
    """Where the normalized `line` first occurs: "prompt", "completion", or None (nowhere)."""
    for kind, text in records:
        if line in text:
            return kind
    return None
