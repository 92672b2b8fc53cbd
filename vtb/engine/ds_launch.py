"""Start the SFT trainer on N ranks with the deepspeed launcher, inside the research sandbox.

    python -m vtb.engine.ds_launch [--script trainer/train.py] -- --config trainer/config.json ...

`runner.train` runs this instead of `python -m vtb.engine.sft` when trainer/config.json has a
`deepspeed` block. The ranks get the first `deepspeed.gpus` of the GPUs the sandbox was given
(CUDA_VISIBLE_DEVICES with bwrap; with docker the container sees only its own GPUs), started
by DeepSpeed's per-node launcher (see `launcher_argv`). Without a
CUDA GPU it stops with an error, unless the config says `deepspeed.cpu: true` (gloo ranks on
the CPU, for tests).
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import sys
from pathlib import Path

from vtb.engine.sft_config import ConfigError, resolve_config
from vtb.engine.sft_deepspeed import MASTER_PORT


def launcher_argv(
    python: str, gpus: int, visible: str | None, script: str | None, args: list[str]
) -> list[str]:
    """The command line of DeepSpeed's per-node launcher (`deepspeed.launcher.launch`) for `gpus` ranks.

    The ranks get the first `gpus` entries of the sandbox's CUDA_VISIBLE_DEVICES, passed on as
    they are: the launcher sets each rank's CUDA_VISIBLE_DEVICES to exactly the ids in
    `world_info`, so a rank on GPU 2 sees "2", the same id, meaning the same device, as the
    sandbox itself. `deepspeed.launcher.runner` (the `deepspeed` command) is not used: it
    deletes CUDA_VISIBLE_DEVICES and checks `--include` ids against the devices it counts
    without it, which inside a bwrap sandbox given only GPU 2 may be one device, numbered 0,
    so `--include localhost:2` would be refused. Without CUDA_VISIBLE_DEVICES (docker: the
    container sees only its own GPUs) the ranks get devices 0..gpus-1.
    """
    ids = [v.strip() for v in (visible or "").split(",") if v.strip()]
    if ids and gpus > len(ids):
        raise ConfigError(
            f"deepspeed.gpus={gpus} but the sandbox was given {len(ids)} GPU(s) ({visible}): "
            "lower deepspeed.gpus in trainer/config.json or give the run more (sandbox.gpus)"
        )
    ranks = [int(i) if i.isdigit() else i for i in ids[:gpus]] if ids else list(range(gpus))
    world = base64.urlsafe_b64encode(json.dumps({"localhost": ranks}).encode()).decode()
    argv = [python, "-u", "-m", "deepspeed.launcher.launch", f"--world_info={world}", "--node_rank=0"]
    argv += ["--master_addr=127.0.0.1", f"--master_port={MASTER_PORT}", "--no_local_rank"]
    argv += ["--module", "vtb.engine.sft"] if script is None else [script]
    return argv + args


def check_devices(ds: dict, cuda_devices: int) -> dict[str, str]:
    """Extra environment for the launcher; an error when the ranks have nowhere to run."""
    if cuda_devices:
        if not os.environ.get("CUDA_VISIBLE_DEVICES") and ds["gpus"] > cuda_devices:
            raise ConfigError(f"deepspeed.gpus={ds['gpus']} but only {cuda_devices} GPU(s) are visible")
        return {}
    if not ds["cpu"]:
        raise ConfigError(
            "trainer/config.json asks for DeepSpeed but no CUDA GPU is visible in the sandbox: set "
            "sandbox.gpus (e.g. sandbox.gpus=0), remove the deepspeed block, or set deepspeed.cpu=true (slow)"
        )
    return {"DS_ACCELERATOR": "cpu", "LOCAL_SIZE": str(ds["gpus"])}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m vtb.engine.ds_launch", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--script", default=None, help="a trainer script to launch instead of vtb.engine.sft")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="-- then the trainer's own arguments")
    ns = parser.parse_args(argv)
    args = ns.args[1:] if ns.args[:1] == ["--"] else ns.args
    try:
        config_path = Path(args[args.index("--config") + 1])
        ds = resolve_config(json.loads(config_path.read_text()))["deepspeed"]
        if ds is None:
            raise ConfigError(f"{config_path} has no deepspeed block: run python -m vtb.engine.sft instead")
        import torch

        env = check_devices(ds, torch.cuda.device_count() if torch.cuda.is_available() else 0)
        command = launcher_argv(
            sys.executable, ds["gpus"], os.environ.get("CUDA_VISIBLE_DEVICES"), ns.script, args
        )
    except (ConfigError, ValueError, IndexError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"[ds_launch] {' '.join(command)}", flush=True)
    os.environ.update(env)
    os.execv(command[0], command)  # the launcher becomes this process: the sandbox meters its tree


if __name__ == "__main__":
    sys.exit(main())
