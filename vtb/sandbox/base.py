"""The sandbox interface every backend (bwrap, docker) implements.

Untrusted code (research-agent commands, agent-written trainers and harnesses) only ever
runs through a `Sandbox`. The orchestrator decides what is visible (`Mount`s) and what the
process may spend (`Limits`); the backend enforces both and meters CPU-seconds (and, where
it was given GPUs, GPU-seconds through NVML: gpu.py) from *outside* the sandbox, because code
inside could tamper with any in-process counter.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Protocol

# Inside every sandbox the engines write their FLOPs count here (see vtb.engine.usage). Not
# under /vtb: with cwd=/ a /vtb dir would shadow the `vtb` package as a namespace package.
USAGE_FILE = "/run/vtb/usage.json"


@dataclass(frozen=True)
class Mount:
    """A host path made visible inside the sandbox at `target`."""

    source: Path
    target: str
    writable: bool = False


@dataclass(frozen=True)
class Limits:
    """What one sandboxed process tree may spend; exceeding any of them kills the tree."""

    wall_seconds: float = 600.0
    cpu_seconds: float = 600.0  # summed over the whole process tree, metered from outside
    # ONE cap on all the tree holds at once, its RAM-backed /tmp and /dev/shm included (a memory
    # cgroup; docker: the container's), killed="memory" past it. Where no cgroup can be made
    # (bwrap): RLIMIT_AS per process plus /tmp and /dev/shm half of it each, so at most
    # (1 + live processes) x memory_mb. None = unlimited.
    memory_mb: int | None = None
    max_flops: float | None = None  # checked against the usage file the engines write
    # Tasks (processes and threads) alive at once in the tree, None = unlimited. Set it for
    # untrusted shell work (a fork bomb); not for torch, whose thread pools count too.
    max_processes: int | None = None
    # Seconds GPUs were held by the tree, summed over GPUs (gpu.py); only metered, and so only
    # enforced, by a sandbox given GPUs (sandbox.gpus). None = unlimited.
    gpu_seconds: float | None = None


@dataclass
class SandboxResult:
    returncode: int | None
    stdout: str
    stderr: str
    wall_seconds: float
    cpu_seconds: float
    # None, "wall", "cpu", "gpu", "flops", "procs", "memory", "disk" (docker's native images) or "closed"
    killed: str | None = None
    usage: dict = field(default_factory=dict)  # parsed usage file ({} if none was written)
    denials: list[str] = field(default_factory=list)  # stderr lines showing blocked access
    gpu_seconds: float = 0.0  # GPU holding time metered through NVML (0 without sandbox GPUs)
    gpu_busy_seconds: float = 0.0  # the same weighted by NVML utilization: informational


class SandboxProcess(Protocol):
    """A running sandboxed process with text pipes (used for the harness protocol)."""

    stdin: IO[str]
    stdout: IO[str]

    def poll(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> SandboxResult: ...

    def kill(self, reason: str = "closed") -> None: ...


class Sandbox(Protocol):
    name: str

    def start(
        self,
        argv: list[str],
        *,
        mounts: list[Mount],
        limits: Limits,
        cwd: str = "/",
        env: dict[str, str] | None = None,
    ) -> SandboxProcess: ...

    def run(
        self,
        argv: list[str],
        *,
        mounts: list[Mount],
        limits: Limits,
        cwd: str = "/",
        env: dict[str, str] | None = None,
        input: str | None = None,
    ) -> SandboxResult: ...


class SandboxStartError(RuntimeError):
    """The sandbox itself could not be set up (not the code inside failing): worth a retry."""
