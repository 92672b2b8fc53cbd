"""Validate and grade: play a split's episodes against a harness + checkpoint, score them here.

The sandbox gets only episode inputs and observations; answers, environments (tool database,
user simulator) and the scorer stay in this (orchestrator) process. Cached by hash(checkpoint, harness, split, code).
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

from steps.common import step
from vtb import pipeline, runner
from vtb.config import EngineConfig, SandboxConfig, TaskConfig
from vtb.domains import get_domain
from vtb.engine.select import engine_env


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
    gpu_seconds: float | None = None,
    engine_cfg: EngineConfig | None = None,
) -> dict:
    domain = get_domain(task_cfg.name)
    sandbox = pipeline.sandbox_for(sandbox_cfg)
    episodes = domain.episodes(Path(data_dir), split, task_cfg, sandbox=sandbox)
    outcome = runner.play(
        sandbox,
        Path(harness_dir),
        Path(model_dir),
        episodes,
        limits=pipeline.step_limits(sandbox_cfg, max_flops, cpu_seconds, gpu_seconds),
        round_timeout_s=task_cfg.round_timeout_s,
        per_episode_timeout_s=task_cfg.per_episode_timeout_s,
        null_model=null_model,
        env=engine_env(engine_cfg.name, engine_cfg.options, engine_cfg.fallback) if engine_cfg else None,
    )
    rewards = {ep.id: ep.reward() for ep in episodes}
    return {
        "split": split,
        "score": sum(rewards.values()) / max(1, len(rewards)),
        "n": len(episodes),
        "answered": len(outcome.actions),
        "rewards": rewards,
        "metrics": domain.metrics(episodes, task_cfg),
        "samples": [ep.record() for ep in episodes[:5]],
        "charge": asdict(outcome.charge),
        "rounds": outcome.rounds,
        "crashes": outcome.crashes,
        "failed": dict(list(outcome.failed.items())[:50]),
        "killed": outcome.killed,
        "garbage": outcome.garbage,
        "denials": outcome.denials[:50],
        "stderr_tail": outcome.stderr_tail,
        "engine": outcome.engine,
        # Files the domain's own tooling reads (SWE-bench: per-instance report.json, the run report)
        "artifacts": domain.artifacts(episodes) if hasattr(domain, "artifacts") else {},
    }
