"""A toy arithmetic corpus and a tiny model trained on it, for tests and engine benchmarks.

Real provisioning takes its words and texts from the domain; tests and benchmarks need a
model that builds in seconds and does not depend on the domain package.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from pathlib import Path

from vtb.models.tiny import build_tiny_model, build_tokenizer

TOY_WORDS = [
    "Tom",
    "Ann",
    "has",
    "apples",
    "pears",
    "buys",
    "more",
    "gives",
    "away",
    "How",
    "many",
    "does",
    "have",
]
TOY_WORDS += ["Q", "A", "and", "the", "answer", "is"]
TOY_NUMBER_MAX = 200


def toy_example(rng: random.Random) -> tuple[str, str]:
    """One (question, worked answer) pair with a GSM8K-style calculator annotation."""
    name, item = rng.choice(["Tom", "Ann"]), rng.choice(["apples", "pears"])
    a, b = rng.randint(1, 50), rng.randint(1, 50)
    if rng.random() < 0.5:
        question = f"{name} has {a} {item} and buys {b} more. How many {item} does {name} have?"
        answer = f"<<{a}+{b}={a + b}>>{a + b}\n#### {a + b}"
    else:
        a, b = max(a, b), min(a, b)
        question = f"{name} has {a} {item} and gives {b} away. How many {item} does {name} have?"
        answer = f"<<{a}-{b}={a - b}>>{a - b}\n#### {a - b}"
    return question, answer


def toy_texts(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return [f"Q: {q}\nA: {a}" for q, a in (toy_example(rng) for _ in range(n))]


def build_toy_model(
    out_dir: Path,
    *,
    steps: int = 30,
    n_texts: int = 500,
    seed: int = 0,
    progress: Callable[[str], None] = print,
    **shape,
) -> Path:
    """A tiny GPT-2 on the toy corpus (defaults: 4 layers, width 128; pass n_layer=... to shrink)."""
    tokenizer = build_tokenizer(TOY_WORDS, TOY_NUMBER_MAX)
    return build_tiny_model(
        out_dir, toy_texts(n_texts, seed), tokenizer, steps=steps, seed=seed, progress=progress, **shape
    )


def write_toy_system(folder: Path, trainer: dict, n_rows: int = 48) -> Path:
    """A system's data and trainer parts for the toy model: `n_rows` toy SFT rows and `trainer` as
    its config (the DeepSpeed tests, the GPU suite and scripts/gpu_check.py train it)."""
    (folder / "data").mkdir(parents=True, exist_ok=True)
    (folder / "trainer").mkdir(exist_ok=True)
    rng = random.Random(0)
    rows = [toy_example(rng) for _ in range(n_rows)]
    (folder / "data" / "train.jsonl").write_text(
        "".join(json.dumps({"prompt": f"Q: {q}\nA:", "completion": " " + a}) + "\n" for q, a in rows)
    )
    (folder / "trainer" / "config.json").write_text(json.dumps(trainer))
    return folder
