"""The run's reproducibility fingerprint: which CPU figures it can be compared with bit for bit.

Every sandbox of a bench runs with the same pinned CPU code paths (sandbox.reproducible,
vtb/sandbox/runtime.py REPRODUCIBLE_CPU) and thread count, so two x86-64 machines with AVX2
give the same losses, FLOPs, val path and scores for the same config and seed. What could still
differ (a machine without AVX2, another torch or transformers, another thread count, the mode
off) shows in the fingerprint: the pins, the versions, and the hash of a short fixed training
run in a sandbox of this bench (vtb/engine/probe.py). The leaderboard pools only runs whose
fingerprints agree (vtb/leaderboard.py), and lists the others apart.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import threading
from concurrent.futures import Future
from importlib import metadata

from vtb import runner
from vtb.config import SandboxConfig
from vtb.sandbox import runtime_mounts
from vtb.sandbox.base import Limits
from vtb.sandbox.runtime import REPRODUCIBLE_CPU

PROBE_SECONDS = 120.0
KEYS = ("probe", "cpu_capability", "threads", "torch")


def fingerprint(cfg: SandboxConfig) -> dict:
    """The probe run in a sandbox of `cfg`, with the pins and versions: {"id", ...}. Once per
    process and sandbox shape: the machine does not change under a running process."""
    return dict(start_fingerprint(cfg).result())


def start_fingerprint(cfg: SandboxConfig) -> Future:
    """The probe started in a thread (once per process and sandbox shape), for `fingerprint` to
    wait on: its few seconds then overlap other start-up work (flows/bench.py starts it beside
    the Prefect server). Its figures are a hash of bits, so load does not change them. A failed
    probe is forgotten, so the next call runs it again."""
    shape = (
        cfg.backend, cfg.threads, cfg.model_server_threads, cfg.reproducible, cfg.image, cfg.runtime,
        cfg.gpus, cfg.memory_mb,
    )  # fmt: skip
    with _LOCK:
        if shape not in _SEEN:
            future: Future = Future()
            _SEEN[shape] = future

            def probe() -> None:
                try:
                    future.set_result(_fingerprint(cfg))
                except BaseException as e:  # handed to whoever waits
                    with _LOCK:
                        _SEEN.pop(shape, None)
                    future.set_exception(e)

            threading.Thread(target=probe, name="vtb-fingerprint", daemon=True).start()
        return _SEEN[shape]


_SEEN: dict[tuple, Future] = {}
_LOCK = threading.Lock()


def _fingerprint(cfg: SandboxConfig) -> dict:
    # The probe measures the CPU code paths: its sandbox gets no GPU (a GPU run's kernels are not
    # pinned, and the fingerprint says so), so it needs no NVML either.
    sandbox = runner.sandbox_for(dataclasses.replace(cfg, gpus=None))
    limits = Limits(wall_seconds=PROBE_SECONDS, cpu_seconds=PROBE_SECONDS, memory_mb=cfg.memory_mb)
    result = sandbox.run([runner.PYTHON, "-m", "vtb.engine.probe"], mounts=runtime_mounts(), limits=limits)
    if result.returncode != 0:
        raise RuntimeError(f"the reproducibility probe failed in the sandbox: {result.stderr[-1000:]}")
    probe = parse(result.stdout)
    out = {
        "mode": "gpu" if cfg.gpus else "reproducible" if cfg.reproducible else "native",
        "pins": dict(REPRODUCIBLE_CPU) if cfg.reproducible else {},
        **probe,
        "server_threads": cfg.model_server_threads,  # the model servers' (the probe runs on `threads`)
        "transformers": _version("transformers"),
    }
    out["id"] = hashlib.sha256(json.dumps(out, sort_keys=True).encode()).hexdigest()[:12]
    return out


def parse(stdout: str) -> dict:
    """The probe's last line, checked field by field (it prints nothing else of use)."""
    try:
        found = json.loads(stdout.strip().splitlines()[-1][:4096])
        out = {k: found[k] for k in KEYS}
    except (IndexError, KeyError, TypeError, ValueError) as e:
        raise RuntimeError(f"the reproducibility probe printed no result: {stdout[-300:]!r}") from e
    if not all(
        isinstance(out[k], str) and 0 < len(out[k]) <= 64 for k in ("probe", "cpu_capability", "torch")
    ):
        raise RuntimeError(f"the reproducibility probe printed an odd result: {out!r}")
    if not isinstance(out["threads"], int) or not 0 < out["threads"] <= 4096:
        raise RuntimeError(f"the reproducibility probe printed an odd thread count: {out['threads']!r}")
    return out


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "absent"
