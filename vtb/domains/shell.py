"""Shell-action episodes (terminal tasks, real SWE-bench instances): a persistent bash and its turns.

`ShellSession` is a persistent bash in one sandbox, so `cd` and variables carry over.

Each `run()` sends the command wrapped as `{ eval '<command>'\n} < /dev/null` followed by a
sentinel `printf` carrying a fresh random nonce and `$?`, and reads output until the sentinel
line. `eval` turns a syntax error (an unclosed quote, a missing `fi`) into an error message
instead of a shell waiting for more input; the /dev/null stdin keeps `cat` or `read` from
eating the next commands or waiting forever; the nonce is printed from two printf arguments,
so neither the command text nor a `set -x` trace of the sentinel (dropped) can fake it.

A command past its timeout kills the shell; the next `run()` starts a fresh one in /app (the
files the agent wrote stay, the shell state does not) and says so in its output. Every
restart gets only what is left of the episode's `Limits`, so restarts cannot buy more time.
`--die-with-parent` ties each shell to the thread that started it: call `run()` and `close()`
from one thread that outlives the session.

`ShellTurns` is what every shell-action episode shares: the commands the harness sends, run in
one session at a time, the history it sees, and how the episode ends (the harness says it is
done, it runs out of steps or time, or it fails). Each domain's episode keeps only what is its
own: its start message, what its final actions carry, and its grade.
"""

from __future__ import annotations

import dataclasses
import queue
import re
import secrets
import shlex
import threading
import time
from collections.abc import Callable
from pathlib import Path

from vtb.sandbox.base import Limits, Mount, Sandbox, SandboxProcess, SandboxResult
from vtb.sandbox.runtime import runtime_mounts

MAX_OUTPUT = 4000  # characters of output a run() returns (the tail)
CHUNK = 8192  # read size: a line without a newline cannot grow without bound
QUEUE_CHUNKS = 256  # unread output held at most (a background `yes &` then blocks, not our memory)
CLOSE_WAIT_S = 5.0
RESTART_NOTE = "[the previous shell was killed or exited; a new shell started in /app]\n"
SHELL_ENV = {"HOME": "/app", "PS1": "", "TERM": "dumb"}
IMAGE_SHELL_ENV = {"PS1": "", "TERM": "dumb", "TEST_DIR": "/tests"}  # a built image keeps its HOME


class ImageState:
    """Where the shells of a task built from its Dockerfile start: its image, then what the last one left.

    Such a task's /app and everything else live in the container's own layer, not in a host
    folder, so a shell that ends (killed at a timeout, or by its own `exit`) is snapshotted
    (files, no processes) and the next shell, and the hidden tests, start from that snapshot.
    `release()` removes the snapshots once the tests ran. `native`: what every container of the
    task gets beside its image (DockerSandbox.with_image's disk_mb and cpus, a task's own limits).
    """

    def __init__(self, sandbox, image: str, workdir: str = "/app", native: dict | None = None) -> None:
        self.sandbox, self.image, self.current, self.workdir = sandbox, image, image, workdir
        self.native = dict(native or {})
        self._snapshots: list[str] = []
        self.changes: list[dict] = []  # docker's diff of every shell's layer: {"Path", "Kind"}

    def shell_sandbox(self):
        return self.sandbox.with_image(self.current, keep=True, **self.native)

    def test_sandbox(self):
        """A fresh container from the state the agent left, with the same limits as its shells."""
        return self.sandbox.with_image(self.current, **self.native)

    def keep(self, proc) -> None:
        """The ended shell's container becomes the state the next one starts from."""
        try:
            self.changes += self.sandbox.api.diff(proc.id) or []
            ref = self.sandbox.snapshot(proc)
            self._snapshots.append(ref)
            self.current = ref
        finally:
            proc.remove()

    def release(self) -> None:
        for ref in reversed(self._snapshots):
            self.sandbox.remove_image(ref)
        self._snapshots.clear()


