"""The pipeline's sandboxed work: train a candidate, play harness episodes, run agent commands.

Everything untrusted runs through a `Sandbox`; this module only decides what is mounted,
what limits apply, and turns what came back into charges and scores. Labels never enter a
sandbox: episodes carry inputs only, and rewards are computed here.
"""

from __future__ import annotations

import inspect
import queue
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from vtb import safefs
from vtb.config import SandboxConfig
from vtb.ledger import Charge
from vtb.protocol import parse_action_line, send
from vtb.sandbox import SANDBOXES, runtime_mounts
from vtb.sandbox.base import Limits, Mount, Sandbox, SandboxResult
from vtb.sandbox.output import MAX_LINE_BYTES, StreamStats, bounded_lines

PYTHON = sys.executable


def charge_of(result: SandboxResult) -> Charge:
    """What a sandboxed process used: metered seconds and the FLOPs its usage file reported.

    The usage file is written by code the agent can change, so every figure is checked and a
    bad one recorded in `errors`, never raised; the ledger then charges at least the FLOPs
    floor of the metered seconds (vtb/ledger.py). Used by every step: train, play, research
    commands and CLI agents.
    """
    return Charge.of(
        flops=result.usage.get("flops", 0.0) if isinstance(result.usage, dict) else 0.0,
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


KEEP_LINES = 2000  # stream_lines: the last lines of a step's stdout kept for its log
KEEP_BYTES = 1 << 20  # ... and at most this many bytes of them
ECHO_LINES = 2000  # lines echoed to the orchestrator's console (each cut to ECHO_CHARS)
ECHO_CHARS = 2000
PLAY_QUEUE_LINES = 64  # harness lines read ahead of the orchestrator (each at most MAX_LINE_BYTES)


def stream_lines(proc, echo: Callable[[str], None] | None, stats: StreamStats | None = None) -> list[str]:
    """The last lines of a sandboxed process's stdout (KEEP_LINES, KEEP_BYTES), read to its end.

    Lines over MAX_LINE_BYTES are dropped unread; what was left out is counted in `stats` and,
    when anything was, named in a first line of the result, so the step's log shows it.
    """
    stats = stats if stats is not None else StreamStats()
    kept: deque[str] = deque()
    kept_bytes = echoed = 0
    for line in bounded_lines(proc.stdout, stats):
        kept.append(line)
        kept_bytes += len(line)
        while len(kept) > KEEP_LINES or (kept_bytes > KEEP_BYTES and len(kept) > 1):
            kept_bytes -= len(kept.popleft())
            stats.dropped_lines += 1
        if echo and echoed < ECHO_LINES:
            echoed += 1
            echo(
                line.rstrip("\n")[:ECHO_CHARS] if echoed < ECHO_LINES else "[vtb: further output not echoed]"
            )
    head = []
    if stats.dropped_lines or stats.long_lines:
        head = [
            f"[vtb: output of {stats.bytes} bytes; kept the last {len(kept)} lines, dropped "
            f"{stats.dropped_lines} earlier lines and {stats.long_lines} lines over "
            f"{MAX_LINE_BYTES} bytes ({stats.long_bytes} bytes)]\n"
        ]
    return head + list(kept)


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
    checkpoint_caps: safefs.Caps = safefs.NO_CAPS,
) -> TrainOutcome:
    """Run the candidate's trainer in a fresh research sandbox; the checkpoint lands in out_dir/checkpoint.

    The produced checkpoint is sandbox-written: it is copied (bytes, never linked) with its links
    and special files dropped and held to checkpoint_caps; a checkpoint refused there fails this
    train step with the reason in its summary and log, never the run. train_summary.json is read
    bounded (an oversized, malformed or special one is recorded as invalid, not read).
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    safefs.remove(out_dir / "checkpoint")
    rejected, dropped = None, []
    with tempfile.TemporaryDirectory(prefix="vtb-train-") as scratch:
        ws = Path(scratch) / "ws"
        safefs.copy_tree(candidate, ws)
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
        ok = result.returncode == 0 and result.killed is None
        if ok:
            produced = ws / "out" / "checkpoint"
            rejected, dropped = _take_checkpoint(produced, out_dir / "checkpoint", checkpoint_caps)
            ok = rejected is None
    summary: dict = {}
    if ok:
        try:
            data = safefs.read_json(out_dir / "checkpoint" / "train_summary.json", MAX_SUMMARY_BYTES)
            summary = data if isinstance(data, dict) else {"invalid_summary": "not a JSON object"}
        except FileNotFoundError:
            pass
        except OSError as e:  # over the limit, not JSON, not a regular file
            summary = {"invalid_summary": str(e)}
    if dropped:
        summary["dropped"] = [f"{d['path']} ({d['kind']})" for d in dropped[:20]] + (
            [f"... {len(dropped) - 20} more"] if len(dropped) > 20 else []
        )
    if rejected:
        summary["rejected"] = rejected
    log = "".join(lines)[-20000:] + "\n--- stderr ---\n" + result.stderr[-20000:]
    if rejected:
        log += f"\n--- checkpoint rejected ---\n{rejected}\n"
    (out_dir / "train.log").write_text(log)
    return TrainOutcome(ok, charge_of(result), result.killed, result.returncode, log, summary)


MAX_SUMMARY_BYTES = 1 << 20  # train_summary.json: a larger one is ignored (recorded as invalid)


# What a model server loads from a checkpoint: weights as safetensors, JSON configs, tokenizer
# files (text, sentencepiece, tiktoken) and chat templates. Anything else a trainer writes
# (optimizer states, torch pickles, logs) is left in its sandbox: the orchestrator never opens,
# unpickles or stores it, and no later step can load it.
MODEL_SUFFIXES = (".safetensors", ".json", ".txt", ".model", ".tiktoken", ".jinja")


def model_file(name: str) -> bool:
    return name.endswith(MODEL_SUFFIXES)


def _take_checkpoint(produced: Path, dest: Path, caps: safefs.Caps) -> tuple[str | None, list[dict]]:
    """Copy a produced checkpoint into dest (model files only, regular, within caps): (why it was
    refused, dropped). A file with a hole is refused: the null model (vtb/blind.py) rewrites
    every weight byte, which would expand it on the host (a 3 GB sparse shard costs one block
    inside).

    Runs after the trainer's sandbox is gone, so the lstat checks of the path cannot be raced.
    """
    if not (safefs.is_real_dir(produced.parent) and safefs.is_real_dir(produced)):
        return "no checkpoint directory at out/checkpoint (a link or a file is not taken)", []
    tmp = dest.with_name(dest.name + ".tmp")
    safefs.remove(tmp)
    try:
        dropped = safefs.copy_tree(produced, tmp, caps, keep=model_file, dense=True)
    except OSError as e:  # Rejected past the caps, or an unreadable file
        return f"checkpoint rejected: {e}", []
    if not safefs.is_regular(tmp / "config.json"):
        safefs.remove(tmp)
        return "checkpoint rejected: no config.json (a regular file) in out/checkpoint", dropped
    tmp.rename(dest)
    return None, dropped


def _wants_deepspeed(config: Path) -> bool:
    """Whether the candidate's trainer config has a deepspeed block (a broken file: the trainer says so)."""
    try:
        data = safefs.read_json(config, MAX_SUMMARY_BYTES)  # agent-written: bounded, no link followed
    except OSError:
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


