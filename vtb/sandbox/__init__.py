"""Sandboxes for untrusted code (research-agent commands, agent-written trainers and harnesses).

`make_sandbox` picks a backend by name; every backend implements `base.Sandbox` and must pass
the same isolation tests (tests/test_sandbox_isolation.py).
"""

from __future__ import annotations

from vtb.sandbox.base import USAGE_FILE, Limits, Mount, Sandbox, SandboxProcess, SandboxResult
from vtb.sandbox.runtime import runtime_mounts

BACKENDS = ("bwrap", "docker")

__all__ = [
    "BACKENDS",
    "USAGE_FILE",
    "Limits",
    "Mount",
    "Sandbox",
    "SandboxProcess",
    "SandboxResult",
    "make_sandbox",
    "runtime_mounts",
]


def make_sandbox(name: str, **kwargs) -> Sandbox:
    """A sandbox backend by name; kwargs go to its constructor (threads=2, gpus=; docker: image=)."""
    if name == "bwrap":
        from vtb.sandbox.bwrap import BwrapSandbox

        return BwrapSandbox(**kwargs)
    if name == "docker":
        from vtb.sandbox.docker import DockerSandbox

        return DockerSandbox(**kwargs)
    raise ValueError(f"unknown sandbox backend {name!r}; known backends: {', '.join(BACKENDS)}")
