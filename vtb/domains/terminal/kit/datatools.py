"""Data tools for terminal systems, usable by research agents inside their sandbox.

    python -m vtb.domains.terminal.kit.datatools from-pool /data/pool.jsonl data/train.jsonl --n 800
    python -m vtb.domains.terminal.kit.datatools check data/train.jsonl --pool /data/pool.jsonl
    python -m vtb.domains.terminal.kit.datatools clean data/train.jsonl data/clean.jsonl --pool /data/pool.jsonl

Rows are SFT rows {"prompt", "completion"} in the prompting.py format, with the task's id. A
row is correct when its command is the train task's reference solution (solution.sh).
"""

from __future__ import annotations

import random
import sys

from vtb.domains.kit import rowtools
from vtb.domains.terminal.kit import prompting

FLAWS = ("wrong_value", "other_template", "truncated")


def solution_command(task: dict) -> str:
    """The solution as one command line (comment and shebang lines dropped)."""
    lines = [ln.strip() for ln in task["solution"].splitlines()]
    return " && ".join(ln for ln in lines if ln and not ln.startswith("#"))


def row(task: dict, command: str) -> dict:
    return {"id": task["id"], "template": task.get("template")} | prompting.sft_row(
        task["instruction"], command
    )


def flawed_command(task: dict, pool: list[dict], rng: random.Random) -> str:
    """A plausible wrong command: another task's values, another template, or cut short."""
    flaw = rng.choice(FLAWS)
    same = [t for t in pool if t.get("template") == task.get("template") and t["id"] != task["id"]]
    other = [t for t in pool if t.get("template") != task.get("template")]
    good = solution_command(task)
    if flaw == "wrong_value" and same:
        return solution_command(rng.choice(same))
    if flaw == "other_template" and other:
        return solution_command(rng.choice(other))
    words = good.split()
    return " ".join(words[: max(1, 2 * len(words) // 3)])


def make_rows(pool: list[dict], n: int, seed: int, flawed: float = 0.0) -> list[dict]:
    """n rows over the pool's tasks (each task once before any repeats); a `flawed` share wrong."""
    if not pool and n > 0:  # the bench's preflight refuses an empty pool first (vtb/preflight.py)
        raise ValueError(f"no train tasks to make {n} rows from: the pool is empty")
    rng = random.Random(seed)
    order = list(pool)
    rng.shuffle(order)
    picked = [order[i % len(order)] for i in range(n)]
    bad = set(rng.sample(range(n), round(n * flawed)))
    return [
        row(t, flawed_command(t, pool, rng) if i in bad else solution_command(t))
        for i, t in enumerate(picked)
    ]


def is_correct(r: dict, by_instruction: dict[str, dict]) -> bool:
    task = by_instruction.get(r.get("prompt", ""))
    return task is not None and prompting.command_of(r.get("completion", "")) == solution_command(task)


def index(pool: list[dict]) -> dict[str, dict]:
    return {prompting.prompt(t["instruction"]): t for t in pool}


def main(argv: list[str] | None = None) -> int:
    return rowtools.run_cli(argv, sys.modules[__name__], default_n=800, gold="reference command")


if __name__ == "__main__":
    sys.exit(main())
