"""Domains by name: each provides its data splits, its initial and reference systems and its scorer.

A domain object is the orchestrator-side half of a task: it holds test labels and rewards,
so it is only ever used outside the sandboxes (this module is not in the sandbox layout,
vtb.sandbox.runtime.SANDBOX_CODE; vtb/domains/__init__.py stays import-free for the kits).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Protocol

from vtb.config import TaskConfig, TrainerConfig
from vtb.registry import Registry
from vtb.runner import Episode
from vtb.sandbox.base import Sandbox


class Domain(Protocol):
    """What every domain provides. What some provide is in `Hooks` (read through `hooks`), and
    its own checks before any budget in `vtb.preflight.DomainCheck`."""

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


@dataclass(frozen=True)
class Hooks:
    """A domain's optional methods, each None where the domain has none; `hooks(domain)` is the
    one place they are looked up, so what is optional, and what its absence means, is here."""

    # the provenance audit's swap (math, terminal; vtb/provenance.py): the one task text of an
    # episode, and the reward its answer would get on another episode (None: scored as its own)
    audit_text: Callable[[Any], str] | None = None
    reward_as: Callable[[Any, Any], float] | None = None
    # the written check (SWE-bench, tau; vtb/provenance.py): each answer line the model must have
    # written, with the pieces an edit put into it; and per episode the texts a prompt of its own
    # holds, where its lines would otherwise be credited by any episode's (tau)
    written_lines: Callable[[Any], list[tuple[str, list[str]]]] | None = None
    written_scopes: Callable[[list], list[list[str]]] | None = None
    # grader files for the record (SWE-bench's report.json files); None: none
    artifacts: Callable[[list], dict] | None = None


def hooks(domain: Domain) -> Hooks:
    """The optional methods `domain` has (a domain from an outside package may have none)."""
    return Hooks(**{f.name: getattr(domain, f.name, None) for f in fields(Hooks)})


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
