"""A bench's result read back from shared result storage, checked before a leaderboard uses it.

A sweep that dispatches benches to workers on other machines gets each result.json back as its
flow run's persisted result (Prefect result storage: a folder or bucket that every worker writes
to). Whoever can write there can hand the sweep any bytes, so the sweep treats them like a
sandbox's output: bounded in size, parsed as plain JSON (never unpickled, never through a
serializer that builds objects), every field the leaderboard reads checked for type and range,
and the run named what the sweep asked for. A result that fails becomes a failed row with the
reason, never a score. Nothing here imports Prefect: the record format is plain JSON.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from vtb import codesign

MAX_RESULT_BYTES = 8 << 20  # a result with per-item rewards of a large test split fits well below
MAX_ITEMS = 200_000  # per-item rewards of the submission
SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")  # run ids become folder names
UNITS = ("flops", "cpu_seconds", "gpu_seconds")


class BadResult(ValueError):
    """A stored result that may not reach the leaderboard; the message says why."""


def parse_record(data: bytes, serializer: str) -> dict:
    """The result in the bytes Prefect stored for a flow run, written with `serializer`.

    Prefect stores either the serialized result alone or a result record (`{"metadata": ...,
    "result": "<serialized>"}`); both are read. Only the JSON serializer is accepted: a pickled
    result from shared storage would run code when loaded.
    """
    if serializer != "json":
        raise BadResult(f"result serialized as {str(serializer)[:40]!r}, only 'json' is read")
    if len(data) > MAX_RESULT_BYTES:
        raise BadResult(f"stored result of {len(data)} bytes, over the {MAX_RESULT_BYTES}-byte limit")
    value = _loads(data, "stored result")
    if isinstance(value, dict) and set(value) == {"metadata", "result"}:  # a whole result record
        if not isinstance(value["result"], str):
            raise BadResult("result record without a JSON result")
        value = _loads(value["result"].encode(), "result")
    return value


def _loads(data: bytes, what: str) -> Any:
    try:
        return json.loads(data)
    except (ValueError, RecursionError) as e:
        raise BadResult(f"{what} is not valid JSON ({type(e).__name__})") from None


def _number(value: Any, where: str, low: float = 0.0, high: float = math.inf) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise BadResult(f"{where} is {type(value).__name__}, not a number")
    if not math.isfinite(value) or not low <= value <= high:
        raise BadResult(f"{where} = {value!r} is not a finite number in [{low}, {high}]")
    return float(value)


def _score(value: Any, where: str) -> float:
    return _number(value, where, 0.0, 1.0)


def _optional(value: Any, check, where: str) -> None:
    if value is not None:
        check(value, where)


def _text(value: Any, where: str, limit: int = 4096) -> str:
    if not isinstance(value, str) or len(value) > limit:
        raise BadResult(f"{where} is not a string of at most {limit} characters")
    return value


def _name(value: Any, where: str) -> str:
    if not isinstance(value, str) or not SAFE_NAME.match(value):
        raise BadResult(f"{where} {str(value)[:60]!r} is not a plain name ([A-Za-z0-9._-], 200 max)")
    return value


def _dict(value: Any, where: str) -> dict:
    if not isinstance(value, dict):
        raise BadResult(f"{where} is {type(value).__name__}, not an object")
    return value


def _system(value: Any, where: str) -> dict:
    """A graded system: its test score, and any other figure (pass^k, val score) a number."""
    entry = _dict(value, where)
    _score(entry.get("test_score"), f"{where}.test_score")
    for key in ("val_score", "base_model_test_score"):
        _optional(entry.get(key), _score, f"{where}.{key}")
    for key, v in entry.items():
        if key.startswith(("pass^", "pass@")):
            _optional(v, _score, f"{where}.{key}")
    return entry


def _rewards(value: Any, where: str) -> None:
    items = _dict(value, where)
    if len(items) > MAX_ITEMS:
        raise BadResult(f"{where}: {len(items)} items, over {MAX_ITEMS}")
    for key, v in items.items():
        _text(key, f"{where} key", 200)
        _score(v, f"{where}[{key[:40]!r}]")


def _grid(value: Any, where: str) -> None:
    """The co-design grid the leaderboard reads: 8 corners, each once, scored; a known verdict."""
    grid = _dict(value, where)
    corners = grid.get("corners")
    if not isinstance(corners, list) or len(corners) != len(codesign.CORNERS):
        raise BadResult(f"{where}.corners is not a list of {len(codesign.CORNERS)} corners")
    seen = []
    for i, corner in enumerate(corners):
        entry = _dict(corner, f"{where}.corners[{i}]")
        seen.append(entry.get("corner"))
        _score(entry.get("test_score"), f"{where}.corners[{i}].test_score")
        _optional(entry.get("item_rewards"), _rewards, f"{where}.corners[{i}].item_rewards")
    if sorted(map(str, seen)) != list(codesign.CORNERS):
        raise BadResult(f"{where}.corners are not the corners {codesign.CORNERS}, each once")
    if grid.get("verdict") not in codesign.VERDICTS:
        raise BadResult(
            f"{where}.verdict {str(grid.get('verdict'))[:40]!r} is not one of {codesign.VERDICTS}"
        )
    _optional(grid.get("effects"), _dict, f"{where}.effects")


def check_result(result: Any, expected: dict[str, Any] | None = None) -> dict:
    """`result` if every figure the leaderboard reads is sound, else BadResult with the reason.

    `expected` ({"run_id": ..., "task": ..., "agent": ..., "seed": ...}) is what the sweep
    dispatched: a result of another run (a swapped or replayed record) is refused too.
    """
    r = _dict(result, "result")
    _name(r.get("run_id"), "run_id")
    for key in ("task", "agent", "model"):
        _name(r.get(key), key)
    if isinstance(r.get("seed"), bool) or not isinstance(r.get("seed"), int) or abs(r["seed"]) >= 2**63:
        raise BadResult(f"seed {str(r.get('seed'))[:40]!r} is not an integer")
    _system(r.get("initial"), "initial")
    sub = _system(r.get("submitted"), "submitted")
    if (
        not isinstance(sub.get("iteration"), int)
        or isinstance(sub["iteration"], bool)
        or sub["iteration"] < 0
    ):
        raise BadResult("submitted.iteration is not a non-negative integer")
    for flag in ("flagged_by_null_model", "flagged_by_grading_cap", "flagged_by_provenance"):
        if sub.get(flag) not in (None, True, False):
            raise BadResult(f"submitted.{flag} is not a boolean")
    _optional(sub.get("item_rewards"), _rewards, "submitted.item_rewards")
    _optional(r.get("reference"), _system, "reference")
    budget = _dict(r.get("budget"), "budget")
    if budget.get("unit") not in UNITS:
        raise BadResult(f"budget.unit {str(budget.get('unit'))[:40]!r} is not one of {UNITS}")
    for key in ("used", "flops", "cpu_seconds", "gpu_seconds", "agent_tokens", "agent_cost_usd"):
        _number(budget.get(key, 0.0), f"budget.{key}")
    _optional(budget.get("limit"), _number, "budget.limit")
    scan = r.get("contamination")
    if scan is not None and _dict(scan, "contamination").get("flagged") not in (None, True, False):
        raise BadResult("contamination.flagged is not a boolean")
    analysis = r.get("analysis")
    if analysis is not None:
        _optional(_dict(analysis, "analysis").get("grid"), _grid, "analysis.grid")
    split = r.get("test_split")
    if split is not None:
        split = _dict(split, "test_split")
        if split.get("kind") not in ("public", "hidden"):
            raise BadResult("test_split.kind is not public or hidden")
        if not (
            isinstance(split.get("salt_sha256"), str) and re.fullmatch(r"[0-9a-f]{64}", split["salt_sha256"])
        ):
            raise BadResult("test_split.salt_sha256 is not a sha256 hex digest")
    where = _dict(r.get("location"), "location")
    _text(where.get("host"), "location.host", 255)
    _text(where.get("path"), "location.path")
    for key, want in (expected or {}).items():
        if key == "test_split" and r.get(key) != want:
            got = str((r.get(key) or {}).get("salt_sha256", "none"))[:12]
            raise BadResult(
                f"the bench drew another test split (salt sha256 {got}..., the sweep's "
                f"{want['salt_sha256'][:12]}...): give every worker the sweep's salt (the same salt file, "
                "or $VTB_TEST_SALT)"
            )
        if r.get(key) != want:
            raise BadResult(f"{key} is {str(r.get(key))[:80]!r}, the sweep dispatched {str(want)[:80]!r}")
    return r
