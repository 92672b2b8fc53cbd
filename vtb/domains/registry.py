"""Domains by name: each provides its data splits, its initial and reference systems and its scorer.

A domain object is the orchestrator-side half of a task: it holds test labels and rewards,
so it is only ever used outside the sandboxes (this module is not in the sandbox layout,
vtb.sandbox.runtime.SANDBOX_CODE; vtb/domains/__init__.py stays import-free for the kits).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from vtb.config import TaskConfig, TrainerConfig
from vtb.registry import Registry
from vtb.runner import Episode
from vtb.sandbox.base import Sandbox


class Domain(Protocol):
    """What every domain provides. Optional hooks, looked up where used:

    - `audit_text(episode) -> str`, `reward_as(episode, other) -> float`: the provenance audit's swap
      (math, terminal; vtb/provenance.py);
    - `written_lines(episode) -> list[tuple[str, list[str]]]`: each line of its answer the model must
      have written, with the pieces an edit put into it (the written check: SWE-bench, tau;
      vtb/provenance.py), and `written_scopes(episodes) -> list[list[str]]`: texts a prompt of each
      episode's own holds, where its lines would otherwise be credited by any episode's (tau);
    - `artifacts(episodes)`, `check_sandbox(data_dir, backend)`, `preflight(...)`: grader files for
      the record, and checks before any budget is spent.
    """

    name: str
    config: type[TaskConfig]  # its settings: TaskConfig or a subclass with the domain's own fields

    def provision(self, task: TaskConfig, out: Path) -> dict:
        """Write research/ (what the research sandbox may see) and hidden/ (test labels) under out."""
        ...

    def tokenizer_spec(self, task: TaskConfig, data_dir: Path) -> dict:
        """What the tiny model's tokenizer must cover: {"words", "number_max", "mode", optional "min_positions"}."""
        ...

    def pretraining_texts(self, task: TaskConfig, data_dir: Path, n: int, seed: int) -> list[str]: ...

    def write_initial_system(
        self, ws: Path, task: TaskConfig, trainer: TrainerConfig, data_dir: Path
    ) -> None: ...

    def write_reference_system(self, ws: Path, task: TaskConfig, data_dir: Path) -> None: ...

    def split(self, data_dir: Path, name: str) -> list[dict]: ...

    def episodes(
        self, data_dir: Path, split: str, task: TaskConfig, sandbox: Sandbox | None = None
    ) -> list[ScoredEpisode]:
        """The split's episodes (orchestrator side: environment, user simulator, reward).

        `sandbox` runs what an episode executes on the agent's behalf (shell commands, patches,
        hidden tests); domains that execute nothing ignore it.
        """
        ...

    def metrics(self, episodes: list[ScoredEpisode], task: TaskConfig) -> dict:
        """Split-level figures beyond the mean reward (e.g. pass^k)."""
        ...


class ScoredEpisode(Episode, Protocol):
    def reward(self) -> float: ...

    def record(self) -> dict:
        """A JSON-able account of the episode for the run record (no hidden labels needed to read it)."""
        ...


BUILTIN = ("math", "tau", "terminal", "swe")  # each registers itself on import

# name -> domain factory; built-ins in vtb/domains/<name>/domain.py (a new one is its folder and a
# conf/task file), outside packages by the "vtb.domains" entry point group (vtb/registry.py)
DOMAINS: Registry[Callable[[], Domain]] = Registry(
    "task", "vtb.domains", lambda name: f"vtb.domains.{name}.domain", BUILTIN
)
register_domain = DOMAINS.register


def domain_config(name: str) -> type[TaskConfig]:
    """The config class of the domain registered under `name` (its `config`; TaskConfig if none)."""
    return getattr(_get(name), "config", TaskConfig)


def get_domain(name: str) -> Domain:
    """The domain registered under `name`."""
    return _get(name)()


def _get(name: str) -> Callable[[], Domain]:
    try:
        return DOMAINS.get(name)
    except ValueError as e:
        raise ValueError(f"{e} (set task=<name>)") from None
