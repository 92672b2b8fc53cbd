"""The five steps as Prefect tasks; each body is the pipeline function of the same role.

Retries are for a sandbox that failed to start (steps/common.py); a failing trainer or harness
fails its step's result, not the task.
"""

from __future__ import annotations

from pathlib import Path

from steps.common import step
from vtb import pipeline, progress
from vtb.config import AgentConfig, EngineConfig, ModelConfig, SandboxConfig, TaskConfig
from vtb.results import DataResult, ModelResult, PlayResult, TrainResult, TurnOutcome


@step("provision-data")
def provision_data_step(key: str, task_cfg: TaskConfig, cache: str) -> DataResult:
    return pipeline.provision_data(task_cfg, Path(cache))


@step("provision-model")
def provision_model_step(
    key: str,
    model_cfg: ModelConfig,
    task_cfg: TaskConfig,
    data_dir: str,
    cache: str,
    sandbox_cfg: SandboxConfig,
) -> ModelResult:
    echo = lambda line: progress.say(f"  [base] {line}")  # noqa: E731
    out = pipeline.model_dir(cache, model_cfg, key)
    return pipeline.provision_model(model_cfg, task_cfg, Path(data_dir), out, sandbox_cfg, echo)


@step("train", retries=2)
def train_step(
    key: str,
    snapshot_dir: str,
    base_dir: str,
    cache: str,
    seed: int,
    sandbox_cfg: SandboxConfig,
    max_flops: float | None,
    cpu_seconds: float | None,
    gpu_seconds: float | None = None,
) -> TrainResult:
    return pipeline.train(
        key, snapshot_dir, base_dir, cache, seed, sandbox_cfg, max_flops, cpu_seconds, gpu_seconds
    )


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
    flops_per_episode: float | None = None,
    shard: int | None = None,
    audit: bool = False,
) -> PlayResult:
    return pipeline.play(
        harness_dir,
        model_dir,
        split,
        data_dir,
        task_cfg,
        sandbox_cfg,
        max_flops,
        cpu_seconds,
        gpu_seconds,
        engine_cfg,
        flops_per_episode,
        shard,
        audit,
    )


@step("agent-turn")
def agent_turn_step(
    key: str,
    agent_cfg: AgentConfig,
    feedback: dict,
    before: str,
    store: str,
    workspace: str,
    data_dir: str,
    base_dir: str,
    sandbox_cfg: SandboxConfig,
    cpu_seconds: float,
    gpu_seconds: float | None = None,
) -> TurnOutcome:
    return pipeline.agent_turn(
        agent_cfg,
        feedback,
        before,
        store,
        workspace,
        data_dir,
        base_dir,
        sandbox_cfg,
        cpu_seconds,
        gpu_seconds,
    )
