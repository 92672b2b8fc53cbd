"""The tau (tool use: retail, airline) domain as the pipeline sees it: database, splits, systems, episodes.

Splits are fixed by task.data_seed (and the salt for test); a real checkout's own train / dev /
test splits are used where it has them (`_real_splits`). The research sandbox gets the train tasks WITH gold actions
(research/pool.jsonl: demonstrations may be made from them), the database, tools and policy,
and only the ids and templates of the val tasks; val and test tasks in full live in hidden/.
The embedded miniature is retail; a real checkout is played in either of its environments
(task.env=retail|airline), with that environment's database, tools and policy.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path

from vtb import salt
from vtb.config import SandboxConfig, TrainerConfig
from vtb.domains import common
from vtb.domains.kit.jsonl import read_jsonl, write_jsonl
from vtb.domains.registry import register_domain
from vtb.domains.tau import db as dbgen
from vtb.domains.tau import demos as demotools
from vtb.domains.tau import generator, tools, user
from vtb.domains.tau.env import TauEpisode
from vtb.domains.tau.kit import datatools, prompting
from vtb.domains.tau.kit.schemas import WRITE_TOOLS
from vtb.preflight import Problem, Systems

HERE = Path(__file__).parent
HARNESSES = HERE / "kit" / "harnesses"
POLICY = (HERE / "policy.md").read_text()

REFERENCE_TRAINER = {
    "method": "full",
    "lr": 3e-3,
    "epochs": 10,
    "batch_size": 8,
    "lr_schedule": "cosine",
    "max_length": 384,
}
REFERENCE_DEMOS = 400
# A whole conversation is one SFT row (up to ~300 tokens): the tiny model's window and the
# trainer's max_length are raised to this for tau, whatever the model/trainer config says.
MIN_POSITIONS = 384

WORKSPACE_README = """# Workspace of the agent system (tau: customer service with tools, retail or airline)

- data/trajectories.jsonl  demonstration conversations {"task_id", "trial", "messages", "reward"}
  (OpenAI-style messages). data/train.jsonl  SFT rows {"prompt", "completion"} rendered from them;
  the trainer reads only train.jsonl, so re-render after changing trajectories.
- trainer/config.json  settings of vtb.engine.sft (see the math README for the fields).
- harness/harness.py  the agent: speaks the JSON-lines protocol (vtb/protocol.py); each message
  carries the conversation so far, start messages also the tool schemas and the policy. It answers
  with {"type": "tool_call", "name", "arguments"} or {"type": "message", "content"}.
  The model: an OpenAI-compatible server at $OPENAI_BASE_URL (key $OPENAI_API_KEY;
  vtb/serve/client.py or any OpenAI client; harness/ is capped at 1 MB). Prompt format and parsing: vtb/domains/tau/kit/prompting.py.