class ShellSession:
    """One episode's shell; `run()` commands, then `close()` for the charges.

    `image`: the task runs in its own built image (ImageState) instead of a host /app folder.
    """

    def __init__(
        self, sandbox: Sandbox, app_dir: Path | None, limits: Limits, image: ImageState | None = None
    ) -> None:
        self.sandbox = sandbox
        self.app_dir = Path(app_dir) if app_dir is not None else None
        self.limits = limits
        self.image = image
        self.dead = True
        self.results: list[SandboxResult] = []
        self._proc: SandboxProcess | None = None
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._pump: threading.Thread | None = None
        self._start()

    def __enter__(self) -> ShellSession:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _start(self) -> None:
        used_wall = sum(r.wall_seconds for r in self.results)
        used_cpu = sum(r.cpu_seconds for r in self.results)
        limits = dataclasses.replace(
            self.limits,
            wall_seconds=self.limits.wall_seconds - used_wall,
            cpu_seconds=self.limits.cpu_seconds - used_cpu,
        )
        if limits.wall_seconds <= 0 or limits.cpu_seconds <= 0:
            return  # the episode's limits are spent: stay dead
        argv = ["/bin/bash", "--noprofile", "--norc"]
        if self.image is not None:  # the image's own programs, HOME and /app
            sandbox, mounts, cwd, env = self.image.shell_sandbox(), [], self.image.workdir, IMAGE_SHELL_ENV
        else:
            sandbox, cwd, env = self.sandbox, "/app", SHELL_ENV
            mounts = runtime_mounts() + [Mount(self.app_dir, "/app", writable=True)]
        self._proc = sandbox.start(argv, mounts=mounts, limits=limits, cwd=cwd, env=env)
        self._lines = queue.Queue(QUEUE_CHUNKS)
        self._pump = threading.Thread(target=_pump, args=(self._proc.stdout, self._lines), daemon=True)
        self._pump.start()
        self.dead = not _write(self._proc, "exec 2>&1\n")

    def run(self, command: str, timeout: float) -> dict:
        """Run one command; {"output": its last MAX_OUTPUT chars, "exit_code", "timed_out"}."""
        note = ""
        if self.dead:
            self._end()
            self._start()
            note = RESTART_NOTE
            if self.dead:
                return {
                    "output": "[the episode's time in the shell is spent]\n",
                    "exit_code": None,
                    "timed_out": False,
                }
        nonce = secrets.token_hex(8)
        sentinel = re.compile(rf"^(.*)__vtb_{nonce}_done (\d+)\n$", re.DOTALL)
        script = f"{{ eval {shlex.quote(command.replace(chr(0), ''))}\n}} < /dev/null\n"
        script += f"printf '__vtb_%s_done %d\\n' {nonce} \"$?\"\n"
        out = _Tail()
        if not _write(self._proc, script):
            return self._died(note, out)
        deadline = time.monotonic() + timeout
        pending = ""  # the current line, until its newline arrives
        while True:
            try:
                chunk = self._lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                out.add(pending)
                self._end("wall")
                return {"output": note + out.text(), "exit_code": None, "timed_out": True}
            if chunk is None:
                out.add(pending)
                return self._died(note, out)
            pending += chunk
            if pending.endswith("\n"):
                if m := sentinel.match(pending):
                    out.add(m.group(1))
                    return {"output": note + out.text(), "exit_code": int(m.group(2)), "timed_out": False}
                if nonce not in pending:  # else it is a `set -x` trace of the sentinel: not output
                    out.add(pending)
                pending = ""
            elif len(pending) > 2 * CHUNK:
                out.add(pending[:-200])  # keep a tail in case the sentinel straddles two chunks
                pending = pending[-200:]

    def _died(self, note: str, out: _Tail) -> dict:
        """The shell exited during a command (`exit`, `set -e`, a limit): its exit status is the code."""
        self._end()
        code = self.results[-1].returncode if self.results else None
        return {"output": note + out.text(), "exit_code": code, "timed_out": False}

    def _end(self, reason: str = "closed") -> None:
        """Stop the current shell (if any) and keep its result; it is then dead."""
        proc, self._proc, self.dead = self._proc, None, True
        if proc is None:
            return
        if reason == "closed" and proc.poll() is None and _write(proc, "exit 0\n"):
            try:
                proc.stdin.close()
            except (OSError, ValueError):
                pass
            end = time.monotonic() + CLOSE_WAIT_S
            while proc.poll() is None and time.monotonic() < end:
                time.sleep(0.01)
        proc.kill(reason)
        self.results.append(proc.wait(timeout=10))
        if self.image is not None:
            self.image.keep(proc)
        end = time.monotonic() + 2.0  # drain, so a pump blocked on a full queue sees EOF and ends
        while self._pump is not None and self._pump.is_alive() and time.monotonic() < end:
            try:
                self._lines.get(timeout=0.05)
            except queue.Empty:
                pass

    def close(self) -> dict:
        """End the shell; {"cpu_seconds", "wall_seconds", "denials", "killed"} over all its shells."""
        self._end()
        return {
            "cpu_seconds": sum(r.cpu_seconds for r in self.results),
            "wall_seconds": sum(r.wall_seconds for r in self.results),
            "denials": [d for r in self.results for d in r.denials],
            "killed": [r.killed for r in self.results if r.killed and r.killed != "closed"],
        }


