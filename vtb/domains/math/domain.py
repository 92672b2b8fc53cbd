"""The math domain as the pipeline sees it: splits, initial/reference systems, reward.

Pool and val are fixed by task.data_seed, the test split by the salt too (vtb/salt.py),
so every research agent and seed starts from the same initial system and is graded on the same
hidden test split, which no sandbox can rebuild.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path

from vtb import salt
from vtb.config import SandboxConfig, TaskConfig, TrainerConfig
from vtb.domains import common
from vtb.domains.math import checks, generator, grading, loaders
from vtb.domains.math.env import MathEnv, MathEpisode
from vtb.domains.math.kit import datatools
from vtb.domains.registry import register_domain
from vtb.engine.sft_config import ConfigError, resolve_config
from vtb.preflight import Problem, Systems

HARNESSES = Path(__file__).parent / "kit" / "harnesses"

# The best choices we know for the embedded miniature (the reference row of the summary).
REFERENCE_TRAINER = {
    "method": "full",
    "lr": 3e-3,
    "epochs": 3,
    "batch_size": 32,
    "lr_schedule": "cosine",
    "chat_template": "auto",
}
# Training and inference prompts in the model's chat template when it has one (an instruct model
# such as SmolLM2; the tiny model has none, so its prompts are plain).
CHAT = "auto"

WORKSPACE_README = """# Workspace of the agent system (math)

- data/train.jsonl  SFT rows {"prompt", "completion"}; the loss is on the completion only.
- trainer/config.json  settings of vtb.engine.sft (method full|lora, lr, epochs, max_steps,
  batch_size, lr_schedule, warmup_steps, weight_decay, max_length, chat_template, lora{r,alpha,dropout}).
  chat_template "auto" wraps each prompt in the model's chat template; the harness's "chat" must match.
  Put a trainer/train.py here to replace the trainer; it is run as
  `python trainer/train.py --config trainer/config.json --data data/train.jsonl --base /base --out <dir> --seed N`.
- harness/harness.py  inference-time program speaking the JSON-lines protocol (vtb/protocol.py);
  the model is an OpenAI-compatible server at $OPENAI_BASE_URL
  (key $OPENAI_API_KEY; vtb/serve/client.py or any OpenAI client); harness/ is capped at 1 MB (no weights).
- /data/pool.jsonl (train pool: question, answer, answer_format "gsm8k" (`#### N`) or "boxed"
  (`\\boxed{...}`: MATH-500, AIME), a worked solution where the data set has one),
  /data/val.jsonl (validation split), /base (base model).
- Data tools: python -m vtb.domains.math.kit.datatools {check,clean,from-pool,merge} --help
"""


def _real_splits(task: MathConfig) -> dict[str, list[dict]]:
    """A real data set cut into test / val / pool (val by the public seed, test by the salt)."""
    if not task.path:
        raise ValueError(f"task.source={task.source} needs task.path=<local file or HF dataset name>")
    split = {"aime": "train"}.get(task.source, "test")  # AIME sets on the hub only have a train split
    test, val, pool = salt.cut_records(loaders.load(task.source, task.path, split), task)
    return {"test": test, "val": val, "pool": pool}


def answer_format(task: TaskConfig) -> str:
    """How answers are written for the task's metric: `\\boxed{...}` or GSM8K's `#### N`."""
    return "boxed" if loaders.metric_of(task) == "boxed" else "gsm8k"


def initial_rows(task: TaskConfig, pool: list[dict], noise: float) -> list[dict]:
    """The initial system's rows: initial_data_size pool problems, a share `noise` of them wrong.

    GSM8K format: the annotated solution, a wrong one changed in its last step (generator.corrupt).
    Boxed: the boxed answer alone (short rows any harness budget reaches), a wrong one another value.
    """
    rng = random.Random(task.data_seed)
    boxed = answer_format(task) == "boxed"
    answers = sorted({datatools.final_answer(p) for p in pool})
    rows = []
    for problem in rng.sample(pool, min(task.initial_data_size, len(pool))):
        wrong = rng.random() < noise
        if wrong and boxed:
            problem = {**problem, "answer": _wrong_answer(datatools.final_answer(problem), answers, rng)}
        elif wrong:
            problem = {**problem, "answer": generator.corrupt(problem["answer"], rng)}
        rows.append(datatools.to_sft_row(problem, direct=boxed))
    return rows


def _wrong_answer(answer: str, others: list[str], rng: random.Random) -> str:
    """A value the boxed metric does not credit: a near integer, or another problem's answer."""
    if answer.lstrip("-").isdigit():
        return str(int(answer) + rng.choice([d for d in range(-10, 11) if d and int(answer) + d >= 0]))
    choices = [a for a in others if not grading.math_equiv(a, answer)]
    return rng.choice(choices) if choices else f"{answer}+1"


