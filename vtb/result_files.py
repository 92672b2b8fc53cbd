"""A run record's result files, result.json and item_rewards.json: their schema versions and how
they are read back (a leaf: no project imports).

The leaderboard's paired comparisons (agents against each other, the co-design grid's
contrasts) need each test item's reward for the submission and for the grid's 8 systems: 1,800
numbers on the default run, which used to make up most of result.json. They live in their own
file; result.json keeps the scores. In memory, the bench's returned result (which a deployed
bench sends to its sweep) and `load_result` carry them joined as before
(`submitted.item_rewards`, `analysis.grid.corners[i].item_rewards`), so the checks
(vtb/result_check.py) and the leaderboard read one shape whatever the record's age.

item_rewards.json: {"schema_version": 1, "run_id": ..., "systems": {"initial" | "submitted" |
"reference": {item id: reward}}, "grid": {corner code: {item id: reward}}}. Item ids, never inputs.
"""

from __future__ import annotations

import copy
import json
import os
import stat
from pathlib import Path

RESULT_SCHEMA_VERSION = 3  # result.json's layout: raised when a field changes meaning or goes
SEPARATE_SINCE = 3  # the result.json schema_version from which per-item rewards are in FILE
FILE = "item_rewards.json"
SCHEMA_VERSION = 1  # item_rewards.json's layout
MAX_BYTES = 64 << 20  # a record copied from elsewhere is read with a bound


class BadRecord(ValueError):
    """A run record this code cannot read (the reason names the file and, where it is one, the version)."""


def document(run_id: str, systems: dict[str, dict | None], grid: dict | None) -> dict:
    """item_rewards.json's content: each graded system's rewards and, with the analysis, the grid's."""
    corners = {str(c["corner"]): c.get("item_rewards") for c in (grid or {}).get("corners", [])}
    return {"schema_version": SCHEMA_VERSION, "run_id": run_id, "systems": dict(systems), "grid": corners}


def strip(result: dict) -> dict:
    """result.json's content: `result` without the per-item rewards (a copy)."""
    lean = copy.deepcopy(result)
    (lean.get("submitted") or {}).pop("item_rewards", None)
    for corner in ((lean.get("analysis") or {}).get("grid") or {}).get("corners", []):
        corner.pop("item_rewards", None)
    return lean


def join(result: dict, rewards: dict) -> dict:
    """`result` with the rewards of item_rewards.json back where the leaderboard reads them (a copy)."""
    joined = copy.deepcopy(result)
    systems, grid = rewards.get("systems") or {}, rewards.get("grid") or {}
    if isinstance(joined.get("submitted"), dict) and "submitted" in systems:
        joined["submitted"]["item_rewards"] = systems["submitted"]
    for corner in ((joined.get("analysis") or {}).get("grid") or {}).get("corners", []):
        if str(corner.get("corner")) in grid:
            corner["item_rewards"] = grid[str(corner["corner"])]
    return joined


def files_of(result: dict) -> dict[str, dict]:
    """The record files of a result as the bench returned it (rewards joined), by file name: what a
    sweep writes for a bench that ran on another machine. A result of an older schema (rewards
    inline) is one file, as it was written."""
    version = result.get("schema_version", 1)
    if not isinstance(version, int) or version < SEPARATE_SINCE:
        return {"result.json": result}
    sub = (result.get("submitted") or {}).get("item_rewards")
    rewards = document(
        str(result.get("run_id")),
        {"submitted": sub} if isinstance(sub, dict) else {},
        (result.get("analysis") or {}).get("grid"),
    )
    return {"result.json": strip(result), FILE: rewards}


def _read_json(path: Path) -> dict:
    """A JSON object from `path`, read with a bound and without following a link."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as e:
        raise BadRecord(f"{path}: not a regular file ({e.strerror})") from None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise BadRecord(f"{path}: not a regular file")
        raw = f.read(MAX_BYTES + 1)
    if len(raw) > MAX_BYTES:
        raise BadRecord(f"{path}: over {MAX_BYTES >> 20} MiB")
    try:
        data = json.loads(raw)
    except ValueError as e:
        raise BadRecord(f"{path}: not JSON ({e})") from None
    if not isinstance(data, dict):
        raise BadRecord(f"{path}: not a JSON object")
    return data


def load_result(path: Path) -> dict:
    """A run's result.json as the leaderboard reads it: with its per-item rewards joined in.

    Older records (rewards inline: schema_version 2 and before) load as they are; one newer than
    this code writes is refused, naming its version."""
    result = _read_json(path)
    version = result.get("schema_version", 1)
    if not isinstance(version, int) or isinstance(version, bool) or version > RESULT_SCHEMA_VERSION:
        raise BadRecord(
            f"{path}: result.json schema_version {str(version)[:20]} is newer than this code reads "
            f"({RESULT_SCHEMA_VERSION}); update the project to read it"
        )
    if version < SEPARATE_SINCE:
        return result
    side = path.parent / FILE
    if not side.exists():
        return result  # a record without its rewards file: the leaderboard compares over seeds only
    rewards = _read_json(side)
    if rewards.get("schema_version") != SCHEMA_VERSION or rewards.get("run_id") != result.get("run_id"):
        raise BadRecord(
            f"{side}: schema_version {str(rewards.get('schema_version'))[:20]!r}, run "
            f"{str(rewards.get('run_id'))[:80]!r}: not this code's {SCHEMA_VERSION} for run "
            f"{str(result.get('run_id'))[:80]!r}"
        )
    return join(result, rewards)
