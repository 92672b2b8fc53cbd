"""Train: run the candidate's trainer in the research sandbox; cached by hash(base, data, trainer, seed, code)."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

from steps.common import step
from vtb import pipeline, runner
from vtb.config import SandboxConfig


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
) -> dict:
    out_dir = Path(cache) / "checkpoints" / key[:24]
    outcome = runner.train(
        pipeline.sandbox_for(sandbox_cfg),
        Path(snapshot_dir),
        Path(base_dir),
        out_dir,
        seed=seed,
        limits=pipeline.step_limits(sandbox_cfg, max_flops, cpu_seconds, gpu_seconds),
        echo=lambda line: print(f"  [train] {line}", flush=True),
        checkpoint_caps=sandbox_cfg.checkpoint_caps(),
    )
    return {
        "ok": outcome.ok,
        "checkpoint": str(out_dir / "checkpoint") if outcome.ok else None,
        "log": str(out_dir / "train.log"),
        "charge": asdict(outcome.charge),
        "killed": outcome.killed,
        "returncode": outcome.returncode,
        "summary": outcome.summary,
    }
