"""The nested parts of result.json as types, and the one set of checks a figure read back passes.

vtb/bench_result.py holds the result; this module holds what it is made of below the scores:
the test split, the reproducibility fingerprint (vtb/repro.py) and the contamination scan
(vtb/contamination.py). Each part is built from the JSON its producer writes (`from_json`) and
written back key for key (`to_json`), so the report and the leaderboard read attributes. Reading
is strict only where a leaderboard ranks or flags by the figure (the split, `flagged`); the rest is
read leniently (a bounded string, a count, or nothing), as a report line does not rank anything.
It imports nothing of the project: every layer that reads results may use it.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any


class BadResult(ValueError):
    """A result that may not reach a leaderboard; the message names the field and why."""


def number(value: Any, where: str, low: float = 0.0, high: float = math.inf) -> float:
    """The one check of a figure read back: a real number, finite, in [low, high]."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise BadResult(f"{where} is {type(value).__name__}, not a number")
    if not math.isfinite(value) or not low <= value <= high:
        raise BadResult(f"{where} = {value!r} is not a finite number in [{low}, {high}]")
    return float(value)


def score(value: Any, where: str) -> float:
    return number(value, where, 0.0, 1.0)


def an_object(value: Any, where: str) -> dict:
    if not isinstance(value, dict):
        raise BadResult(f"{where} is {type(value).__name__}, not an object")
    return value


def text_or_none(value: Any, limit: int = 4096) -> str | None:
    return value[:limit] if isinstance(value, str) else None


def _text(value: Any, limit: int = 4096) -> str:
    return text_or_none(value, limit) or ""


def _count(value: Any) -> int:
    """A non-negative integer figure of a report line; anything else reads as 0."""
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**63 else 0


def _fraction(value: Any) -> float:
    try:
        return number(value, "", 0.0, 1.0)
    except BadResult:
        return 0.0


def _objects(value: Any, limit: int = 1000) -> list[dict]:
    return [v for v in value[:limit] if isinstance(v, dict)] if isinstance(value, list) else []


def _texts(value: Any, limit: int = 1000) -> list[str]:
    return [v[:4096] for v in value[:limit] if isinstance(v, str)] if isinstance(value, list) else []


@dataclass(frozen=True)
class TestSplit:
    """Which test split a run was graded on: `public` (the published default salt, which anyone
    can rebuild) or `hidden`; runs of different splits are never ranked together."""

    __test__ = False  # a record, not a pytest class

    kind: str
    salt_sha256: str

    def to_json(self) -> dict:
        return {"kind": self.kind, "salt_sha256": self.salt_sha256}

    @classmethod
    def from_json(cls, value: Any) -> TestSplit:
        split = an_object(value, "test_split")
        if split.get("kind") not in ("public", "hidden"):
            raise BadResult("test_split.kind is not public or hidden")
        sha = split.get("salt_sha256")
        if not (isinstance(sha, str) and re.fullmatch(r"[0-9a-f]{64}", sha)):
            raise BadResult("test_split.salt_sha256 is not a sha256 hex digest")
        return cls(split["kind"], sha)


@dataclass(frozen=True)
class Fingerprint:
    """The reproducibility fingerprint (vtb/repro.py): what the sandboxes pinned, and the id of
    the probe's bits; runs whose ids agree can match bit for bit."""

    id: str
    mode: str  # reproducible (pinned CPU code paths), native, gpu
    pins: dict[str, str]
    probe: str
    cpu_capability: str
    threads: int
    torch: str
    server_threads: int | None  # threads per model server; older records lack it
    transformers: str

    def to_json(self) -> dict:
        out: dict[str, Any] = {
            "mode": self.mode,
            "pins": self.pins,
            "probe": self.probe,
            "cpu_capability": self.cpu_capability,
            "threads": self.threads,
            "torch": self.torch,
        }
        if self.server_threads is not None:
            out["server_threads"] = self.server_threads
        return {**out, "transformers": self.transformers, "id": self.id}

    @classmethod
    def from_json(cls, value: Any) -> Fingerprint | None:
        """None for a record without one (or with one that is not an object)."""
        if not isinstance(value, dict):
            return None
        pins = value.get("pins") if isinstance(value.get("pins"), dict) else {}
        server = value.get("server_threads")
        return cls(
            id=_text(value.get("id"), 64),
            mode=_text(value.get("mode"), 20),
            pins={str(k)[:64]: _text(v, 64) for k, v in list(pins.items())[:32]},
            probe=_text(value.get("probe"), 128),
            cpu_capability=_text(value.get("cpu_capability"), 40),
            threads=_count(value.get("threads")),
            torch=_text(value.get("torch"), 40),
            server_threads=_count(server) if server is not None else None,
            transformers=_text(value.get("transformers"), 40),
        )


@dataclass(frozen=True)
class CopiedExample:
    item: str  # the split item's id
    text: str  # the copied text, cut short


