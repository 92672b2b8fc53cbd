"""Candidates: content-addressed snapshots of the three editable parts of an agent system.

The research agent edits a live workspace; after each turn the pipeline snapshots
data/, trainer/ and harness/ into a store keyed by their hashes. Train, validate and grade
read snapshots, never the live workspace, so a later edit cannot change a past result.

The workspace is written by sandboxed code, so a snapshot is a `safefs.copy_tree`: only
regular files and directories are kept (links, FIFOs, sockets and devices are dropped and
reported), and a part over its caps (apparent size, entries) raises `safefs.Rejected` before
anything enters the store. The snapshot id is the hash of what was kept.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from vtb import safefs
from vtb.hashing import file_digests, hash_dir, hash_json

PARTS = ("data", "trainer", "harness")


def part_hashes(root: Path) -> dict[str, str]:
    return {part: hash_dir(root / part) for part in PARTS}


def snapshot_id(hashes: dict[str, str]) -> str:
    return hash_json(hashes)[:16]


def snapshot(
    ws: Path,
    store: Path,
    caps: safefs.Caps | dict[str, safefs.Caps] = safefs.NO_CAPS,
    dropped: list | None = None,
) -> str:
    """Copy the parts of ws into store/<id> (once) and return the id.

    Each part is held to caps (one for all, or one per part name; Rejected past them); links and special files are left out and,
    when `dropped` is a list, appended to it as {"path": "<part>/<rel>", "kind": ...}.
    """
    store.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".snap-", dir=store))
    try:
        for part in PARTS:
            cap = caps.get(part, safefs.NO_CAPS) if isinstance(caps, dict) else caps
            lost = safefs.copy_tree(ws / part, tmp / part, cap, skip=safefs.skip_hidden)
            if dropped is not None:
                dropped += [
                    {"path": f"{part}/{d['path']}".removesuffix("/."), "kind": d["kind"]} for d in lost
                ]
        sid = snapshot_id(part_hashes(tmp))
        dest = store / sid
        if not dest.exists():
            try:
                tmp.rename(dest)
            except OSError:
                if not dest.is_dir():  # not a concurrent writer of the same snapshot
                    raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return sid


def restore(store: Path, sid: str, ws: Path) -> None:
    """Make the parts of ws identical to snapshot sid (other workspace files are left alone).

    Whatever the sandbox left at a part's place (a tree, a link, a FIFO) is removed, not followed.
    """
    for part in PARTS:
        safefs.remove(ws / part)
        safefs.copy_tree(store / sid / part, ws / part)


def changed_files(store: Path, before: str, after: str) -> dict[str, list[str]]:
    """Files added, removed or changed per part between two snapshots."""
    out: dict[str, list[str]] = {}
    for part in PARTS:
        a = file_digests(store / before / part)
        b = file_digests(store / after / part)
        changed = sorted(rel for rel in a.keys() | b.keys() if a.get(rel) != b.get(rel))
        if changed:
            out[part] = changed
    return out
