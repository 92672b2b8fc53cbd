"""Candidates: content-addressed snapshots of the three editable parts of an agent system.

The research agent edits a live workspace; after each turn the pipeline snapshots
data/, trainer/ and harness/ into a store keyed by their hashes. Train, validate and grade
read snapshots, never the live workspace, so a later edit cannot change a past result.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from vtb.hashing import hash_dir, hash_json

PARTS = ("data", "trainer", "harness")


def part_hashes(root: Path) -> dict[str, str]:
    return {part: hash_dir(root / part) for part in PARTS}


def snapshot_id(hashes: dict[str, str]) -> str:
    return hash_json(hashes)[:16]


def snapshot(ws: Path, store: Path) -> str:
    """Copy the parts of ws into store/<id> (once) and return the id."""
    sid = snapshot_id(part_hashes(ws))
    dest = store / sid
    if not dest.exists():
        tmp = store / f".{sid}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        for part in PARTS:
            if (ws / part).exists():
                shutil.copytree(ws / part, tmp / part, ignore=shutil.ignore_patterns("__pycache__", ".*"))
            else:
                (tmp / part).mkdir(parents=True)
        tmp.rename(dest)
    return sid


def restore(store: Path, sid: str, ws: Path) -> None:
    """Make the parts of ws identical to snapshot sid (other workspace files are left alone)."""
    for part in PARTS:
        shutil.rmtree(ws / part, ignore_errors=True)
        shutil.copytree(store / sid / part, ws / part)


def changed_files(store: Path, before: str, after: str) -> dict[str, list[str]]:
    """Files added, removed or changed per part between two snapshots."""
    out: dict[str, list[str]] = {}
    for part in PARTS:
        a, b = store / before / part, store / after / part
        files_a = {p.relative_to(a): p for p in a.rglob("*") if p.is_file()}
        files_b = {p.relative_to(b): p for p in b.rglob("*") if p.is_file()}
        changed = sorted(
            str(rel)
            for rel in files_a.keys() | files_b.keys()
            if rel not in files_a
            or rel not in files_b
            or files_a[rel].read_bytes() != files_b[rel].read_bytes()
        )
        if changed:
            out[part] = changed
    return out