@dataclass(frozen=True)
class FileHits:
    """One submission file's n-grams from one split."""

    path: str
    ngrams: int
    items: int
    canary: bool
    examples: list[CopiedExample]

    def to_json(self) -> dict:
        examples = [{"item": e.item, "text": e.text} for e in self.examples]
        return {
            "path": self.path,
            "ngrams": self.ngrams,
            "items": self.items,
            "canary": self.canary,
            "examples": examples,
        }

    @classmethod
    def from_json(cls, d: dict) -> FileHits:
        examples = [
            CopiedExample(_text(e.get("item"), 200), _text(e.get("text"), 400))
            for e in _objects(d.get("examples"))
        ]
        return cls(
            _text(d.get("path")),
            _count(d.get("ngrams")),
            _count(d.get("items")),
            d.get("canary") is True,
            examples,
        )


@dataclass(frozen=True)
class SplitScan:
    """The scan's figures for one split: items copied, canary, files, flagged."""

    items: int
    decidable: int  # items with enough n-grams to decide
    hit_items: int
    hit_fraction: float
    hit_examples: list[str]
    canary_checked: bool
    canary_found: bool
    hidden: bool  # a hidden split flags the run; a public one is reported only
    flagged: bool
    files: list[FileHits]

    def to_json(self) -> dict:
        return {
            "items": self.items,
            "decidable": self.decidable,
            "hit_items": self.hit_items,
            "hit_fraction": self.hit_fraction,
            "hit_examples": self.hit_examples,
            "canary_checked": self.canary_checked,
            "canary_found": self.canary_found,
            "hidden": self.hidden,
            "flagged": self.flagged,
            "files": [f.to_json() for f in self.files],
        }

    @classmethod
    def from_json(cls, d: dict) -> SplitScan:
        return cls(
            items=_count(d.get("items")),
            decidable=_count(d.get("decidable")),
            hit_items=_count(d.get("hit_items")),
            hit_fraction=_fraction(d.get("hit_fraction")),
            hit_examples=_texts(d.get("hit_examples"), 100),
            canary_checked=d.get("canary_checked") is True,
            canary_found=d.get("canary_found") is True,
            hidden=d.get("hidden") is True,
            flagged=d.get("flagged") is True,
            files=[FileHits.from_json(f) for f in _objects(d.get("files"))],
        )


@dataclass(frozen=True)
class Skipped:
    path: str
    kind: str  # link, fifo, socket, device, unreadable (why)


@dataclass(frozen=True)
class ContaminationScan:
    """The submission against the full test and val splits (vtb/contamination.py scan_submission)."""

    flagged: bool
    reasons: list[str]
    splits: dict[str, SplitScan]
    files: int  # scanned
    bytes: int
    skipped: list[Skipped]  # links and special files, never opened
    truncated: list[str]  # read in part, past the cap
    thresholds: dict[str, int | float]  # n-gram sizes, coverage and flag thresholds, the byte cap

    def to_json(self) -> dict:
        return {
            "flagged": self.flagged,
            "reasons": self.reasons,
            "splits": {name: s.to_json() for name, s in self.splits.items()},
            "scanned": {
                "files": self.files,
                "bytes": self.bytes,
                "skipped": [{"path": s.path, "kind": s.kind} for s in self.skipped],
                "truncated": self.truncated,
            },
            "thresholds": self.thresholds,
        }

    @classmethod
    def from_json(cls, value: Any) -> ContaminationScan | None:
        """None for a run without the scan; `flagged` must be a boolean (a leaderboard flags by it)."""
        if value is None:
            return None
        scan = an_object(value, "contamination")
        if scan.get("flagged") not in (None, True, False):
            raise BadResult("contamination.flagged is not a boolean")
        splits = scan.get("splits") if isinstance(scan.get("splits"), dict) else {}
        scanned = scan.get("scanned") if isinstance(scan.get("scanned"), dict) else {}
        thresholds = scan.get("thresholds") if isinstance(scan.get("thresholds"), dict) else {}
        return cls(
            flagged=scan.get("flagged") is True,
            reasons=_texts(scan.get("reasons"), 20),
            splits={
                str(k)[:40]: SplitScan.from_json(v)
                for k, v in list(splits.items())[:8]
                if isinstance(v, dict)
            },
            files=_count(scanned.get("files")),
            bytes=_count(scanned.get("bytes")),
            skipped=[_skipped(s) for s in (scanned.get("skipped") or [])[:50] if isinstance(s, dict | str)],
            truncated=_texts(scanned.get("truncated"), 50),
            thresholds={
                str(k)[:40]: v
                for k, v in list(thresholds.items())[:20]
                if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
            },
        )


def _skipped(entry: dict | str) -> Skipped:
    """A skipped file: {"path", "kind"}, or a path alone as older records wrote it."""
    if isinstance(entry, str):
        return Skipped(entry[:4096], "")
    return Skipped(_text(entry.get("path")), _text(entry.get("kind"), 80))
