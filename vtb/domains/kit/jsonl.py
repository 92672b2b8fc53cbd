"""JSONL files as the data tools, harness helpers and the orchestrator read and write them."""

from __future__ import annotations

import json
import sys
from pathlib import Path


def read_jsonl(path: str | Path) -> list[dict]:
    """The JSON lines of a file; a line that is not JSON is skipped with a note on stderr."""
    rows = []
    with open(path) as f:
        for lineno, line in enumerate(f, 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError:
                    print(f"{path}:{lineno}: skipped, not JSON", file=sys.stderr)
    return rows


def write_jsonl(path: str | Path, rows: list[dict]) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
