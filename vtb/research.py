"""The orchestrator side of a research-agent turn: a `ResearchEnv` backed by the research sandbox.

The agent's object lives in the orchestrator, but every command it runs executes in a
fresh research sandbox (workspace rw, train pool + val and base model ro, no network), and
is charged to the turn. File reads and writes are confined to the workspace. A CLI agent runs
as one long command (`run_agent`) whose only network is the allowlisting egress proxy.
"""

from __future__ import annotations

import os
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from vtb.agents import Feedback
from vtb.ledger import Charge
from vtb.runner import PYTHON, charge_of, run_command
from vtb.sandbox.base import Limits, Mount, Sandbox
from vtb.sandbox.egress import SOCKET_DIR, SOCKET_NAME, EgressProxy
from vtb.workspace import restore

MAX_AGENT_LINES = 20000  # output lines of a CLI agent kept in the trajectory (the last ones)


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
        self.egress: list[dict] = []  # requests a CLI agent made through the egress proxy

    def _path(self, relpath: str) -> Path:
        path = (self.workspace / relpath).resolve()
        if not path.is_relative_to(self.workspace.resolve()):
            raise PermissionError(f"{relpath!r} is outside the workspace")
        return path

    def run(self, command: str, timeout_s: float = 600.0) -> dict:
        limits = self._limits_left(min(timeout_s, self._limits.wall_seconds))
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

    def _limits_left(self, wall_seconds: float) -> Limits:
        """The turn's limits less what its commands have used so far (CPU- and GPU-seconds)."""
        gpu = self._limits.gpu_seconds
        return replace(
            self._limits,
            wall_seconds=wall_seconds,
            cpu_seconds=max(0.0, self._limits.cpu_seconds - self.charge.cpu_seconds),
            gpu_seconds=None if gpu is None else max(0.0, gpu - self.charge.gpu_seconds),
        )

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

    def charge_agent(self, tokens: int, cost_usd: float) -> None:
        self.charge = self.charge + Charge(agent_tokens=int(tokens), agent_cost_usd=float(cost_usd))

    def note(self, entry: dict) -> None:
        self.log.append({"time": time.time(), **entry})

    def run_agent(
        self,
        command: str,
        *,
        prompt: str,
        env: dict[str, str],
        allow_hosts: list[str],
        timeout_s: float,
        extra_mounts: list[Mount] = (),
    ) -> dict:
        """Run a CLI agent: prompt at /agent/prompt.md, a fresh HOME, egress only via the proxy.

        Its stdout and stderr lines are kept with the time each arrived; the proxy's log of
        every request it made goes to `self.egress`.
        """
        with tempfile.TemporaryDirectory(prefix="vtb-agent-") as tmp:
            root = Path(tmp)
            for d in ("agent", "home", "egress"):
                (root / d).mkdir()
            (root / "agent" / "prompt.md").write_text(prompt)
            mounts = [*self._mounts, *extra_mounts, Mount(root / "agent", "/agent"),
                      Mount(root / "home", "/home/agent", writable=True)]  # fmt: skip
            argv = [PYTHON, "-m", "vtb.sandbox.egress"]
            proxy = EgressProxy(allow_hosts, root / "egress") if allow_hosts else None
            if proxy:
                mounts.append(Mount(root / "egress", SOCKET_DIR))
                argv += ["--socket", f"{SOCKET_DIR}/{SOCKET_NAME}"]
            argv += ["--", "/bin/bash", "-c", command]
            limits = self._limits_left(timeout_s)  # the turn's own wall limit, not the per-step one
            lines: list[dict] = []
            dropped = 0
            try:
                proc = self._sandbox.start(argv, mounts=mounts, limits=limits, cwd="/ws",
                                           env={"HOME": "/home/agent", **env})  # fmt: skip
                proc.stdin.close()
                for raw in proc.stdout:
                    tag, _, text = raw.rstrip("\n").partition(" ")
                    stream = {"1": "stdout", "2": "stderr"}.get(tag)
                    lines.append({"t": round(time.time(), 3), "stream": stream or "bridge",
                                  "line": text if stream else raw.rstrip("\n")})  # fmt: skip
                    if len(lines) > MAX_AGENT_LINES:
                        lines.pop(0)
                        dropped += 1
                result = proc.wait()
            finally:
                if proxy:
                    proxy.close()
                    self.egress += sorted(proxy.log, key=lambda e: e["time"])  # by start time
        self.charge = self.charge + charge_of(result)
        entry = {"time": time.time(), "agent_command": command, "returncode": result.returncode,
                 "killed": result.killed, "output": lines, "dropped_lines": dropped,
                 "sandbox_stderr": result.stderr[-4000:], "denials": result.denials[:20]}  # fmt: skip
        self.log.append(entry)
        return entry


# -- keeping API keys out of the record ----------------------------------------------------------

MIN_SECRET_CHARS = 8  # shorter values would redact ordinary text


def secret_values(names: list[str]) -> dict[str, str]:
    """The values of the named environment variables that are long enough to be keys."""
    return {n: v for n in names if len(v := os.environ.get(n, "")) >= MIN_SECRET_CHARS}


def redact(obj: object, secrets: dict[str, str]) -> object:
    """A copy of a JSON-like value with every secret value replaced by [redacted:NAME]."""
    if not secrets:
        return obj
    if isinstance(obj, str):
        for name, value in secrets.items():
            obj = obj.replace(value, f"[redacted:{name}]")
        return obj
    if isinstance(obj, dict):
        return {k: redact(v, secrets) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [redact(v, secrets) for v in obj]
    return obj


def scrub_workspace(ws: Path, secrets: dict[str, str]) -> list[str]:
    """Replace secret values inside workspace files (an agent may write its key there); the files changed."""
    hits = []
    needles = {name: value.encode() for name, value in secrets.items()}
    for path in sorted(p for p in ws.rglob("*") if p.is_file() and not p.is_symlink()):
        data = path.read_bytes()
        if not any(v in data for v in needles.values()):
            continue
        for name, value in needles.items():
            data = data.replace(value, f"[redacted:{name}]".encode())
        path.write_bytes(data)
        hits.append(str(path.relative_to(ws)))
    return hits
