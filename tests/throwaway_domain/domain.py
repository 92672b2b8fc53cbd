"""A throwaway domain for tests/test_new_domain.py: reverse a word. Copied to vtb/domains/<name>/
by the test, it is a whole domain in one folder: data, systems, episodes, reward, proposals, prompt."""

from __future__ import annotations

import random
import string
from dataclasses import dataclass
from pathlib import Path

from vtb import salt
from vtb.config import TaskConfig, TrainerConfig
from vtb.domains import common
from vtb.domains.registry import register_domain
from vtb.runner import SingleTurn

NAME = Path(__file__).parent.name
HARNESSES = Path(__file__).parent / "kit" / "harnesses"
README = "# Reverse the word\n\n- data/train.jsonl  SFT rows {prompt, completion}\n"


@dataclass
class ReverseConfig(TaskConfig):
    word_length: int = 4  # a setting of this domain only (task.word_length=...)


def _words(seed: int, n: int, length: int) -> list[dict]:
    rng = random.Random(seed)
    return [{"word": "".join(rng.choices(string.ascii_lowercase[:6], k=length))} for _ in range(n)]


class Episode(SingleTurn):
    def __init__(self, item: dict):
        super().__init__(
            {"type": "start", "episode": item["id"], "domain": NAME, "observation": {"word": item["word"]}}
        )
        self.item = item

    def reward(self) -> float:
        content = (self.action or {}).get("content")
        return float(isinstance(content, str) and content.strip() == self.item["word"][::-1])

    def record(self) -> dict:
        return {"id": self.id, "reward": self.reward(), "action": self.action, "failure": self.failure}


@register_domain(NAME)
class ReverseDomain:
    name, config = NAME, ReverseConfig

    def provision(self, task: TaskConfig, out: Path) -> dict:
        public = _words(task.data_seed, task.n_pool + task.n_val, task.word_length)
        splits = {
            "pool": public[: task.n_pool],
            "val": public[task.n_pool :],
            "test": _words(salt.hidden_seed(task), task.n_test, task.word_length),
        }
        for name, rows in splits.items():
            for i, row in enumerate(rows):
                row["id"] = f"{name}-{i:04d}"
        common.write_splits(out, splits["pool"], splits["val"], splits["test"], public=("id",))
        return {name: len(rows) for name, rows in splits.items()}

    def tokenizer_spec(self, task: TaskConfig, data_dir: Path) -> dict:
        return {"words": ["reverse", ":", *string.ascii_lowercase[:6]], "number_max": 0, "mode": "words"}

    def pretraining_texts(self, task: TaskConfig, data_dir: Path, n: int, seed: int) -> list[str]:
        return [f"reverse : {' '.join(r['word'])}" for r in common.read_split(data_dir, "pool")][:n]

    def _rows(self, pool: list[dict], n: int, seed: int, flawed: float = 0.0) -> list[dict]:
        rng = random.Random(seed)
        return [
            {"prompt": f"reverse : {' '.join(r['word'])} :", "completion": " " + " ".join(r["word"][::-1])}
            for r in rng.sample(pool, min(n, len(pool)))
        ]

    def write_initial_system(
        self, ws: Path, task: TaskConfig, trainer: TrainerConfig, data_dir: Path
    ) -> None:
        common.write_system(
            ws,
            data_dir,
            self._rows,
            task.initial_data_size,
            task.data_seed,
            common.trainer_dict(trainer),
            HARNESSES / "plain",
            README,
        )

    def write_reference_system(self, ws: Path, task: TaskConfig, data_dir: Path) -> None:
        common.write_system(
            ws, data_dir, self._rows, task.n_pool, task.data_seed, {"epochs": 1}, HARNESSES / "rule", README
        )

    def split(self, data_dir: Path, name: str) -> list[dict]:
        return common.read_split(data_dir, name)

    def episodes(self, data_dir: Path, split: str, task: TaskConfig, sandbox=None) -> list[Episode]:
        return [Episode(item) for item in self.split(data_dir, split)]

    def metrics(self, episodes: list[Episode], task: TaskConfig) -> dict:
        return {"reversed": sum(ep.reward() for ep in episodes)}
