"""The orchestrator side of a research-agent turn: a `ResearchEnv` backed by the research sandbox.

The agent's object lives in the orchestrator, but every command it runs executes in a
fresh research sandbox (workspace rw, train pool + val and base model ro, no network), and
is charged to the turn. File reads and writes are confined to the workspace. A CLI agent runs
as one long command (`run_agent`) whose only network is the allowlisting egress proxy.
"""

from __future__ import annotations

import os
import re
import tempfile
import threading
import time
from collections import deque
from dataclasses import replace
from pathlib import Path

from vtb import safefs
from vtb.agents import Feedback
from vtb.ledger import Charge
from vtb.runner import PYTHON, charge_of, run_command
from vtb.sandbox.base import Limits, Mount, Sandbox
from vtb.sandbox.egress import SOCKET_DIR, SOCKET_NAME, EgressProxy, loopback_ports
from vtb.sandbox.output import StreamStats, bounded_lines
from vtb.workspace import restore

MAX_AGENT_LINES = 20000  # output lines of a CLI agent kept in the trajectory (the last ones)
MAX_AGENT_BYTES = 32 << 20  # ... and at most this many bytes of them (each line at most MAX_LINE_BYTES)
MAX_READ_BYTES = 64 << 20  # read_file: larger workspace files are refused, not read
MAX_SCRUB_BYTES = 256 << 20  # scrub_workspace: larger files are removed, not read into memory
# The egress bridge (the CLI sandbox's pid 1) says "0 alive" every second; this long without a
# line from it, it is stopped, traced or wedged, and the turn ends (killed="bridge").
BRIDGE_SILENCE_S = 10.0


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

    def _path(self, relpath: str) -> str:
        """relpath checked lexically (no absolute path, no '..'); every use then opens it through
        safefs.open_in, which follows no link on the way, so a link cannot lead out of the workspace."""
        return "/".join(safefs.relative_parts(relpath))

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
        safefs.write_in(self.workspace, self._path(relpath), content.encode())
        self.log.append({"time": time.time(), "write": relpath, "bytes": len(content)})

    def read_file(self, relpath: str) -> str:
        """A workspace file's text; a link, a FIFO or a file over MAX_READ_BYTES raises an OSError."""
        return safefs.read_in(self.workspace, self._path(relpath), MAX_READ_BYTES).decode(errors="replace")

    def restore(self, snapshot: str) -> None:
        if not re.fullmatch(r"[0-9a-f]{16}", snapshot) or not safefs.is_real_dir(self._store / snapshot):
            raise ValueError(f"no snapshot {snapshot!r}")
        restore(self._store, snapshot, self.workspace)
        self.log.append({"time": time.time(), "restore": snapshot})

    def feedback(self) -> Feedback:
        return self._feedback

    def charge_agent(self, tokens: int, cost_usd: float, errors: list[str] = ()) -> None:
        """Charge an LLM's tokens and cost; the figures are checked (`Charge.of`), bad ones named."""
        charge = Charge.of(agent_tokens=tokens, agent_cost_usd=cost_usd)
        charge.errors = [*errors, *charge.errors]
        self.charge = self.charge + charge

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
        home_files: dict[str, str] | None = None,
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
            for rel, text in (home_files or {}).items():  # the CLI's own settings, from its config
                target = root / "home" / home_path(rel)
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(text)
            mounts = [
                *self._mounts,
                *extra_mounts,
                Mount(root / "agent", "/agent"),
                Mount(root / "home", "/home/agent", writable=True),
            ]
            argv = [PYTHON, "-m", "vtb.sandbox.egress"]
            proxy = EgressProxy(allow_hosts, root / "egress") if allow_hosts else None
            if proxy:
                mounts.append(Mount(root / "egress", SOCKET_DIR))
                argv += ["--socket", f"{SOCKET_DIR}/{SOCKET_NAME}"]
                argv += [f"--forward={port}" for port in loopback_ports(allow_hosts)]
            argv += ["--", "/bin/bash", "-c", command]
            limits = self._limits_left(timeout_s)  # the turn's own wall limit, not the per-step one
            lines: deque[dict] = deque()
            dropped = kept_bytes = 0
            stats = StreamStats()
            bridge = {"heard": None, "exit": None, "why": None}  # its last line (monotonic), exit line
            ended = threading.Event()
            try:
                proc = self._sandbox.start(
                    argv, mounts=mounts, limits=limits, cwd="/ws", env={"HOME": "/home/agent", **env}
                )
                threading.Thread(target=_watch_bridge, args=(proc, bridge, ended), daemon=True).start()
                proc.stdin.close()
                for raw in bounded_lines(proc.stdout, stats):  # lines over MAX_LINE_BYTES: counted only
                    tag, _, text = raw.rstrip("\n").partition(" ")
                    if tag == "0":  # the bridge's own: a heartbeat, or how the command ended
                        bridge["heard"] = time.monotonic()
                        if text.startswith("exit "):
                            bridge["exit"] = text[5:]
                        continue
                    stream = {"1": "stdout", "2": "stderr"}.get(tag)
                    lines.append(
                        {
                            "t": round(time.time(), 3),
                            "stream": stream or "bridge",
                            "line": text if stream else raw.rstrip("\n"),
                        }
                    )
                    kept_bytes += len(lines[-1]["line"])
                    while len(lines) > MAX_AGENT_LINES or (kept_bytes > MAX_AGENT_BYTES and len(lines) > 1):
                        kept_bytes -= len(lines.popleft()["line"])
                        dropped += 1
                result = proc.wait()
            finally:
                ended.set()
                if proxy:
                    proxy.close()
                    self.egress += sorted(proxy.log, key=lambda e: e["time"])  # by start time
        if bridge["heard"] is not None and bridge["exit"] is None and not bridge["why"] and not result.killed:
            bridge["why"] = (
                "the egress bridge (the sandbox's pid 1) ended before the agent's command did "
                "(killed or crashed): the turn ended with it"
            )
        self.charge = self.charge + charge_of(result)
        entry = {
            "time": time.time(),
            "agent_command": command,
            "returncode": result.returncode,
            "killed": result.killed,
            "output": list(lines),
            "dropped_lines": dropped,
            "output_stats": {**stats.record(), "dropped_lines": dropped},
            "sandbox_stderr": result.stderr[-4000:],
            "denials": result.denials[:20],
            "bridge": bridge["why"],  # why the bridge ended the turn, or None
        }
        self.log.append(entry)
        return entry


