"""Validate and grade: play a split's episodes against a harness + checkpoint, score them here.

The sandbox gets only episode inputs; answers and the scorer stay in this (orchestrator)
process. Cached by hash(checkpoint, harness, split, code).
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

from steps.common import step
from vtb import pipeline, runner
from vtb.config import SandboxConfig, TaskConfig
from vtb.domains import get_domain


@step("play", retries=2)
def play_step(
    key: str,
    harness_dir: str,
    model_dir: str,
    split: str,
    data_dir: str,
    task_cfg: TaskConfig,
    sandbox_cfg: SandboxConfig,
    max_flops: float | None,
    cpu_seconds: float | None,
    null_model: bool = False,
) -> dict:
    domain = get_domain(task_cfg.name)
    items = domain.split(Path(data_dir), split)
    outcome = runner.play(
        pipeline.sandbox_for(sandbox_cfg),
        Path(harness_dir),
        Path(model_dir),
        [domain.start_message(item) for item in items],
        limits=pipeline.step_limits(sandbox_cfg, max_flops, cpu_seconds),
        round_timeout_s=task_cfg.round_timeout_s,
        per_episode_timeout_s=task_cfg.per_episode_timeout_s,
        null_model=null_model,
    )
    rewards = {item["id"]: domain.reward(item, outcome.actions.get(item["id"]), task_cfg) for item in items}
    return {
        "split": split,
        "score": sum(rewards.values()) / max(1, len(rewards)),
        "n": len(items),
        "answered": len(outcome.actions),
        "rewards": rewards,
        "samples": [
            {"id": i["id"], "reward": rewards[i["id"]], "action": outcome.actions.get(i["id"])}
            for i in items[:5]
        ],
        "charge": asdict(outcome.charge),
        "crashes": outcome.crashes,
        "killed": outcome.killed,
        "garbage": outcome.garbage,
        "denials": outcome.denials[:50],
        "stderr_tail": outcome.stderr_tail,
    }
