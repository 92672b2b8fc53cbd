"""A scripted co-design reference: try one edit per turn, keep what does not lower the val score.

Each turn it restores the best candidate so far and applies the next proposal from the domain's
fixed list (vtb/domains/<task>/kit/proposals.json) spanning all three parts (data, trainer, harness). Everything it decides
comes from the feedback (history and budget), so a resumed run takes the same decisions.
Its data edits run as commands inside the research sandbox, like any agent's would.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from vtb.agents import ResearchEnv, TurnResult, register
from vtb.config import AgentConfig

DOMAINS = Path(__file__).resolve().parents[1] / "domains"


@dataclass
class Proposal:
    """One edit from a domain's `kit/proposals.json`: exactly one of `run` (a command run in the
    research sandbox, `{seed}` filled in), `harness` (a shipped harness of the kit, its config
    updated by `config`) or `trainer` (changes to trainer/config.json)."""

    name: str
    part: str
    why: str
    run: str | None = None
    harness: str | None = None
    config: dict = field(default_factory=dict)
    trainer: dict | None = None

    def apply(self, env: ResearchEnv, seed: int, domain: str) -> None:
        if self.run is not None:
            result = env.run(self.run.format(seed=seed))
            if result["returncode"] != 0:
                raise RuntimeError(f"data edit failed: {result['stderr'][-500:]}")
        elif self.harness is not None:
            src = DOMAINS / domain / "kit" / "harnesses" / self.harness
            env.write_file("harness/harness.py", (src / "harness.py").read_text())
            config = json.loads((src / "config.json").read_text()) | self.config
            env.write_file("harness/config.json", json.dumps(config, indent=2) + "\n")
        elif self.trainer is not None:
            config = json.loads(env.read_file("trainer/config.json")) | self.trainer
            env.write_file("trainer/config.json", json.dumps(config, indent=2) + "\n")


def proposals_of(domain: str) -> list[Proposal]:
    """The domain's proposals, in order (vtb/domains/<domain>/kit/proposals.json; none: no file)."""
    path = DOMAINS / domain / "kit" / "proposals.json"
    if not domain.isidentifier() or not path.is_file():
        return []
    return [Proposal(**p) for p in json.loads(path.read_text())]


class GreedyAgent:
    def __init__(self, proposals: dict[str, list[Proposal]] | None = None, margin: float = 1.0):
        self.proposals = proposals  # by domain; None: each domain's own (proposals_of)
        self.margin = margin  # stop when the budget left is below margin × the dearest iteration so far

    def turn(self, env: ResearchEnv) -> TurnResult:
        fb = env.feedback()
        plan = self.proposals.get(fb.task, []) if self.proposals is not None else proposals_of(fb.task)
        k = fb.iteration - 1
        if k >= len(plan):
            return TurnResult(done=True, notes="greedy: no proposals left")
        if fb.budget is not None:
            dearest = max((h.get("charge", {}).get(fb.budget.unit, 0.0) for h in fb.history), default=0.0)
            if fb.budget.left < self.margin * dearest:
                return TurnResult(
                    done=True, notes=f"greedy: budget left {fb.budget.left:.3g} < one iteration"
                )
        best = fb.best(prefer_latest=True)  # a neutral edit is kept: it may pay off with the next one
        if best is not None:
            env.restore(best["snapshot"])
        proposal = plan[k]
        proposal.apply(env, fb.seed, fb.task)
        base = f"iteration {best['iteration']}" if best else "initial"
        return TurnResult(notes=f"greedy: {proposal.name} ({proposal.part}) on top of {base}: {proposal.why}")


@register("greedy")
def make(cfg: AgentConfig) -> GreedyAgent:
    return GreedyAgent(margin=float(cfg.options.get("margin", 1.0)))
