"""The pipeline's sandboxed work: train a candidate, play harness episodes, run agent commands.

Everything untrusted runs through a `Sandbox`; this module only decides what is mounted,
what limits apply, and turns what came back into charges and scores. Labels never enter a
sandbox: episodes carry inputs only, and rewards are computed here.
"""

from __future__ import annotations

import json
import queue
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from vtb.ledger import Charge
from vtb.protocol import parse_action_line, send
from vtb.sandbox import runtime_mounts
from vtb.sandbox.base import Limits, Mount, Sandbox, SandboxResult

PYTHON = sys.executable


def charge_of(result: SandboxResult) -> Charge:
    return Charge(
        flops=float(result.usage.get("flops", 0.0)),
        cpu_seconds=result.cpu_seconds,
        gpu_seconds=result.gpu_seconds,
        wall_seconds=result.wall_seconds,
    )


def research_mounts(ws: Path, data_dir: Path, base_dir: Path) -> list[Mount]:
    """What a research-agent command sees: its workspace (rw), train pool + val, base model (ro)."""
    return runtime_mounts() + [
        Mount(ws, "/ws", writable=True),
        Mount(data_dir / "research", "/data"),
        Mount(base_dir, "/base"),
    ]


def stream_lines(proc, echo: Callable[[str], None] | None) -> list[str]:
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if echo:
            echo(line.rstrip("\n"))
    return lines


@dataclass
class TrainOutcome:
    ok: bool
    charge: Charge
    killed: str | None
    returncode: int | None
    log: str
    summary: dict = field(default_factory=dict)


def train(
    sandbox: Sandbox,
    candidate: Path,
    base_dir: Path,
    out_dir: Path,
    *,
    seed: int,
    limits: Limits,
    echo: Callable[[str], None] | None = None,
) -> TrainOutcome:
    """Run the candidate's trainer in a fresh research sandbox; the checkpoint lands in out_dir/checkpoint."""
    out_dir.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(out_dir / "checkpoint", ignore_errors=True)
    with tempfile.TemporaryDirectory(prefix="vtb-train-") as scratch:
        ws = Path(scratch) / "ws"
        shutil.copytree(candidate, ws)
        (ws / "out").mkdir()
        custom = ws / "trainer" / "train.py"
        entry = ["/ws/trainer/train.py"] if custom.exists() else ["-m", "vtb.engine.sft"]
        if _wants_deepspeed(ws / "trainer" / "config.json"):  # N ranks through the deepspeed launcher
            entry = ["-m", "vtb.engine.ds_launch", *(["--script", entry[0]] if custom.exists() else []), "--"]
        argv = [PYTHON, *entry, "--config", "/ws/trainer/config.json", "--data", "/ws/data/train.jsonl"]
        argv += ["--base", "/base", "--out", "/ws/out/checkpoint", "--seed", str(seed)]
        mounts = runtime_mounts() + [Mount(ws, "/ws", writable=True), Mount(base_dir, "/base")]
        proc = sandbox.start(argv, mounts=mounts, limits=limits, cwd="/ws")
        proc.stdin.close()
        lines = stream_lines(proc, echo)
        result = proc.wait()
        produced = ws / "out" / "checkpoint"
        ok = result.returncode == 0 and result.killed is None and (produced / "config.json").exists()
        if ok:
            shutil.move(str(produced), out_dir / "checkpoint")
    summary = {}
    summary_file = out_dir / "checkpoint" / "train_summary.json"
    if ok and summary_file.exists():
        summary = json.loads(summary_file.read_text())
    log = "".join(lines)[-20000:] + "\n--- stderr ---\n" + result.stderr[-20000:]
    (out_dir / "train.log").write_text(log)
    return TrainOutcome(ok, charge_of(result), result.killed, result.returncode, log, summary)


def _wants_deepspeed(config: Path) -> bool:
    """Whether the candidate's trainer config has a deepspeed block (a broken file: the trainer says so)."""
    try:
        data = json.loads(config.read_text())
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and data.get("deepspeed") is not None


class Episode(Protocol):
    """The orchestrator-side state of one episode (environment, user simulator, reward).

    `message(fresh)` is what the harness gets next: a full ``start`` message when the harness
    process has not seen this episode yet (first round, or after a restart), an ``observation``
    otherwise. `step(action)` advances the episode; it returns False when the episode is over.
    `fail(reason)` ends it without a valid action (crash, hang, garbage): that episode scores 0.
    """

    id: str

    def message(self, fresh: bool) -> dict: ...

    def step(self, action: dict) -> bool: ...

    def fail(self, reason: str) -> None: ...


class SingleTurn:
    """A one-step episode around a ready start message (math, and tests)."""

    def __init__(self, start: dict):
        self.id = start["episode"]
        self.start = start
        self.action: dict | None = None
        self.failure: str | None = None

    def message(self, fresh: bool) -> dict:
        return self.start

    def step(self, action: dict) -> bool:
        self.action = action
        return False

    def fail(self, reason: str) -> None:
        self.failure = reason


@dataclass
class EpisodeOutcome:
    actions: dict[str, dict]  # episode id -> the last action it answered with
    charge: Charge
    garbage: list[str]  # lines that were not protocol actions (first few)
    crashes: int  # harness processes that died or were killed before answering everything
    killed: list[str]  # reasons the sandbox gave (wall, cpu, flops)
    denials: list[str]
    stderr_tail: str = ""
    rounds: int = 0
    engine: str = ""  # the engine the harness ran on, as it reported it (e.g. a vllm fallback)
    failed: dict[str, str] = field(default_factory=dict)  # episode id -> why it ended without an action


