"""The math domain as the pipeline sees it: splits, initial/reference systems, reward.

Pool and val are fixed by task.data_seed, the test split by the salt too (vtb/domains/salt.py),
so every research agent and seed starts from the same initial system and is graded on the same
hidden test split, which no sandbox can rebuild.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path

from vtb.config import TaskConfig, TrainerConfig
from vtb.domains import common, salt
from vtb.domains.math import generator, loaders
from vtb.domains.math.env import MathEnv, MathEpisode
from vtb.domains.math.kit import datatools
from vtb.domains.registry import register_domain
from vtb.engine.sft_config import ConfigError, resolve_config

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
- /data/pool.jsonl (GSM8K schema train pool), /data/val.jsonl (validation split), /base (base model).
- Data tools: python -m vtb.domains.math.kit.datatools {check,clean,from-pool,merge} --help
"""


def _real_splits(task: MathConfig) -> dict[str, list[dict]]:
    """A real data set cut into test / val / pool (val by the public seed, test by the salt)."""
    if not task.path:
        raise ValueError(f"task.source={task.source} needs task.path=<local file or HF dataset name>")
    split = {"aime": "train"}.get(task.source, "test")  # AIME sets on the hub only have a train split
    test, val, pool = salt.cut_records(loaders.load(task.source, task.path, split), task)
    return {"test": test, "val": val, "pool": pool}


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
        loaders.check_metric(self.metric)
        try:  # a typo here would only fail when the reference trains, at the end of the run
            resolve_config({**REFERENCE_TRAINER, **self.reference_trainer})
        except ConfigError as e:
            raise ValueError(f"task.reference_trainer: {e}") from None


@register_domain("math")
class MathDomain:
    name, config = "math", MathConfig
    env = MathEnv()

    def provision(self, task: MathConfig, out: Path) -> dict:
        loaders.metric_of(task)  # a contradicting task.metric is warned about before the run, not after
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
        datatools.write_jsonl(out / "research" / "pool.jsonl", splits["pool"])
        datatools.write_jsonl(out / "research" / "val.jsonl", splits["val"])
        datatools.write_jsonl(out / "hidden" / "test.jsonl", splits["test"])
        return {name: len(rows) for name, rows in splits.items()}

    def tokenizer_spec(self, task: MathConfig, data_dir: Path) -> dict:
        return {"words": list(generator.WORDS), "number_max": generator.NUMBER_MAX, "mode": "words"}

    def pretraining_texts(self, task: MathConfig, data_dir: Path, n: int, seed: int) -> list[str]:
        """Worked problems in plain text (no calculator annotations, no prompt format), never val/test.

        Like a real base model, the tiny one has read math text before SFT: it knows the words
        and the shape of a solution, but not the Question/Answer format nor the calculator.
        """
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
        rng = random.Random(task.data_seed)
        pool = self.split(data_dir, "pool")
        rows = []
        for problem in rng.sample(pool, min(task.initial_data_size, len(pool))):
            if rng.random() < task.initial_noise:
                problem = {**problem, "answer": generator.corrupt(problem["answer"], rng)}
            rows.append(datatools.to_sft_row(problem))
        trainer_cfg = {**common.trainer_dict(trainer), "chat_template": CHAT}
        common.write_workspace(ws, rows, trainer_cfg, HARNESSES / "initial", WORKSPACE_README)

    def write_reference_system(self, ws: Path, task: MathConfig, data_dir: Path) -> None:
        pool = self.split(data_dir, "pool")
        rows = [datatools.to_sft_row(p) for p in pool[: task.reference_data_size]]
        trainer_cfg = {**REFERENCE_TRAINER, **task.reference_trainer}
        common.write_workspace(ws, rows, trainer_cfg, HARNESSES / "calculator", WORKSPACE_README)

    def episodes(self, data_dir: Path, split: str, task: MathConfig, sandbox=None) -> list[MathEpisode]:
        metric = loaders.metric_of(task)
        return [MathEpisode(item, metric, self.env) for item in self.split(data_dir, split)]

    def metrics(self, episodes: list[MathEpisode], task: MathConfig) -> dict:
        return {}

    def start_message(self, item: dict) -> dict:
        return self.env.start_message(item)
