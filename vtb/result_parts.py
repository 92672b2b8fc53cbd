"""The nested parts of result.json as types, and the one set of checks a figure read back passes.

vtb/bench_result.py holds the result; this module holds what it is made of below the scores:
the test split, the reproducibility fingerprint (vtb/repro.py), the contamination scan
(vtb/contamination.py) and the analysis (vtb/analysis.py: the co-design grid, whose effects
vtb/codesign.py computes, and the path). Each part is built from the JSON its producer writes (`from_json`) and
written back key for key (`to_json`), so the report and the leaderboard read attributes. Reading
is strict only where a leaderboard ranks or flags by the figure (the split, `flagged`); the rest is
read leniently (a bounded string, a count, or nothing), as a report line does not rank anything.
It imports nothing of the project (the lowest layer): every module that makes or reads a part may use it.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass
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
        return asdict(self)

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
        return asdict(self)

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
        return asdict(self)

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
        thresholds = scan.get("thresholds")
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
            thresholds=_scores(thresholds, limit=20, key_limit=40),
        )


def _skipped(entry: dict | str) -> Skipped:
    """A skipped file: {"path", "kind"}, or a path alone as older records wrote it."""
    if isinstance(entry, str):
        return Skipped(entry[:4096], "")
    return Skipped(_text(entry.get("path")), _text(entry.get("kind"), 80))


def _is_finite(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _finite(value: Any, default: float = 0.0) -> float:
    """A finite number of a report line, as written; anything else reads as `default`."""
    return value if _is_finite(value) else default


def _scores(value: Any, limit: int = 16, key_limit: int = 80) -> dict[str, float]:
    """{name: a finite number} of a table (effects, thresholds); other entries left out."""
    if not isinstance(value, dict):
        return {}
    return {str(k)[:key_limit]: v for k, v in list(value.items())[:limit] if _is_finite(v)}


def _rewards(value: dict) -> dict[str, float]:
    """Per-item rewards (checked strictly before, where a leaderboard pairs them: check_grid)."""
    return {str(k)[:200]: _fraction(v) for k, v in list(value.items())[:200_000]}


def _optional_count(value: Any) -> int | None:
    return None if value is None else _count(value)


@dataclass(frozen=True)
class Corner:
    """One system of the co-design grid: each part initial or submitted (`corner` "011": data
    initial, trainer and harness submitted), graded on the test split."""

    corner: str
    name: str
    parts: dict[str, str]  # part -> initial | submitted
    snapshot: str
    test_score: float
    n: int | None  # test items played; None when not played (`note` says why)
    note: str | None
    item_rewards: dict[str, float] | None  # per test item (item_rewards.json holds them on disk)

    def to_json(self) -> dict:
        out: dict[str, Any] = {
            "corner": self.corner,
            "name": self.name,
            "parts": self.parts,
            "snapshot": self.snapshot,
            "test_score": self.test_score,
        }
        if self.n is not None:
            out["n"] = self.n
        if self.note is not None:
            out["note"] = self.note
        return {**out, "item_rewards": self.item_rewards}

    @classmethod
    def from_json(cls, d: dict) -> Corner:
        parts = d.get("parts") if isinstance(d.get("parts"), dict) else {}
        rewards = d.get("item_rewards")
        return cls(
            corner=_text(d.get("corner"), 8),
            name=_text(d.get("name"), 80),
            parts={str(k)[:20]: _text(v, 20) for k, v in list(parts.items())[:3]},
            snapshot=_text(d.get("snapshot"), 200),
            test_score=_fraction(d.get("test_score")),
            n=_optional_count(d.get("n")),
            note=text_or_none(d.get("note"), 200),
            item_rewards=_rewards(rewards) if isinstance(rewards, dict) else None,
        )


@dataclass(frozen=True)
class GridTraining:
    """A training the grid needed: its data and trainer, and whether the run had made it already."""

    data: str
    trainer: str
    train_key: str | None
    reused: str | None  # "iteration N" when the research had trained it
    ok: bool
    charge: dict[str, float] | None  # flops, cpu_seconds, wall_seconds of a fresh one

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict) -> GridTraining:
        charge = d.get("charge")
        return cls(
            data=_text(d.get("data"), 20),
            trainer=_text(d.get("trainer"), 20),
            train_key=text_or_none(d.get("train_key"), 200),
            reused=text_or_none(d.get("reused"), 80),
            ok=d.get("ok") is True,
            charge=_scores(charge) if isinstance(charge, dict) else None,
        )


@dataclass(frozen=True)
class Effects:
    """The grid's effects (computed by vtb/codesign.py `effects`). `main` and `interactions` are
    the 2^3 factorial effects; `alone` and `together` are the gains over the initial system along
    the cube's edges from "000": one part alone, and all three at once (the submission's gain)."""

    main: dict[str, float]  # per part
    interactions: dict[str, float]  # "data×trainer", ..., "data×trainer×harness"
    alone: dict[str, float]  # score with only that part submitted, minus the initial score
    together: float  # submitted minus initial
    interaction: float  # together minus the sum of the parts alone: 0 when their gains add up

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, value: Any) -> Effects | None:
        """None for a grid without effects (the submission changed nothing)."""
        if not isinstance(value, dict) or not value:
            return None
        return cls(
            main=_scores(value.get("main")),
            interactions=_scores(value.get("interactions")),
            alone=_scores(value.get("alone")),
            together=_finite(value.get("together")),
            interaction=_finite(value.get("interaction")),
        )


@dataclass(frozen=True)
class Grid:
    """The co-design grid (vtb/analysis.py): every mix of initial and submitted parts, graded."""

    corners: list[Corner]
    changed: list[str]  # the parts the submission changed
    distinct_systems: int
    trainings: list[GridTraining]
    effects: Effects | None
    verdict: str  # codesign.VERDICTS
    verdict_line: str
    tolerance: float

    def to_json(self) -> dict:
        return {
            "corners": [c.to_json() for c in self.corners],
            "changed": self.changed,
            "distinct_systems": self.distinct_systems,
            "trainings": [t.to_json() for t in self.trainings],
            "effects": self.effects.to_json() if self.effects else {},
            "verdict": self.verdict,
            "verdict_line": self.verdict_line,
            "tolerance": self.tolerance,
        }

    @classmethod
    def from_json(cls, d: dict) -> Grid:
        """Read leniently: the corners' names and scores and the verdict that a leaderboard pools
        are checked strictly before (vtb/bench_result.py check_grid)."""
        return cls(
            corners=[Corner.from_json(c) for c in _objects(d.get("corners"), 8)],
            changed=_texts(d.get("changed"), 3),
            distinct_systems=_count(d.get("distinct_systems")),
            trainings=[GridTraining.from_json(t) for t in _objects(d.get("trainings"), 8)],
            effects=Effects.from_json(d.get("effects")),
            verdict=_text(d.get("verdict"), 40),
            verdict_line=_text(d.get("verdict_line"), 400),
            tolerance=_finite(d.get("tolerance")),
        )


@dataclass(frozen=True)
class PathStep:
    """A kept candidate on the research path (best on validation so far), graded on the test split."""

    iteration: int
    parts_edited: list[str]
    val_score: float | None
    test_score: float
    n: int | None
    note: str | None
    corner: str | None  # its grid corner; None off the grid's corners, or where the grid did not run

    def to_json(self) -> dict:
        out: dict[str, Any] = {
            "iteration": self.iteration,
            "parts_edited": self.parts_edited,
            "val_score": self.val_score,
            "test_score": self.test_score,
        }
        for key in ("n", "note"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        return {**out, "corner": self.corner}

    @classmethod
    def from_json(cls, d: dict) -> PathStep:
        val = d.get("val_score")
        return cls(
            iteration=_count(d.get("iteration")),
            parts_edited=_texts(d.get("parts_edited"), 3),
            val_score=None if val is None else _fraction(val),
            test_score=_fraction(d.get("test_score")),
            n=_optional_count(d.get("n")),
            note=text_or_none(d.get("note"), 200),
            corner=text_or_none(d.get("corner"), 8),
        )


@dataclass(frozen=True)
class Spend:
    """What the analysis's own trainings and plays cost: never in the ledger."""

    trainings: int
    plays: int
    flops: float
    cpu_seconds: float
    sandbox_wall_seconds: float

    def to_json(self) -> dict:
        return {"budgeted": False, **asdict(self)}  # never in the ledger

    @classmethod
    def from_json(cls, value: Any) -> Spend | None:
        if not isinstance(value, dict):
            return None
        return cls(
            trainings=_count(value.get("trainings")),
            plays=_count(value.get("plays")),
            flops=_finite(value.get("flops")),
            cpu_seconds=_finite(value.get("cpu_seconds")),
            sandbox_wall_seconds=_finite(value.get("sandbox_wall_seconds")),
        )


