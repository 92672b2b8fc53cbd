"""result.json as one typed value: written once, read back as strictly as a leaderboard needs.

The run record builds it (`record.RunRecord.finish`) and its summary table and report read its
attributes; `to_json()` gives the schema-3 object key for key. `from_json()` is the one reader:
strict (a `BadResult` naming the field) on every figure a leaderboard uses, lenient (None) on the
rest. The sweep's check of results from shared storage (vtb/result_check.py) is this plus where
and whose; the leaderboard reads every result through it (`leaderboard.RunResult`). Records of
schema <= 2 hold the same fields with the rewards inline, which is how `result_files.load_result`
hands every record over, so one reader serves all.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from vtb import codesign
from vtb.result_parts import (
    AnalysisResult,
    BadResult,
    ContaminationScan,
    Fingerprint,
    Provenance,
    TestSplit,
    an_object,
    number,
    score,
    text_or_none,
)

SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")  # run ids become folder names
UNITS = ("flops", "cpu_seconds", "gpu_seconds")
MAX_ITEMS = 200_000  # per-item rewards of one system
BUDGET_KEYS = (
    "used",
    "limit",
    "unit",
    "flops",
    "cpu_seconds",
    "gpu_seconds",
    "agent_tokens",
    "agent_cost_usd",
)


def _optional(value: Any, check, where: str):
    return None if value is None else check(value, where)


def _name(value: Any, where: str) -> str:
    if not isinstance(value, str) or not SAFE_NAME.match(value):
        raise BadResult(f"{where} {str(value)[:60]!r} is not a plain name ([A-Za-z0-9._-], 200 max)")
    return value


def _flag(value: Any, where: str) -> bool | None:
    if value not in (None, True, False):
        raise BadResult(f"{where} is not a boolean")
    return value


def rewards(value: Any, where: str) -> dict[str, float]:
    items = an_object(value, where)
    if len(items) > MAX_ITEMS:
        raise BadResult(f"{where}: {len(items)} items, over {MAX_ITEMS}")
    out = {}
    for key, v in items.items():
        if not isinstance(key, str) or len(key) > 200:
            raise BadResult(f"{where} key is not a string of at most 200 characters")
        out[key] = score(v, f"{where}[{key[:40]!r}]")
    return out


@dataclass(frozen=True)
class Score:
    """A graded system: its test score and its domain's extra figures (pass^k, pass@k), plus
    `not_judged` (tau2 episodes scored on their other components)."""

    test_score: float
    extra: dict[str, float] = field(default_factory=dict)

    def to_json(self) -> dict:
        return {"test_score": self.test_score, **self.extra}

    @classmethod
    def from_json(cls, value: Any, where: str) -> Score:
        d = an_object(value, where)
        extra: dict[str, float] = {}
        for key, v in d.items():
            if key.startswith(("pass^", "pass@")) and v is not None:
                extra[key] = score(v, f"{where}.{key}")
            elif key == "not_judged" and v is not None:
                extra[key] = number(v, f"{where}.{key}")
        return cls(score(d.get("test_score"), f"{where}.test_score"), extra)


@dataclass(frozen=True)
class Submitted:
    score: Score
    val_score: float | None
    iteration: int
    flagged_by_null_model: bool | None  # None: not checked
    flagged_by_grading_cap: bool
    flagged_by_provenance: bool | None  # None: not audited
    provenance: Provenance | None
    base_model_test_score: float | None
    item_rewards: dict[str, float] | None

    @property
    def flagged(self) -> bool:
        return bool(self.flagged_by_null_model or self.flagged_by_grading_cap or self.flagged_by_provenance)

    def to_json(self) -> dict:
        return {
            **self.score.to_json(),
            "val_score": self.val_score,
            "iteration": self.iteration,
            "flagged_by_null_model": self.flagged_by_null_model,
            "flagged_by_grading_cap": self.flagged_by_grading_cap,
            "flagged_by_provenance": self.flagged_by_provenance,
            "provenance": self.provenance.to_json() if self.provenance else None,
            "base_model_test_score": self.base_model_test_score,
            "item_rewards": self.item_rewards,
        }

    @classmethod
    def from_json(cls, value: Any) -> Submitted:
        d = an_object(value, "submitted")
        it = d.get("iteration")
        if not isinstance(it, int) or isinstance(it, bool) or it < 0:
            raise BadResult("submitted.iteration is not a non-negative integer")
        return cls(
            score=Score.from_json(d, "submitted"),
            val_score=_optional(d.get("val_score"), score, "submitted.val_score"),
            iteration=it,
            flagged_by_null_model=_flag(d.get("flagged_by_null_model"), "submitted.flagged_by_null_model"),
            flagged_by_grading_cap=bool(
                _flag(d.get("flagged_by_grading_cap"), "submitted.flagged_by_grading_cap")
            ),
            flagged_by_provenance=_flag(d.get("flagged_by_provenance"), "submitted.flagged_by_provenance"),
            provenance=Provenance.from_json(d.get("provenance")),
            base_model_test_score=_optional(
                d.get("base_model_test_score"), score, "submitted.base_model_test_score"
            ),
            item_rewards=_optional(d.get("item_rewards"), rewards, "submitted.item_rewards"),
        )


@dataclass(frozen=True)
class Budget:
    used: float
    limit: float | None
    unit: str
    flops: float
    cpu_seconds: float
    gpu_seconds: float
    agent_tokens: int
    agent_cost_usd: float

    def to_json(self) -> dict:
        return {k: getattr(self, k) for k in BUDGET_KEYS}

    @classmethod
    def from_json(cls, value: Any) -> Budget:
        d = an_object(value, "budget")
        if d.get("unit") not in UNITS:
            raise BadResult(f"budget.unit {str(d.get('unit'))[:40]!r} is not one of {UNITS}")
        figures = {
            k: number(d.get(k, 0.0), f"budget.{k}")
            for k in ("used", "flops", "cpu_seconds", "gpu_seconds", "agent_cost_usd")
        }
        tokens = int(number(d.get("agent_tokens", 0), "budget.agent_tokens"))
        return cls(
            limit=_optional(d.get("limit"), number, "budget.limit"),
            unit=d["unit"],
            agent_tokens=tokens,
            **figures,
        )


def check_grid(value: Any, where: str = "analysis.grid") -> dict:
    """The co-design grid a leaderboard reads: the 8 corners, each once, scored; a known verdict."""
    grid = an_object(value, where)
    corners = grid.get("corners")
    if not isinstance(corners, list) or len(corners) != len(codesign.CORNERS):
        raise BadResult(f"{where}.corners is not a list of {len(codesign.CORNERS)} corners")
    seen = []
    for i, corner in enumerate(corners):
        entry = an_object(corner, f"{where}.corners[{i}]")
        seen.append(entry.get("corner"))
        score(entry.get("test_score"), f"{where}.corners[{i}].test_score")
        _optional(entry.get("item_rewards"), rewards, f"{where}.corners[{i}].item_rewards")
    if sorted(map(str, seen)) != list(codesign.CORNERS):
        raise BadResult(f"{where}.corners are not the corners {codesign.CORNERS}, each once")
    if grid.get("verdict") not in codesign.VERDICTS:
        raise BadResult(
            f"{where}.verdict {str(grid.get('verdict'))[:40]!r} is not one of {codesign.VERDICTS}"
        )
    _optional(grid.get("effects"), an_object, f"{where}.effects")
    return grid


@dataclass(frozen=True)
class BenchResult:
    schema_version: int
    run_id: str
    git: dict | None
    started_at: str | None
    ended_at: str | None
    task: str
    source: str | None
    metric: str | None
    test_split: TestSplit | None
    reproducibility: Fingerprint | None  # vtb/repro.py's fingerprint
    agent: str
    model: str
    seed: int
    initial: Score
    initial_val_score: float | None
    submitted: Submitted
    reference: Score | None  # None: the run built no reference system
    budget: Budget
    iterations: int | None
    gains_by_part: dict[str, float]
    contamination: ContaminationScan | None
    grading_determinism: dict | None
    analysis: AnalysisResult | None  # its grid checked strictly (check_grid)
    item_rewards_file: str | None
    record: str | None

    @property
    def flagged(self) -> bool:
        """By the contamination scan, the null-model check, the grading cap or the audit."""
        return bool(self.contamination and self.contamination.flagged) or self.submitted.flagged

    def to_json(self) -> dict:
        """result.json's object (rewards joined, as the bench returns it; result_files.strip
        takes them out for the file)."""
        return {
            "schema_version": self.schema_version,
            "run_id": self.run_id,
            "git": self.git,
            "started_at": self.started_at,
            "ended_at": self.ended_at,
            "task": self.task,
            "source": self.source,
            "metric": self.metric,
            "test_split": self.test_split.to_json() if self.test_split else None,
            "reproducibility": self.reproducibility.to_json() if self.reproducibility else None,
            "agent": self.agent,
            "model": self.model,
            "seed": self.seed,
            "initial": {
                "test_score": self.initial.test_score,
                "val_score": self.initial_val_score,
                **self.initial.extra,
            },
            "submitted": self.submitted.to_json(),
            "reference": self.reference.to_json() if self.reference else None,
            "budget": self.budget.to_json(),
            "iterations": self.iterations,
            "gains_by_part": self.gains_by_part,
            "contamination": self.contamination.to_json() if self.contamination else None,
            "grading_determinism": self.grading_determinism,
            "analysis": self.analysis.to_json() if self.analysis else None,
            "item_rewards_file": self.item_rewards_file,
            "record": self.record,
        }

    @classmethod
    def from_json(cls, value: Any) -> BenchResult:
        r = an_object(value, "result")
        seed = r.get("seed")
        if isinstance(seed, bool) or not isinstance(seed, int) or abs(seed) >= 2**63:
            raise BadResult(f"seed {str(seed)[:40]!r} is not an integer")
        analysis = r.get("analysis")
        if analysis is not None:
            _optional(an_object(analysis, "analysis").get("grid"), check_grid, "analysis.grid")
        initial = an_object(r.get("initial"), "initial")
        gains = r.get("gains_by_part") or {}
        version = r.get("schema_version", 1)
        return cls(
            schema_version=version if isinstance(version, int) and not isinstance(version, bool) else 1,
            run_id=_name(r.get("run_id"), "run_id"),
            git=r.get("git") if isinstance(r.get("git"), dict) else None,
            started_at=text_or_none(r.get("started_at")),
            ended_at=text_or_none(r.get("ended_at")),
            task=_name(r.get("task"), "task"),
            source=text_or_none(r.get("source")),
            metric=text_or_none(r.get("metric")),
            test_split=_optional(r.get("test_split"), lambda v, _: TestSplit.from_json(v), "test_split"),
            reproducibility=Fingerprint.from_json(r.get("reproducibility")),
            agent=_name(r.get("agent"), "agent"),
            model=_name(r.get("model"), "model"),
            seed=seed,
            initial=Score.from_json(initial, "initial"),
            initial_val_score=_optional(initial.get("val_score"), score, "initial.val_score"),
            submitted=Submitted.from_json(r.get("submitted")),
            reference=_optional(r.get("reference"), Score.from_json, "reference"),
            budget=Budget.from_json(r.get("budget")),
            iterations=r.get("iterations") if isinstance(r.get("iterations"), int) else None,
            gains_by_part={
                str(k): number(v, f"gains_by_part.{k}", -1.0, 1.0)
                for k, v in an_object(gains, "gains_by_part").items()
            },
            contamination=ContaminationScan.from_json(r.get("contamination")),
            grading_determinism=r.get("grading_determinism"),
            analysis=AnalysisResult.from_json(analysis),
            item_rewards_file=text_or_none(r.get("item_rewards_file")),
            record=text_or_none(r.get("record")),
        )


@dataclass(frozen=True)
class Errored:
    """A run that could not do what it was asked (vtb/bench.py RunError): the reason and where
    its record is, never a score. error.json holds `to_json()`; a bench returns this instead of a
    BenchResult, and a sweep's row, the leaderboard's errored table and the command line's
    message read it."""

    run_id: str
    error: str
    task: str
    agent: str
    seed: int | None
    budget: Budget | None  # what the run had spent when it stopped
    record: str | None

    state = "errored"  # what tells error.json (and a deployed bench's result) from result.json

    def to_json(self) -> dict:
        return {
            "run_id": self.run_id,
            "state": self.state,
            "error": self.error,
            "task": self.task,
            "agent": self.agent,
            "seed": self.seed,
            "budget": self.budget.to_json() if self.budget else None,
            "record": self.record,
        }

    @classmethod
    def from_json(cls, value: Any) -> Errored:
        """An errored run's record read back (from a worker's storage, or error.json): every field
        a bounded string, the seed an integer or nothing, a budget that does not check is dropped."""
        d = an_object(value, "errored run")
        if d.get("state", cls.state) != cls.state:  # error.json's name says so; a state must agree
            raise BadResult("not an errored run's record (its state is not 'errored')")
        try:
            budget = Budget.from_json(d.get("budget"))
        except BadResult:
            budget = None
        seed = d.get("seed")
        return cls(
            run_id=text_or_none(d.get("run_id"), 200) or "?",
            error=text_or_none(d.get("error")) or "(no reason given)",
            task=text_or_none(d.get("task"), 200) or "?",
            agent=text_or_none(d.get("agent"), 200) or "?",
            seed=seed if isinstance(seed, int) and not isinstance(seed, bool) and abs(seed) < 2**63 else None,
            budget=budget,
            record=text_or_none(d.get("record")),
        )


def is_errored(value: Any) -> bool:
    """Whether a bench's returned or stored JSON is an errored run's (see Errored), not a result."""
    return isinstance(value, dict) and value.get("state") == Errored.state


def outcome_from_json(value: Any) -> BenchResult | Errored:
    """A bench's outcome as JSON (a deployed bench's persisted return) read back typed."""
    return Errored.from_json(value) if is_errored(value) else BenchResult.from_json(value)