class ShellTurns:
    """The turns of one shell-action episode: commands run until the harness ends, or its steps or time.

    `ends`: the action types that end the episode (the episode reads what they carry before
    calling `step`). `on_over` runs once, when the episode is over (it starts the grade in the
    background). `command_seconds` caps one command's wall time below what is left of the
    episode's `seconds` (past it the shell restarts; the files stay). `not_run` names what the
    harness may send, for the history line of an action that is none of them.
    """

    def __init__(
        self,
        sandbox: Sandbox,
        app_dir: Path | None,
        image: ImageState | None,
        *,
        max_steps: int,
        seconds: float,
        memory_mb: int,
        max_processes: int,
        on_over: Callable[[], None],
        ends: tuple[str, ...] = ("answer", "message"),
        not_run: str = "a shell command or a final answer",
        command_seconds: float = float("inf"),
    ) -> None:
        self.sandbox, self.app_dir, self.image = sandbox, app_dir, image
        self.max_steps, self.seconds, self.command_seconds = max_steps, seconds, command_seconds
        self.memory_mb, self.max_processes = memory_mb, max_processes
        self.on_over, self.ends, self.not_run = on_over, ends, not_run
        self.history: list[dict] = []  # {"command", "output", "exit_code", "timed_out"}
        self.finished = False  # the harness ended the episode
        self.timeout = False  # out of steps or of the episode's time
        self.failure: str | None = None
        self.started: float | None = None
        self.shell: ShellSession | None = None
        self.usage: dict = {}  # the ended shells' charges (ShellSession.close)

    @property
    def over(self) -> bool:
        return self.finished or self.timeout or self.failure is not None

    def step(self, action: dict) -> bool:
        """Play one action; False once the episode is over."""
        kind = action.get("type") if isinstance(action, dict) else None
        if kind in self.ends:
            self.finished = True
        elif kind == "shell" and isinstance(action.get("command"), str):
            self.history.append({"command": action["command"], **self._run(action["command"])})
        else:
            self.history.append(
                {
                    "command": None,
                    "output": f"(not run: action {kind!r} is not {self.not_run})",
                    "exit_code": None,
                    "timed_out": False,
                }
            )
        if not self.finished and (len(self.history) >= self.max_steps or self.time_left() <= 0):
            self.timeout = True
        if self.over:
            self._ended()
        return not self.over

    def fail(self, reason: str) -> None:
        self.failure = reason
        self._ended()

    def time_left(self) -> float:
        return self.seconds - (time.monotonic() - self.started) if self.started else self.seconds

    def close(self) -> None:
        if self.shell is not None:
            self.usage = self.shell.close()
            self.shell = None

    def _ended(self) -> None:
        self.close()
        self.on_over()

    def _run(self, command: str) -> dict:
        if self.shell is None:
            self.started = self.started or time.monotonic()
            limits = Limits(
                wall_seconds=self.seconds + 5,
                cpu_seconds=self.seconds + 5,
                memory_mb=self.memory_mb,
                max_processes=self.max_processes,
            )
            self.shell = ShellSession(self.sandbox, self.app_dir, limits, self.image)
        return self.shell.run(command, timeout=max(0.5, min(self.command_seconds, self.time_left())))


class _Tail:
    """The last MAX_OUTPUT characters of a command's output, with a note of what was cut."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.size = 0
        self.cut = 0

    def add(self, text: str) -> None:
        self.parts.append(text)
        self.size += len(text)
        if self.size > 2 * MAX_OUTPUT:
            joined = "".join(self.parts)
            self.cut += len(joined) - MAX_OUTPUT
            self.parts, self.size = [joined[-MAX_OUTPUT:]], MAX_OUTPUT

    def text(self) -> str:
        joined = "".join(self.parts)
        cut = self.cut + max(0, len(joined) - MAX_OUTPUT)
        return (f"[... {cut} characters cut ...]\n" if cut else "") + joined[-MAX_OUTPUT:]


def _write(proc: SandboxProcess, text: str) -> bool:
    try:
        proc.stdin.write(text)
        proc.stdin.flush()
        return True
    except (BrokenPipeError, OSError, ValueError):
        return False


def _pump(stream, q: queue.Queue) -> None:
    try:
        while chunk := stream.readline(CHUNK):
            q.put(chunk)
    except (OSError, ValueError):
        pass
    q.put(None)
