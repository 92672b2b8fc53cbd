"""Load real SWE-bench / SWE-bench Verified instances from a local file or the Hugging Face Hub.

Accepts a .json file (a list of records), .jsonl, .parquet (the Hub's own format), or a dataset
name such as "princeton-nlp/SWE-bench_Verified" (only when the string is not a local path; that
needs network access). FAIL_TO_PASS / PASS_TO_PASS come back as lists whether the source stores
them JSON-encoded (the Hub does) or as lists. Errors name the file, the record and the field,
because a half-loaded benchmark would quietly change what is measured.
"""

from __future__ import annotations

import json
from pathlib import Path

from vtb.domains import common

REQUIRED = (
    "instance_id",
    "repo",
    "base_commit",
    "patch",
    "test_patch",
    "problem_statement",
    "FAIL_TO_PASS",
    "PASS_TO_PASS",
)
OPTIONAL = {"hints_text": "", "created_at": "", "version": "", "environment_setup_commit": ""}
SUFFIXES = (".json", ".jsonl", ".parquet")


def _from_hub(name: str, split: str) -> list:
    try:
        from datasets import load_dataset

        return [dict(r) for r in load_dataset(name, split=split)]
    except Exception as err:
        raise ValueError(
            f"{name!r} is not a local file, and loading it as a Hugging Face dataset (split {split!r}) failed: "
            f"{type(err).__name__}: {err}. That needs network access; offline, pass a local "
            f".json/.jsonl/.parquet file in the SWE-bench schema instead."
        ) from err


def _tests(value, where: str, field: str) -> list[str]:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            raise ValueError(f"{where}: field {field!r} is a string but not a JSON list") from None
    if not isinstance(value, list | tuple) or not all(isinstance(t, str) for t in value):
        raise ValueError(f"{where}: field {field!r} must be a list of test ids (or its JSON encoding)")
    return list(value)


def load_instances(path: str, split: str = "test") -> list[dict]:
    """SWE-bench records from a local .json/.jsonl/.parquet file or a Hub dataset name (`split`)."""
    local = Path(path).expanduser()
    if local.is_file():
        if local.suffix not in SUFFIXES:
            raise ValueError(
                f"{local}: unsupported file type {local.suffix!r}; use one of {', '.join(SUFFIXES)}"
            )
        source, records = str(local), common.read_records(local, "SWE-bench records")
    elif local.exists():
        raise ValueError(f"{path}: not a file (expected a .json/.jsonl/.parquet file of SWE-bench records)")
    elif local.suffix in SUFFIXES or path.startswith((".", "/", "~")):
        raise ValueError(f"{path}: no such file (expected a .json/.jsonl/.parquet file of SWE-bench records)")
    else:
        source, records = path, _from_hub(path, split)
    out = []
    for i, record in enumerate(records):
        if not isinstance(record, dict):
            raise ValueError(f"{source}: record {i} is not an object")
        where = f"{source}: record {i} ({record.get('instance_id', 'no instance_id')})"
        for field in REQUIRED:
            if record.get(field) is None:
                raise ValueError(f"{where} is missing required field {field!r}")
        inst = {**OPTIONAL, **record}
        for field in ("FAIL_TO_PASS", "PASS_TO_PASS"):
            inst[field] = _tests(record[field], where, field)
        out.append(inst)
    seen: set = set()
    for inst in out:
        if inst["instance_id"] in seen:
            raise ValueError(f"{source}: instance_id {inst['instance_id']!r} occurs more than once")
        seen.add(inst["instance_id"])
    return out
