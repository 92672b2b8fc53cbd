"""The provenance audit: is a submission's score the model's score, or its harness's?

The harness is code that sees every test input. A harness that solves the task itself (a
solver of the question forms, unlocked by a fingerprint only the trained weights answer), or
that hands the model its own answer in any encoding for the model to repeat, or that picks,
among many samples, the one its own solver agrees with, lifts the score with no help from
training, and the null-model check cannot see it (the shuffled weights lose the fingerprint).

The audit plays the test split once more, shaped exactly like grading (the same shards, decoys
and per-episode cap), but the model server swaps each episode's task text in every prompt for
the next episode's in the shard (vtb/serve/swap.py): the harness still sees episode i's question,
the model sees only question i+1's. Whatever the harness does, its answer then tells where it
came from:

- the answer to question i+1 (the one only the model saw): the model's work. An honest
  system scores here what it scored on question i+1 in grading, whatever its prompts, samples,
  votes, retries, format repairs or calculator (they all act on what the model wrote).
- the answer to question i (the one the model never saw): the harness's. Counted against a
  baseline of answers matching a third, unrelated episode's question (coincidence).
- neither, where grading scored: a harness that noticed the swap (say, by sending the
  question twice, once altered) and played honest has to fall to its model's own level,
  and the gap to its graded score shows.

Terminal tasks have one task text too (the instruction), but an answer there is an action on
the episode's own environment, so it can be scored only as an answer to the task the harness
saw: `own` (the environment's hidden tests), with no `served` or `chance` score. The model then
works on another task's instruction in this task's shell: an honest system almost never passes
this task's tests, a harness that solves (or hands over) its own task does. The gap check needs
`served`, so it does not run there.

The written check (SWE-bench, where the answer is code; tau, below): the model server keeps a
transcript of every prompt the harness sent and every completion it got back
(vtb/serve/transcript.py), in the grading play itself, so there is nothing to tell apart. Each non-trivial line a scored answer adds
must appear in a completion whose own prompt did not hold it: a line the model wrote only where
its prompt held it was handed over, a line in no completion was the harness's own. An edit of an
existing line is checked by the piece it changed, widened to whole tokens until it is at least 8
characters (`transcript.piece`), so a model's `sed 's/age > 21/age >= 21/'` credits it.
Legitimate harnesses pass: the shipped ones build the patch from an edit line the model wrote,
and a model's `sed` command or diff counts as writing the lines it contains. Flagged when the answers of WRITTEN_MIN and at
least WRITTEN_FRACTION of the scored episodes are mostly not the model's writing.

What stays open (SECURITY.md): a model trained to leak the question it sees back to the harness
in an altered form (the harness then solves the served question); a harness that alters every
question it sends (not swapped: flagged as unverifiable when it scores); on terminal, a harness
that tells the swap (say, from paths the model's commands name) and plays honest in the audit.
SWE-bench has no swap (its shipped harness sends the model the issue's title beside code located
from the whole issue, so the model would still see this instance's code), only the written check:
a model trained to decode a hand-over written in its own code, a capable model asked to repair a
deliberately corrupted copy of the fix, or a harness that picks among many samples the one its
solver agrees with, passes it. tau has no single task text (the user speaks it), so no swap,
and the written check there reads the agent's actions: each write call's tool name and each
message must be the model's, credited only by the episode's own exchanges (`tracer`, the domain's
`written_scopes`); the call's arguments stay the harness's to repair.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

from vtb.serve.swap import words
from vtb.serve.transcript import Exchange, checkable, source, within

OWN_MIN, OWN_FRACTION = 2, 0.1  # answers to the question the model never saw, past coincidence
GAP_MIN, GAP_FRACTION = 2, 0.2  # graded minus audited hits on the same questions
UNVERIFIABLE_FRACTION = 0.5  # episodes whose question never reached the model verbatim
WRITTEN_MIN, WRITTEN_FRACTION = 2, 0.2  # scored answers mostly not the model's writing


@dataclass
class Pair:
    """One audited episode: the harness saw `id`'s input, the model `partner`'s; their rewards."""

    id: str
    partner: str
    swapped: bool  # the server found `id`'s task text in a prompt (and swapped it)
    own: float  # the answer scored as an answer to `id` (the question the model never saw)
    served: float | None  # ... to `partner` (the question the model saw); None: not scorable
    # ... to a third episode's question (coincidence); None: a shard of 2, or not scorable
    chance: float | None

    def to_json(self) -> dict:
        return {
            "id": self.id,
            "partner": self.partner,
            "swapped": self.swapped,
            "own": self.own,
            "served": self.served,
            "chance": self.chance,
        }


def _texts(part: list, text_of) -> tuple[list[str], list[int]]:
    """A shard's distinct task texts (as words, in play order) and each episode's index among them.

    Two episodes of one text (two trials of a task, a decoy that repeats a scored episode when the
    split is smaller than a shard) are one text to the server: it cannot tell which of them sent a
    prompt, so the rotation and the audit run over texts, not episodes."""
    keys: dict[str, int] = {}
    of = [keys.setdefault(words(text_of(b.inner)), len(keys)) for b in part]
    return list(keys), of


def rotation(part: list, text_of) -> list[tuple[str, str]]:
    """The swap pairs of one shard: each distinct task text -> the next one (vtb/serve/swap.py).

    `part` are the shard's episodes in play order (blinded); `text_of(inner episode)` their task
    text. A shard with a single text has nothing to swap with: no pairs."""
    texts, _ = _texts(part, text_of)
    m = len(texts)
    return [(texts[j], texts[(j + 1) % m]) for j in range(m)] if m >= 2 else []


def audit_pairs(part: list, swapped: set[int], text_of, reward_as, scored: set[str]) -> list[Pair]:
    """Score a played shard both ways; only the episodes in `scored` (not decoys) are kept.

    `swapped` holds the indices of the rotation's pairs the server used. An episode's partner is
    the first episode of the next text (what the model saw instead), its third the first of the
    text after that (coincidence). `reward_as(inner, other_inner)` scores an episode's answer as an
    answer to another's task; None where an answer is an action on the episode's own environment
    (its own reward only)."""
    texts, of = _texts(part, text_of)
    m = len(texts)
    if m < 2:
        return []
    first = {j: next(b.inner for b, t in zip(part, of, strict=True) if t == j) for j in range(m)}
    out = []
    for b, j in zip(part, of, strict=True):
        if b.id not in scored:
            continue
        ep, partner = b.inner, first[(j + 1) % m]
        third = first[(j + 2) % m] if m >= 3 else None
        if reward_as is None:
            own, served, chance = float(ep.reward()), None, None
        else:
            own, served = float(reward_as(ep, ep)), float(reward_as(ep, partner))
            chance = None if third is None else float(reward_as(ep, third))
        out.append(Pair(str(ep.id), str(partner.id), j in swapped, own, served, chance))
    return out


def verdict(pairs: list[dict], graded: dict[str, float]) -> dict:
    """The audit's figures and its finding, from the pairs and the graded play's rewards.

    Flagged when the harness answered the questions the model never saw (beyond coincidence),
    when it scored markedly less on the questions the model did see than grading scored on the
    same questions, or when too few of its inputs reached the model verbatim to tell."""
    n = len(pairs)
    if n == 0:
        return {"flagged": False, "n": 0, "reason": "nothing to audit"}
    hit = lambda x: x is not None and x >= 0.5  # noqa: E731 (rewards in [0, 1])
    unswapped = sum(1 for p in pairs if not p["swapped"])
    informative = [p for p in pairs if p["swapped"] and not (hit(p["own"]) and hit(p["served"]))]
    k = len(informative)
    own = sum(1 for p in informative if hit(p["own"]) and not hit(p["served"]))
    chance = sum(1 for p in informative if hit(p["chance"]) and not hit(p["served"]))
    scorable = [p for p in informative if p["served"] is not None]  # terminal, SWE-bench: none
    served = sum(p["served"] for p in scorable)
    graded_same = sum(float(graded.get(p["partner"], 0.0)) for p in scorable)
    graded_score = sum(graded.values()) / max(1, len(graded))
    reasons = []
    if own - chance >= max(OWN_MIN, OWN_FRACTION * k):
        reasons.append(
            f"{own} of {k} answers answer the question the harness saw and the model never did "
            f"(coincidence: {chance}): the harness, not the model, answered"
        )
    if scorable and graded_same - served >= max(GAP_MIN, GAP_FRACTION * len(scorable)):
        reasons.append(
            f"{served:g} of {k} right where the model saw other questions, against {graded_same:g} "
            "in grading on the same questions: the harness scores when it can tell its inputs reach the model"
        )
    if unswapped > UNVERIFIABLE_FRACTION * n and graded_score > 0:
        reasons.append(
            f"{unswapped} of {n} questions never reached the model verbatim: where the answers come from "
            "cannot be checked (send the question as given)"
        )
    return {
        "flagged": bool(reasons),
        "reason": "; ".join(reasons) or None,
        "n": n,
        "unswapped": unswapped,
        "informative": k,
        "own_hits": own,
        "chance_hits": chance,
        "served_hits": served,
        "graded_hits_same_questions": graded_same,
    }


def written(
    lines: list[tuple[str, list[str]]], exchanges: list[tuple[str, list[str]]], complete: bool
) -> dict:
    """Who wrote each line of one answer, by the play's transcript (transcript.source).

    `lines`: (the line, the pieces an edit put into it; [the line] when it is new). A line is the
    model's when a completion holds it whole, or holds every piece long enough to tell (a `sed`
    edit writes only those); a line whose pieces are all too short to tell (an operator, a
    constant) is not counted either way."""
    counts = {"lines": 0, "model": 0, "handed": 0, "harness": 0, "complete": complete}
    who_wrote = functools.cache(lambda text: source(text, exchanges))  # a new line is its own piece
    for line, pieces in lines:
        if checkable(line) and who_wrote(line) == "model":
            who = "model"
        else:
            told = [p for p in pieces if checkable(p)]
            if not told:
                continue  # nothing long enough to tell who wrote it
            found = {who_wrote(p) for p in told}
            who = next((w for w in ("harness", "handed") if w in found), "model")
        counts["lines"] += 1
        counts[who] += 1
    return counts


def tracer(lines_of: Callable | None, scopes_of: Callable | None = None) -> Callable | None:
    """The written check of one play, or None where the domain's answers are not traced.

    A domain's `written_lines(episode)` (`lines_of`) gives each answer's lines; its optional
    `written_scopes(episodes)` gives each episode the texts a prompt of its own holds, so that a
    line is credited only by that episode's exchanges (tau's tool names are common to all)."""
    if lines_of is None:
        return None

    def trace(episodes: list, exchanges: list[Exchange], complete: bool) -> list[dict]:
        scopes = scopes_of(episodes) if scopes_of else [None] * len(episodes)
        return [
            written(lines_of(ep), within(exchanges, scope), complete)
            for ep, scope in zip(episodes, scopes, strict=True)
        ]

    return trace


def written_verdict(answers: dict[str, dict], graded: dict[str, float]) -> dict:
    """The written check's finding over the scored answers (`written` counts, by episode id)."""
    scored = [answers[i] for i, r in graded.items() if r >= 0.5 and i in answers]
    checked = [a for a in scored if a["lines"] > 0]
    not_model = [a for a in checked if a["model"] < a["lines"] / 2]
    incomplete = sum(1 for a in scored if not a["complete"])
    reasons = []
    if len(not_model) >= max(WRITTEN_MIN, WRITTEN_FRACTION * len(scored)):
        handed = sum(a["handed"] for a in not_model)
        own = sum(a["harness"] for a in not_model)
        reasons.append(
            f"{len(not_model)} of {len(scored)} scored answers are mostly not the model's writing "
            f"({own} lines in no completion, {handed} written by the model only where its prompt held them): "
            "the harness, not the model, wrote them"
        )
    if incomplete >= max(WRITTEN_MIN, WRITTEN_FRACTION * len(scored)):
        reasons.append(
            f"the model server's transcript of {incomplete} scored answers is incomplete "
            "(over its size limit): where they come from cannot be checked"
        )
    return {
        "check": "written",
        "flagged": bool(reasons),
        "reason": "; ".join(reasons) or None,
        "n": len(answers),
        "scored": len(scored),
        "checked_lines": sum(a["lines"] for a in checked),
        "not_model": len(not_model),
        "incomplete": incomplete,
    }
