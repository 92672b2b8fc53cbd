"""A scripted co-design reference: try one edit per turn, keep what does not lower the val score.

Each turn it restores the best candidate so far and applies the next proposal from a fixed,
per-domain list that spans all three parts (data, trainer, harness). Everything it decides
comes from the feedback (history and budget), so a resumed run takes the same decisions.
Its data edits run as commands inside the research sandbox, like any agent's would.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from vtb.agents import ResearchEnv, TurnResult, register
from vtb.config import AgentConfig

DOMAINS = Path(__file__).resolve().parents[1] / "domains"
MATH_HARNESSES = DOMAINS / "math" / "kit" / "harnesses"


@dataclass
class Proposal:
    name: str
    part: str
    why: str
    apply: Callable[[ResearchEnv, int], None]


def _from_pool(n: int) -> Callable[[ResearchEnv, int], None]:
    def apply(env: ResearchEnv, seed: int) -> None:
        cmd = f"python -m vtb.domains.math.kit.datatools from-pool /data/pool.jsonl data/train.jsonl --n {n} --seed {seed}"
        result = env.run(cmd)
        if result["returncode"] != 0:
            raise RuntimeError(f"data edit failed: {result['stderr'][-500:]}")

    return apply


def _demos(n: int) -> Callable[[ResearchEnv, int], None]:
    """Replace the demonstrations with n fresh expert ones of train tasks, then re-render the SFT rows."""

    def apply(env: ResearchEnv, seed: int) -> None:
        tool = "python -m vtb.domains.tau.kit.datatools"
        cmd = (f"{tool} demos --n {n} --seed {seed} --out data/trajectories.jsonl && "
               f"{tool} check data/trajectories.jsonl && {tool} sft data/trajectories.jsonl data/train.jsonl")  # fmt: skip
        result = env.run(cmd)
        if result["returncode"] != 0:
            raise RuntimeError(f"data edit failed: {result['stderr'][-500:]}")

    return apply


def _rows_from_pool(domain: str, n: int) -> Callable[[ResearchEnv, int], None]:
    """Replace the SFT rows with n rows made from train tasks' reference solutions."""

    def apply(env: ResearchEnv, seed: int) -> None:
        tool = f"python -m vtb.domains.{domain}.kit.datatools"
        cmd = f"{tool} from-pool /data/pool.jsonl data/train.jsonl --n {n} --seed {seed} && {tool} check data/train.jsonl"
        result = env.run(cmd)
        if result["returncode"] != 0:
            raise RuntimeError(f"data edit failed: {result['stderr'][-500:]}")

    return apply


def _harness(name: str, domain: str = "math", **overrides) -> Callable[[ResearchEnv, int], None]:
    def apply(env: ResearchEnv, seed: int) -> None:
        src = DOMAINS / domain / "kit" / "harnesses" / name
        env.write_file("harness/harness.py", (src / "harness.py").read_text())
        config = json.loads((src / "config.json").read_text()) | overrides
        env.write_file("harness/config.json", json.dumps(config, indent=2) + "\n")

    return apply


def _trainer(**changes) -> Callable[[ResearchEnv, int], None]:
    def apply(env: ResearchEnv, seed: int) -> None:
        config = json.loads(env.read_file("trainer/config.json")) | changes
        env.write_file("trainer/config.json", json.dumps(config, indent=2) + "\n")

    return apply


PROPOSALS: dict[str, list[Proposal]] = {
    "math": [
        Proposal(
            "calculator",
            "harness",
            "GSM8K calculator + answer extraction, longer outputs",
            _harness("calculator"),
        ),
        Proposal(
            "clean-data", "data", "replace the small noisy set with 2000 verified pool rows", _from_pool(2000)
        ),
        Proposal(
            "train-longer",
            "trainer",
            "lr 3e-3, 3 epochs, cosine schedule",
            _trainer(lr=3e-3, epochs=3, lr_schedule="cosine"),
        ),  # fmt: skip
        Proposal("vote", "harness", "self-consistency over 5 samples", _harness("calculator", votes=5)),
    ],
    "tau": [
        Proposal(
            "train-longer",
            "trainer",
            "lr 3e-3, 8 epochs, batch 8, cosine schedule",
            _trainer(lr=3e-3, epochs=8, batch_size=8, lr_schedule="cosine"),
        ),
        Proposal("clean-demos", "data", "300 verified expert demonstrations of train tasks", _demos(300)),
        Proposal(
            "repair",
            "harness",
            "validate tool calls against the schemas; repair ids; retry",
            _harness("repair", domain="tau"),
        ),
    ],
    "terminal": [
        Proposal(
            "train-longer",
            "trainer",
            "lr 3e-3, 4 epochs, batch 16, cosine schedule",
            _trainer(lr=3e-3, epochs=4, batch_size=16, lr_schedule="cosine"),
        ),  # fmt: skip
        Proposal(
            "clean-data",
            "data",
            "800 rows from train tasks' reference solutions",
            _rows_from_pool("terminal", 800),
        ),  # fmt: skip
        Proposal(
            "repair",
            "harness",
            "ground paths in the instruction; re-sample a failed command",
            _harness("repair", domain="terminal"),
        ),  # fmt: skip
    ],
    "swe": [
        Proposal(
            "train-longer",
            "trainer",
            "lr 3e-3, 6 epochs, batch 16, cosine schedule",
            _trainer(lr=3e-3, epochs=6, batch_size=16, lr_schedule="cosine"),
        ),  # fmt: skip
        Proposal(
            "clean-data", "data", "500 rows from train instances' gold fixes", _rows_from_pool("swe", 500)
        ),
        Proposal(
            "fuzzy-edit",
            "harness",
            "snap mis-copied lines to the closest one; re-sample failed edits",
            _harness("fuzzy", domain="swe"),
        ),  # fmt: skip
    ],
}


class GreedyAgent:
    def __init__(self, proposals: dict[str, list[Proposal]] | None = None, margin: float = 1.0):
        self.proposals = proposals or PROPOSALS
        self.margin = margin  # stop when the budget left is below margin × the dearest iteration so far

    def turn(self, env: ResearchEnv) -> TurnResult:
        fb = env.feedback()
        plan = self.proposals.get(fb.task, [])
        k = fb.iteration - 1
        if k >= len(plan):
            return TurnResult(done=True, notes="greedy: no proposals left")
        unit = fb.budget.get("unit", "flops")
        dearest = max((h.get("charge", {}).get(unit, 0.0) for h in fb.history), default=0.0)
        if fb.budget.get("left", 0.0) < self.margin * dearest:
            return TurnResult(
                done=True, notes=f"greedy: budget left {fb.budget.get('left'):.3g} < one iteration"
            )
        best = fb.best(prefer_latest=True)  # a neutral edit is kept: it may pay off with the next one
        if best is not None:
            env.restore(best["snapshot"])
        proposal = plan[k]
        proposal.apply(env, fb.seed)
        base = f"iteration {best['iteration']}" if best else "initial"
        return TurnResult(notes=f"greedy: {proposal.name} ({proposal.part}) on top of {base}: {proposal.why}")


@register("greedy")
def make(cfg: AgentConfig) -> GreedyAgent:
    return GreedyAgent(margin=float(cfg.options.get("margin", 1.0)))
