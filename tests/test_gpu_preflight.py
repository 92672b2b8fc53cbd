"""What vLLM needs before it starts, checked on the CPU: Triton's toolchain (a missing compiler,
Python.h or ldconfig is named with its fix), the persistent engine cache of the model server,
and a stdout that carries only the server's events (vLLM's logs go to stderr).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import types
from pathlib import Path

import pytest

from tests.conftest import sandbox_backend
from vtb.engine import select, toolchain
from vtb.engine.toolchain import FIX, triton_problems, triton_unavailable
from vtb.sandbox import Limits, runtime_mounts
from vtb.sandbox.base import Mount

ROOT = str(Path(__file__).resolve().parents[1])


def _which(present: set[str]):
    return lambda name: f"/usr/bin/{name}" if name in present else None


# -- Triton's toolchain ------------------------------------------------------------------------


def test_a_missing_compiler_is_named_with_its_fix(tmp_path):
    (tmp_path / "Python.h").write_text("")
    problems = triton_problems(env={}, which=_which(set()), include_dir=str(tmp_path), compile_probe=False)
    assert len(problems) == 1 and "no C compiler" in problems[0] and "apt-get install gcc python3-dev" in FIX
    assert FIX in problems[0]
    assert (
        triton_problems(
            env={"CC": "/opt/cc"}, which=_which(set()), include_dir=str(tmp_path), compile_probe=False
        )
        == []
    )
    assert (
        triton_problems(env={}, which=_which({"clang"}), include_dir=str(tmp_path), compile_probe=False) == []
    )


def test_missing_python_headers_and_ldconfig_are_named(tmp_path):
    problems = triton_problems(
        env={}, which=_which({"gcc"}), include_dir=str(tmp_path), ldconfig=str(tmp_path / "ldconfig")
    )
    assert len(problems) == 2
    assert f"no Python.h in {tmp_path}" in problems[0] and FIX in problems[0]
    assert "ldconfig" in problems[1] and "TRITON_LIBCUDA_PATH" in problems[1]
    (tmp_path / "Python.h").write_text("")
    assert (
        triton_problems(
            env={"TRITON_LIBCUDA_PATH": "/usr/lib/x86_64-linux-gnu"},
            which=_which({"gcc"}),
            include_dir=str(tmp_path),
            ldconfig=str(tmp_path / "ldconfig"),
            compile_probe=False,
        )
        == []
    )


def test_a_compiler_that_cannot_build_the_launcher_is_named(tmp_path):
    (tmp_path / "Python.h").write_text("")
    reason = triton_unavailable(env={"CC": "/bin/false"}, include_dir=str(tmp_path), ldconfig="/bin/true")
    assert reason is not None and "/bin/false cannot compile a file including Python.h" in reason
    assert "apt-get install gcc python3-dev" in reason and reason.startswith("Triton")


def test_the_toolchain_is_seen_inside_a_bwrap_sandbox_as_on_the_host():
    """With the host's /usr mounted, the sandbox finds the compiler, Python.h and ldconfig the host
    has (or misses the same ones); where the host has them all, the probe compiles inside too."""
    host = triton_problems(compile_probe=False)
    code = (
        f"import json, sys; sys.path.insert(0, {ROOT!r}); from vtb.engine.toolchain import triton_problems; "
        f"print(json.dumps([triton_problems(compile_probe=False), triton_problems(compile_probe={not host})]))"
    )
    result = sandbox_backend("bwrap").run(
        [sys.executable, "-c", code], mounts=runtime_mounts(), limits=Limits(wall_seconds=60)
    )
    assert result.returncode == 0, result.stderr[-2000:]
    inside, probed = json.loads(result.stdout)
    assert inside == host
    assert probed == host  # [] where the host can build: the launcher compiles in the sandbox


def test_vllm_is_unavailable_with_the_fix_when_triton_cannot_build(monkeypatch):
    import torch

    monkeypatch.setitem(sys.modules, "vllm", types.ModuleType("vllm"))  # as if installed
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # as if on a GPU
    monkeypatch.setattr(toolchain, "compiler", lambda env, which=None: None)
    reason = select.vllm_unavailable()
    assert reason is not None and "no C compiler" in reason and "apt-get install gcc python3-dev" in reason


# -- vLLM's logging and the server's stdout ----------------------------------------------------


def test_vllm_logs_to_stderr():
    env = select.engine_env("vllm")
    assert env["VLLM_LOGGING_STREAM"] == "ext://sys.stderr" and env["VLLM_CONFIGURE_LOGGING"] == "1"
    assert "VLLM_LOGGING_STREAM" not in select.engine_env("transformers")


def test_the_servers_stdout_carries_only_its_events():
    """After protocol_stream(), prints, logging to stdout and child processes all land on stderr."""
    code = (
        f"import os, sys, logging; sys.path.insert(0, {ROOT!r}); from vtb.serve.server import protocol_stream\n"
        "events = protocol_stream()\n"
        "print('noise from print'); sys.stdout.flush()\n"
        "logging.basicConfig(stream=sys.stdout); logging.warning('noise from logging')\n"
        "os.system('echo noise from a child')\n"
        'print(\'{"event": "ready"}\', file=events, flush=True)\n'
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout == '{"event": "ready"}\n'
    for noise in ("noise from print", "noise from logging", "noise from a child"):
        assert noise in done.stderr


# -- the persistent engine cache ---------------------------------------------------------------


class _Recorder:
    """A sandbox that records what a service starts with, then fails the start (no server runs)."""

    name = "recorder"

    def start(self, argv, *, mounts, limits, cwd="/", env=None):
        self.mounts, self.env = mounts, env
        raise RuntimeError("recorded")


def test_a_vllm_server_gets_the_persistent_cache_mounted_and_its_caches_pointed_there(tmp_path, monkeypatch):
    from vtb.service import ENGINE_CACHE, ModelService, engine_cache_env, engine_cache_for

    monkeypatch.setenv("VTB_ENGINE_CACHE", str(tmp_path / "cache"))
    assert engine_cache_for("transformers") is None and engine_cache_for("vllm") == tmp_path / "cache"
    sandbox = _Recorder()
    service = ModelService(
        sandbox, tmp_path, Limits(), env=select.engine_env("vllm"), cache_dir=engine_cache_for("vllm")
    )
    with pytest.raises(RuntimeError, match="recorded"):
        service.start()
    assert Mount(tmp_path / "cache", ENGINE_CACHE, writable=True) in sandbox.mounts
    assert (tmp_path / "cache").is_dir()
    cache_env = engine_cache_env()
    assert {k: sandbox.env[k] for k in cache_env} == cache_env
    assert all(v.startswith(ENGINE_CACHE + "/") for v in cache_env.values())
    assert {"TRITON_CACHE_DIR", "VLLM_CACHE_ROOT"} <= set(cache_env)
    shutil.rmtree(service._dir, ignore_errors=True)

    plain = _Recorder()
    service = ModelService(plain, tmp_path, Limits())
    with pytest.raises(RuntimeError):
        service.start()
    shutil.rmtree(service._dir, ignore_errors=True)
    assert not [m for m in plain.mounts if m.target == ENGINE_CACHE] and "TRITON_CACHE_DIR" not in plain.env
