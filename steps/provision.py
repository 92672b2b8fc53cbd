"""Provision: the task's data splits and the base model, once per content key."""

from __future__ import annotations

from pathlib import Path

from steps.common import step
from vtb import pipeline
from vtb.config import ModelConfig, SandboxConfig, TaskConfig


@step("provision-data")
def provision_data_step(key: str, task_cfg: TaskConfig, cache: str) -> dict:
    return pipeline.provision_data(task_cfg, Path(cache))


@step("provision-model")
def provision_model_step(
    key: str,
    model_cfg: ModelConfig,
    task_cfg: TaskConfig,
    data_dir: str,
    cache: str,
    sandbox_cfg: SandboxConfig,
) -> dict:
    out = Path(cache) / "models" / f"{model_cfg.name}-{key[:16]}"
    echo = lambda line: print(f"  [base] {line}", flush=True)  # noqa: E731
    return pipeline.provision_model(model_cfg, task_cfg, Path(data_dir), out, sandbox_cfg, echo)
