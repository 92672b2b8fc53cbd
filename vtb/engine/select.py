"""Which inference engine a harness gets: `open_engine(model_dir)`.

The run's `engine` config reaches the harness process as environment variables (set by the
orchestrator, see `engine_env`): VTB_ENGINE (transformers | vllm), VTB_ENGINE_OPTIONS (JSON,
vLLM's options) and VTB_ENGINE_FALLBACK. With engine=vllm and no CUDA GPU or no `vllm`
package, the harness gets the transformers engine instead (fallback on, the default) or an
error that says so (fallback off). Either way the engine that actually ran is written to the
usage file, so the run record says which engine produced each score.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from vtb.engine import usage

ENGINES = ("transformers", "vllm")
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
    if name not in ENGINES:
        raise ValueError(f"engine={name!r} is not one of {', '.join(ENGINES)}; set engine=transformers")
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
    from vtb.engine.infer import Engine

    name = name or os.environ.get("VTB_ENGINE", "transformers")
    if name not in ENGINES:
        raise ValueError(f"VTB_ENGINE={name!r} is not one of {', '.join(ENGINES)}")
    if name == "vllm":
        reason = vllm_unavailable()
        if reason is None:
            from vtb.engine.vllm_engine import VLLMEngine

            options = json.loads(os.environ.get("VTB_ENGINE_OPTIONS") or "{}")
            if safetensors_only:
                options["load_format"] = "safetensors"
            engine = VLLMEngine(model_dir, options=options)
            usage.note(engine="vllm", engine_fallback="")
            return engine
        if os.environ.get("VTB_ENGINE_FALLBACK", "1") != "1":
            raise RuntimeError(f"engine=vllm cannot run: {reason}; or set engine.fallback=true")
        print(
            f"[engine] vllm unavailable: {reason}; using the transformers engine", file=sys.stderr, flush=True
        )
        usage.note(engine="transformers", engine_fallback=f"vllm: {reason}")
        return Engine(model_dir, threads=threads, safetensors_only=safetensors_only)
    usage.note(engine="transformers", engine_fallback="")
    return Engine(model_dir, threads=threads, safetensors_only=safetensors_only)
