"""What every domain uses (orchestrator side): JSONL, the trainer config, workspaces, splits, pass@k/pass^k.

A workspace: data/train.jsonl, trainer/config.json, harness/ (copied), README.md.
Data dir of a domain whose val/test items stay hidden (tau, terminal, swe):
research/pool.jsonl (train items in full, mounted at /data for the research agent),
research/val.jsonl (val ids and templates only), hidden/{val,test}.jsonl (in full, orchestrator
only). Math shows its val split in full: research/{pool,val}.jsonl, hidden/test.jsonl.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from math import comb
from pathlib import Path

from vtb import salt
from vtb.config import TaskConfig, TrainerConfig
from vtb.domains.kit.jsonl import read_jsonl, write_jsonl

__all__ = ["read_jsonl", "write_jsonl"]  # the kits' JSONL helpers, for the orchestrator side too


@dataclass
class TrialsConfig(TaskConfig):
    """Settings of a multi-trial, multi-step domain (tau, terminal)."""

    trials: int = 2  # test trials per task (pass^k / pass@k need k <= trials)
    val_trials: int = 1
    pass_k: int = 2  # the k of the reported pass^k / pass@k
    max_steps_per_episode: int = 30  # agent actions per episode (tau-bench's limit)


def trainer_dict(trainer: TrainerConfig) -> dict:
    """The initial trainer config as vtb.engine.sft reads it (trainer/config.json)."""
    out = {
        "method": trainer.method,
        "lr": trainer.lr,
        "epochs": trainer.epochs,
        "max_steps": trainer.max_steps,
        "batch_size": trainer.batch_size,
        "weight_decay": trainer.weight_decay,
        "warmup_steps": trainer.warmup_steps,
        "lr_schedule": trainer.lr_schedule,
        "max_length": trainer.max_length,
    }
    if trainer.method == "lora":
        out["lora"] = {
            "r": trainer.lora.r,
            "alpha": trainer.lora.alpha,
            "dropout": trainer.lora.dropout,
            "target_modules": trainer.lora.target_modules,
        }
    if trainer.deepspeed is not None:
        out["deepspeed"] = asdict(trainer.deepspeed)
    return out


def write_workspace(ws: Path, rows: list[dict], trainer: dict, harness_dir: Path, readme: str) -> None:
    """The four pieces of a system's workspace: SFT rows, trainer config, harness folder, README."""
    write_jsonl(ws / "data" / "train.jsonl", rows)
    (ws / "trainer").mkdir(parents=True, exist_ok=True)
    (ws / "trainer" / "config.json").write_text(json.dumps(trainer, indent=2) + "\n")
    shutil.copytree(harness_dir, ws / "harness", dirs_exist_ok=True)
    (ws / "README.md").write_text(readme)


def write_splits(
    out: Path, pool: list[dict], val: list[dict], test: list[dict], public: tuple[str, ...]
) -> dict:
    """Write the splits; of val the research side gets only the `public` fields (id, template)."""
    write_jsonl(out / "research" / "pool.jsonl", pool)
    write_jsonl(out / "research" / "val.jsonl", [{k: item.get(k) for k in public} for item in val])
    write_jsonl(out / "hidden" / "val.jsonl", val)
    write_jsonl(out / "hidden" / "test.jsonl", test)
    return {"pool": len(pool), "val": len(val), "test": len(test)}


def embedded_splits(
    task: TaskConfig, make: Callable[[int, int, str, set], list[dict]]
) -> tuple[list, list, list]:
    """(test, val, pool) from a generator `make(seed, n, prefix, taken)`: val and pool from the
    public seed first, then test from the salted seed (vtb/salt.py), skipping all they hold."""
    taken: set = set()
    val = make(task.data_seed + 2, task.n_val, "val", taken)
    pool = make(task.data_seed + 3, task.n_pool, "train", taken)
    return make(salt.hidden_seed(task), task.n_test, "test", taken), val, pool


def draw_distinct(
    n: int,
    kinds: list[str],
    draw: Callable[[str, int], tuple | None],
    exclude: set,
    max_misses: int,
    ran_out: str,
) -> list:
    """n items cycling over `kinds`; `draw(kind, i)` gives (key, item) or None. An item whose key
    is in `exclude` is a miss, and a kind with more than max_misses misses in a row drops out;
    kept keys join `exclude`, so successive calls give disjoint sets. `ran_out` is the error
    when every kind has dropped out."""
    out: list = []
    live, misses = list(kinds), dict.fromkeys(kinds, 0)
    while len(out) < n:
        if not live:
            raise ValueError(ran_out)
        kind = live[len(out) % len(live)]
        got = draw(kind, len(out))
        if got is None or got[0] in exclude:
            misses[kind] += 1
            if misses[kind] > max_misses:
                live.remove(kind)
            continue
        misses[kind] = 0
        exclude.add(got[0])
        out.append(got[1])
    return out


def read_records(path: Path, what: str) -> list:
    """The records of a local data file of a real data set: .parquet; .jsonl (one JSON value a
    line); .json (a list, {"data": list}, or JSON lines). `what` names them in errors."""
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        return pq.read_table(path).to_pylist()
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError:
            data = None  # perhaps JSON lines in a .json file
        if isinstance(data, dict) and isinstance(data.get("data"), list):
            data = data["data"]
        if isinstance(data, list):
            return data
        if data is not None:
            raise ValueError(f"{path}: expected a JSON list of {what}, got {type(data).__name__}")
    records = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError as err:
                raise ValueError(f"{path}:{lineno}: not valid JSON ({err.msg})") from None
    return records


