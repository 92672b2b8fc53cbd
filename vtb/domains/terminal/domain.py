"""The terminal domain as the pipeline sees it: task splits, systems, sandboxed episodes, scores.

Embedded splits are fixed by task.data_seed. The research sandbox gets the train tasks in full
(research/pool.jsonl, and as Terminal-Bench folders under research/tasks/: instruction,
initial files, tests and solution.sh) and only the ids and templates of the val tasks; val
and test tasks in full live in hidden/, and their tests only ever enter a grading sandbox.
"""

from __future__ import annotations

import random
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from vtb import salt
from vtb.config import SandboxConfig, TaskConfig, TrainerConfig
from vtb.domains import common
from vtb.domains.registry import register_domain
from vtb.domains.terminal import checks, generator, images, loaders
from vtb.domains.terminal.env import TerminalEpisode
from vtb.domains.terminal.kit import datatools
from vtb.preflight import Problem, Systems

HARNESSES = Path(__file__).parent / "kit" / "harnesses"
REFERENCE_TRAINER = {"method": "full", "lr": 3e-3, "epochs": 4, "batch_size": 16, "lr_schedule": "cosine"}
REFERENCE_ROWS = 800
VOCAB_TASKS = 3000  # generated tasks whose words make the tokenizer's vocabulary

WORKSPACE_README = """# Workspace of the agent system (terminal: shell tasks, graded by hidden tests)

- data/train.jsonl  SFT rows {"prompt": "task: <instruction>\\n$ ", "completion": "<command>\\n"}.
- trainer/config.json  settings of vtb.engine.sft (see the math README for the fields).
- harness/harness.py  the agent: speaks the JSON-lines protocol (vtb/protocol.py). Each message
  carries the instruction and the commands run so far ({"command", "output", "exit_code",
  "timed_out"}); it answers {"type": "shell", "command": "..."} or {"type": "answer"} when done.
  Each episode has its own shell in a fresh sandbox, rooted at /app. The model: an OpenAI-compatible
  server at $OPENAI_BASE_URL (key $OPENAI_API_KEY; vtb/serve/client.py or any OpenAI client).
- /data/pool.jsonl  train tasks (instruction, files, solution, tests); /data/tasks/<id>/ the same
  as Terminal-Bench folders; /data/val.jsonl  val task ids and templates only.
- Data tools: python -m vtb.domains.terminal.kit.datatools {from-pool,check,clean} --help
"""


@dataclass
class TerminalConfig(common.TrialsConfig):
    # Tasks built from their Dockerfile (sandbox=docker): "<base>=<local image>" entries that map
    # a Dockerfile's base to one this machine has, e.g. ["python:3.13-slim=vtb/hostroot:latest"].
    base_images: list[str] = field(default_factory=list)
    build_network: str = "none"  # docker network of those builds; "host" lets RUN steps download

    def __post_init__(self) -> None:
        super().__post_init__()
        self.base_map()  # a malformed entry fails when the config is built, not at the first build

    def base_map(self) -> dict[str, str]:
        out = {}
        for entry in self.base_images:
            base, sep, local = str(entry).partition("=")
            if not sep or not base.strip() or not local.strip():
                raise ValueError(
                    f"task.base_images entry {entry!r} is not '<base>=<local image>' "
                    "(e.g. task.base_images='[\"python:3.13-slim=vtb/hostroot:latest\"]')"
                )
            out[base.strip()] = local.strip()
        return out