@dataclass
class MathConfig(TaskConfig):
    min_steps: int = 1  # arithmetic steps per generated problem
    max_steps: int = 2  # the generator does 1-4 (see conf/task/math.yaml)
    reference_data_size: int = 2500  # pool rows the reference system trains on
    # Keys of the reference trainer (REFERENCE_TRAINER) replaced for a model or budget, e.g. LoRA
    # for SmolLM2 on a CPU (conf/budget/smollm2_cpu.yaml).
    reference_trainer: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        super().__post_init__()
        # The metric actually used, resolved once: config.json and result.json record it.
        self.metric = loaders.metric_of(self)
        try:  # a typo here would only fail when the reference trains, at the end of the run
            resolve_config({**REFERENCE_TRAINER, **self.reference_trainer})
        except ConfigError as e:
            raise ValueError(f"task.reference_trainer: {e}") from None


@register_domain("math")
class MathDomain:
    name, config = "math", MathConfig
    env = MathEnv()

    def provision(self, task: MathConfig, out: Path) -> dict:
        if task.source == "embedded":
            splits = generator.make_splits(
                task.data_seed,
                task.n_pool,
                task.n_val,
                task.n_test,
                task.min_steps,
                task.max_steps,
                test_seed=salt.hidden_seed(task),
            )
        else:
            splits = _real_splits(task)
        seen: dict[str, str] = {}
        for name, rows in splits.items():
            for row in rows:
                key = " ".join(row["question"].lower().split())
                if seen.setdefault(key, name) != name:
                    raise ValueError(f"split overlap: a {name} question is also in {seen[key]}")
        fmt = answer_format(task)  # every record says how it is graded, so targets and prompts follow
        splits = {name: [{**row, "answer_format": fmt} for row in rows] for name, rows in splits.items()}
        datatools.write_jsonl(out / "research" / "pool.jsonl", splits["pool"])
        datatools.write_jsonl(out / "research" / "val.jsonl", splits["val"])
        datatools.write_jsonl(out / "hidden" / "test.jsonl", splits["test"])
        return {name: len(rows) for name, rows in splits.items()}

    def tokenizer_spec(self, task: MathConfig, data_dir: Path) -> dict:
        """The generator's words; for a real data set every piece of its pool and of what a harness
        is shown (val/test questions, never their answers), kept exact: `\\boxed{3}` must decode
        as written, not as `\\ boxed { 3 }`."""
        if task.source == "embedded":
            return {"words": list(generator.WORDS), "number_max": generator.NUMBER_MAX, "mode": "words"}
        corpus = [*datatools.PROMPTS.values(), "The final answer is"]
        corpus += [
            f"{r['question']}\n{datatools.to_sft_row(r)['completion']}" for r in self.split(data_dir, "pool")
        ]
        corpus += [r["question"] for name in ("val", "test") for r in self.split(data_dir, name)]
        return {"words": corpus, "number_max": generator.NUMBER_MAX, "mode": "exact"}

    def pretraining_texts(self, task: MathConfig, data_dir: Path, n: int, seed: int) -> list[str]:
        """Worked problems in plain text (no calculator annotations, no prompt format), never val/test.

        Like a real base model, the tiny one has read math text before SFT: it knows the words
        and the shape of a solution, but not the Question/Answer format nor the calculator.
        """
        if task.source != "embedded":  # a real data set: its train problems and their worked answers
            rng = random.Random(seed)
            pool = self.split(data_dir, "pool")
            texts = [
                f"{r['question']}\n{datatools.strip_annotations(datatools.to_sft_row(r)['completion'].strip())}"
                for r in pool
            ]
            return [rng.choice(texts) for _ in range(n)]
        held_out = {generator.normalize_question(r["question"]) for r in self.split(data_dir, "val")}
        held_out |= {generator.normalize_question(r["question"]) for r in self.split(data_dir, "test")}
        problems = generator.generate_problems(seed + 7919, n + len(held_out), task.min_steps, task.max_steps)
        texts = [
            f"{p['question']}\n{generator.strip_annotations(p['answer'])}"
            for p in problems
            if generator.normalize_question(p["question"]) not in held_out
        ]
        return texts[:n]

    def split(self, data_dir: Path, name: str) -> list[dict]:
        sub = "hidden" if name == "test" else "research"
        return datatools.read_jsonl(data_dir / sub / f"{name}.jsonl")

    def write_initial_system(
        self, ws: Path, task: MathConfig, trainer: TrainerConfig, data_dir: Path
    ) -> None:
        """Small, partly noisy data; the configured trainer; a plain harness."""
        rows = initial_rows(task, self.split(data_dir, "pool"), task.initial_noise)
        trainer_cfg = {**common.trainer_dict(trainer), "chat_template": CHAT}
        common.write_workspace(ws, rows, trainer_cfg, HARNESSES / "initial", WORKSPACE_README)

    def write_reference_system(self, ws: Path, task: MathConfig, data_dir: Path) -> None:
        pool = self.split(data_dir, "pool")
        rows = [datatools.to_sft_row(p) for p in pool[: task.reference_data_size]]
        trainer_cfg = {**REFERENCE_TRAINER, **task.reference_trainer}
        common.write_workspace(ws, rows, trainer_cfg, HARNESSES / "calculator", WORKSPACE_README)

    def preflight(
        self, task: MathConfig, data_dir: Path, systems: Systems, sandbox: SandboxConfig
    ) -> list[Problem]:
        """vtb/preflight.py: gold answers credited and empty ones not, the systems' targets credited."""
        splits = {name: self.split(data_dir, name) for name in ("pool", "val", "test")}
        metric, clean = loaders.metric_of(task), initial_rows(task, splits["pool"], noise=0.0)
        bad = checks.bad_items(splits, metric)
        skip = {str(item.get("id")) for found in bad.values() for item, _ in found}
        own = metric in loaders.SAME_FORMAT[loaders.SOURCE_METRICS[task.source]]
        return checks.gold(bad, own) + checks.targets(splits["pool"], metric, systems, clean, skip)

    def episodes(self, data_dir: Path, split: str, task: MathConfig, sandbox=None) -> list[MathEpisode]:
        metric = loaders.metric_of(task)  # task.metric, resolved by MathConfig; a plain TaskConfig too
        return [MathEpisode(item, metric, self.env) for item in self.split(data_dir, split)]

    def metrics(self, episodes: list[MathEpisode], task: MathConfig) -> dict:
        return {}

    # The provenance audit (vtb/provenance.py): the question is the one task text, and an answer
    # can be scored against any other problem's gold.
    def audit_text(self, episode: MathEpisode) -> str:
        return episode.problem["question"]

    def reward_as(self, episode: MathEpisode, other: MathEpisode) -> float:
        return self.env.reward(other.problem, episode.action, episode.metric)

    def start_message(self, item: dict) -> dict:
        return self.env.start_message(item)
