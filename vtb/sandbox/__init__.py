"""Sandboxes for untrusted code (research-agent commands, agent-written trainers and harnesses).

`make_sandbox` picks a backend by name from `BACKENDS` (name -> the module and class that
implement `base.Sandbox`, imported only when asked for: the docker SDK stays unloaded for bwrap,
and nothing here imports a backend inside a sandbox). A new backend is one module plus one
entry; every backend must pass the same isolation tests (tests/test_sandbox_isolation.py).
"""

from __future__ import annotations

from vtb.registry import Registry
from vtb.sandbox.base import USAGE_FILE, Limits, Mount, Sandbox, SandboxProcess, SandboxResult
from vtb.sandbox.runtime import runtime_mounts

BACKENDS: dict[str, str] = {
    "bwrap": "vtb.sandbox.bwrap:BwrapSandbox",
    "docker": "vtb.sandbox.docker:DockerSandbox",
}

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


# name -> backend class; outside packages add one through the "vtb.sandboxes" entry point group
# (vtb/registry.py). It must pass the same isolation tests as these.
SANDBOXES: Registry = Registry(
    "sandbox backend",
    "vtb.sandboxes",
    lambda name: BACKENDS.get(name, "").partition(":")[0] or None,
    BACKENDS,
)


def make_sandbox(name: str, **kwargs) -> Sandbox:
    """A sandbox backend by name; kwargs go to its constructor (threads=2, gpus=; docker: image=)."""
    return SANDBOXES.get(name)(**kwargs)
