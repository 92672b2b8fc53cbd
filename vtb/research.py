"""The orchestrator side of a research-agent turn: a `ResearchEnv` backed by the research sandbox.

The agent's object lives in the orchestrator, but every command it runs executes in a
fresh research sandbox (workspace rw, train pool + val and base model ro, no network), and
is charged to the turn. File reads and writes are confined to the workspace.
"""

from __future__ import annotations

import time
from pathlib import Path

from vtb.agents import Feedback
from vtb.ledger import Charge
from vtb.runner import run_command
from vtb.sandbox.base import Limits, Mount, Sandbox
from vtb.workspace import restore


class SandboxResearchEnv:
    def __init__(
        self,
        workspace: Path,
        store: Path,
        feedback: Feedback,
        sandbox: Sandbox,
        mounts: list[Mount],
        limits: Limits,
    ):
        self.workspace = workspace
        self._store = store
        self._feedback = feedback
        self._sandbox = sandbox
        self._mounts = mounts
        self._limits = limits
        self.charge = Charge()
        self.log: list[dict] = []  # the turn's trajectory: commands, file writes, restores

    def _path(self, relpath: str) -> Path:
        path = (self.workspace / relpath).resolve()
        if not path.is_relative_to(self.workspace.resolve()):
            raise PermissionError(f"{relpath!r} is outside the workspace")
        return path

    def run(self, command: str, timeout_s: float = 600.0) -> dict:
        cpu_left = max(0.0, self._limits.cpu_seconds - self.charge.cpu_seconds)
        limits = Limits(
            wall_seconds=min(timeout_s, self._limits.wall_seconds),
            cpu_seconds=cpu_left,
            memory_mb=self._limits.memory_mb,
            max_flops=self._limits.max_flops,
        )
        result = run_command(self._sandbox, command, self._mounts, limits)
        self.charge = self.charge + result.charge
        entry = {
            "time": time.time(),
            "command": command,
            "returncode": result.returncode,
            "killed": result.killed,
            "stdout": result.stdout[-2000:],
            "stderr": result.stderr[-2000:],
            "denials": result.denials[:20],
        }
        self.log.append(entry)
        return entry

    def write_file(self, relpath: str, content: str) -> None:
        path = self._path(relpath)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
        self.log.append({"time": time.time(), "write": relpath, "bytes": len(content)})

    def read_file(self, relpath: str) -> str:
        return self._path(relpath).read_text()

    def restore(self, snapshot: str) -> None:
        restore(self._store, snapshot, self.workspace)
        self.log.append({"time": time.time(), "restore": snapshot})

    def feedback(self) -> Feedback:
        return self._feedback