- /data/pool.jsonl  train tasks (tau-bench Task schema, with gold actions); /data/db.json the
  database (retail or airline); /data/policy.md; /data/tools.json (the environment's tools);
  /data/val.jsonl  val task ids and templates only;
  /data/demos.jsonl  expert demonstrations of every train task (clean and flawed, with rewards).
- Data tools: python -m vtb.domains.tau.kit.datatools {demos,check,clean,sft} --help
"""


@dataclass
class TauConfig(common.TrialsConfig):
    env: str = "retail"  # retail | airline: tau-bench's env, tau2's domain (airline: real sources only)
    n_users: int = 40  # size of the generated retail database
    user: str = "scripted"  # scripted | llm (an OpenAI-compatible endpoint, see user_* below)
    user_base_url: str | None = None
    user_model: str | None = None
    # tau2's NL_ASSERTION reward component: an OpenAI-compatible judge; without one the component
    # is recorded per episode as "not judged" and the reward is the product of the others
    judge_base_url: str | None = None
    judge_model: str | None = None
    # without a judge, a task whose reward_basis has NL_ASSERTION is refused at preflight (its
    # score would not be tau2's); true plays it on the other components, counted as not judged
    allow_unjudged: bool = False


@register_domain("tau")
class TauDomain:
    name, config = "tau", TauConfig

    # --- provisioning -----------------------------------------------------------------------
    def provision(self, task: TauConfig, out: Path) -> dict:
        if task.source == "embedded":
            if task.env != "retail":
                raise ValueError(
                    f"task.env={task.env}: the embedded miniature is retail; other environments need a real "
                    "checkout (task.source=tau_bench|tau2 task.path=...)"
                )
            db = dbgen.make_db(task.data_seed, task.n_users)
            taken: set = set()
            # pool and val from the public seed first, then the test tasks from the salted seed
            # (vtb/salt.py), skipping every task they hold
            val = generator.make_tasks(db, task.data_seed + 2, task.n_val, "val", taken)
            pool = generator.make_tasks(db, task.data_seed + 3, task.n_pool, "train", taken)
            test = generator.make_tasks(db, salt.hidden_seed(task), task.n_test, "test", taken)
            policy, schemas = POLICY, tools.TOOL_SCHEMAS
        else:
            test, val, pool, db, policy, schemas = _real_splits(task)
        research, hidden = out / "research", out / "hidden"
        research.mkdir(parents=True)
        hidden.mkdir(parents=True)
        (research / "db.json").write_text(json.dumps(db))
        (research / "policy.md").write_text(policy)
        (research / "tools.json").write_text(json.dumps(schemas, indent=1))
        write_jsonl(research / "pool.jsonl", pool)
        write_jsonl(research / "val.jsonl", [{"id": t["id"], "template": t.get("template")} for t in val])
        write_jsonl(hidden / "val.jsonl", val)
        write_jsonl(hidden / "test.jsonl", test)
        demotools.write_bank(research / "demos.jsonl", pool, db)
        tables = {name: len(rows) for name, rows in db.items() if isinstance(rows, dict)}
        return {"env": tools.env_of(db), "pool": len(pool), "val": len(val), "test": len(test), **tables}

    def split(self, data_dir: Path, name: str) -> list[dict]:
        if name == "pool":
            return read_jsonl(data_dir / "research" / "pool.jsonl")
        return read_jsonl(data_dir / "hidden" / f"{name}.jsonl")

    def db(self, data_dir: Path) -> dict:
        return json.loads((data_dir / "research" / "db.json").read_text())

    # --- the tiny base model ----------------------------------------------------------------
    def _demos(self, data_dir: Path, trials: int = 3) -> list[dict]:
        """Expert conversations of every train task (a few trials each); made once per data dir."""
        key = (str(data_dir), trials)
        if getattr(self, "_demo_cache", (None,))[0] != key:
            bank = read_jsonl(data_dir / "research" / "demos.jsonl")  # clean trials first (demos.bank)
            demos = [d for d in bank if d.get("flaw") is None and d["trial"] < trials]
            if trials > demotools.BANK_TRIALS:
                pool, db = self.split(data_dir, "pool"), self.db(data_dir)
                demos += [
                    demotools.play_demo(t, db, trial)
                    for trial in range(demotools.BANK_TRIALS, trials)
                    for t in pool
                ]
            self._demo_cache = (key, demos)
        return self._demo_cache[1]

    def tokenizer_spec(self, task: TauConfig, data_dir: Path) -> dict:
        """Every piece of the database, tool schemas, policy and of demonstrations of every train task."""
        research = data_dir / "research"
        schemas = json.loads((research / "tools.json").read_text())
        policy = (research / "policy.md").read_text()
        corpus = [json.dumps(self.db(data_dir)), json.dumps(schemas), policy, user.STOP]
        corpus += [prompting.render(d["messages"]) for d in self._demos(data_dir)]
        return {"words": corpus, "number_max": 999, "mode": "ids", "min_positions": MIN_POSITIONS}

    def pretraining_texts(self, task: TauConfig, data_dir: Path, n: int, seed: int) -> list[str]:
        """Plain text a base model could have read: customers' requests and how they were handled.

        Each text is a train-task request followed by a plain account of the lookups and changes
        made for it (ids and values as they recur), but never an agent turn in the action format:
        that comes only from the system's training data. Val/test requests are left out.
        """
        narrations = [narrate(d["messages"]) for d in self._demos(data_dir) if d["messages"]]
        if not narrations:
            raise ValueError(
                f"{data_dir / 'research' / 'demos.jsonl'}: no clean demonstration of any train task, so the "
                "base model has nothing to pre-train on; the pool needs tasks whose gold actions replay"
            )
        rng = random.Random(seed)
        return [rng.choice(narrations) for _ in range(n)]

    # --- systems ----------------------------------------------------------------------------
    def write_initial_system(self, ws: Path, task: TauConfig, trainer: TrainerConfig, data_dir: Path) -> None:
        """A few demonstrations, some flawed; the configured trainer; the plain harness."""
        pool = self.split(data_dir, "pool")
        demos = demotools.make_demos(
            pool, self.db(data_dir), task.initial_data_size, seed=task.data_seed, flawed=task.initial_noise
        )
        self._write(
            ws,
            demos,
            common.trainer_dict(trainer) | {"max_length": max(trainer.max_length, MIN_POSITIONS)},
            "plain",
        )

    def write_reference_system(self, ws: Path, task: TauConfig, data_dir: Path) -> None:
        pool = self.split(data_dir, "pool")
        demos = demotools.make_demos(pool, self.db(data_dir), REFERENCE_DEMOS, seed=task.data_seed + 1)
        self._write(ws, demos, REFERENCE_TRAINER, "repair")

    def _write(self, ws: Path, demos: list[dict], trainer: dict, harness: str) -> None:
        write_jsonl(ws / "data" / "trajectories.jsonl", demos)  # the demonstrations the rows render
        common.write_workspace(ws, datatools.sft_rows(demos), trainer, HARNESSES / harness, WORKSPACE_README)

    def preflight(
        self, task: TauConfig, data_dir: Path, systems: Systems, sandbox: SandboxConfig
    ) -> list[Problem]:
        """vtb/preflight.py: gold replays earn 1 and doing nothing 0, the systems' rows replay, the
        customer (and judge) endpoints answer (vtb/domains/tau/checks.py)."""
        from vtb.domains.tau import checks

        return checks.preflight(self, task, data_dir, systems)

    # --- episodes and scores ----------------------------------------------------------------
    def episodes(self, data_dir: Path, split: str, task: TauConfig, sandbox=None) -> list[TauEpisode]:
        db = self.db(data_dir)
        policy = (data_dir / "research" / "policy.md").read_text()
        schemas = json.loads((data_dir / "research" / "tools.json").read_text())
        trials = task.trials if split == "test" else task.val_trials
        judge = make_judge(task)
        out = []
        for t in self.split(data_dir, split):
            gold = tools.hash_db(generator.replay(db, t["actions"]))
            for trial in range(trials):
                episode = TauEpisode(
                    t, trial, db, gold, make_user(task), policy, task.max_steps_per_episode, schemas
                )
                episode.judge = judge
                out.append(episode)
        return out

    # --- the written check (vtb/provenance.py) -----------------------------------------------
    def written_lines(self, episode: TauEpisode) -> list[tuple[str, list[str]]]:
        """What the agent did that the reward reads: each write call, by its tool's name (the
        model must have chosen it; its arguments are the harness's to repair against the
        conversation, as the shipped repair harness does), and each message to the user."""
        out = []
        for m in episode.messages:
            if m["role"] != "assistant":
                continue
            action = prompting.message_action(m)
            if action["type"] == "tool_call" and action["name"] in WRITE_TOOLS:
                out.append((action["name"], [action["name"]]))
            elif action["type"] == "message" and action["content"]:
                out.append((action["content"], [action["content"]]))
        return out

    def written_scopes(self, episodes: list[TauEpisode]) -> list[list[str]]:
        """Each episode's own exchanges are those whose prompt holds one of its user's messages
        that no other task's user said (every conversation names its write calls from one short
        list of tools, and "Yes." or "The reason is: no longer needed." open many)."""
        said: dict[str, set] = {}
        for ep in episodes:
            for m in ep.messages:
                if m["role"] == "user" and m["content"]:
                    said.setdefault(m["content"], set()).add(ep.task["id"])
        return [
            [
                m["content"]
                for m in ep.messages
                if m["role"] == "user" and said.get(m["content"]) == {ep.task["id"]}
            ]
            for ep in episodes
        ]

    def metrics(self, episodes: list[TauEpisode], task: TauConfig) -> dict:
        return common.pass_metrics(
            episodes,
            task.pass_k,
            "pass^",
            finished=sum(ep.finished for ep in episodes),
            not_judged=sum(bool(ep.not_judged()) for ep in episodes),
        )


def narrate(messages: list[dict]) -> str:
    """A conversation as plain prose lines: the request, then `<tool> <argument values> -> <result>`."""
    lines = [messages[0]["content"]]
    for i, m in enumerate(messages):
        action = prompting.message_action(m) if m["role"] == "assistant" else None
        if action and action["type"] == "tool_call":
            values = " ".join(_words(v) for v in action["arguments"].values())
            result = messages[i + 1]["content"] if i + 1 < len(messages) else ""
            lines.append(
                f"{action['name'].replace('_', ' ')} {values} -> {prompting.compact(action['name'], result)}"
            )
    return "\n".join(lines)


def _words(value: object) -> str:
    """An argument value as plain words: lists and objects flattened to their values."""
    if isinstance(value, list):
        return " ".join(_words(v) for v in value)
    if isinstance(value, dict):
        return " ".join(_words(v) for v in value.values())
    return str(value)


def make_judge(task: TauConfig):
    """The NL-assertion judge of tau2 tasks (task.judge_base_url), or None: those are then not judged."""
    if not task.judge_base_url:
        return None
    from vtb.domains.tau.grading import Judge

    if not task.judge_model:
        raise ValueError("task.judge_base_url needs task.judge_model=<name> too")
    return Judge(task.judge_base_url, task.judge_model)


def make_user(task: TauConfig):
    if task.user == "scripted":
        return user.ScriptedUser()
    if task.user == "llm":
        from vtb.domains.tau.llm_user import LLMUser

        if not (task.user_base_url and task.user_model):
            raise ValueError(
                "task.user=llm needs task.user_base_url=<OpenAI-compatible URL> and task.user_model=<name>"
            )
        return _InstructionUser(LLMUser(task.user_base_url, task.user_model))
    raise ValueError(f"task.user={task.user!r} is not one of scripted, llm")


class _InstructionUser:
    """Adapts the LLM simulator (reset(instruction)) to the episode's reset(task, trial)."""

    def __init__(self, llm):
        self.llm = llm

    def reset(self, task: dict, trial: int = 0) -> str:
        return self.llm.reset(task["instruction"])

    def step(self, message: str) -> str:
        return self.llm.step(message)


