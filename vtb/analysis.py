"""After grading: the co-design grid and the test scores along the research path (bench option `analysis`).

The headline says how much the submission gained; this says where the gain came from.

- The grid: every mix of {initial, submitted} for data, trainer and harness (8 systems, a 2^3
  factorial design, vtb/codesign.py) graded on the hidden test split. Its systems are ordinary
  snapshots made of parts the store already holds, so they train and play through the bench's
  own train step and grading play (the same sandboxes, keys and checks as the submission's
  grading): a mix equal to a system already trained or graded is that system, by its content
  hash, and is reused, never run twice.
- The path: each kept candidate (one that beat every earlier one on validation, up to the
  submission) graded on the test split after the research ended, so the report shows whether
  gains seen on validation accumulated on the test split. Never shown to the agent.

Both are unbudgeted: not charged to the research agent's ledger, their fresh steps' charges
summed as the analysis's own spend. The bench hands in its steps as callables (`Hooks`), so
this module stays below vtb/bench.py and runs with fakes in tests.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path

from vtb import codesign, safefs
from vtb.ledger import Charge
from vtb.result_parts import AnalysisResult, Corner, Grid, GridTraining, PathStep, Spend
from vtb.results import Candidate, PlayResult, System
from vtb.workspace import PARTS, part_hashes, snapshot


@dataclass
class Hooks:
    """What the analysis needs of the bench.

    train(snapshot, run_name) -> (System, Charge | None, reused): weights for the snapshot's data
    and trainer (a candidate's checkpoint when one has the same train key; else an unbudgeted
    train step); grade(system, label) -> (Future[PlayResult], new): its test play in the grading
    pool (new: False when the bench already started a play with that key)."""

    train: Callable[[str, str], tuple[System, Charge | None, str | None]]
    grade: Callable[[System, str], tuple[Future, bool]]
    log: Callable[[str], None] = lambda msg: None


def kept_path(history: list[Candidate], chosen: Candidate) -> list[Candidate]:
    """The initial system and each later candidate that beat every earlier one on validation, up to
    the submission (the rule of record.attribute_gains; ties go to the earliest, as in selection)."""
    path = [history[0]]
    for c in history[1:]:
        if c.iteration > chosen.iteration or c.val_score is None:
            continue
        if path[-1].val_score is None or c.val_score > path[-1].val_score:
            path.append(c)
    if path[-1] is not chosen:  # not on a path by this rule (cannot happen with `bench.select`)
        path.append(chosen)
    return path


def compose(store: Path, sources: dict[str, str]) -> str:
    """A snapshot whose part `p` is snapshot sources[p]'s; returns its id (content-addressed:
    the same parts give the same id as any snapshot already holding them)."""
    with tempfile.TemporaryDirectory(prefix=".grid-", dir=store) as tmp:
        ws = Path(tmp)
        for part in PARTS:
            safefs.copy_tree(store / sources[part] / part, ws / part)
        return snapshot(ws, store)


def corner_snapshots(store: Path, initial: str, submitted: str) -> dict[str, str]:
    """Each grid corner's snapshot id; "000" is `initial`, "111" `submitted` (by content)."""
    return {
        code: compose(
            store, {p: submitted if bit == "1" else initial for p, bit in zip(PARTS, code, strict=True)}
        )
        for code in codesign.CORNERS
    }


def corner_of(parts: dict, initial: dict, submitted: dict) -> str | None:
    """The grid corner a system is: a part the same as the initial one is 0 (so an unchanged part
    is 0 even though it is the submission's too), the submission's is 1, any other: no corner."""
    bits = []
    for p in PARTS:
        if parts[p] == initial[p]:
            bits.append("0")
        elif parts[p] == submitted[p]:
            bits.append("1")
        else:
            return None
    return "".join(bits)


@dataclass
class _Play:
    label: str
    system: System
    future: Future | None  # None: no weights (training failed), scored 0
    new: bool = False


