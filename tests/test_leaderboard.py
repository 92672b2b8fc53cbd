"""The leaderboard's statistics on fixed inputs: bootstrap CIs, normalised gains, the weighted aggregate."""

from __future__ import annotations

import csv
import json

import pytest

from vtb.leaderboard import aggregate, bootstrap_ci, normalised_gain, rows, write


def _result(
    task: str, agent: str, seed: int, submitted: float, initial: float, reference: float | None
) -> dict:
    return {
        "run_id": f"{task}-{agent}-s{seed}",
        "task": task,
        "agent": agent,
        "seed": seed,
        "submitted": {"test_score": submitted},
        "initial": {"test_score": initial},
        "reference": None if reference is None else {"test_score": reference},
        "budget": {"used": 1e12 * (seed + 1), "unit": "flops"},
    }


def test_bootstrap_ci_known_cases() -> None:
    assert bootstrap_ci([0.4]) == (0.4, 0.4)
    assert bootstrap_ci([0.3, 0.3, 0.3]) == (0.3, 0.3)
    # two seeds 0 and 1: resampled means are 0, 0.5, 1 with probability 1/4, 1/2, 1/4
    assert bootstrap_ci([0.0, 1.0]) == (0.0, 1.0)
    # 10 zeros and 10 ones: the resampled mean is Binomial(20, 1/2) / 20, whose central 95% is [0.3, 0.7]
    lo, hi = bootstrap_ci([0.0] * 10 + [1.0] * 10)
    assert lo == pytest.approx(0.3) and hi == pytest.approx(0.7)
    assert bootstrap_ci([0.1, 0.5, 0.9]) == bootstrap_ci([0.1, 0.5, 0.9])  # fixed seed: reproducible
    with pytest.raises(ValueError):
        bootstrap_ci([])


def test_normalised_gain() -> None:
    assert normalised_gain(0.6, 0.2, 0.8) == pytest.approx(2 / 3)
    assert normalised_gain(0.2, 0.2, 0.8) == 0.0 and normalised_gain(0.8, 0.2, 0.8) == 1.0
    assert normalised_gain(0.1, 0.2, 0.8) == pytest.approx(-1 / 6)  # worse than the initial system
    assert normalised_gain(0.5, 0.3, 0.3) is None and normalised_gain(0.5, 0.3, None) is None


def test_rows_pool_seeds_per_task_and_agent() -> None:
    results = [_result("math", "greedy", s, sub, 0.0, 0.8) for s, sub in enumerate((0.4, 0.6, 0.8))]
    results += [_result("math", "noop", s, 0.0, 0.0, 0.8) for s in range(3)]
    table = {(r.task, r.agent): r for r in rows(results)}
    greedy = table[("math", "greedy")]
    assert greedy.seeds == 3 and greedy.score == pytest.approx(0.6) and greedy.initial == 0.0
    # all three resamples alike has probability 1/27 > 2.5%: the CI runs from the lowest to the highest seed
    assert greedy.ci_low == pytest.approx(0.4) and greedy.ci_high == pytest.approx(0.8)
    assert greedy.gain == pytest.approx(0.75) and greedy.gain_ci_low <= 0.75 <= greedy.gain_ci_high
    assert greedy.budget_used == pytest.approx(2e12)
    noop = table[("math", "noop")]
    assert (noop.score, noop.ci_low, noop.ci_high, noop.gain) == (0.0, 0.0, 0.0, 0.0)


def test_aggregate_weights_tasks_by_the_inverse_reference_gap() -> None:
    results = [
        _result("math", "a", 0, 0.5, 0.0, 0.5),  # gap 0.5: weight 2
        _result("tau", "a", 0, 0.2, 0.1, 0.35),  # gap 0.25: weight 4
        _result("swe", "a", 0, 0.9, 0.4, 0.4),  # no gap: left out
    ]
    agg = aggregate(rows(results))["a"]
    assert agg["tasks"] == ["math", "tau"]
    assert agg["weights"] == {"math": pytest.approx(1 / 3, abs=1e-4), "tau": pytest.approx(2 / 3, abs=1e-4)}
    assert agg["score"] == pytest.approx((2 * 0.5 + 4 * 0.2) / 6)


def test_write_files(tmp_path) -> None:
    for s, sub in enumerate((0.4, 0.6)):
        run = tmp_path / f"math-greedy-s{s}"
        run.mkdir()
        (run / "result.json").write_text(json.dumps(_result("math", "greedy", s, sub, 0.0, 0.8)))
    table, agg = write(tmp_path)
    md = (tmp_path / "leaderboard.md").read_text()
    assert "| math | greedy | 2 | 0.500 [0.400, 0.600] | 0.000 | 0.800 | 0.625 [0.500, 0.750] |" in md
    (row,) = list(csv.DictReader(open(tmp_path / "leaderboard.csv")))
    assert row["agent"] == "greedy" and float(row["score"]) == pytest.approx(0.5)
    assert (tmp_path / "leaderboard.png").stat().st_size > 1000 and agg["greedy"]["score"] == pytest.approx(
        0.5
    )
