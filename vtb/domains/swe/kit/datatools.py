"""Data tools for swe systems, usable by research agents inside their sandbox.

    python -m vtb.domains.swe.kit.datatools from-pool /data/pool.jsonl data/train.jsonl --n 600
    python -m vtb.domains.swe.kit.datatools check data/train.jsonl --pool /data/pool.jsonl
    python -m vtb.domains.swe.kit.datatools clean data/train.jsonl data/clean.jsonl --pool /data/pool.jsonl

Rows are SFT rows {"prompt", "completion"} in the prompting.py format, made from a train
instance's gold fix (its one-line `fix`). A row is correct when its edit is that fix.
"""

from __future__ import annotations

import random
import sys

from vtb.domains.kit import rowtools
from vtb.domains.swe.kit import prompting

FLAWS = ("other_fix", "no_change", "wrong_line")


def view(instance: dict) -> tuple[str, list[str]] | None:
    """What a harness shows the model of this instance (prompting.locate)."""
    return prompting.locate(instance["problem_statement"], instance["files"])


def gold_edit(instance: dict) -> tuple[str, str]:
    return instance["fix"]["old"].strip(), instance["fix"]["new"].strip()


def row(instance: dict, old: str, new: str) -> dict | None:
    found = view(instance)
    if found is None:
        return None
    return {"instance_id": instance["instance_id"], "bug": instance.get("bug")} | prompting.sft_row(
        instance["problem_statement"], *found, old, new
    )


def flawed_edit(instance: dict, pool: list[dict], rng: random.Random) -> tuple[str, str]:
    """A plausible wrong edit: another instance's fix, a no-op, or the right change on another line."""
    old, new = gold_edit(instance)
    flaw = rng.choice(FLAWS)
    if flaw == "other_fix":
        others = [i for i in pool if i["instance_id"] != instance["instance_id"]]
        return gold_edit(rng.choice(others)) if others else (old, old)
    if flaw == "no_change":
        return old, old
    lines = [ln.strip() for ln in (view(instance) or ("", []))[1] if ln.strip() and ln.strip() != old]
    return (rng.choice(lines), new) if lines else (old, old)


def shell_rows(pool: list[dict], n: int, seed: int, flawed: float = 0.0) -> list[dict]:
    """Rows for real instances (no files): the issue, then `cat` of the file its gold patch edits.

    What the shipped shell harness asks the model first; a flawed row names another instance's file.
    """
    rng = random.Random(seed)
    usable = [(i, paths[0]) for i in pool if (paths := prompting.patched_paths(i.get("patch", "")))]
    if not usable:
        raise ValueError("swe: no pool instance has a gold patch that names a file; no rows can be made")
    rng.shuffle(usable)
    picked = [usable[k % len(usable)] for k in range(n)]
    bad = set(rng.sample(range(len(picked)), round(len(picked) * flawed)))
    rows = []
    for k, (inst, path) in enumerate(picked):
        if k in bad:
            path = rng.choice(usable)[1]
        rows.append(
            {
                "instance_id": inst["instance_id"],
                "prompt": prompting.shell_prompt(inst["problem_statement"]),
                "completion": f"cat {path}\n",
            }
        )
    return rows


def make_rows(pool: list[dict], n: int, seed: int, flawed: float = 0.0) -> list[dict]:
    """n rows over the pool's instances (each once before any repeats); a `flawed` share wrong."""
    if pool and not any("files" in i for i in pool):  # real SWE-bench instances
        return shell_rows(pool, n, seed, flawed)
    rng = random.Random(seed)
    usable = [i for i in pool if view(i) is not None]
    rng.shuffle(usable)
    picked = [usable[k % len(usable)] for k in range(n)] if usable else []
    bad = set(rng.sample(range(len(picked)), round(len(picked) * flawed)))
    rows = [row(i, *(flawed_edit(i, pool, rng) if k in bad else gold_edit(i))) for k, i in enumerate(picked)]
    return [r for r in rows if r is not None]


def is_correct(r: dict, by_prompt: dict[str, dict]) -> bool:
    instance = by_prompt.get(r.get("prompt", ""))
    if instance is not None and "files" not in instance:  # a real instance: `cat` the file the fix edits
        paths = prompting.patched_paths(instance.get("patch", ""))
        return bool(paths) and r.get("completion", "").strip() == f"cat {paths[0]}"
    return instance is not None and prompting.parse_edit(r.get("completion", "")) == gold_edit(instance)


def index(pool: list[dict]) -> dict[str, dict]:
    out = {}
    for i in pool:
        if "files" not in i:  # a real instance (shell_rows)
            out[prompting.shell_prompt(i["problem_statement"])] = i
            continue
        found = view(i)
        if found:
            out[prompting.prompt(i["problem_statement"], *found)] = i
    return out


def main(argv: list[str] | None = None) -> int:
    return rowtools.run_cli(argv, sys.modules[__name__], default_n=600, gold="gold edit")


if __name__ == "__main__":
    sys.exit(main())
