"""tau's preflight (vtb/preflight.py): what must hold before a tau bench spends any budget.

- every task's gold actions replay on the database (a task whose gold fails would crash the
  episodes that play it, after training);
- on a sample of every split, the expert replaying the gold earns reward 1, and an episode in
  which the agent does nothing earns 0 wherever the gold changes the database or asks for
  something to be said (where it does neither, doing nothing is the right answer);
- no val or test task's reward rests on an NL assertion nobody judges: tau2 tasks whose
  reward_basis has NL_ASSERTION need task.judge_base_url, else the run is refused (their score
  would be the other components', not tau2's); task.allow_unjudged=true plays them anyway, each
  such episode counted as "not judged" in the summary;
- the initial and reference systems' demonstrations replay to the reward they record, the
  reference's all to 1; the initial's reward-0 rows are its deliberately flawed share
  (task.initial_noise), said in the log, and a problem only beyond what that share explains;
- with task.user=llm the customer endpoint answers (and the NL-assertion judge, when given): a dead
  endpoint is a refusal in seconds naming the setting, not a run of failed episodes.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from vtb.chat import ChatClient, ChatError
from vtb.domains.kit.jsonl import read_jsonl
from vtb.domains.tau import demos as demotools
from vtb.domains.tau import generator, tools
from vtb.domains.tau.env import TauEpisode
from vtb.domains.tau.user import ScriptedUser
from vtb.preflight import SPLITS, Problem, Systems, sample, some
from vtb.progress import say

ENDPOINT_TIMEOUT_S = 10.0
NOTHING = {"type": "message", "content": "Sorry, I cannot help with that."}


def preflight(domain, task, data_dir: Path, systems: Systems) -> list[Problem]:
    db = domain.db(data_dir)
    problems: list[Problem] = []
    pool = {t["id"]: t for t in domain.split(data_dir, "pool")}
    judged = bool(getattr(task, "judge_base_url", None))
    for split in SPLITS:
        items = domain.split(data_dir, split)
        if split != "pool" and not judged and not task.allow_unjudged:
            problems += _unjudged(items, split)
        broken = _gold_failures(items, db, split)
        problems += broken
        bad = {p.where for p in broken}
        for item in sample([t for t in items if f"{split} task {t['id']}" not in bad]):
            problems += _gold_and_empty(item, db, split, note=not judged and task.allow_unjudged)
    problems += _system_rows(systems.initial, "initial", pool, db, task.initial_noise)
    if systems.reference is not None:
        problems += _system_rows(systems.reference, "reference", pool, db, 0.0)
    if task.user == "llm":
        problems += _endpoint("task.user_base_url", task.user_base_url, task.user_model, "task.user_model")
    if getattr(task, "judge_base_url", None):
        problems += _endpoint(
            "task.judge_base_url", task.judge_base_url, task.judge_model, "task.judge_model"
        )
    return problems


def _unjudged(items: list[dict], split: str) -> list[Problem]:
    ids = [
        t["id"] for t in items if "NL_ASSERTION" in (t.get("reward_basis") or []) and t.get("nl_assertions")
    ]
    if not ids:
        return []
    return [
        Problem(
            f"{split} tasks {some(ids)}",
            "their reward_basis includes NL_ASSERTION, and no judge is configured: their scores would "
            "be the other components' alone, not tau2's",
            "set task.judge_base_url=<OpenAI-compatible URL> task.judge_model=<name>, or "
            "task.allow_unjudged=true to score them on their other components (counted as not judged)",
        )
    ]


def _gold_failures(items: list[dict], db: dict, split: str) -> list[Problem]:
    out = []
    for item in items:
        try:
            generator.replay(db, item["actions"])
        except ValueError as err:
            out.append(
                Problem(
                    f"{split} task {item['id']}",
                    f"its {err} on the task's database",
                    "correct the task's gold actions or remove the task from the data set",
                )
            )
    return out


def _gold_and_empty(item: dict, db: dict, split: str, note: bool) -> list[Problem]:
    where = f"{split} task {item['id']}"
    demo = demotools.play_demo(item, db, trial=0)
    out = []
    if demo["reward"] != 1.0:
        out.append(
            Problem(
                where,
                "replaying its gold actions earns reward 0, so no agent can earn 1 on it",
                "check the task's actions and outputs (communicate_info) against its database",
            )
        )
    gold = generator.replay(db, item["actions"])
    asks = tools.hash_db(gold) != tools.hash_db(db) or item.get("outputs") or _asks_actions(item)
    empty = _empty_episode(item, db, gold) if asks else None
    if empty is None or empty.reward() == 0.0:
        return out
    if "NL_ASSERTION" in empty.not_judged():  # the one component that would tell: refused in `_unjudged`
        if note:  # played unjudged on purpose (task.allow_unjudged): said once here
            say(
                f"preflight: {where}: with no judge (task.judge_base_url) doing nothing earns reward 1; "
                "its NL_ASSERTION component is recorded as not judged in every episode"
            )
        return out
    out.append(
        Problem(
            where,
            "an episode in which the agent does nothing earns reward 1 although the gold changes "
            "the database or asks for outputs",
            "check the task's reward_basis: it must include what the gold changes (DB) or says",
        )
    )
    return out


def _asks_actions(item: dict) -> bool:
    return "ACTION" in (item.get("reward_basis") or []) and bool(item["actions"])


def _empty_episode(item: dict, db: dict, gold: dict) -> TauEpisode:
    episode = TauEpisode(item, 0, db, tools.hash_db(gold), ScriptedUser(), policy="")
    episode.step(NOTHING)
    while not episode.over:  # a customer that keeps asking gets the same nothing until the limit
        episode.step(NOTHING)
    return episode


def _system_rows(ws: Path, system: str, pool: dict, db: dict, noise: float) -> list[Problem]:
    path = ws / "data" / "trajectories.jsonl"
    if not path.is_file():
        return []  # a system without demonstrations trains on its rows only: nothing to replay
    rows = read_jsonl(path)
    where = f"system {system} ({path.relative_to(ws)})"
    unknown = sorted({str(r.get("task_id")) for r in rows} - set(pool))
    if unknown:
        return [Problem(where, f"rows name tasks not in the train pool: {unknown[:5]}", "rebuild the system")]
    replayed = [demotools.score(r, pool[r["task_id"]], db) for r in rows]
    lying = [i for i, (r, got) in enumerate(zip(rows, replayed, strict=True)) if got != r.get("reward")]
    out = []
    if lying:
        out.append(
            Problem(
                where,
                f"{len(lying)} of {len(rows)} rows record a reward their replay does not give (rows {lying[:5]})",
                "rebuild the system's demonstrations (vtb.domains.tau.kit.datatools demos)",
            )
        )
    zero = sum(r != 1.0 for r in replayed)
    allowed = (
        0 if noise <= 0 else math.ceil(len(rows) * noise + 3 * math.sqrt(len(rows) * noise * (1 - noise)))
    )
    if zero > allowed:
        out.append(
            Problem(
                where,
                f"{zero} of {len(rows)} training rows replay to reward 0 (its flawed share task.initial_noise="
                f"{noise} explains at most {allowed})",
                "check that the train pool's gold actions replay (see the task problems above)",
            )
        )
    elif zero:
        say(
            f"preflight: {system} system: {zero} of {len(rows)} training rows replay to reward 0, "
            f"flawed on purpose (task.initial_noise={noise}); the other rows replay to 1"
        )
    return out


def _endpoint(setting: str, url: str | None, model: str | None, model_setting: str) -> list[Problem]:
    if not (url and model):
        return [
            Problem(setting, "not set", f"set {setting}=<OpenAI-compatible URL> and {model_setting}=<name>")
        ]
    client = ChatClient(url, model, timeout_s=ENDPOINT_TIMEOUT_S, retries=0)
    try:
        body = client.complete([{"role": "user", "content": "Reply with: ok"}], max_tokens=8)
        body["choices"][0]["message"]
    except (ChatError, KeyError, IndexError, TypeError) as err:
        detail = (
            str(err) if isinstance(err, ChatError) else f"no choices[0].message in {json.dumps(body)[:120]}"
        )
        return [
            Problem(
                f"{setting}={url}",
                f"the endpoint did not answer a chat completion for {model_setting}={model} ({detail})",
                f"start the endpoint, or point {setting} / {model_setting} at one that answers",
            )
        ]
    return []
