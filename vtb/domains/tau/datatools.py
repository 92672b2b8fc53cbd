"""Data tools for tau workspaces: make, check and clean demonstrations; render SFT rows.

Run in the research sandbox, e.g.
  python -m vtb.domains.tau.datatools demos --n 300 --out data/trajectories.jsonl
  python -m vtb.domains.tau.datatools check data/trajectories.jsonl
  python -m vtb.domains.tau.datatools clean data/trajectories.jsonl data/trajectories.jsonl
  python -m vtb.domains.tau.datatools sft data/trajectories.jsonl data/train.jsonl
Demonstrations come from TRAIN tasks (/data/pool.jsonl) only: they are conversations of the
scripted expert with the scripted user, replayed against a fresh copy of the database.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections import Counter
from pathlib import Path

from vtb.domains.math.datatools import read_jsonl, write_jsonl
from vtb.domains.tau import expert, prompting, tasks, tools
from vtb.domains.tau.env import TauEpisode
from vtb.domains.tau.user import ScriptedUser

POOL, DB = "/data/pool.jsonl", "/data/db.json"


def play_demo(task: dict, db: dict, trial: int, flaw: str | None = None, seed: int = 0) -> dict:
    """The expert's conversation on a fresh copy of db, with its reward."""
    gold = tools.hash_db(tasks.replay(db, task["actions"]))
    episode = TauEpisode(task, trial, db, gold, ScriptedUser(), policy="")
    agent = expert.Expert(task, flaw, seed)
    while episode.step(agent.act(episode.messages)):
        pass
    return {"task_id": task["id"], "trial": trial, "messages": episode.messages, "reward": episode.reward()}


def make_demos(pool: list[dict], db: dict, n: int, seed: int, flawed: float = 0.0) -> list[dict]:
    """n demonstrations over the pool's tasks (each task once before any repeats); a `flawed` share is wrong."""
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
    gold = tools.hash_db(tasks.replay(db, task["actions"]))
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


def sft_rows(demos: list[dict]) -> list[dict]:
    return [row for demo in demos for row in prompting.sft_rows(demo["messages"])]


def _load(pool_path: str, db_path: str) -> tuple[dict, dict]:
    pool = {t["id"]: t for t in read_jsonl(Path(pool_path))}
    return pool, json.loads(Path(db_path).read_text())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m vtb.domains.tau.datatools", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("demos", help="expert demonstrations of train tasks")
    p.add_argument("--n", type=int, required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--flawed", type=float, default=0.0, help="share of deliberately wrong demonstrations")
    for name in ("check", "clean"):
        q = sub.add_parser(name, help=f"{name} demonstrations by replaying them against their gold actions")
        q.add_argument("path")
        if name == "clean":
            q.add_argument("out")
    s = sub.add_parser("sft", help="render SFT rows (the prompt format of vtb.domains.tau.prompting)")
    s.add_argument("path")
    s.add_argument("out")
    for q in sub.choices.values():
        q.add_argument("--pool", default=POOL)
        q.add_argument("--db", default=DB)
    args = parser.parse_args(argv)

    if args.cmd == "sft":
        rows = sft_rows(read_jsonl(Path(args.path)))
        write_jsonl(Path(args.out), rows)
        print(f"wrote {len(rows)} SFT rows to {args.out}")
        return
    pool, db = _load(args.pool, args.db)
    if args.cmd == "demos":
        demos = make_demos(list(pool.values()), db, args.n, args.seed, args.flawed)
        write_jsonl(Path(args.out), demos)
        print(f"wrote {len(demos)} demonstrations to {args.out}")
        return
    demos = read_jsonl(Path(args.path))
    unknown = [d.get("task_id") for d in demos if d.get("task_id") not in pool]
    if unknown:
        sys.exit(f"{len(unknown)} demonstrations name tasks not in {args.pool} (first: {unknown[0]}); "
                 "only train-pool tasks can be checked")  # fmt: skip
    rewards = [score(d, pool[d["task_id"]], db) for d in demos]
    per = Counter((pool[d["task_id"]].get("template"), r) for d, r in zip(demos, rewards, strict=True))
    print(f"{sum(rewards):.0f}/{len(demos)} demonstrations earn reward 1")
    for (template, r), count in sorted(per.items()):
        print(f"  {template:15s} reward {r:.0f}: {count}")
    if args.cmd == "clean":
        kept = [d for d, r in zip(demos, rewards, strict=True) if r >= 1.0]
        write_jsonl(Path(args.out), kept)
        print(f"kept {len(kept)} of {len(demos)} in {args.out}")


if __name__ == "__main__":
    main()
