"""Which inference engine a harness gets: `open_engine(model_dir)`.

The run's `engine` config reaches the harness process as environment variables (set by the
orchestrator, see `engine_env`): VTB_ENGINE (a name in `ENGINES`), VTB_ENGINE_OPTIONS (JSON,
the engine's options) and VTB_ENGINE_FALLBACK. An engine that cannot run here (engine=vllm
with no CUDA GPU or no `vllm` package) raises `EngineUnavailable`, and the harness gets the
transformers engine instead (fallback on, the default) or an error that says so (fallback off).
Either way the engine that actually ran is written to the usage file, so the run record says
which engine produced each score.

Engines are found like every other named kind (vtb/registry.py): the built-in two here, others
from an installed package's `vtb.engines` entry point (a factory `(model_dir, *, options,
threads, safetensors_only) -> engine`; sandboxes mount the environment's site-packages, so the
model server finds it there too).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from vtb.engine import usage
from vtb.registry import Registry


class EngineUnavailable(RuntimeError):
    """The engine cannot run on this machine; the message says why and what would fix it."""


ENGINES: Registry = Registry(
    "engine", "vtb.engines", builtin=lambda name: None, known=("transformers", "vllm")
)
VLLM_ENV = {
    # No network in the sandbox: vLLM must not try to report usage.
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
    # vLLM's own logging goes to stdout by default (envs.py: VLLM_LOGGING_STREAM="ext://sys.stdout"),
    # which is the model server's event stream; its handler reads this stream name (logger.py).
    "VLLM_CONFIGURE_LOGGING": "1",
    "VLLM_LOGGING_STREAM": "ext://sys.stderr",
}


def engine_env(name: str, options: dict | None = None, fallback: bool = True) -> dict[str, str]:
    """The environment that selects an engine inside a harness sandbox."""
    try:
        ENGINES.get(name)
    except ValueError as e:
        raise ValueError(f"engine={name!r}: {e}; set engine=transformers") from None
    env = {
        "VTB_ENGINE": name,
        "VTB_ENGINE_OPTIONS": json.dumps(options or {}, sort_keys=True),
        "VTB_ENGINE_FALLBACK": "1" if fallback else "0",
    }
    if name == "vllm":
        env.update(VLLM_ENV)
    return env


def vllm_unavailable() -> str | None:
    """Why vLLM cannot run here, or None when it can."""
    try:
        import vllm  # noqa: F401
    except Exception as e:  # noqa: BLE001 (a broken install is as unusable as a missing one)
        return f"the vllm package cannot be imported ({type(e).__name__}: {e}); scripts/install.sh --gpu"
    import torch

    if not torch.cuda.is_available():
        return "no CUDA GPU is visible (set sandbox.gpus to pass one through)"
    from vtb.engine.toolchain import triton_unavailable

    return triton_unavailable()  # a missing compiler, Python.h or ldconfig, named with its fix


def open_engine(
    model_dir: str | Path,
    *,
    name: str | None = None,
    threads: int | None = None,
    safetensors_only: bool = False,
):
    """The engine the run configured for model_dir.

    The model server (vtb/serve/server.py) opens agent-produced checkpoints with
    `safetensors_only`: weights in a pickle format are refused, never unpickled.
    """
    name = name or os.environ.get("VTB_ENGINE", "transformers")
    try:
        factory = ENGINES.get(name)
    except ValueError as e:
        raise ValueError(f"VTB_ENGINE={name!r}: {e}") from None
    options = json.loads(os.environ.get("VTB_ENGINE_OPTIONS") or "{}")
    kwargs = dict(options=options, threads=threads, safetensors_only=safetensors_only)
    try:
        engine = factory(model_dir, **kwargs)
    except EngineUnavailable as e:
        if name == "transformers" or os.environ.get("VTB_ENGINE_FALLBACK", "1") != "1":
            raise RuntimeError(f"engine={name} cannot run: {e}; or set engine.fallback=true") from None
        print(f"[engine] {name} unavailable: {e}; using the transformers engine", file=sys.stderr, flush=True)
        engine = ENGINES.get("transformers")(model_dir, **{**kwargs, "options": {}})
        usage.note(engine="transformers", engine_fallback=f"{name}: {e}")
        return engine
    usage.note(engine=getattr(engine, "name", name), engine_fallback="")
    return engine


@ENGINES.register("transformers")
def transformers_engine(model_dir, *, options: dict, threads: int | None, safetensors_only: bool):
    """The project's own batched KV-cache decoder (vtb/engine/infer.py): CPU or GPU."""
    from vtb.engine.infer import Engine

    return Engine(model_dir, threads=threads, safetensors_only=safetensors_only)


@ENGINES.register("vllm")
def vllm_engine(model_dir, *, options: dict, threads: int | None, safetensors_only: bool):
    """vLLM on a CUDA GPU (vtb/engine/vllm_engine.py); `options` are its engine arguments."""
    reason = vllm_unavailable()
    if reason is not None:
        raise EngineUnavailable(reason)
    from vtb.engine.vllm_engine import VLLMEngine

    if safetensors_only:
        options = {**options, "load_format": "safetensors"}
    return VLLMEngine(model_dir, options=options)