def _watch_bridge(proc, bridge: dict, ended: threading.Event) -> None:
    """End the sandbox once the bridge, having started its heartbeat, stays silent
    BRIDGE_SILENCE_S: agent code cannot trace or stop it (`egress.harden_self`), so this is the
    net under anything else that could, and keeps a hung bridge from holding the turn until its
    wall limit (30 min)."""
    while not ended.wait(0.5):
        heard = bridge["heard"]
        if heard is not None and time.monotonic() - heard > BRIDGE_SILENCE_S:
            bridge["why"] = (
                f"the egress bridge (the sandbox's pid 1) sent no heartbeat for {BRIDGE_SILENCE_S:g} s "
                "(stopped, traced or hung): the turn was ended"
            )
            proc.kill("bridge")
            return


# -- keeping API keys out of the record ----------------------------------------------------------

MIN_SECRET_CHARS = 8  # shorter values would redact ordinary text


def secret_values(names: list[str]) -> dict[str, str]:
    """The values of the named environment variables that are long enough to be keys."""
    return {n: v for n in names if len(v := os.environ.get(n, "")) >= MIN_SECRET_CHARS}


def home_path(rel: str) -> Path:
    """An `agent.home_files` entry as a path inside the CLI's HOME; anything else is refused."""
    if Path(rel).is_absolute() or ".." in Path(rel).parts:
        raise ValueError(f"agent.home_files: {rel!r} must be a path inside HOME, e.g. .gemini/settings.json")
    return Path(rel)


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


def scrub_workspace(ws: Path, secrets: dict[str, str], max_bytes: int = MAX_SCRUB_BYTES) -> list[str]:
    """Replace secret values inside workspace files (an agent may write its key there); the files changed.

    An lstat walk: links and special files are neither followed nor opened. A file over max_bytes
    (apparent size) cannot be scrubbed in memory and is removed instead (listed too).
    """
    if not secrets:
        return []
    hits = []
    needles = {name: value.encode() for name, value in secrets.items()}
    for e in list(safefs.walk(ws)):
        if e.kind != "file":
            continue
        if e.size > max_bytes:
            safefs.remove(ws / e.rel)
            hits.append(e.rel)
            continue
        try:
            data = safefs.read_in(ws, e.rel, max_bytes)
        except OSError:
            continue  # swapped for a link or a special file since the walk: not read
        if not any(v in data for v in needles.values()):
            continue
        for name, value in needles.items():
            data = data.replace(value, f"[redacted:{name}]".encode())
        safefs.write_in(ws, e.rel, data)
        hits.append(e.rel)
    return hits
