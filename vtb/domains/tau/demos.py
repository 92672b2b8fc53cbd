"""Data tools for tau workspaces: make, check and clean demonstrations; render SFT rows.

Run in the research sandbox, e.g.
  python -m vtb.domains.tau.kit.datatools demos --n 300 --out data/trajectories.jsonl
  python -m vtb.domains.tau.kit.datatools check data/trajectories.jsonl
  python -m vtb.domains.tau.kit.datatools clean data/trajectories.jsonl data/trajectories.jsonl
  python -m vtb.domains.tau.kit.datatools sft data/trajectories.jsonl data/train.jsonl
Demonstrations come from TRAIN tasks (/data/pool.jsonl) only: they are conversations of the
scripted expert with the scripted user, replayed against a fresh copy of the database.
"""

from __future__ import annotations

import random
from pathlib import Path

from vtb.domains.kit.jsonl import write_jsonl
from vtb.domains.tau import expert, generator, tools
from vtb.domains.tau.env import TauEpisode
from vtb.domains.tau.kit import prompting
from vtb.domains.tau.kit.datatools import sft_rows  # noqa: F401  (re-exported)
from vtb.domains.tau.user import ScriptedUser

# Clean trials per train task in the bank (the user's phrasing and identity form vary by trial),
# plus one demonstration of each flaw: ~6 plays per task, about 10 s for the default 240 tasks.
BANK_TRIALS = 3


def play_demo(task: dict, db: dict, trial: int, flaw: str | None = None, seed: int = 0) -> dict:
    """The expert's conversation on a fresh copy of db, with its reward."""
    gold = tools.hash_db(generator.replay(db, task["actions"]))
    episode = TauEpisode(task, trial, db, gold, ScriptedUser(), policy="")
    agent = expert.Expert(task, flaw, seed)
    while episode.step(agent.act(episode.messages)):
        pass
    return {"task_id": task["id"], "trial": trial, "messages": episode.messages, "reward": episode.reward()}


def make_demos(pool: list[dict], db: dict, n: int, seed: int, flawed: float = 0.0) -> list[dict]:
    """n demonstrations over the pool's tasks (each task once before any repeats); a `flawed` share is wrong."""
    if not pool and n > 0:
        raise ValueError("no train tasks to make demonstrations from: the train pool is empty")
    rng = random.Random(seed)
    order = []
    while len(order) < n:
        order += rng.sample(pool, len(pool))
    demos = []
    for i, task in enumerate(order[:n]):
        flaw = rng.choice(expert.FLAWS) if rng.random() < flawed else None
        demos.append(
            play_demo(
                task, db, trial=i // len(pool) + rng.randrange(100), flaw=flaw, seed=rng.randrange(10**6)
            )
        )
    return demos


def score(demo: dict, task: dict, db: dict) -> float:
    """Replay a demonstration's tool calls on a fresh database and apply the tau-bench reward."""
    gold = tools.hash_db(generator.replay(db, task["actions"]))
    episode = TauEpisode(task, demo.get("trial", 0), db, gold, ScriptedUser(), policy="")
    episode.messages = list(demo["messages"])
    episode.finished = "###STOP###" in (demo["messages"][-1].get("content") or "")
    for m in demo["messages"]:
        if m["role"] == "assistant" and m.get("tool_calls"):
            action = prompting.message_action(m)
            result = tools.call_tool(episode.db, action["name"], action["arguments"])
            if action["name"] == "transfer_to_human_agents" and not result.startswith("Error"):
                episode.finished = True
    return episode.reward()


def bank(pool: list[dict], db: dict, trials: int = BANK_TRIALS) -> list[dict]:
    """BANK_TRIALS clean demonstrations of every train task, then one per flaw; each says its `flaw`."""
    clean = [play_demo(t, db, trial) | {"flaw": None} for trial in range(trials) for t in pool]
    flawed = [
        play_demo(t, db, trial=i % trials, flaw=flaw, seed=i) | {"flaw": flaw}
        for t in pool
        for i, flaw in enumerate(expert.FLAWS)
    ]
    return clean + flawed


def write_bank(path: Path, pool: list[dict], db: dict) -> int:
    demos = bank(pool, db)
    write_jsonl(path, demos)
    return len(demos)
