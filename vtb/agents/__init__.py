"""Research agents: what improves the agent system between iterations.

An agent is a factory registered by name (`@register("name")`) in its own module; its config
file conf/agent/<name>.yaml sets `name` (and `module` when it lives outside vtb.agents).
Each turn it gets a `ResearchEnv` and edits the workspace through it; the pipeline then
trains and validates the result. Adding an agent is one module plus one config file.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from vtb.config import AgentConfig


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
    budget: dict = field(default_factory=dict)  # unit, limit, used, left

    def best(self, prefer_latest: bool = False) -> dict | None:
        """Best validated candidate so far; the earliest (or latest) wins a tie."""
        scored = [h for h in self.history if h.get("val_score") is not None]
        sign = 1 if prefer_latest else -1
        return max(scored, key=lambda h: (h["val_score"], sign * h["iteration"]), default=None)


class ResearchEnv(Protocol):
    workspace: Path  # host path of the live workspace (data/, trainer/, harness/)

    def run(self, command: str, timeout_s: float = 600.0) -> dict: ...

    def write_file(self, relpath: str, content: str) -> None: ...

    def read_file(self, relpath: str) -> str: ...

    def restore(self, snapshot: str) -> None: ...

    def feedback(self) -> Feedback: ...


@dataclass
class TurnResult:
    done: bool = False  # True: stop iterating and submit the best candidate
    notes: str = ""


class ResearchAgent(Protocol):
    def turn(self, env: ResearchEnv) -> TurnResult: ...


_REGISTRY: dict[str, Callable[[dict], ResearchAgent]] = {}


def register(name: str):
    def deco(factory: Callable[[dict], ResearchAgent]):
        _REGISTRY[name] = factory
        return factory

    return deco


def make_agent(cfg: AgentConfig) -> ResearchAgent:
    module = cfg.module or f"vtb.agents.{cfg.name}"
    try:
        importlib.import_module(module)
    except ModuleNotFoundError as e:
        raise ValueError(
            f"agent={cfg.name}: cannot import {module} ({e}); add the module or set agent.module"
        ) from e
    if cfg.name not in _REGISTRY:
        raise ValueError(
            f"agent={cfg.name}: {module} registers no agent of that name; known: {sorted(_REGISTRY)}"
        )
    return _REGISTRY[cfg.name](dict(cfg.options))
