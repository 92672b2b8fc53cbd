"""Content hashes for cache keys: exactly what determines a result, never a run id."""

from __future__ import annotations

import hashlib
import json
import os
from functools import cache
from pathlib import Path

from vtb import safefs


def hash_json(obj: object) -> str:
    data = json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(data.encode()).hexdigest()


def hash_file(path: Path) -> str:
    """sha256 of a regular file's bytes, opened without following a link at its last component."""
    fd, _ = safefs._open_regular(str(path))
    return _hash_fd(fd)


def _hash_fd(fd: int) -> str:
    h = hashlib.sha256()
    try:
        while block := os.read(fd, 1 << 20):
            h.update(block)
    finally:
        os.close(fd)
    return h.hexdigest()


def file_digests(path: Path) -> dict[str, str]:
    """sha256 per regular file under path by relative path (an lstat walk: dotfiles and __pycache__
    skipped; links, FIFOs, sockets and devices never followed or opened, and left out, as the
    workspace snapshot leaves them out)."""
    out = {}
    for e in safefs.walk(Path(path), safefs.skip_hidden):
        if e.kind == "file":
            try:
                fd, _ = safefs._open_regular(e.name, e.dir_fd)
            except safefs.Rejected:
                continue  # swapped for a link or a special file since the lstat
            out[e.rel] = _hash_fd(fd)
    return out


def hash_dir(path: Path) -> str:
    """Hash of relative paths and bytes of every regular file (see file_digests); None for no directory."""
    if not safefs.is_real_dir(Path(path)):
        return hash_json(None)
    h = hashlib.sha256()
    for rel, digest in sorted(file_digests(path).items(), key=lambda kv: kv[0].split("/")):
        h.update(rel.encode() + b"\0" + digest.encode() + b"\0")
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