def play(
    sandbox: Sandbox,
    harness_dir: Path,
    model_dir: Path,
    episodes: list[Episode] | list[dict],
    *,
    limits: Limits,
    round_timeout_s: float,
    per_episode_timeout_s: float,
    chunk: int = 128,
    max_restarts: int = 20,
    null_model: bool = False,
    env: dict[str, str] | None = None,
) -> EpisodeOutcome:
    """Play episodes against the harness in rounds until every episode is over.

    Each round sends up to `chunk` running episodes their next message and waits for one
    action each; single-turn episodes (plain start-message dicts) end after one round.
    A harness that crashes, hangs or prints garbage costs only the episodes it failed to
    answer: those are retried once alone in a fresh harness (so one poisonous input cannot
    take the others with it) and end with a failure if that fails too.
    """
    eps: list[Episode] = [SingleTurn(e) if isinstance(e, dict) else e for e in episodes]
    mounts = runtime_mounts() + [Mount(harness_dir, "/ws/harness"), Mount(model_dir, "/model")]
    env = {**(env or {}), "VTB_MODEL_DIR": "/model"}  # env: e.g. the engine selection
    if null_model:
        env["VTB_NULL_MODEL"] = "1"
    argv = [PYTHON, "/ws/harness/harness.py"]
    out = EpisodeOutcome({}, Charge(), [], 0, [], [])
    running: list[Episode] = [ep for ep in eps if not getattr(ep, "over", False)]  # e.g. its user failed
    alone: list[Episode] = []  # episodes to retry one per round after a failure
    retried: set[str] = set()
    proc = lines = None
    seen: set[str] = set()  # episodes the current harness process has been started on
    starts = 0

    def finish(p, hung: bool = False) -> None:
        if hung:
            if p.poll() is None:
                p.kill("wall")
        else:
            try:
                send(p.stdin, {"type": "close"})
                p.stdin.close()
            except (BrokenPipeError, OSError, ValueError):
                pass
        result = p.wait(timeout=10)
        out.charge = out.charge + charge_of(result)
        out.denials += result.denials
        out.stderr_tail = result.stderr[-4000:]
        if result.usage.get("engine"):
            fallback = result.usage.get("engine_fallback")
            out.engine = str(result.usage["engine"]) + (f" (fallback from {fallback})" if fallback else "")
        if result.killed and result.killed != "closed":
            out.killed.append(result.killed)

    def end(ep: Episode, reason: str) -> None:
        ep.fail(reason)
        out.failed[ep.id] = reason

    while running or alone:
        if alone:
            batch = [alone.pop(0)]
        else:
            batch, running = running[:chunk], running[chunk:]
        if proc is None:
            if starts > max_restarts:
                for ep in batch + alone + running:
                    end(ep, "harness restarted too often")
                break
            starts += 1
            proc = sandbox.start(argv, mounts=mounts, limits=limits, cwd="/ws/harness", env=env)
            lines = queue.Queue()
            threading.Thread(target=_pump, args=(proc.stdout, lines), daemon=True).start()
            seen = set()
        out.rounds += 1
        wanted = {ep.id: ep for ep in batch}
        try:
            for ep in batch:
                send(proc.stdin, ep.message(fresh=ep.id not in seen))
                seen.add(ep.id)
            send(proc.stdin, {"type": "flush"})
        except (BrokenPipeError, OSError, ValueError):
            pass
        deadline = time.monotonic() + round_timeout_s + per_episode_timeout_s * len(batch)
        got: dict[str, dict] = {}
        while len(got) < len(wanted):
            try:
                line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                break
            if line is None:  # harness exited
                break
            parsed = parse_action_line(line)
            if parsed is None or parsed[0] not in wanted or parsed[0] in got:
                if len(out.garbage) < 20 and line.strip():
                    out.garbage.append(line.strip()[:200])
                continue
            got[parsed[0]] = parsed[1]
        # Episodes step only after the round is read: a step may take a while (a shell command
        # runs), and that time must not count against the harness's deadline for its answers.
        for ep_id, action in got.items():
            out.actions[ep_id] = action
            if wanted[ep_id].step(action):
                running.append(wanted[ep_id])
        missing = [ep for ep in batch if ep.id not in got]
        if missing:
            out.crashes += 1
            finish(proc, hung=True)
            proc = None
            if out.killed and out.killed[-1] in ("flops", "cpu"):
                for ep in missing + alone + running:
                    end(ep, f"budget: killed ({out.killed[-1]})")
                break  # budget spent: retrying would only be killed again
            for ep in missing:
                if len(batch) > 1 and ep.id not in retried:
                    retried.add(ep.id)
                    alone.append(ep)
                else:
                    end(ep, "no valid action from the harness")
    if proc is not None:
        finish(proc)
    return out


def _pump(stream, q: queue.Queue) -> None:
    try:
        for line in stream:
            q.put(line)
    except (OSError, ValueError):
        pass
    q.put(None)


@dataclass
class CommandResult:
    returncode: int | None
    stdout: str
    stderr: str
    charge: Charge
    killed: str | None
    denials: list[str]


def run_command(sandbox: Sandbox, command: str, mounts: list[Mount], limits: Limits) -> CommandResult:
    """A research-agent shell command, in the research sandbox with the workspace as cwd."""
    result = sandbox.run(["/bin/bash", "-c", command], mounts=mounts, limits=limits, cwd="/ws")
    return CommandResult(
        result.returncode, result.stdout, result.stderr, charge_of(result), result.killed, result.denials
    )
