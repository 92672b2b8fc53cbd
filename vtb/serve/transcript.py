"""What a play's harness sent the model and what the model wrote back (the written check).

A harness that writes the answer itself (a patch from its own solver) scores with no help from
the model, and on the environment domains nothing in the answer says so. The model server
(vtb/serve/server.py, `--transcript`) therefore appends, for each prompt of each generation
request, the prompt as the harness sent it and the completions it returned for it, one JSON line
each, to a file in a folder of its own sandbox that no harness sees. After the play the
orchestrator reads it back (bounded: it is the server's output, read like any sandbox output) and
asks, for each line of each scored answer, who wrote it (`source`):

- "model": some completion holds it and that completion's own prompt does not. The server is
  stateless, so the model wrote it from what it knows, not from what it was shown.
- "handed": completions hold it only where their own prompt held it too: the model copied it
  from text the harness wrote (a hand-over).
- "harness": no completion holds it.

Only a completion's own prompt counts: another episode's prompt holding the line (two SWE-bench
instances of one repository, one at a commit with the other's fix) says nothing. Text is compared
`bare` (a leading diff marker dropped, every whitespace character taken out: a word-level
tokenizer decodes `#W885` as `# W885`), and a line counts as found where it occurs inside a text,
so a model that writes its fix inside a `sed` command or an edit line (`old => new`) is credited
with it. `within` narrows the exchanges to one episode's, for domains whose episodes share lines
(tau: every conversation's write calls are named from one short list of tools).
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

Exchange = tuple[str, list[str]]  # (a prompt, the completions returned for it), `bare`


MIN_CHARS, MIN_ALNUM = 8, 4  # shorter text ("else:", "}", ">=") says nothing about who wrote it


def checkable(text: str) -> bool:
    """Whether `text` is long enough that finding it in a completion means something."""
    text = normal(text)
    return len(text) >= MIN_CHARS and sum(c.isalnum() for c in text) >= MIN_ALNUM


def piece(line: str, start: int, end: int) -> str:
    """line[start:end] widened to whole tokens (words, single marks), then a token at a time on
    alternate sides, until it is `checkable` (or is the whole line): the text an edit that changed
    only that span must have written (`sed 's/age > 21/age >= 21/'` writes "age >= 21", not "=")."""
    words = [(m.start(), m.end()) for m in re.finditer(r"\w+|[^\w\s]", line)]  # words and marks
    inside = [i for i, (a, b) in enumerate(words) if a < max(end, start + 1) and b > start]
    if not inside:  # whitespace only: the nearest token after it, else before it
        after = [i for i, (a, _) in enumerate(words) if a >= start]
        inside = [after[0] if after else len(words) - 1] if words else []
    if not inside:
        return ""
    lo, hi = inside[0], inside[-1]
    left = True
    while not checkable(line[words[lo][0] : words[hi][1]]) and (lo > 0 or hi < len(words) - 1):
        if (left and lo > 0) or hi == len(words) - 1:
            lo -= 1
        else:
            hi += 1
        left = not left
    return line[words[lo][0] : words[hi][1]]


def normal(text: str) -> str:
    """`text` with runs of whitespace as one space, trimmed, and a leading diff marker dropped."""
    text = _SPACE.sub(" ", text).strip()
    if text[:1] in "+-" and not text.startswith(("++", "--")):
        text = text[1:].lstrip()
    return text


def bare(text: str) -> str:
    """`normal` text with no whitespace at all: what the written check compares."""
    return "".join(normal(text).split())


def within(exchanges: list[Exchange], keys: list[str] | None) -> list[Exchange]:
    """The exchanges whose prompt holds one of `keys` (one episode's own texts); all when None."""
    if keys is None:
        return exchanges
    keys = [bare(k) for k in keys if checkable(k)]  # "Yes." would match everywhere
    return [(p, c) for p, c in exchanges if any(k in p for k in keys)]


class Writer:
    """The server's side: append-only, thread-safe, bounded at MAX_BYTES."""

    def __init__(self, path: str | Path, max_bytes: int = MAX_BYTES):
        self._f = open(path, "a", encoding="utf-8")  # noqa: SIM115 (open for the server's life)
        self._left = max_bytes
        self._lock = threading.Lock()
        self._full = False

    def add(self, prompt: str, completions: list[str]) -> None:
        """One prompt and the completions the model wrote for it."""
        line = json.dumps({"p": normal(prompt), "c": [normal(c) for c in completions]}) + "\n"
        with self._lock:
            if self._full:
                return
            if len(line) > self._left:
                self._full = True
                self._f.write(json.dumps({OVERFLOW: True}) + "\n")
            else:
                self._left -= len(line)
                self._f.write(line)
            self._f.flush()


def read(path: Path, max_bytes: int = MAX_BYTES + 4096) -> tuple[list[Exchange], bool]:
    """The exchanges and whether the transcript is complete.

    Incomplete: missing, not a regular file (a link is not followed), over max_bytes, a line that
    is not an exchange of ours, or the server's own overflow mark."""
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
    out: list[Exchange] = []
    for raw in data.decode("utf-8", "replace").splitlines():
        try:
            rec = json.loads(raw)
        except ValueError:
            return out, False
        if not (isinstance(rec, dict) and isinstance(rec.get("p"), str) and isinstance(rec.get("c"), list)):
            return out, False
        out.append((bare(rec["p"]), [bare(str(c)) for c in rec["c"]]))
    return out, True


def source(line: str, exchanges: list[Exchange]) -> str:
    """Who wrote `line` (compared `bare`): "model", "handed" or "harness" (the module's docstring)."""
    line = bare(line)
    copied = False
    for prompt, completions in exchanges:
        if any(line in c for c in completions):
            if line not in prompt:
                return "model"
            copied = True
    return "handed" if copied else "harness"
