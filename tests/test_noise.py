"""The noise-floor arithmetic (vtb/noise.py) on fixed inputs: t quantiles against the published
table, the seed SD and minimum detectable difference, the paired bootstrap over seeds and items,
and the grading-determinism comparison."""

from __future__ import annotations

import math

import pytest

from vtb.noise import min_detectable_difference, paired_bootstrap, regrade_diff, seed_sd, t_cdf, t_quantile


@pytest.mark.parametrize(
    ("p", "df", "table"),
    [
        (0.975, 1, 12.706),
        (0.975, 2, 4.303),
        (0.975, 3, 3.182),
        (0.975, 4, 2.776),
        (0.975, 10, 2.228),
        (0.975, 30, 2.042),
        (0.80, 4, 0.941),
        (0.95, 5, 2.015),
    ],
)
def test_t_quantiles_match_the_published_table(p: float, df: int, table: float) -> None:
    assert t_quantile(p, df) == pytest.approx(table, abs=5e-4)
    assert t_cdf(t_quantile(p, df), df) == pytest.approx(p, abs=1e-9)
    assert t_cdf(-table, df) == pytest.approx(1 - p, abs=1e-4)  # symmetric


def test_seed_sd_and_minimum_detectable_difference() -> None:
    assert seed_sd([0.4]) is None and min_detectable_difference(None, 1) is None
    assert seed_sd([0.4, 0.5, 0.6]) == pytest.approx(0.1)
    # t(0.975, df=4) * 0.1 * sqrt(2/3)
    assert min_detectable_difference(0.1, 3) == pytest.approx(2.7764451 * 0.1 * math.sqrt(2 / 3), rel=1e-6)
    assert min_detectable_difference(0.1, 3) == pytest.approx(0.22670, abs=1e-5)
    # more seeds shrink it: t(0.975, 18) * 0.1 * sqrt(2/10)
    assert min_detectable_difference(0.1, 10) == pytest.approx(2.100922 * 0.1 * math.sqrt(0.2), rel=1e-6)
    assert min_detectable_difference(0.0, 3) == 0.0


def runs(scores_by_seed: dict[int, list[float]]) -> dict[int, dict[str, float]]:
    return {s: {f"test-{i}": r for i, r in enumerate(rewards)} for s, rewards in scores_by_seed.items()}


def test_paired_bootstrap_over_seeds_and_items() -> None:
    same = runs({0: [1, 0, 1], 1: [0, 0, 1]})
    p = paired_bootstrap(same, same)
    assert (p.diff, p.ci_low, p.ci_high, p.seeds, p.items, p.verdict) == (
        0,
        0,
        0,
        2,
        3,
        "not distinguishable",
    )
    # seeds that differ a lot, A - B constant: pairing removes the seed noise entirely
    a = runs({0: [0.2] * 4, 1: [0.5] * 4, 2: [0.8] * 4})
    b = runs({0: [0.1] * 4, 1: [0.4] * 4, 2: [0.7] * 4})
    p = paired_bootstrap(a, b)
    assert p.diff == pytest.approx(0.1) and p.ci_low == pytest.approx(0.1) and p.ci_high == pytest.approx(0.1)
    assert p.verdict == "A better" and paired_bootstrap(b, a).verdict == "B better"
    # one seed, 10 items won and 10 not: the mean of 20 resampled items is Binomial(20, 1/2)/20,
    # whose central 95% is [0.3, 0.7]
    p = paired_bootstrap(runs({0: [1.0] * 10 + [0.0] * 10}), runs({0: [0.0] * 20}))
    assert (p.diff, p.ci_low, p.ci_high) == (pytest.approx(0.5), pytest.approx(0.3), pytest.approx(0.7))
    # seeds only (no per-item rewards): seeds 0 and 1 give 0 and 1, so resampled means 0, .5, 1
    p = paired_bootstrap({0: {"": 0.0}, 1: {"": 1.0}}, {0: {"": 0.0}, 1: {"": 0.0}})
    assert (p.diff, p.ci_low, p.ci_high, p.items) == (0.5, 0.0, 1.0, 0)
    # only shared seeds and items count; a fixed RNG seed makes it reproducible
    a = runs({0: [1, 1, 1], 1: [1, 0, 1], 2: [0, 0, 0]})
    b = runs({1: [0, 0], 2: [0, 0], 3: [1, 1]})
    p = paired_bootstrap(a, b)
    assert (p.seeds, p.items, p.diff) == (2, 2, pytest.approx(0.25))
    assert paired_bootstrap(a, b) == p
    assert paired_bootstrap(a, runs({5: [1]})) is None
    with pytest.raises(ValueError):
        paired_bootstrap({0: {"x": float("nan")}}, {0: {"x": 0.0}})


def test_regrade_diff_says_whether_and_where_grading_differs() -> None:
    same = regrade_diff({"a": 1.0, "b": 0.0}, {"a": 1.0, "b": 0.0}, 0.5, 0.5)
    assert same["identical"] and same["items_differ"] == 0 and same["note"].startswith("identical")
    moved = regrade_diff({"a": 1.0, "b": 0.0, "c": 1.0}, {"a": 0.0, "b": 0.0, "c": 1.0}, 2 / 3, 1 / 3)
    assert not moved["identical"] and moved["differing_items"] == ["a"] and moved["items_differ"] == 1
    assert moved["note"].startswith("differs by -0.3333 on 1 of 3 items")
    # the same score from different items is still not deterministic grading
    swapped = regrade_diff({"a": 1.0, "b": 0.0}, {"a": 0.0, "b": 1.0}, 0.5, 0.5)
    assert not swapped["identical"] and swapped["differing_items"] == ["a", "b"]
