"""The co-design grid's arithmetic: which part of the submission carried its gain, and whether parts add up.

A bench's submission differs from the initial system in up to three parts (data, trainer,
harness). The grid (vtb/analysis.py) grades every mix of {initial, submitted} for each part: 8
systems, a 2^3 factorial design. This module turns their 8 test scores into the standard
factorial effects and one verdict line. Pure functions on fixed inputs, no I/O, so the
numbers are pinned by a unit test and the leaderboard can apply the same contrasts to per-item
rewards (vtb/leaderboard.py).

A corner is a code of three bits in PARTS order, 1 = the submitted part: "000" is the initial
system, "111" the submission, "001" the initial data and trainer with the submitted harness.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping

from vtb.result_parts import Effects

PARTS = ("data", "trainer", "harness")
CORNERS = tuple("".join(bits) for bits in itertools.product("01", repeat=len(PARTS)))
# The effects: each non-empty subset of the parts, main effects first ("data", ..., "data×trainer×harness").
EFFECTS = tuple(
    "×".join(subset) for k in range(1, len(PARTS) + 1) for subset in itertools.combinations(PARTS, k)
)
# Two numbers within this of each other are read as equal by `verdict`: the standard error of
# the difference of two scores at p = 0.5 on 200 test items (sqrt(2 * 0.25 / 200) = 0.05), the
# default math and tau test size. A documented default; conf/bench.yaml analysis.tolerance sets it.
TOLERANCE = 0.05
VERDICTS = ("unchanged", "single", "no effect", "additive", "synergistic", "redundant", "interfering")


def corner_name(code: str) -> str:
    """A corner as people read it: "initial", "submitted", or the submitted parts ("data+harness")."""
    if set(code) == {"0"}:
        return "initial"
    if set(code) == {"1"}:
        return "submitted"
    return "+".join(p for p, bit in zip(PARTS, code, strict=True) if bit == "1")


def only(part: str) -> str:
    """The corner with only `part` taken from the submission."""
    return "".join("1" if p == part else "0" for p in PARTS)


def contrast(effect: str) -> dict[str, float]:
    """The weight of each corner's score in `effect` (a name of EFFECTS, or "interaction").

    A factorial effect is (1/4) sum over corners of prod_{part in effect} (+1 submitted, -1 initial)
    x score: a main effect is the mean score with that part submitted minus the mean with it
    initial, over every level of the other two parts. "interaction" is together minus the sum
    of the parts alone (see `Effects.interaction`), the number `verdict` reads.
    """
    if effect == "interaction":
        weights = {c: 0.0 for c in CORNERS}
        weights["1" * len(PARTS)] += 1.0
        weights["0" * len(PARTS)] -= 1.0
        for part in PARTS:
            weights[only(part)] -= 1.0
            weights["0" * len(PARTS)] += 1.0
        return weights
    members = effect.split("×")
    if effect not in EFFECTS:
        raise ValueError(f"unknown effect {effect!r}: one of {EFFECTS} or 'interaction'")
    half = 2 ** (len(PARTS) - 1)
    out = {}
    for code in CORNERS:
        sign = 1.0
        for part, bit in zip(PARTS, code, strict=True):
            if part in members:
                sign *= 1.0 if bit == "1" else -1.0
        out[code] = sign / half
    return out


def apply(weights: Mapping[str, float], scores: Mapping[str, float]) -> float:
    return sum(w * scores[code] for code, w in weights.items())


def effects(scores: Mapping[str, float]) -> Effects:
    """The effects of the 8 corners' scores ({"000": s, ..., "111": s})."""
    missing = set(CORNERS) - set(scores)
    if missing:
        raise ValueError(f"the grid lacks corners {sorted(missing)}")
    by = {e: apply(contrast(e), scores) for e in EFFECTS}
    base = scores["0" * len(PARTS)]
    alone = {p: scores[only(p)] - base for p in PARTS}
    together = scores["1" * len(PARTS)] - base
    return Effects(
        main={p: by[p] for p in PARTS},
        interactions={e: by[e] for e in EFFECTS if "×" in e},
        alone=alone,
        together=together,
        interaction=together - sum(alone.values()),
    )


def verdict(eff: Effects, changed: list[str], tolerance: float = TOLERANCE) -> tuple[str, str]:
    """(kind, one line) for a run: how the submission's parts combined.

    Over the parts the submission changed, with `tolerance` as the resolution:
    - "unchanged": the submission is the initial system;
    - "single": one part changed (nothing to combine);
    - "no effect": every part alone and all together within tolerance of the initial system;
    - "additive": together within tolerance of the sum of the parts alone;
    - "synergistic": together above that sum by more than tolerance;
    - "redundant": together below the sum, but not below the best part alone (their gains overlap);
    - "interfering": together below the best part alone by more than tolerance (combining hurt).
    """
    if not changed:
        return "unchanged", "the submission is the initial system: no part changed"
    alone = "; ".join(f"{p} alone {eff.alone[p]:+.3f}" for p in changed)
    if len(changed) == 1:
        return "single", f"only the {changed[0]} changed: {eff.together:+.3f}"
    parts_sum = sum(eff.alone[p] for p in changed)
    line = f"{alone}; together {eff.together:+.3f} (sum alone {parts_sum:+.3f})"
    best = max(eff.alone[p] for p in changed)
    if all(abs(eff.alone[p]) <= tolerance for p in changed) and abs(eff.together) <= tolerance:
        kind = "no effect"
    elif abs(eff.together - parts_sum) <= tolerance:
        kind = "additive"
    elif eff.together > parts_sum:
        kind = "synergistic"
    elif eff.together >= best - tolerance:
        kind = "redundant"
    else:
        kind = "interfering"
    return kind, f"{line}: {kind} (tolerance {tolerance:.3f})"
