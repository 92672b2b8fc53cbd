"""The noise floor of a comparison: how large a difference must be before it means anything.

Peer benchmarks' users report 7-11 points of run-to-run noise (tau-bench) and verdicts that flip
on a rerun (SWE-bench), so a leaderboard that shows only means invites reading noise as
progress. This module is the arithmetic the leaderboard (vtb/leaderboard.py) and the bench's
grading-determinism check (vtb/bench.py) use; pure functions on fixed inputs, no I/O:

- `seed_sd`: the sample standard deviation of a (task, agent)'s submitted test scores over seeds;
- `min_detectable_difference`: the smallest difference between two agents' mean scores that a
  two-sided test at 95% could tell from seed noise, given that SD and the seeds run;
- `paired_bootstrap`: the CI of agent A minus agent B, resampling seeds and test items, paired
  (the same seed and the same test item on both sides);
- `regrade_diff`: whether grading one submission twice gave the same score, and on which items not.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

PAIRED_SAMPLES = 10_000
PAIRED_SEED = 0  # fixed: the same runs give the same CIs


def seed_sd(scores: list[float]) -> float | None:
    """Sample standard deviation (n - 1) of scores over seeds; None with fewer than two seeds."""
    return statistics.stdev(scores) if len(scores) >= 2 else None


def t_cdf(t: float, df: int) -> float:
    """P(T <= t) for Student's t with an integer df >= 1 (the closed forms of Abramowitz & Stegun 26.7.3/4)."""
    if df < 1:
        raise ValueError("df must be >= 1")
    theta = math.atan(abs(t) / math.sqrt(df))
    c2, s = math.cos(theta) ** 2, math.sin(theta)
    if df % 2:  # odd: A = (2/pi) (theta + sin cos (1 + 2/3 cos^2 + 2*4/(3*5) cos^4 + ...))
        total, term = 0.0, 1.0
        for k in range(1, (df - 1) // 2 + 1):
            total += term
            term *= c2 * (2 * k) / (2 * k + 1)
        inner = s * math.cos(theta) * total if df > 1 else 0.0
        a = 2 / math.pi * (theta + inner)
    else:  # even: A = sin (1 + 1/2 cos^2 + 1*3/(2*4) cos^4 + ...)
        total, term = 0.0, 1.0
        for k in range(1, df // 2 + 1):
            total += term
            term *= c2 * (2 * k - 1) / (2 * k)
        a = s * total
    return 0.5 + math.copysign(a / 2, t)


def t_quantile(p: float, df: int) -> float:
    """The p-quantile of Student's t with integer df (bisection on t_cdf, to 1e-10)."""
    if not 0 < p < 1:
        raise ValueError("p must be in (0, 1)")
    lo, hi = -1e6, 1e6
    for _ in range(200):
        mid = (lo + hi) / 2
        if t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-10:
            break
    return (lo + hi) / 2


def min_detectable_difference(sd: float | None, n: int, level: float = 0.95) -> float | None:
    """The smallest difference of mean scores between two agents that a test at `level` detects.

    MDD = t_{(1 + level)/2, 2(n - 1)} * sd * sqrt(2 / n): two agents with n seeds each and this
    seed SD (the pooled two-sample t-test's critical difference, df = 2(n - 1)). A smaller
    difference between two rows cannot be told from seed-to-seed noise at this level; to detect
    it with 80% power as well, (t_{(1+level)/2} + t_{0.80}) replaces the first factor. It covers
    the noise that seeds bring (training, agent, sampled decoding), not the sampling of test
    items, which the paired bootstrap adds. None with fewer than two seeds.
    """
    if sd is None or n < 2:
        return None
    return t_quantile((1 + level) / 2, 2 * (n - 1)) * sd * math.sqrt(2 / n)


@dataclass
class Paired:
    """A minus B over the seeds both ran (and the test items all their runs graded)."""

    diff: float  # mean over seeds and items of A - B
    ci_low: float
    ci_high: float
    seeds: int
    items: int  # 0 when per-item rewards were missing: seeds only

    @property
    def verdict(self) -> str:
        if self.ci_low > 0:
            return "A better"
        if self.ci_high < 0:
            return "B better"
        return "not distinguishable"


def paired_bootstrap(
    a: Mapping[int, Mapping[str, float]],
    b: Mapping[int, Mapping[str, float]],
    level: float = 0.95,
    samples: int = PAIRED_SAMPLES,
    seed: int = PAIRED_SEED,
) -> Paired | None:
    """Percentile CI of mean(A - B), resampling seeds and test items with replacement, paired.

    a and b map a seed to its per-item rewards ({item id: reward}); only seeds both ran and items
    every one of those runs graded count, so each difference compares the same seed and the same
    test item. Each resample draws the seeds and, independently, the items (a two-level
    bootstrap: seed noise and test-set sampling together) and averages d[s, i] over both draws.
    A run given as {"": score} (no per-item rewards) reduces it to seeds only. None when no seed
    is shared.
    """
    seeds = sorted(set(a) & set(b))
    if not seeds:
        return None
    items = sorted(set.intersection(*(set(a[s]) & set(b[s]) for s in seeds)))
    if not items:
        return None
    d = np.array([[a[s][i] - b[s][i] for i in items] for s in seeds], dtype=float)
    if not np.isfinite(d).all():
        raise ValueError("non-finite rewards")
    rng = np.random.default_rng(seed)
    n, m = d.shape
    seed_counts = np.zeros((samples, n))
    item_counts = np.zeros((samples, m))
    np.add.at(seed_counts, (np.arange(samples)[:, None], rng.integers(0, n, (samples, n))), 1)
    np.add.at(item_counts, (np.arange(samples)[:, None], rng.integers(0, m, (samples, m))), 1)
    means = np.sort(np.einsum("bs,si,bi->b", seed_counts, d, item_counts) / (n * m))
    lo = float(means[int((1 - level) / 2 * samples)])
    hi = float(means[min(samples - 1, int((1 + level) / 2 * samples))])
    per_item = items != [""]
    return Paired(float(d.mean()), lo, hi, n, m if per_item else 0)


def regrade_diff(
    first: Mapping[str, float], second: Mapping[str, float], score: float, regrade_score: float
) -> dict:
    """Grading one submission twice: identical, or which items' rewards moved (sampling at play).

    Same harness, weights, episodes and order both times (vtb/bench.py's regrade play), so any
    difference comes from sampling in the harness's decoding, the engine or the environment.
    """
    differ = sorted(k for k in set(first) | set(second) if first.get(k) != second.get(k))
    identical = score == regrade_score and not differ
    if identical:
        note = f"identical: {len(first)} items, score {score:.4f} both times"
    else:
        note = (
            f"differs by {regrade_score - score:+.4f} on {len(differ)} of {len(set(first) | set(second))} "
            "items: sampling in the harness's decoding, the engine or the environment"
        )
    return {
        "identical": identical,
        "score": score,
        "regrade_score": regrade_score,
        "items_differ": len(differ),
        "differing_items": differ[:20],
        "note": note,
    }
