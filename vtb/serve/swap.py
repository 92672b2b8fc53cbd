"""The provenance audit's text swap, applied by the model server (vtb/serve/server.py).

In an audit play (vtb/provenance.py) the harness gets each episode's real input, and the model
server rewrites every prompt before the model sees it: each episode's task text (a math
question) is replaced by another episode's. So the model answers a question the harness never
saw, and the harness's answer must be the one to *that* question if it came from the model. A
harness that solves the task itself (or hands the model its own answer, in any encoding) answers
the question it saw. The swap is invisible to the harness: its prompts are counted (usage,
/tokenize) as it sent them, and a completion that echoes the served text gets the harness's own
text back.

Orchestrator-written pairs only (the harness never sees this file); matching is exact, so a
harness that sends the task text in another form is not swapped (and counted as such).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

MAX_PAIRS = 20000
MAX_TEXT = 64 << 10  # characters of one task text


class Swap:
    """Pairs (seen, served): `seen` is what the harness got, `served` what the model gets instead."""

    def __init__(self, pairs: list[tuple[str, str]]):
        # Indices stay those of the list given (the orchestrator's episode order); a pair with an
        # empty text or two equal ones swaps nothing and is never reported as used.
        self.index = {a: i for i, (a, b) in enumerate(pairs[:MAX_PAIRS]) if a and a != b}
        pairs = [(a, b) for a, b in pairs[:MAX_PAIRS] if a and a != b]
        self.served = {a: b for a, b in pairs}
        self.back = {b: a for a, b in pairs}
        # Longest first, so a text that contains another is replaced whole.
        self._forward = _alternation([a for a, _ in pairs])
        self._backward = _alternation([b for _, b in pairs])

    @classmethod
    def load(cls, path: str | Path) -> Swap:
        raw = json.loads(Path(path).read_text("utf-8"))
        pairs = [(str(a)[:MAX_TEXT], str(b)[:MAX_TEXT]) for a, b in raw]
        return cls(pairs)

    def apply(self, text: str) -> tuple[str, set[int]]:
        """The text the model gets, and which pairs it used."""
        if self._forward is None:
            return text, set()
        hits: set[int] = set()

        def sub(m: re.Match) -> str:
            hits.add(self.index[m.group(0)])
            return self.served[m.group(0)]

        return self._forward.sub(sub, text), hits

    def restore(self, text: str) -> str:
        """A completion with every served text the model echoed turned back into the harness's."""
        if self._backward is None:
            return text
        return self._backward.sub(lambda m: self.back[m.group(0)], text)


def _alternation(texts: list[str]) -> re.Pattern | None:
    if not texts:
        return None
    return re.compile("|".join(re.escape(t) for t in sorted(set(texts), key=len, reverse=True)))
