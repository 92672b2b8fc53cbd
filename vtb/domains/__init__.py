"""Domains: each provides its data splits, its initial and reference systems and its scorer.

A domain object is the orchestrator-side half of a task: it holds test labels and rewards,
so it is only ever used outside the sandboxes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from vtb.config import TaskConfig, TrainerConfig


class Domain(Protocol):
    name: str

    def provision(self, task: TaskConfig, out: Path) -> dict:
        """Write research/ (what the research sandbox may see) and hidden/ (test labels) under out."""
        ...

    def tokenizer_words(self) -> list[str]: ...

    def pretraining_texts(self, task: TaskConfig, data_dir: Path, n: int, seed: int) -> list[str]: ...

    def write_initial_system(
        self, ws: Path, task: TaskConfig, trainer: TrainerConfig, data_dir: Path
    ) -> None: ...

    def write_reference_system(self, ws: Path, task: TaskConfig, data_dir: Path) -> None: ...

    def split(self, data_dir: Path, name: str) -> list[dict]: ...

    def start_message(self, item: dict) -> dict: ...

    def reward(self, item: dict, action: dict | None, task: TaskConfig) -> float: ...


def get_domain(name: str) -> Domain:
    if name == "math":
        from vtb.domains.math.domain import MathDomain

        return MathDomain()
    raise ValueError(f"unknown task {name!r}; available: math (set task=math)")
