"""The GPU suite (`pytest -m gpu`, scripts/gpu_smoke.sh): what the CPU tests cannot show.

CI deselects it (-m "not gpu"). On a machine without a CUDA GPU these tests skip, unless
VTB_REQUIRE_GPU=1 (set by scripts/gpu_smoke.sh), where a missing GPU or package fails them.
VTB_TEST_GPU picks the GPU index (default 0).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from tests.conftest import sandbox_backend
from tests.test_engine_deepspeed import write_candidate
from vtb import runner
from vtb.models.toy import build_toy_model, toy_example
from vtb.sandbox import runtime_mounts
from vtb.sandbox.base import Limits

pytestmark = pytest.mark.gpu
GPU = os.environ.get("VTB_TEST_GPU", "0")
SHAPE = {"n_layer": 2, "n_embd": 64, "n_head": 2, "n_positions": 128}


def _need(module: str | None = None) -> None:
    import torch

    missing = None
    if not torch.cuda.is_available():
        missing = "no CUDA GPU"
    elif module is not None:
        try:
            __import__(module)
        except ImportError:
            missing = f"{module} not installed (scripts/install.sh --gpu)"
    if missing:
        if os.environ.get("VTB_REQUIRE_GPU") == "1":
            pytest.fail(missing)
        pytest.skip(missing)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    _need()
    out = tmp_path_factory.mktemp("toy") / "model"
    return build_toy_model(
        out, steps=60, n_texts=600, batch_size=16, lr=5e-3, progress=lambda s: None, **SHAPE
    )


def _prompts(n: int) -> list[str]:
    import random

    rng = random.Random(3)
    return [f"Q: {toy_example(rng)[0]}\nA:" for _ in range(n)]


def test_nvml_sees_a_process_holding_the_gpu():
    _need("pynvml")
    from vtb.sandbox.gpu import PynvmlReader

    reader = PynvmlReader()
    assert reader.device_count() >= 1
    code = f"import torch, time; x = torch.ones(1 << 20, device='cuda:{GPU}'); print('ready', flush=True); time.sleep(30)"
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        deadline = time.monotonic() + 10
        while proc.pid not in reader.compute_pids(int(GPU)) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert proc.pid in reader.compute_pids(int(GPU))
    finally:
        proc.kill()
        proc.wait()


def test_gpu_seconds_are_metered_and_enforced_in_the_sandbox(tmp_path):
    _need("pynvml")
    sandbox = sandbox_backend("bwrap", threads=2, gpus=GPU)
    code = "import torch, time; x = torch.ones(1 << 20, device='cuda'); time.sleep(4); print(float(x.sum()))"
    held = sandbox.run(
        [sys.executable, "-c", code],
        mounts=runtime_mounts(),
        limits=Limits(wall_seconds=120, cpu_seconds=120),
    )
    assert held.returncode == 0, held.stderr[-2000:]
    assert 3.0 <= held.gpu_seconds <= held.wall_seconds + 0.5
    capped = sandbox.run(
        [sys.executable, "-c", code],
        mounts=runtime_mounts(),
        limits=Limits(wall_seconds=120, cpu_seconds=120, gpu_seconds=1.0),
    )
    assert capped.killed == "gpu" and capped.gpu_seconds < 3.0


def test_vllm_engine_matches_the_transformers_engine_on_the_gpu(model_dir):
    _need("vllm")
    from vtb.engine.infer import Engine
    from vtb.engine.vllm_engine import VLLMEngine

    prompts = _prompts(64)
    hf = Engine(model_dir)
    assert hf.device.type == "cuda"
    expected = hf.generate(prompts, max_new_tokens=24, stop=["\n"])
    vl = VLLMEngine(model_dir, options={"dtype": "float32", "gpu_memory_utilization": 0.3})
    got = vl.generate(prompts, max_new_tokens=24, stop=["\n"])
    same = sum(a == b for a, b in zip(expected, got, strict=True))
    assert same >= 0.9 * len(prompts), list(zip(expected, got, strict=True))[
        :5
    ]  # fp32 both: kernels may differ slightly
    assert vl.last_usage["prompt_tokens"] == hf.last_usage["prompt_tokens"]


def test_deepspeed_zero2_trains_on_the_gpu_in_the_sandbox(model_dir, tmp_path):
    _need("deepspeed")
    trainer = {
        "lr": 3e-3,
        "epochs": 1,
        "batch_size": 32,
        "deepspeed": {"stage": 2, "gpus": 1, "precision": "bf16"},
    }
    cand = write_candidate(tmp_path, trainer, n_rows=256)
    sandbox = sandbox_backend("bwrap", threads=4, gpus=GPU)
    out = runner.train(
        sandbox, cand, model_dir, tmp_path / "out", seed=0, limits=Limits(wall_seconds=300, cpu_seconds=1200)
    )
    assert out.ok, out.log[-4000:]
    assert out.summary["deepspeed"]["world_size"] == 1 and out.summary["steps"] == 8
    assert out.charge.gpu_seconds > 0.0 and out.charge.flops == out.summary["flops"]


def test_deepspeed_trains_on_a_gpu_other_than_0(model_dir, tmp_path):
    """The sandbox holds only its GPU's node; the rank must get that GPU's id (ds_launch's world_info)."""
    _need("deepspeed")
    import torch

    if torch.cuda.device_count() < 2:
        pytest.skip(
            "one GPU: index 0 is the only one (tests/test_engine_deepspeed.py checks the mapping on the CPU)"
        )
    last = str(torch.cuda.device_count() - 1)
    trainer = {
        "lr": 3e-3,
        "epochs": 1,
        "batch_size": 32,
        "deepspeed": {"stage": 2, "gpus": 1, "precision": "bf16"},
    }
    cand = write_candidate(tmp_path, trainer, n_rows=64)
    sandbox = sandbox_backend("bwrap", threads=2, gpus=last)
    out = runner.train(
        sandbox, cand, model_dir, tmp_path / "out", seed=0, limits=Limits(wall_seconds=300, cpu_seconds=1200)
    )
    assert out.ok, out.log[-4000:]
    assert f"CUDA_VISIBLE_DEVICES={last}" in out.log and out.charge.gpu_seconds > 0.0