@dataclass(frozen=True)
class AnalysisResult:
    """After the run, not charged to the agent: the co-design grid and the path's test scores."""

    grid: Grid | None
    path: list[PathStep] | None
    spend: Spend | None

    def to_json(self) -> dict:
        return {
            "grid": self.grid.to_json() if self.grid else None,
            "path": [s.to_json() for s in self.path] if self.path is not None else None,
            "spend": self.spend.to_json() if self.spend else None,
        }

    @classmethod
    def from_json(cls, value: Any) -> AnalysisResult | None:
        if not isinstance(value, dict):
            return None
        grid, path = value.get("grid"), value.get("path")
        return cls(
            grid=Grid.from_json(grid) if isinstance(grid, dict) else None,
            path=[PathStep.from_json(s) for s in _objects(path, 1000)] if isinstance(path, list) else None,
            spend=Spend.from_json(value.get("spend")),
        )


@dataclass(frozen=True)
class Provenance:
    """Whether the submission's scored answers are the model's (vtb/provenance.py): the audit
    (each question swapped for another's at the model server) or, where a domain has no single
    question text to swap, the written check (what a scored answer adds must be the model's
    writing). `figures` are the check's counts, named as vtb/provenance.py names them."""

    check: str  # audit | written
    flagged: bool
    reason: str | None
    n: int
    figures: dict[str, float]

    def to_json(self) -> dict:
        head = {"check": "written"} if self.check == "written" else {}
        return {**head, "flagged": self.flagged, "reason": self.reason, "n": self.n, **self.figures}

    def figure(self, name: str) -> float:
        return self.figures.get(name, 0)

    @classmethod
    def from_json(cls, value: Any) -> Provenance | None:
        if not isinstance(value, dict):
            return None
        named = ("check", "flagged", "reason", "n")
        return cls(
            check="written" if value.get("check") == "written" else "audit",
            flagged=value.get("flagged") is True,
            reason=text_or_none(value.get("reason"), 2000),
            n=_count(value.get("n")),
            figures=_scores({k: v for k, v in value.items() if k not in named}),
        )
