"""Research agents: what improves the agent system between iterations.

An agent is a factory registered by name (`@register("name")`) in its own module, called with
the run's `AgentConfig` once per turn; its config file conf/agent/<name>.yaml sets `name`
(and `module` when it lives outside vtb.agents). Each turn it gets a `ResearchEnv` and edits
the workspace through it; the pipeline then trains and validates the result. Adding an agent
is one module plus one config file.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, TypeVar

from vtb.config import AgentConfig
from vtb.ledger import LedgerSummary
from vtb.registry import Registry


@dataclass
class Feedback:
    """What the research agent may know: its own past iterations and the budget."""

    task: str
    iteration: int  # the turn being taken now (1 = first turn after the initial system)
    max_iterations: int
    seed: int
    history: list[dict] = field(
        default_factory=list
    )  # per candidate: iteration, snapshot, val_score, edits, charge
    budget: LedgerSummary | None = None  # None only where no ledger exists (a test's feedback)

    def to_json(self) -> dict:
        """What an agent is shown as JSON (the prompt's feedback block, the feedback tool): its
        history and the budget's figures (`LedgerSummary.to_json`; {} when there is no ledger)."""
        return {
            "iteration": self.iteration,
            "max_iterations": self.max_iterations,
            "history": self.history,
            "budget": self.budget.to_json() if self.budget else {},
        }

    def best(self, prefer_latest: bool = False) -> dict | None:
        """Best validated candidate so far; the earliest (or latest) wins a tie."""
        return best_of(self.history, lambda h: h.get("val_score"), lambda h: h["iteration"], prefer_latest)


T = TypeVar("T")


def best_of(
    items: list[T],
    score: Callable[[T], float | None],
    iteration: Callable[[T], int],
    prefer_latest: bool = False,
) -> T | None:
    """The selection rule (the bench submits by it, agents read it): the highest validation score
    among those that have one; the earliest iteration on a tie, or the latest with prefer_latest."""
    sign = 1 if prefer_latest else -1
    scored = [i for i in items if score(i) is not None]
    return max(scored, key=lambda i: (score(i), sign * iteration(i)), default=None)


class ResearchEnv(Protocol):
    workspace: Path  # host path of the live workspace (data/, trainer/, harness/)
    egress: list[dict]  # a CLI agent's requests through the egress proxy, as logged

    def run(self, command: str, timeout_s: float = 600.0) -> dict: ...

    def write_file(self, relpath: str, content: str) -> None: ...

    def read_file(self, relpath: str) -> str: ...

    def restore(self, snapshot: str) -> None: ...

    def feedback(self) -> Feedback: ...

    def charge_agent(self, tokens: int, cost_usd: float, errors: list[str] = ()) -> None: ...  # to the ledger

    def note(self, entry: dict) -> None: ...  # one trajectory entry (e.g. a model call)

    def run_agent(
        self,
        command: str,
        *,
        prompt: str,
        env: dict[str, str],
        allow_hosts: list[str],
        timeout_s: float,
        extra_mounts: list = (),
        home_files: dict[str, str] | None = None,
    ) -> dict: ...


@dataclass
class TurnResult:
    done: bool = False  # True: stop iterating and submit the best candidate
    notes: str = ""
    stopped: str | None = None  # the per-turn limit that ended the turn: steps | tokens | wall
    # the agent could not work (its endpoint failed): the run ends errored, not with a score
    error: str | None = None
    usage: str | None = (
        None  # where its tokens came from: metered | self-reported[ (rounded)] | estimated | none
    )


class ResearchAgent(Protocol):
    def turn(self, env: ResearchEnv) -> TurnResult: ...


BUILTIN = ("noop", "greedy", "llm", "cli")
# name -> factory(AgentConfig); built-ins in vtb/agents/<name>.py, outside packages by the
# "vtb.agents" entry point group (vtb/registry.py)
AGENTS: Registry[Callable[[AgentConfig], ResearchAgent]] = Registry(
    "agent", "vtb.agents", lambda name: f"vtb.agents.{name}" if name in BUILTIN else None, BUILTIN
)
register = AGENTS.register


def make_agent(cfg: AgentConfig) -> ResearchAgent:
    """The agent `cfg` names: its factory (agent.factory, else agent.name) from the registry,
    after importing agent.module where one is set (an agent in a module of one's own)."""
    factory = cfg.factory or cfg.name
    if cfg.module:
        try:
            importlib.import_module(cfg.module)
        except ModuleNotFoundError as e:
            raise ValueError(
                f"agent={cfg.name}: cannot import {cfg.module} ({e}); fix agent.module (a module on "
                "the Python path that registers the agent)"
            ) from e
    try:
        return AGENTS.get(factory)(cfg)
    except ValueError as e:
        if not str(e).startswith("unknown agent"):
            raise
        where = f"{cfg.module} registers no agent {factory!r}" if cfg.module else str(e)
        raise ValueError(
            f"agent={cfg.name}: {where}; register one with @register({factory!r}) in a module set as "
            '+agent.module, or through a package\'s "vtb.agents" entry point'
        ) from None