@register_domain("terminal")
class TerminalDomain:
    config = TerminalConfig
    name = "terminal"
    rows = common.RowSystems(datatools.make_rows, WORKSPACE_README, REFERENCE_ROWS, REFERENCE_TRAINER)

    # --- the initial and reference systems --------------------------------------------------
    def harness_for(self, task: TaskConfig, system: str) -> Path:
        """The shipped harness folder of the "initial" or "reference" system."""
        return HARNESSES / ("plain" if system == "initial" else "repair")

    def write_initial_system(
        self, ws: Path, task: TaskConfig, trainer: TrainerConfig, data_dir: Path
    ) -> None:
        self.rows.write_initial(ws, task, trainer, data_dir, self.harness_for(task, "initial"))

    def write_reference_system(self, ws: Path, task: TaskConfig, data_dir: Path) -> None:
        self.rows.write_reference(ws, task, data_dir, self.harness_for(task, "reference"))

    def split(self, data_dir: Path, name: str) -> list[dict]:
        return common.read_split(data_dir, name)

    # --- provisioning -----------------------------------------------------------------------
    def provision(self, task: TaskConfig, out: Path) -> dict:
        test, val, pool = common.splits_of(task, generator.make_tasks, _real_splits)
        for t in pool:
            loaders.write_task(t, out / "research" / "tasks" / t["id"])
        return common.write_splits(out, pool, val, test, public=("id", "template"))

    # --- the tiny base model ----------------------------------------------------------------
    def tokenizer_spec(self, task: TaskConfig, data_dir: Path) -> dict:
        """Every piece of instructions and commands the generator can produce, kept exact (spaces)."""
        corpus = [t["instruction"] + "\n" + t["solution"] for t in self.split(data_dir, "pool")]
        corpus += [
            t["instruction"] + "\n" + t["solution"]
            for t in generator.make_tasks(task.data_seed + 7919, VOCAB_TASKS, "vocab", set())
        ]
        for name in ("val", "test"):  # their words, never their solutions
            corpus += [t["instruction"] for t in self.split(data_dir, name)]
        return {"words": corpus, "number_max": 99, "mode": "exact"}

    def pretraining_texts(self, task: TaskConfig, data_dir: Path, n: int, seed: int) -> list[str]:
        """Shell text a base model could have read: a task description, then a command that does it.

        Train tasks and other generated tasks (like the how-to pages a real base model has read),
        in plain text, never in the prompt format, never a val/test instruction. Pre-training on
        descriptions and commands apart left the 1M model unable to copy values (paths, words)
        from an instruction into its command even after 300 SFT steps on 800 clean rows.
        """
        held_out = {t["instruction"] for name in ("val", "test") for t in self.split(data_dir, name)}
        extra = generator.make_tasks(seed + 104729, max(1, n // 4), "pretrain", set())
        tasks = [t for t in self.split(data_dir, "pool") + extra if t["instruction"] not in held_out]
        rng = random.Random(seed)
        return [
            f"{t['instruction']}\n{datatools.solution_command(t)}"
            for t in (rng.choice(tasks) for _ in range(n))
        ]

    # --- episodes and scores ----------------------------------------------------------------
    def episodes(self, data_dir: Path, split: str, task: TaskConfig, sandbox=None) -> list[TerminalEpisode]:
        if sandbox is None:
            raise ValueError("terminal episodes run commands: they need a sandbox")
        tasks = self.split(data_dir, split)
        built = {t["id"]: _image(t, sandbox, task) for t in tasks if "environment" in t}
        scratch = Path(tempfile.mkdtemp(prefix=f"vtb-terminal-{split}-"))
        trials = task.trials if split == "test" else task.val_trials
        return [
            TerminalEpisode(t, trial, sandbox, scratch, task.max_steps_per_episode, built.get(t["id"]))
            for t in tasks
            for trial in range(trials)
        ]

    def preflight(
        self, task: TaskConfig, data_dir: Path, systems: Systems, sandbox: SandboxConfig
    ) -> list[Problem]:
        """vtb/preflight.py: one container per task, the backend runs every task's environment, every
        image builds, and the grader resolves a gold solution and not an empty one (checks.py)."""
        return checks.problems(self, task, data_dir, sandbox)

    def check_sandbox(self, data_dir: Path, backend: str) -> None:
        """Refuse, at provisioning, tasks the backend would run with a missing environment."""
        if backend == "docker":
            return
        built = [
            t["id"] for n in ("pool", "val", "test") for t in self.split(data_dir, n) if "environment" in t
        ]
        if built:
            raise ValueError(_needs_docker(built, backend))

    # The provenance audit (vtb/provenance.py): the model gets another task's instruction in this
    # task's shell; only this task's hidden tests can score what was done there.
    def audit_text(self, episode: TerminalEpisode) -> str:
        return episode.task["instruction"]

    def metrics(self, episodes: list[TerminalEpisode], task: TaskConfig) -> dict:
        commands, done = sum(len(ep.history) for ep in episodes), sum(ep.finished for ep in episodes)
        return common.pass_metrics(episodes, task.pass_k, "pass@", commands=commands, declared_done=done)


def _real_splits(task: TaskConfig) -> tuple[list[dict], list[dict], list[dict]]:
    """Terminal-Bench / Harbor task folders under task.path, cut into splits (test by the salt)."""
    if not task.path:
        raise ValueError("task.source=terminal_bench needs task.path=<folder of task folders>")
    return salt.cut_records(loaders.load_tasks(Path(task.path)), task)


def _needs_docker(ids: list[str], backend: str) -> str:
    return f"{checks.needs_docker(ids, backend)}. Fix: {checks.NEEDS_DOCKER_FIX}"


def _image(t: dict, sandbox, task: TerminalConfig) -> tuple[str, str]:
    """(image tag, working dir) of a task built from its Dockerfile, built now when missing."""
    if not hasattr(sandbox, "with_image"):
        raise ValueError(_needs_docker([t["id"]], getattr(sandbox, "name", "?")))
    return images.built_image(sandbox, t, task.base_map(), task.build_network)