def protocol_message(episode: str, domain: str, observation: dict, fresh: bool = True) -> dict:
    """A start (fresh) or observation message of the harness protocol (vtb/protocol.py)."""
    kind = "start" if fresh else "observation"
    return {"type": kind, "episode": episode, "domain": domain, "observation": observation}


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
    server_threads: int | None = None  # the CPU threads the model server said it ran on
    failed: dict[str, str] = field(default_factory=dict)  # episode id -> why it ended without an action
    output: dict = field(default_factory=dict)  # the harness's stdout: StreamStats + garbage_lines
    swapped: set[int] = field(default_factory=set)  # a provenance audit: the swap pairs the server used
    written: dict[str, dict] = field(default_factory=dict)  # the written check: episode id -> counts


class Model(Protocol):
    """How a harness reaches the model: a running `vtb.service.ModelService` (or a test's stand-in)."""

    exhausted: bool  # the model refused a request for the step's FLOPs budget

    def harness_mounts(self) -> list[Mount]: ...

    def harness_env(self) -> dict[str, str]: ...

    def harness_argv(self, argv: list[str]) -> list[str]: ...


class NoModel:
    """No model behind the harness: a scripted harness (tests, the benchmark of the protocol)."""

    exhausted = False

    def harness_mounts(self) -> list[Mount]:
        return []

    def harness_env(self) -> dict[str, str]:
        return {}

    def harness_argv(self, argv: list[str]) -> list[str]:
        return argv


