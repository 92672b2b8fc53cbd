"""The reproducible CPU mode (issue 38): the same training gives the same bits whatever CPU code
paths the machine would pick, and only with the mode on.

This machine cannot become another one: it has AVX2 and no AVX-512, so no cap here runs the
AVX-512 kernels an Intel server picks by itself. What the test does instead: it hands the
sandboxed training the choices a different machine makes on its own (PyTorch's default kernels
instead of AVX2, MKL's compatible code path instead of this CPU's), as environment, and trains
the tiny base model exactly as provisioning does (vtb.models.build in a sandbox). Without the
mode those choices change the trained weights' bits (measured here: they do); with it the pins
(vtb/sandbox/runtime.py REPRODUCIBLE_CPU) decide the code paths over them, and the weights,
losses and FLOPs are identical. The pins are what an AVX-512 machine gets too.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import pytest
from conftest import BACKENDS

from vtb import record, repro
from vtb.config import SandboxConfig
from vtb.result_parts import Fingerprint
from vtb.sandbox import make_sandbox, runtime_mounts
from vtb.sandbox.base import Limits, Mount

# The code paths another machine would pick by itself, where this one picks AVX2 kernels and
# MKL's own path for this CPU (each measured to change a training's last bits here).
ANOTHER_MACHINE = {"ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "COMPATIBLE"}

WORDS = "the cat sat on a mat dog ran to big red box".split()
SPEC = {
    "words": WORDS,
    "number_max": 20,
    "tokenizer": "words",
    "texts": [" ".join(WORDS[(i * 7 + j) % len(WORDS)] for j in range(12)) + f" {i % 20}" for i in range(64)],
    "model": {"n_layer": 1, "n_embd": 32, "n_head": 2, "n_positions": 32, "steps": 12, "seed": 0},
}


def _train(tmp: Path, backend: str, reproducible: bool, env: dict) -> tuple[str, float]:
    """(sha256 of the weights, final loss) of one sandboxed tiny-model build. (FLOPs are counted
    from tokens, 6 x params x tokens: the same wherever the same data is trained on.)"""
    work = tmp / f"{backend}-{reproducible}-{len(env)}"
    (work / "out").mkdir(parents=True)
    (work / "spec.json").write_text(json.dumps(SPEC))
    sandbox = make_sandbox(backend, threads=2, reproducible=reproducible)
    result = sandbox.run(
        [sys.executable, "-m", "vtb.models.build", "/build/spec.json", "/build/out/model"],
        mounts=runtime_mounts() + [Mount(work, "/build", writable=True)],
        limits=Limits(wall_seconds=300, cpu_seconds=300, memory_mb=4096),
        env=env,
        cwd="/build",
    )
    assert result.returncode == 0, result.stderr[-2000:]
    model = work / "out" / "model"
    weights = hashlib.sha256((model / "model.safetensors").read_bytes()).hexdigest()
    info = json.loads((model / "vtb_model.json").read_text())
    return weights, info["final_loss"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_pinned_code_paths_give_the_same_bits_whatever_the_machine_would_pick(tmp_path, backend) -> None:
    pinned = _train(tmp_path, backend, True, {})
    pinned_elsewhere = _train(tmp_path, backend, True, ANOTHER_MACHINE)
    print(f"\n[{backend}] pinned {pinned}\n  elsewhere {pinned_elsewhere}")
    assert pinned == pinned_elsewhere  # weights and losses, bit for bit
    if backend != "bwrap":  # that the code paths matter is the CPU's, not the backend's: shown once
        return
    native = _train(tmp_path, backend, False, {})
    native_elsewhere = _train(tmp_path, backend, False, ANOTHER_MACHINE)
    # (native equals pinned on an AVX2 machine such as this one; not on an AVX-512 one)
    print(f"native {native}\n  elsewhere {native_elsewhere}")
    assert native[0] != native_elsewhere[0] and native[1] != native_elsewhere[1]  # the mode is what holds


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_fingerprint_names_the_pins_and_a_probe_of_this_machine(backend) -> None:
    fp = repro.fingerprint(SandboxConfig(backend=backend))
    assert fp["mode"] == "reproducible" and fp["pins"]["ATEN_CPU_CAPABILITY"] == "avx2"
    assert fp["cpu_capability"] == "AVX2" and fp["threads"] == 1 and len(fp["id"]) == 12
    native = repro.fingerprint(SandboxConfig(backend=backend, reproducible=False))
    assert native["mode"] == "native" and native["id"] != fp["id"]
    if backend == "docker":  # the host's runtime mounted, the same CPU: the same fingerprint as bwrap
        assert fp["id"] == repro.fingerprint(SandboxConfig(backend="bwrap"))["id"]
    assert record.fingerprint_line(Fingerprint.from_json(fp)).startswith(fp["id"])
    assert fp["server_threads"] == 1 and "1 thread (1 per model server)" in record.fingerprint_line(
        Fingerprint.from_json(fp)
    )
    two = repro.fingerprint(SandboxConfig(backend=backend, threads=2))  # two threads: other bits
    assert two["threads"] == 2 and "2 threads (1 per model server)" in record.fingerprint_line(
        Fingerprint.from_json(two)
    )
    assert two["id"] != fp["id"] and two["probe"] != fp["probe"]
    both = repro.fingerprint(
        SandboxConfig(backend=backend, threads=2, server_threads=None)
    )  # servers on `threads`
    assert both["server_threads"] == 2 and both["id"] != two["id"] and both["probe"] == two["probe"]


def test_a_probe_that_prints_nonsense_is_refused() -> None:
    for bad in (
        "",
        "not json",
        '{"probe": 1}',
        json.dumps({"probe": "x" * 100, "cpu_capability": "A", "threads": 2, "torch": "2"}),
        json.dumps({"probe": "x", "cpu_capability": "A", "threads": -1, "torch": "2"}),
    ):
        with pytest.raises(RuntimeError, match="reproducibility probe"):
            repro.parse(bad)
