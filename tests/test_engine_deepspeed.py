"""trainer=deepspeed: config generation, launch commands and device checks on the CPU, and a real
DeepSpeed ZeRO run on two CPU ranks (gloo) inside the bwrap research sandbox (slow).

The same code runs on GPUs (tests/gpu/, scripts/gpu_smoke.sh); only the accelerator differs.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

from tests.conftest import sandbox_backend
from vtb import runner
from vtb.engine import usage
from vtb.engine.ds_launch import check_devices, launcher_argv
from vtb.engine.sft_config import ConfigError, resolve_config
from vtb.engine.sft_deepspeed import MASTER_PORT, ds_config, rank_rows
from vtb.models.toy import write_toy_system
from vtb.sandbox.base import Limits

SHAPE = {"n_layer": 2, "n_embd": 64, "n_head": 2, "n_positions": 128}


def _cfg(**ds) -> dict:
    return resolve_config({"lr": 2e-3, "batch_size": 8, "weight_decay": 0.1, "deepspeed": ds})


def test_zero2_and_zero3_configs():
    two = ds_config(_cfg(stage=2, gpus=2), world=2)
    assert (
        two["train_micro_batch_size_per_gpu"],
        two["train_batch_size"],
        two["gradient_accumulation_steps"],
    ) == (4, 8, 1)
    assert (
        two["zero_optimization"]["stage"] == 2
        and "stage3_gather_16bit_weights_on_model_save" not in two["zero_optimization"]
    )
    assert two["bf16"]["enabled"] and not two["fp16"]["enabled"]
    assert two["optimizer"] == {
        "type": "AdamW",
        "params": {"lr": 2e-3, "weight_decay": 0.1, "torch_adam": True},
    }
    three = ds_config(_cfg(stage=3, gpus=4, precision="fp16", offload_optimizer=True), world=4)
    assert three["zero_optimization"]["stage3_gather_16bit_weights_on_model_save"] is True
    assert three["zero_optimization"]["offload_optimizer"]["device"] == "cpu"
    assert (
        three["fp16"]["enabled"]
        and not three["bf16"]["enabled"]
        and three["train_micro_batch_size_per_gpu"] == 2
    )
    assert rank_rows([10, 11, 12, 13, 14], 1, 2) == [11, 13]


def test_deepspeed_block_is_validated():
    assert resolve_config({})["deepspeed"] is None
    assert resolve_config({"deepspeed": {}})["deepspeed"] == {
        "stage": 2,
        "gpus": 1,
        "precision": "bf16",
        "offload_optimizer": False,
        "cpu": False,
    }
    for bad, match in [
        ({"stage": 1}, "stage must be 2 or 3"),
        ({"gpus": 0}, "gpus must be >= 1"),
        ({"precision": "fp8"}, "precision"),
        ({"zero": 3}, "unknown deepspeed key"),
        ({"cpu": "yes"}, "cpu must be true or false"),
    ]:
        with pytest.raises(ConfigError, match=match):
            resolve_config({"deepspeed": bad})


def _world(argv: list[str]) -> dict:
    (arg,) = [a for a in argv if a.startswith("--world_info=")]
    return json.loads(base64.urlsafe_b64decode(arg.split("=", 1)[1]))


def test_launch_commands_use_the_sandboxes_gpus():
    args = ["--config", "/ws/trainer/config.json"]
    argv = launcher_argv("/py", 2, "3,5,6", None, args)
    assert argv[:4] == ["/py", "-u", "-m", "deepspeed.launcher.launch"]
    assert f"--master_port={MASTER_PORT}" in argv and "--master_addr=127.0.0.1" in argv
    assert _world(argv) == {"localhost": [3, 5]}  # the first two of the sandbox's GPUs, as numbered there
    assert _world(launcher_argv("/py", 1, "2", None, args)) == {"localhost": [2]}  # sandbox.gpus=2
    assert argv[-4:] == ["--module", "vtb.engine.sft", *args] and "--no_local_rank" in argv
    plain = launcher_argv("/py", 4, None, "/ws/trainer/train.py", args)
    assert _world(plain) == {"localhost": [0, 1, 2, 3]} and plain[-3:] == ["/ws/trainer/train.py", *args]
    with pytest.raises(ConfigError, match="sandbox was given 1 GPU"):
        launcher_argv("/py", 2, "0", None, args)


@pytest.mark.slow  # 10-15 s, nearly all of it DeepSpeed's import in the launcher
def test_a_bwrap_sandbox_on_gpu_2_gives_the_rank_gpu_2(tmp_path):
    """sandbox.gpus=2: inside the bwrap sandbox CUDA_VISIBLE_DEVICES is "2", and DeepSpeed's own
    launcher, run there on ds_launch's command line, hands the one rank CUDA_VISIBLE_DEVICES=2
    (not 0, which in a sandbox holding only GPU 2's node would be no device or the wrong one)."""
    import sys

    from tests.test_sandbox_gpu import ScheduleReader
    from vtb.sandbox import Limits as SandboxLimits
    from vtb.sandbox import runtime_mounts
    from vtb.sandbox.base import Mount

    pytest.importorskip("deepspeed", reason="pip install -e '.[deepspeed]'")
    sandbox = sandbox_backend("bwrap", gpus="2", gpu_reader=ScheduleReader(4))
    assert sandbox.env(SandboxLimits(), None)["CUDA_VISIBLE_DEVICES"] == "2"
    (tmp_path / "rank.py").write_text(
        "import os; print('rank', os.environ['RANK'], os.environ['WORLD_SIZE'], os.environ['CUDA_VISIBLE_DEVICES'])"
    )
    argv = launcher_argv(sys.executable, 1, "2", "/ws/rank.py", [])
    result = sandbox.run(
        argv,
        mounts=runtime_mounts() + [Mount(tmp_path, "/ws")],
        limits=SandboxLimits(wall_seconds=120, cpu_seconds=120),
        env={"DS_ACCELERATOR": "cpu"},  # no GPU here: the launcher only maps ids, the rank runs on the CPU
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "rank 0 1 2" in result.stdout.splitlines()


def test_device_checks_name_the_fix():
    ds = _cfg(gpus=2)["deepspeed"]
    with pytest.raises(ConfigError, match="sandbox.gpus"):
        check_devices(ds, cuda_devices=0)
    assert check_devices({**ds, "cpu": True}, cuda_devices=0) == {"DS_ACCELERATOR": "cpu", "LOCAL_SIZE": "2"}
    assert check_devices(ds, cuda_devices=2) == {}


@pytest.fixture(scope="module")
def base_dir(toy_model_dir):
    """The session's toy base model (tests/conftest.py), of this file's SHAPE: built once per session."""
    config = json.loads((toy_model_dir / "config.json").read_text())
    assert {k: config[k] for k in SHAPE} == SHAPE
    return toy_model_dir


def write_candidate(tmp_path: Path, trainer: dict, n_rows: int = 48) -> Path:
    """A candidate with toy SFT rows and the given trainer config (also used by tests/gpu)."""
    return write_toy_system(tmp_path / "cand", trainer, n_rows)


def test_a_deepspeed_trainer_without_a_gpu_fails_with_the_fix(base_dir, tmp_path):
    cand = write_candidate(tmp_path, {"batch_size": 8, "deepspeed": {"stage": 2, "gpus": 1}})
    out = runner.train(
        sandbox_backend("bwrap"),
        cand,
        base_dir,
        tmp_path / "out",
        seed=0,
        limits=Limits(wall_seconds=120, cpu_seconds=120),
    )
    assert not out.ok and out.returncode == 2
    assert "no CUDA GPU is visible" in out.log and "sandbox.gpus" in out.log


@pytest.mark.slow
@pytest.mark.parametrize("stage,method", [(2, "full"), (3, "lora")])
def test_deepspeed_zero_trains_on_two_ranks_in_the_sandbox(base_dir, tmp_path, stage, method):
    pytest.importorskip("deepspeed", reason="pip install -e '.[deepspeed]' (scripts/install.sh does)")
    trainer = {
        "method": method,
        "lr": 5e-3,
        "epochs": 1,
        "batch_size": 8,
        "deepspeed": {"stage": stage, "gpus": 2, "precision": "fp32", "cpu": True},
    }
    cand = write_candidate(tmp_path, trainer)
    out = runner.train(
        sandbox_backend("bwrap"),
        cand,
        base_dir,
        tmp_path / "out",
        seed=0,
        limits=Limits(wall_seconds=600, cpu_seconds=1200),
    )
    assert out.ok, out.log[-3000:]
    summary = out.summary
    assert summary["deepspeed"]["world_size"] == 2 and summary["deepspeed"]["stage"] == stage
    assert summary["steps"] == 6 and summary["method"] == method
    # charged once (rank 0), for the global batches: the orchestrator read what the trainer counted
    assert out.charge.flops == summary["flops"] == usage.train_flops(summary["n_params"], summary["tokens"])
    before = AutoModelForCausalLM.from_pretrained(base_dir)
    after = AutoModelForCausalLM.from_pretrained(tmp_path / "out" / "checkpoint")
    assert type(after) is type(before)  # a plain model directory (LoRA merged)
    change = sum(
        (p - q).abs().sum().item() for p, q in zip(before.parameters(), after.parameters(), strict=True)
    )
    assert change > 1.0 and all(torch.isfinite(p).all() for p in after.parameters())
