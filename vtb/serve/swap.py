"""The provenance audit's text swap, applied by the model server (vtb/serve/server.py).

In an audit play (vtb/provenance.py) the harness gets each episode's real input, and the model
server rewrites every prompt before the model sees it: each episode's task text (a math
question) is replaced by another episode's. So the model answers a question the harness never
saw, and the harness's answer must be the one to *that* question if it came from the model. A
harness that solves the task itself (or hands the model its own answer, in any encoding) answers
the question it saw. The swap is invisible to the harness: its prompts are counted (usage,
/tokenize) as it sent them, and a completion that echoes the served text gets the harness's own
text back.

Orchestrator-written pairs only (the harness never sees this file). A text matches wherever its
words appear in order with any whitespace between them (a harness that reflows the text, as the
terminal kit's prompt does, or doubles its spaces to tell a swapped prompt from another, is
swapped all the same); any other change of the text is not swapped, and counted as such.
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
        # empty text or two texts with the same words swaps nothing and is never reported as used.
        kept = [(i, a, b) for i, (a, b) in enumerate(pairs[:MAX_PAIRS]) if words(a) and words(a) != words(b)]
        self.index = {words(a): i for i, a, _ in reversed(kept)}  # the first pair of a text wins
        self.served = {words(a): b for _, a, b in reversed(kept)}
        self.back = {words(b): a for _, a, b in reversed(kept)}
        self._forward = _alternation([a for _, a, _ in kept])
        self._backward = _alternation([b for _, _, b in kept])

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
            key = words(m.group(0))
            hits.add(self.index[key])
            return self.served[key]

        return self._forward.sub(sub, text), hits

    def restore(self, text: str) -> str:
        """A completion with every served text the model echoed turned back into the harness's."""
        if self._backward is None:
            return text
        return self._backward.sub(lambda m: self.back[words(m.group(0))], text)


def words(text: str) -> str:
    """A text as its words with single spaces: what the swap matches on."""
    return " ".join(text.split())


def _alternation(texts: list[str]) -> re.Pattern | None:
    """One pattern for all texts, each as its words with any whitespace between; longest first,
    so a text that contains another is replaced whole."""
    keys = sorted({words(t) for t in texts if words(t)}, key=len, reverse=True)
    if not keys:
        return None
    return re.compile("|".join(r"\s+".join(re.escape(w) for w in k.split(" ")) for k in keys))
