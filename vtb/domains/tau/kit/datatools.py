"""Data tools for tau workspaces: pick, check and clean demonstrations; render SFT rows.

Run in the research sandbox, e.g.
  python -m vtb.domains.tau.kit.datatools demos --n 300 --out data/trajectories.jsonl
  python -m vtb.domains.tau.kit.datatools check data/trajectories.jsonl
  python -m vtb.domains.tau.kit.datatools clean data/trajectories.jsonl data/trajectories.jsonl
  python -m vtb.domains.tau.kit.datatools sft data/trajectories.jsonl data/train.jsonl
Demonstrations come from TRAIN tasks (/data/pool.jsonl) only: conversations of the scripted
expert with the scripted user, played by the orchestrator against a fresh copy of the database
and shipped as /data/demos.jsonl (a few clean trials of every train task and one demonstration
of each flaw, each with its reward). `demos` samples from that file.

`check` and `clean` cannot replay a conversation (the tools' database effects and the user
simulator are not in the sandbox): a demonstration found in /data/demos.jsonl has the reward
recorded there; any other one earns 1 when it ends the conversation, its write calls are
exactly its task's gold writes (names, arguments, order) and it states every expected output,
which is the tau-bench reward for conversations whose writes succeed.
"""

from __future__ import annotations

import hashlib
import json
import random
import sys
from collections import Counter
from pathlib import Path

from vtb.domains.kit import rowtools
from vtb.domains.kit.jsonl import read_jsonl, write_jsonl
from vtb.domains.tau.kit import prompting
from vtb.domains.tau.kit.schemas import WRITE_TOOLS

POOL, DB, BANK = "/data/pool.jsonl", "/data/db.json", "/data/demos.jsonl"
STOP = "###STOP###"


def demo_key(demo: dict) -> str:
    """A demonstration's identity: the sha256 of its task id and canonical messages."""
    text = json.dumps([demo.get("task_id"), demo.get("messages")], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def sample_demos(bank: list[dict], n: int, seed: int, flawed: float = 0.0) -> list[dict]:
    """n demonstrations of the bank's tasks (each task once before any repeats); a `flawed` share is wrong."""
    by_task: dict[str, dict[str, list[dict]]] = {}
    for demo in bank:
        kind = "flawed" if demo.get("flaw") else "clean"
        by_task.setdefault(demo["task_id"], {"clean": [], "flawed": []})[kind].append(demo)
    ids = sorted(t for t, kinds in by_task.items() if kinds["clean"])
    if not ids:
        return []
    rng = random.Random(seed)
    order: list[str] = []
    while len(order) < n:
        order += rng.sample(ids, len(ids))
    out = []
    for task_id in order[:n]:
        kinds = by_task[task_id]
        wrong = rng.random() < flawed and kinds["flawed"]
        demo = rng.choice(kinds["flawed"] if wrong else kinds["clean"])
        out.append({k: demo[k] for k in ("task_id", "trial", "messages", "reward")})
    return out


def _writes(messages: list[dict]) -> list[tuple[str, str]]:
    calls = []
    for m in messages:
        if m.get("role") == "assistant" and m.get("tool_calls"):
            action = prompting.message_action(m)
            if action["name"] in WRITE_TOOLS:
                calls.append((action["name"], json.dumps(action["arguments"], sort_keys=True)))
    return calls


def gold_reward(demo: dict, task: dict) -> float:
    """1.0 when the conversation ends, makes exactly the gold writes and states every output."""
    messages = demo.get("messages")
    if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
        return 0.0
    ended = STOP in str(messages[-1].get("content") or "") or any(
        m.get("role") == "assistant"
        and m.get("tool_calls")
        and prompting.message_action(m)["name"] == "transfer_to_human_agents"
        for m in messages
    )
    gold = [
        (a["name"], json.dumps(a["kwargs"], sort_keys=True))
        for a in task["actions"]
        if a["name"] in WRITE_TOOLS
    ]
    if not ended or _writes(messages) != gold:
        return 0.0
    said = [
        str(m["content"]).lower().replace(",", "")
        for m in messages
        if m.get("role") == "assistant" and m.get("content")
    ]
    for output in task.get("outputs", []):
        if not any(output.lower().replace(",", "") in text for text in said):
            return 0.0
    return 1.0


def score(demo: dict, task: dict, known: dict[str, float]) -> float:
    """The recorded reward of a bank demonstration, else `gold_reward`."""
    key = demo_key(demo)
    return known[key] if key in known else gold_reward(demo, task)


def sft_rows(demos: list[dict]) -> list[dict]:
    return [row for demo in demos for row in prompting.sft_rows(demo["messages"])]


def main(argv: list[str] | None = None) -> None:
    parser, sub = rowtools.parser(sys.modules[__name__])
    p = sub.add_parser("demos", help="expert demonstrations of train tasks (sampled from /data/demos.jsonl)")
    p.add_argument("--n", type=int, required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--flawed", type=float, default=0.0, help="share of deliberately wrong demonstrations")
    for name in ("check", "clean"):
        q = sub.add_parser(name, help=f"{name} demonstrations against their tasks' gold actions")
        q.add_argument("path")
        if name == "clean":
            q.add_argument("out")
    s = sub.add_parser("sft", help="render SFT rows (the prompt format of vtb.domains.tau.kit.prompting)")
    s.add_argument("path")
    s.add_argument("out")
    for q in sub.choices.values():
        q.add_argument("--pool", default=POOL)
        q.add_argument("--bank", default=BANK)
    args = parser.parse_args(argv)

    if args.cmd == "sft":
        rows = sft_rows(read_jsonl(Path(args.path)))
        write_jsonl(Path(args.out), rows)
        print(f"wrote {len(rows)} SFT rows to {args.out}")
        return
    bank = read_jsonl(Path(args.bank))
    if args.cmd == "demos":
        demos = sample_demos(bank, args.n, args.seed, args.flawed)
        write_jsonl(Path(args.out), demos)
        print(f"wrote {len(demos)} demonstrations to {args.out}")
        return
    pool = {t["id"]: t for t in read_jsonl(Path(args.pool))}
    known = {demo_key(d): float(d.get("reward", 0.0)) for d in bank}
    demos = read_jsonl(Path(args.path))
    unknown = [d.get("task_id") for d in demos if d.get("task_id") not in pool]
    if unknown:
        sys.exit(
            f"{len(unknown)} demonstrations name tasks not in {args.pool} (first: {unknown[0]}); "
            "only train-pool tasks can be checked"
        )
    rewards = [score(d, pool[d["task_id"]], known) for d in demos]
    # real tau-bench / tau2 tasks have no template: counted under "-"
    per = Counter((pool[d["task_id"]].get("template") or "-", r) for d, r in zip(demos, rewards, strict=True))
    print(f"{sum(rewards):.0f}/{len(demos)} demonstrations earn reward 1")
    for (template, r), count in sorted(per.items()):
        print(f"  {template:15s} reward {r:.0f}: {count}")
    if args.cmd == "clean":
        kept = [d for d, r in zip(demos, rewards, strict=True) if r >= 1.0]
        write_jsonl(Path(args.out), kept)
        print(f"kept {len(kept)} of {len(demos)} in {args.out}")


if __name__ == "__main__":
    main()