def play(
    sandbox: Sandbox,
    harness_dir: Path,
    model: Model,
    episodes: list[Episode] | list[dict],
    *,
    limits: Limits,
    round_timeout_s: float,
    per_episode_timeout_s: float,
    chunk: int = 128,
    max_restarts: int = 20,
    progress: Callable[[int, int], None] | None = None,
) -> EpisodeOutcome:
    """Play episodes against the harness in rounds until every episode is over.

    Each round sends up to `chunk` running episodes their next message and waits for one
    action each; single-turn episodes (plain start-message dicts) end after one round.
    A harness that crashes, hangs or prints garbage costs only the episodes it failed to
    answer: those are retried once alone in a fresh harness (so one poisonous input cannot
    take the others with it) and end with a failure if that fails too.

    The harness sandbox holds the harness and the model's socket, never weights; the model
    server meters the FLOPs, so the harness's own usage file is not read (its charge is its
    CPU and GPU seconds). Once the server refused a request for the budget, the episodes still
    unanswered end as stopped by budget. `progress(over, total)` is called after each round.
    """
    eps: list[Episode] = [SingleTurn(e) if isinstance(e, dict) else e for e in episodes]
    mounts = runtime_mounts() + [Mount(harness_dir, "/ws/harness"), *model.harness_mounts()]
    env = model.harness_env()
    argv = model.harness_argv([PYTHON, "/ws/harness/harness.py"])
    out = EpisodeOutcome({}, Charge(), [], 0, [], [])
    running: list[Episode] = [ep for ep in eps if not getattr(ep, "over", False)]  # e.g. its user failed
    alone: list[Episode] = []  # episodes to retry one per round after a failure
    retried: set[str] = set()
    proc = lines = None
    garbage = 0
    seen: set[str] = set()  # episodes the current harness process has been started on
    starts = 0

    stats = StreamStats()  # all harness processes' stdout together
    pump_stop = threading.Event()

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
        pump_stop.set()
        # Metered seconds only: FLOPs are the model server's to count, not the harness's.
        out.charge = out.charge + Charge.of(cpu_seconds=result.cpu_seconds, gpu_seconds=result.gpu_seconds)
        out.denials += result.denials
        out.stderr_tail = result.stderr[-4000:]
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
            lines = queue.Queue(maxsize=PLAY_QUEUE_LINES)
            pump_stop = threading.Event()
            threading.Thread(target=_pump, args=(proc.stdout, lines, stats, pump_stop), daemon=True).start()
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
                if line.strip():
                    garbage += 1
                    if len(out.garbage) < 20:
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
            if model.exhausted and not (out.killed and out.killed[-1] == "cpu"):
                out.killed.append("flops")
            if out.killed and out.killed[-1] in ("flops", "cpu"):
                for ep in missing + alone + running:
                    end(
                        ep,
                        f"budget: killed ({out.killed[-1]})"
                        if out.killed[-1] == "cpu"
                        else "budget: FLOPs spent",
                    )
                break  # budget spent: retrying would only be refused again
            for ep in missing:
                if len(batch) > 1 and ep.id not in retried:
                    retried.add(ep.id)
                    alone.append(ep)
                else:
                    end(ep, "no valid action from the harness")
        if progress is not None:
            progress(len(eps) - len(running) - len(alone), len(eps))
    if proc is not None:
        finish(proc)
    out.output = {**stats.record(), "garbage_lines": garbage}
    if stats.long_lines or garbage > len(out.garbage):
        out.garbage.append(
            f"[vtb: {garbage} garbage lines in all; {stats.long_lines} lines over "
            f"{MAX_LINE_BYTES} bytes dropped unread ({stats.long_bytes} bytes)]"
        )
    return out


def _pump(stream, q: queue.Queue, stats: StreamStats, stop: threading.Event) -> None:
    """Harness stdout → `q`, line by line, bounded (bounded_lines); None at the end.

    The queue is bounded too: a harness that prints faster than it is read waits on its pipe.
    `stop` (set once its process is finished) ends a pump stuck on a full queue.
    """
    for line in bounded_lines(stream, stats):
        if not _put(q, line, stop):
            return
    _put(q, None, stop)


def _put(q: queue.Queue, item: str | None, stop: threading.Event) -> bool:
    while not stop.is_set():
        try:
            q.put(item, timeout=0.5)
            return True
        except queue.Full:
            continue
    return False


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


def sandbox_for(cfg: SandboxConfig) -> Sandbox:
    """The sandbox backend a run's config names, given the `sandbox.*` settings its constructor
    takes (every backend: threads, gpus, reproducible; docker also image and runtime)."""
    factory = SANDBOXES.get(cfg.backend)
    settings = dict(
        threads=cfg.threads,
        gpus=cfg.gpus,
        reproducible=cfg.reproducible,
        image=cfg.image,
        runtime=cfg.runtime,
    )
    takes = inspect.signature(factory).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in takes.values()):
        return factory(**settings)  # a backend taking **kwargs gets them all
    return factory(**{k: v for k, v in settings.items() if k in takes})
