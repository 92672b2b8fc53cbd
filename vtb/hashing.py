"""Content hashes for cache keys: exactly what determines a result, never a run id."""

from __future__ import annotations

import hashlib
import json
from functools import cache
from pathlib import Path


def hash_json(obj: object) -> str:
    data = json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(data.encode()).hexdigest()


def hash_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def hash_dir(path: Path) -> str:
    """Hash of relative paths and bytes of every file (dotfiles and __pycache__ skipped)."""
    h = hashlib.sha256()
    path = Path(path)
    if not path.exists():
        return hash_json(None)
    for f in sorted(p for p in path.rglob("*") if p.is_file()):
        rel = f.relative_to(path)
        if any(part.startswith(".") or part == "__pycache__" for part in rel.parts):
            continue
        h.update(str(rel).encode() + b"\0" + hash_file(f).encode() + b"\0")
    return h.hexdigest()


@cache
def code_version(*parts: str) -> str:
    """Hash of the vtb source a result depends on (default: the whole package).

    parts are paths relative to the package (e.g. "engine", "models/tiny.py"); a change to
    any of those files invalidates the results keyed with it.
    """
    root = Path(__file__).parent
    files: list[Path] = []
    for part in parts or (".",):
        target = root / part
        files += sorted(target.rglob("*")) if target.is_dir() else [target]
    h = hashlib.sha256()
    for f in files:
        if f.is_file() and "__pycache__" not in f.parts:
            h.update(str(f.relative_to(root)).encode() + b"\0" + f.read_bytes())
    return h.hexdigest()[:16]