def _real_splits(task: TauConfig):
    """(test, val, pool, db, policy, tool schemas) of a real checkout, from its own splits where it has them.

    With an official train split (tau-bench's tasks_train, tau2's split_tasks.json "train") the
    test split is the official test split (n_test of it drawn with the salted seed when it has
    more), val is tau-bench's dev split or else n_val train tasks of the public data_seed shuffle,
    and the pool is the rest of train: the pool is never cut from the test split. Without one,
    the three are a cut of the test tasks (salt.cut_records).
    """
    from vtb.domains.tau import loaders

    if not task.path:
        raise ValueError(
            f"task.source={task.source} needs task.path=<local tau-bench or tau2-bench checkout>"
        )
    if task.user != "llm":
        raise ValueError(
            f"task.source={task.source}: real tasks have no scripted-user facts; set task.user=llm "
            "task.user_base_url=... task.user_model=..."
        )
    db, splits, policy = loaders.load_splits(task.source, task.path, task.env)
    schemas = tools.schemas_for(task.source, task.env)
    if "train" not in splits:
        test, val, pool = salt.cut_records(splits["test"], task)  # test by the salt (vtb/salt.py)
        return test, val, pool, db, policy, schemas
    test = list(splits["test"])
    if len(test) > task.n_test:
        random.Random(salt.hidden_seed(task)).shuffle(test)
        test = test[: task.n_test]
    train = list(splits["train"])
    random.Random(task.data_seed).shuffle(train)
    if "dev" in splits:
        dev = list(splits["dev"])
        random.Random(task.data_seed).shuffle(dev)
        return test, dev[: task.n_val], train, db, policy, schemas
    return test, train[: task.n_val], train[task.n_val :], db, policy, schemas
