"""A persistent bash for one terminal episode, in one sandbox, so `cd` and variables carry over.

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
"""

from __future__ import annotations

import dataclasses
import queue
import re
import secrets
import shlex
import threading
import time
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
    `release()` removes the snapshots once the tests ran.
    """

    def __init__(self, sandbox, image: str, workdir: str = "/app") -> None:
        self.sandbox, self.image, self.current, self.workdir = sandbox, image, image, workdir
        self._snapshots: list[str] = []
        self.changes: list[dict] = []  # docker's diff of every shell's layer: {"Path", "Kind"}

    def shell_sandbox(self):
        return self.sandbox.with_image(self.current, keep=True)

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
