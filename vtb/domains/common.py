"""Layout and tallies shared by the domains whose val/test items stay hidden (tau, terminal, swe).

Data dir: research/pool.jsonl (train items in full, mounted at /data for the research agent),
research/val.jsonl (val ids and templates only), hidden/{val,test}.jsonl (in full, orchestrator
only). A workspace: data/train.jsonl, trainer/config.json, harness/ (copied), README.md.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from vtb.config import TaskConfig, TrainerConfig
from vtb.domains.kit.jsonl import read_jsonl, write_jsonl
from vtb.domains.math.domain import trainer_dict


def write_splits(
    out: Path, pool: list[dict], val: list[dict], test: list[dict], public: tuple[str, ...]
) -> dict:
    """Write the splits; of val the research side gets only the `public` fields (id, template)."""
    write_jsonl(out / "research" / "pool.jsonl", pool)
    write_jsonl(out / "research" / "val.jsonl", [{k: item.get(k) for k in public} for item in val])
    write_jsonl(out / "hidden" / "val.jsonl", val)
    write_jsonl(out / "hidden" / "test.jsonl", test)
    return {"pool": len(pool), "val": len(val), "test": len(test)}


def read_split(data_dir: Path, name: str) -> list[dict]:
    if name == "pool":
        return read_jsonl(data_dir / "research" / "pool.jsonl")
    return read_jsonl(data_dir / "hidden" / f"{name}.jsonl")


def write_system(
    ws: Path,
    data_dir: Path,
    make_rows: Callable[..., list[dict]],
    n: int,
    seed: int,
    trainer: dict,
    harness_dir: Path,
    readme: str,
    flawed: float = 0.0,
) -> None:
    """A workspace: `make_rows(train pool, n, seed, flawed=flawed)` as data/train.jsonl, the
    trainer config, a copy of the harness folder and the README."""
    rows = make_rows(read_split(data_dir, "pool"), n, seed, flawed=flawed)
    write_jsonl(ws / "data" / "train.jsonl", rows)
    (ws / "trainer").mkdir(parents=True, exist_ok=True)
    (ws / "trainer" / "config.json").write_text(json.dumps(trainer, indent=2) + "\n")
    shutil.copytree(harness_dir, ws / "harness", dirs_exist_ok=True)
    (ws / "README.md").write_text(readme)


class RowSystems:
    """The systems of a domain whose training data are SFT rows from `make_rows` (terminal, swe).

    Initial: task.initial_data_size rows, a task.initial_noise share of them flawed, the
    configured trainer and harnesses/plain. Reference: `reference_rows` clean rows,
    `reference_trainer` and harnesses/<reference_harness>.
    """

    make_rows: Callable[..., list[dict]]  # (pool, n, seed, flawed=share) -> rows, a staticmethod
    harnesses: Path
    readme: str
    reference_rows: int
    reference_trainer: dict
    reference_harness: str

    def write_initial_system(
        self, ws: Path, task: TaskConfig, trainer: TrainerConfig, data_dir: Path
    ) -> None:
        write_system(ws, data_dir, self.make_rows, task.initial_data_size, task.data_seed,
                     trainer_dict(trainer), self.harnesses / "plain", self.readme, task.initial_noise)  # fmt: skip

    def write_reference_system(self, ws: Path, task: TaskConfig, data_dir: Path) -> None:
        write_system(ws, data_dir, self.make_rows, self.reference_rows, task.data_seed + 1,
                     self.reference_trainer, self.harnesses / self.reference_harness, self.readme)  # fmt: skip


def tally(episodes: list, task_of) -> tuple[dict[str, list[bool]], dict[str, float], int]:
    """(successes per task, mean reward per template, trials per task) of graded episodes."""
    by_task: dict[str, list[bool]] = {}
    by_template: dict[str, list[float]] = {}
    for ep in episodes:
        r, task = ep.reward(), task_of(ep)
        by_task.setdefault(task["id"], []).append(r >= 1.0)
        by_template.setdefault(task.get("template", "?"), []).append(r)
    means = {k: round(sum(v) / len(v), 3) for k, v in sorted(by_template.items())}
    return by_task, means, min((len(v) for v in by_task.values()), default=0)


# Hidden-test grading (terminal, swe) is a sandboxed pytest run per episode, mostly interpreter
# start-up: episodes start it here the moment they end, so it overlaps the rest of the play and
# uses every core, and `reward()` only waits for the result.
GRADERS = ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2), thread_name_prefix="vtb-grade")


class BackgroundGrade:
    """One grading job per episode, started at most once, awaited by `result()`."""

    def __init__(self, job):
        self._job, self._future = job, None

    def start(self) -> None:
        if self._future is None:
            self._future = GRADERS.submit(self._job)

    def result(self):
        self.start()
        return self._future.result()