def splits_of(
    task: TaskConfig, make: Callable, real: Callable[[TaskConfig], tuple]
) -> tuple[list, list, list]:
    """(test, val, pool): the embedded generator's (`embedded_splits`) or a real data set's."""
    return embedded_splits(task, make) if task.source == "embedded" else real(task)


def trial_record(ep) -> dict:
    """What the run record keeps of every multi-trial episode (tau, terminal); domains add theirs."""
    return {
        "id": ep.id,
        "task": ep.task["id"],
        "trial": ep.trial,
        "reward": ep.reward(),
        "finished": ep.finished,
        "timeout": ep.timeout,
        "failure": ep.failure,
    }


def read_split(data_dir: Path, name: str) -> list[dict]:
    if name == "pool":
        return read_jsonl(data_dir / "research" / "pool.jsonl")
    return read_jsonl(data_dir / "hidden" / f"{name}.jsonl")


def write_system(
    ws: Path,
    data_dir: Path,
    make_rows: Callable[..., list[dict]],
    n: int,
    seed: int,
    trainer: dict,
    harness_dir: Path,
    readme: str,
    flawed: float = 0.0,
) -> None:
    """A workspace: `make_rows(train pool, n, seed, flawed=flawed)` as data/train.jsonl, the
    trainer config, a copy of the harness folder and the README."""
    write_workspace(
        ws, make_rows(read_split(data_dir, "pool"), n, seed, flawed=flawed), trainer, harness_dir, readme
    )


@dataclass(frozen=True)
class RowSystems:
    """The systems of a domain whose training data are SFT rows from `make_rows` (terminal, swe),
    held by the domain (not inherited): its `write_*_system` methods call these with its harness.

    Initial: task.initial_data_size rows, a task.initial_noise share of them flawed, the
    configured trainer. Reference: `reference_rows` clean rows and `reference_trainer`.
    """

    make_rows: Callable[..., list[dict]]  # (pool, n, seed, flawed=share) -> rows
    readme: str
    reference_rows: int
    reference_trainer: dict

    def write_initial(
        self, ws: Path, task: TaskConfig, trainer: TrainerConfig, data_dir: Path, harness: Path
    ) -> None:
        rows, seed = task.initial_data_size, task.data_seed
        write_system(
            ws,
            data_dir,
            self.make_rows,
            rows,
            seed,
            trainer_dict(trainer),
            harness,
            self.readme,
            task.initial_noise,
        )

    def write_reference(self, ws: Path, task: TaskConfig, data_dir: Path, harness: Path) -> None:
        rows, seed = self.reference_rows, task.data_seed + 1
        write_system(ws, data_dir, self.make_rows, rows, seed, self.reference_trainer, harness, self.readme)


def tally(episodes: list, task_of) -> tuple[dict[str, list[bool]], dict[str, float], int]:
    """(successes per task, mean reward per template, trials per task) of graded episodes."""
    by_task: dict[str, list[bool]] = {}
    by_template: dict[str, list[float]] = {}
    for ep in episodes:
        r, task = ep.reward(), task_of(ep)
        by_task.setdefault(task["id"], []).append(r >= 1.0)
        by_template.setdefault(task.get("template", "?"), []).append(r)
    means = {k: round(sum(v) / len(v), 3) for k, v in sorted(by_template.items())}
    return by_task, means, min((len(v) for v in by_task.values()), default=0)


def pass_hat_k(successes: dict[str, list[bool]], k: int) -> float:
    """tau-bench's pass^k: mean over tasks of C(c, k) / C(n, k) (c successes in n trials)."""
    return _mean_over_tasks(successes, k, lambda n, c: comb(c, k) / comb(n, k))


def pass_at_k(successes: dict[str, list[bool]], k: int) -> float:
    """Unbiased pass@k (Chen et al. 2021): mean over tasks of 1 - C(n-c, k) / C(n, k)."""
    return _mean_over_tasks(successes, k, lambda n, c: 1.0 - comb(n - c, k) / comb(n, k))


def pass_metrics(episodes: list, pass_k: int, kind: str, **extra: int) -> dict:
    """A multi-trial split's figures: pass^k (kind "pass^", tau) or pass@k ("pass@", terminal)
    for k up to min(trials, pass_k), the mean reward per template, `extra`, timeouts and failures."""
    by_task, by_template, trials = tally(episodes, lambda ep: ep.task)
    estimate = {"pass^": pass_hat_k, "pass@": pass_at_k}[kind]
    out: dict = {f"{kind}{k}": round(estimate(by_task, k), 4) for k in range(1, min(trials, pass_k) + 1)}
    return out | {
        "by_template": by_template,
        **extra,
        "timeouts": sum(ep.timeout for ep in episodes),
        "harness_failures": sum(ep.failure is not None for ep in episodes),
    }


def _mean_over_tasks(
    successes: dict[str, list[bool]], k: int, estimate: Callable[[int, int], float]
) -> float:
    values = []
    for task, results in successes.items():
        n, c = len(results), sum(results)
        if n < k:
            raise ValueError(f"task {task} has {n} trials, fewer than k={k}")
        values.append(estimate(n, c))
    return sum(values) / max(1, len(values))


# Hidden-test grading (terminal, swe) is a sandboxed pytest run per episode, mostly interpreter
# start-up: episodes start it here the moment they end, so it overlaps the rest of the play and
# uses every core, and `reward()` only waits for the result.
GRADERS = ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2), thread_name_prefix="vtb-grade")


class BackgroundGrade:
    """One grading job per episode, started at most once, awaited by `result()`."""

    def __init__(self, job):
        self._job, self._future = job, None

    def start(self) -> None:
        if self._future is None:
            self._future = GRADERS.submit(self._job)

    def result(self):
        self.start()
        return self._future.result()
