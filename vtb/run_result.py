"""A finished run's result as the leaderboard reads it: one typed value per result.json.

result.json (vtb/record.py) is plain JSON for any tool; the leaderboard, which pools runs and
compares agents, reads it once into a `RunResult` here and then uses attributes, so every rule
about a field (what an absent test split or fingerprint means, which rewards are usable, when a
run is flagged) is in one place. A result that lacks a figure the leaderboard needs is refused
with the field named (`BadRun`), never half read. Sweep results from shared storage are checked
more strictly first (vtb/result_check.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from vtb import codesign


class BadRun(ValueError):
    """A result the leaderboard cannot read; the message names the field."""


def _rewards(value: Any) -> dict[str, float] | None:
    """Per-item rewards, or None when absent, empty or not all finite numbers (the comparison
    then falls back to the runs' scores over seeds)."""
    if not isinstance(value, dict) or not value:
        return None
    ok = all(
        isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) for v in value.values()
    )
    return {str(k): float(v) for k, v in value.items()} if ok else None


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise BadRun(f"{where} is {str(value)[:40]!r}, not a finite number")
    return float(value)


@dataclass(frozen=True)
class Corner:
    """One system of the co-design grid: its test score and, where usable, its per-item rewards."""

    code: str  # "000" (initial) ... "111" (submitted): data, trainer, harness
    test_score: float
    item_rewards: dict[str, float] | None


@dataclass(frozen=True)
class Grid:
    corners: dict[str, Corner]
    verdict: str  # one of codesign.VERDICTS, or "unknown"

    @property
    def per_item(self) -> bool:
        """Whether every corner has usable per-item rewards (a contrast is then paired per item)."""
        return all(c.item_rewards is not None for c in self.corners.values())


@dataclass(frozen=True)
class RunResult:
    run_id: str
    task: str
    agent: str
    seed: int
    initial: float  # test scores
    submitted: float
    reference: float | None  # None: the run built no reference system
    budget_used: float
    budget_unit: str
    flagged: bool  # by the contamination scan, the null-model check, the grading cap or the audit
    split: tuple[str, str]  # (kind, salt sha256) of its test split; ("", "") before it was kept
    fingerprint: str  # its reproducibility id, "<mode> <id>" where kernels were not pinned; "" unrecorded
    item_rewards: dict[str, float] | None  # the submission's, per test item
    grid: Grid | None  # the co-design grid, where the analysis ran and found effects

    @classmethod
    def from_json(cls, r: dict) -> RunResult:
        if not isinstance(r, dict):
            raise BadRun(f"a result is {type(r).__name__}, not an object")
        try:
            sub, scan = r["submitted"], r.get("contamination") or {}
            reference = r.get("reference")
            return cls(
                run_id=str(r["run_id"]),
                task=str(r["task"]),
                agent=str(r["agent"]),
                seed=int(r["seed"]),
                initial=_number(r["initial"]["test_score"], "initial.test_score"),
                submitted=_number(sub["test_score"], "submitted.test_score"),
                reference=_number(reference["test_score"], "reference.test_score") if reference else None,
                budget_used=_number(r["budget"]["used"], "budget.used"),
                budget_unit=str(r["budget"]["unit"]),
                flagged=bool(scan.get("flagged"))
                or bool(
                    sub.get("flagged_by_null_model")
                    or sub.get("flagged_by_grading_cap")
                    or sub.get("flagged_by_provenance")
                ),
                split=_split(r.get("test_split")),
                fingerprint=_fingerprint(r.get("reproducibility")),
                item_rewards=_rewards(sub.get("item_rewards")),
                grid=_grid((r.get("analysis") or {}).get("grid")),
            )
        except (KeyError, TypeError, AttributeError) as e:
            raise BadRun(
                f"result {str(r.get('run_id'))[:80]!r} lacks {type(e).__name__}: {str(e)[:80]}"
            ) from None


def _split(split: Any) -> tuple[str, str]:
    if not isinstance(split, dict):
        return "", ""
    return str(split.get("kind", "")), str(split.get("salt_sha256", ""))


def _fingerprint(fp: Any) -> str:
    """The run's reproducibility fingerprint id (vtb/repro.py), prefixed with its mode ("native",
    "gpu") where its kernels were not pinned; "" for a record from before it was kept."""
    if not isinstance(fp, dict):
        return ""
    mode, fid = str(fp.get("mode", ""))[:20], str(fp.get("id", ""))[:20]
    return fid if mode == "reproducible" else f"{mode or 'native'} {fid}"


def _grid(grid: Any) -> Grid | None:
    if not isinstance(grid, dict) or not grid.get("effects"):
        return None
    corners = {
        str(c["corner"]): Corner(str(c["corner"]), _number(c["test_score"], "grid corner test_score"),
                                 _rewards(c.get("item_rewards")))
        for c in grid["corners"]
    }  # fmt: skip
    verdict = grid.get("verdict")
    return Grid(corners, verdict if verdict in codesign.VERDICTS else "unknown")