@dataclass
class Analysis:
    """One run's analysis: `start` trains what the grid lacks and starts the plays; `finish` waits."""

    store: Path
    history: list[Candidate]
    chosen: Candidate
    hooks: Hooks
    grid: bool = True
    path: bool = True
    tolerance: float = codesign.TOLERANCE
    _plays: dict[str, _Play] = field(default_factory=dict)  # by label: path-itN, grid-XYZ
    _corners: dict[str, dict] = field(default_factory=dict)
    _trained: list[dict] = field(default_factory=list)

    def start(self) -> None:
        if self.path:
            for c in kept_path(self.history, self.chosen):
                self._play(f"path-it{c.iteration}", c.system)
        if self.grid:
            self._start_grid()

    def _play(self, label: str, system: System) -> None:
        if system.weights is None:
            self._plays[label] = _Play(label, system, None)
            return
        future, new = self.hooks.grade(system, label)
        self._plays[label] = _Play(label, system, future, new)

    def _start_grid(self) -> None:
        initial = self.history[0]
        sids = corner_snapshots(self.store, initial.snapshot, self.chosen.snapshot)
        weights: dict[tuple[str, str], System] = {}  # by (data hash, trainer hash): one training each
        # Corners that need no training first, so their plays run while the rest train.
        order = sorted(codesign.CORNERS, key=lambda code: code[:2] not in ("00", "11"))
        for code in order:
            sid = sids[code]
            parts = part_hashes(self.store / sid)
            pair = (parts["data"], parts["trainer"])
            if pair not in weights:
                system, charge, reused = self.hooks.train(sid, f"train-grid-{codesign.corner_name(code)}")
                weights[pair] = system
                self._trained.append(
                    {
                        "data": "submitted" if code[0] == "1" else "initial",
                        "trainer": "submitted" if code[1] == "1" else "initial",
                        "train_key": system.weights_key,
                        "reused": reused,
                        "ok": system.weights is not None,
                        "charge": charge,
                    }
                )
            trained = weights[pair]
            system = System(sid, trained.weights_key, trained.weights)
            self._corners[code] = {"snapshot": sid, "parts": parts}
            self._play(f"grid-{code}", system)

    def finish(self) -> AnalysisResult:
        """The analysis for result.json: grid (corners, effects, verdict), path, and spend."""
        results = {label: _wait(p) for label, p in self._plays.items()}
        grid = self._grid(results) if self.grid else None
        path = None
        if self.path:
            initial, submitted = self.history[0].parts, self.chosen.parts
            path = [
                PathStep(
                    iteration=c.iteration,
                    parts_edited=sorted(c.edits),
                    val_score=c.val_score,
                    test_score=results[f"path-it{c.iteration}"]["test_score"],
                    n=results[f"path-it{c.iteration}"].get("n"),
                    note=results[f"path-it{c.iteration}"].get("note"),
                    corner=corner_of(c.parts, initial, submitted) if grid else None,
                )
                for c in kept_path(self.history, self.chosen)
            ]
        return AnalysisResult(grid, path, self._spend())

    def _grid(self, results: dict[str, dict]) -> Grid:
        initial, submitted = self.history[0].parts, self.chosen.parts
        changed = [p for p in PARTS if initial[p] != submitted[p]]
        corners = []
        for code in codesign.CORNERS:
            got = results[f"grid-{code}"]
            corners.append(
                Corner(
                    corner=code,
                    name=codesign.corner_name(code),
                    parts={
                        p: "submitted" if bit == "1" else "initial"
                        for p, bit in zip(PARTS, code, strict=True)
                    },
                    snapshot=self._corners[code]["snapshot"],
                    test_score=got["test_score"],
                    n=got.get("n"),
                    note=got.get("note"),
                    item_rewards=got.get("rewards"),
                )
            )
        eff = codesign.effects({c.corner: c.test_score for c in corners})
        kind, line = codesign.verdict(eff, changed, self.tolerance)
        return Grid(
            corners=corners,
            changed=changed,
            distinct_systems=len({c.snapshot for c in corners}),
            trainings=[
                GridTraining(
                    data=t["data"],
                    trainer=t["trainer"],
                    train_key=t["train_key"],
                    reused=t["reused"],
                    ok=t["ok"],
                    charge=_charge_view(t["charge"]),
                )
                for t in self._trained
            ],
            effects=eff,
            verdict=kind,
            verdict_line=line,
            tolerance=self.tolerance,
        )

    def _spend(self) -> Spend:
        """What the analysis's own steps cost (not in the ledger): fresh trainings and new plays."""
        total = Charge()
        for t in self._trained:
            if t["reused"] is None and t["charge"] is not None:
                total = total + t["charge"]
        plays = 0
        for p in self._plays.values():
            if p.new and p.future is not None and p.future.done() and p.future.exception() is None:
                total = total + p.future.result().charge
                plays += 1
        return Spend(
            trainings=sum(t["reused"] is None for t in self._trained),
            plays=plays,
            flops=total.flops,
            cpu_seconds=round(total.cpu_seconds, 3),
            sandbox_wall_seconds=round(total.wall_seconds, 3),
        )


def _wait(play: _Play) -> dict:
    """A play's score and per-item rewards. A play that raised raises here, as the submission's
    grading does: the run fails and, started again, resumes from its cached steps."""
    if play.future is None:
        return {"test_score": 0.0, "note": "no checkpoint (training failed)"}
    got: PlayResult = play.future.result()
    return {"test_score": got.score, "n": got.n, "rewards": dict(got.rewards)}


def _charge_view(charge: Charge | None) -> dict | None:
    if charge is None:
        return None
    return {
        "flops": charge.flops,
        "cpu_seconds": round(charge.cpu_seconds, 3),
        "wall_seconds": round(charge.wall_seconds, 3),
    }
