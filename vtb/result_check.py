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
from typing import Any

from vtb.bench_result import BadResult, BenchResult

MAX_RESULT_BYTES = 8 << 20  # a result with per-item rewards of a large test split fits well below


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


def _dict(value: Any, where: str) -> dict:
    if not isinstance(value, dict):
        raise BadResult(f"{where} is {type(value).__name__}, not an object")
    return value


def _text(value: Any, where: str, limit: int = 4096) -> str:
    if not isinstance(value, str) or len(value) > limit:
        raise BadResult(f"{where} is not a string of at most {limit} characters")
    return value


def _loads(data: bytes, what: str) -> Any:
    try:
        return json.loads(data)
    except (ValueError, RecursionError) as e:
        raise BadResult(f"{what} is not valid JSON ({type(e).__name__})") from None


def check_result(result: Any, expected: dict[str, Any] | None = None) -> BenchResult:
    """`result` read typed if every figure the leaderboard reads is sound, else BadResult with
    the reason; its `location` (where the run record stays) must be a host and a path.

    `expected` ({"run_id": ..., "task": ..., "agent": ..., "seed": ...}) is what the sweep
    dispatched: a result of another run (a swapped or replayed record) is refused too.
    """
    r = _dict(result, "result")
    typed = BenchResult.from_json(r)  # every figure a leaderboard reads, checked where it is typed
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
    return typed
