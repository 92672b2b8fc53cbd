"""Validate and grade: play a split's episodes against a harness + checkpoint, score them here.

The sandbox gets only episode inputs and observations; answers, environments (tool database,
user simulator) and the scorer stay in this (orchestrator) process. Cached by hash(checkpoint, harness, split, code).
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

from steps.blind import blind, real_ids, secret_of, stage_model
from steps.common import step
from vtb import pipeline, runner
from vtb.config import EngineConfig, SandboxConfig, TaskConfig
from vtb.domains.registry import get_domain
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
    gpu_seconds: float | None = None,
    engine_cfg: EngineConfig | None = None,
    stage_dir: str | None = None,
) -> dict:
    """One play; the harness sees opaque episode ids in a keyed order and, with stage_dir, the model
    through that run-wide staging folder (steps/blind.py): nothing tells it the split or the mode."""
    domain = get_domain(task_cfg.name)
    sandbox = pipeline.sandbox_for(sandbox_cfg)
    episodes = domain.episodes(Path(data_dir), split, task_cfg, sandbox=sandbox)
    model = stage_model(Path(model_dir), Path(stage_dir)) if stage_dir else Path(model_dir)
    blinded = blind(episodes, secret_of(task_cfg), split)
    outcome = runner.play(
        sandbox,
        Path(harness_dir),
        model,
        blinded,
        limits=pipeline.step_limits(sandbox_cfg, max_flops, cpu_seconds, gpu_seconds),
        round_timeout_s=task_cfg.round_timeout_s,
        per_episode_timeout_s=task_cfg.per_episode_timeout_s,
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
        "failed": dict(list(real_ids(blinded, outcome.failed).items())[:50]),
        "killed": outcome.killed,
        "garbage": outcome.garbage,
        "denials": outcome.denials[:50],
        "stderr_tail": outcome.stderr_tail,
        "engine": outcome.engine,
        # Files the domain's own tooling reads (SWE-bench: per-instance report.json, the run report)
        "artifacts": domain.artifacts(episodes) if hasattr(domain, "artifacts") else {},
    }
