"""The co-design grid's arithmetic (vtb/codesign.py) on fixed scores, every figure computed by hand."""

from __future__ import annotations

import pytest

from vtb import codesign

# corner "dth": 1 = the submitted part. The harness carries most of the gain, the data a little,
# the trainer nothing alone but something beside the harness.
SCORES = {
    "000": 0.10,
    "100": 0.15,
    "010": 0.10,
    "001": 0.57,
    "110": 0.20,
    "101": 0.58,
    "011": 0.60,
    "111": 0.70,
}


def test_main_effects_and_interactions_of_a_2x2x2_grid() -> None:
    eff = codesign.effects(SCORES)
    # data: mean of (.15 .20 .58 .70) - mean of (.10 .10 .57 .60) = .4075 - .3425
    assert eff.main["data"] == pytest.approx(0.065)
    # trainer: mean of (.10 .20 .60 .70) - mean of (.10 .15 .57 .58) = .40 - .35
    assert eff.main["trainer"] == pytest.approx(0.05)
    # harness: mean of (.57 .58 .60 .70) - mean of (.10 .15 .10 .20) = .6125 - .1375
    assert eff.main["harness"] == pytest.approx(0.475)
    # data×trainer: (000 + 001 + 110 + 111 - 100 - 010 - 101 - 011) / 4 = (1.57 - 1.43) / 4
    assert eff.interactions["data×trainer"] == pytest.approx(0.035)
    # data×harness: (000 + 010 + 101 + 111 - 100 - 110 - 001 - 011) / 4 = (1.48 - 1.52) / 4
    assert eff.interactions["data×harness"] == pytest.approx(-0.01)
    # trainer×harness: (000 + 100 + 011 + 111 - 010 - 110 - 001 - 101) / 4 = (1.55 - 1.45) / 4
    assert eff.interactions["trainer×harness"] == pytest.approx(0.025)
    # three-way: (111 + 100 + 010 + 001 - 000 - 110 - 101 - 011) / 4 = (1.52 - 1.48) / 4
    assert eff.interactions["data×trainer×harness"] == pytest.approx(0.01)
    assert eff.alone == pytest.approx({"data": 0.05, "trainer": 0.0, "harness": 0.47})
    assert eff.together == pytest.approx(0.60)
    assert eff.interaction == pytest.approx(0.60 - 0.52)


def test_contrasts_apply_to_any_scores_like_the_effects() -> None:
    """The leaderboard applies the same weights to per-item rewards: they must be the effects."""
    eff = codesign.effects(SCORES)
    assert codesign.apply(codesign.contrast("harness"), SCORES) == pytest.approx(eff.main["harness"])
    assert codesign.apply(codesign.contrast("interaction"), SCORES) == pytest.approx(eff.interaction)
    weights = codesign.contrast("interaction")  # 111 - 100 - 010 - 001 + 2 x 000
    assert weights == {
        "000": 2.0,
        "001": -1.0,
        "010": -1.0,
        "011": 0.0,
        "100": -1.0,
        "101": 0.0,
        "110": 0.0,
        "111": 1.0,
    }
    with pytest.raises(ValueError):
        codesign.contrast("model")
    with pytest.raises(ValueError):
        codesign.effects({"000": 0.1})


def _grid(alone: dict[str, float], together: float, base: float = 0.1) -> codesign.Effects:
    scores = {c: base for c in codesign.CORNERS}
    for part, gain in alone.items():
        scores[codesign.only(part)] = base + gain
    scores["111"] = base + together
    return codesign.effects(scores)


@pytest.mark.parametrize(
    ("alone", "together", "changed", "kind"),
    [
        ({"harness": 0.47, "data": 0.05}, 0.48, ["data", "harness"], "additive"),  # the example
        ({"harness": 0.30, "data": 0.20}, 0.70, ["data", "harness"], "synergistic"),
        ({"harness": 0.40, "data": 0.30}, 0.45, ["data", "harness"], "redundant"),
        ({"harness": 0.40, "data": 0.30}, 0.20, ["data", "harness"], "interfering"),
        ({"harness": 0.01, "trainer": -0.02}, 0.03, ["trainer", "harness"], "no effect"),
        ({"harness": 0.47}, 0.47, ["harness"], "single"),
        ({}, 0.0, [], "unchanged"),
    ],
)
def test_verdicts(alone: dict, together: float, changed: list[str], kind: str) -> None:
    got, line = codesign.verdict(_grid(alone, together), changed, tolerance=0.05)
    assert got == kind, line
    if kind == "additive":
        assert line.startswith("data alone +0.050; harness alone +0.470; together +0.480 (sum alone +0.520)")
        assert line.endswith(": additive (tolerance 0.050)")


def test_corner_names() -> None:
    assert [codesign.corner_name(c) for c in ("000", "111", "001", "101")] == [
        "initial",
        "submitted",
        "harness",
        "data+harness",
    ]
