"""Orchestrator-side terminal episodes: a sandboxed shell per episode, hidden tests at the end.

The harness sees the instruction and the commands it ran with their output; it answers with
`{"type": "shell", "command": ...}` or declares the task done with `{"type": "answer"}`. Each
episode has its own /app folder (a copy of the task's files) and its own persistent shell in a
fresh sandbox with no network. The hidden tests never enter that sandbox: they are copied into
another one, read-only, only after the agent is done (grading.run_tests), as Terminal-Bench does.
Resolved = every parsed test passed.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

from vtb.domains import common
from vtb.domains.common import BackgroundGrade
from vtb.domains.terminal import grading
from vtb.domains.terminal.shell import ImageState, ShellSession
from vtb.runner import protocol_message
from vtb.sandbox.base import Limits, Sandbox

MAX_STEPS = 10  # commands per episode
MAX_PROCESSES = 128  # per shell: a fork bomb stops here (sandbox pids cap)
MEMORY_MB = 2048


def materialize(files: dict, app_dir: Path) -> None:
    """Write a task's initial /app files (relpath -> {"content", "mode"}) under app_dir."""
    app_dir.mkdir(parents=True, exist_ok=True)
    for rel, spec in files.items():
        path = (app_dir / rel).resolve()
        if not path.is_relative_to(app_dir.resolve()):
            raise ValueError(f"task file {rel!r} is outside /app")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(spec["content"])
        path.chmod(int(spec.get("mode", 0o644)))


class TerminalEpisode:
    def __init__(
        self,
        task: dict,
        trial: int,
        sandbox: Sandbox,
        scratch: Path,
        max_steps: int = MAX_STEPS,
        image: tuple[str, str] | None = None,
    ):
        """`image`: (tag, working dir) of the task's own built image (images.py), else /app is a host folder."""
        self.task, self.trial, self.sandbox, self.max_steps = task, trial, sandbox, max_steps
        self.id = f"{task['id']}.t{trial}"
        self.folder = scratch / self.id
        self.app_dir = self.folder / "app"
        self.image = ImageState(sandbox, *image) if image else None
        if self.image is None:
            materialize(task.get("files", {}), self.app_dir)
        self.history: list[dict] = []  # {"command", "output", "exit_code", "timed_out"}
        self.finished = False  # the agent declared it done
        self.timeout = False  # out of steps or of the task's agent time
        self.failure: str | None = None
        self.time_limit = float(task.get("max_agent_timeout_sec", 60))
        self.started: float | None = None
        self.shell: ShellSession | None = None
        self.shell_usage: dict = {}
        self._grade = BackgroundGrade(self._run_tests)

    @property
    def over(self) -> bool:
        return self.finished or self.timeout or self.failure is not None

    # --- runner.Episode ---------------------------------------------------------------------
    def message(self, fresh: bool) -> dict:
        # No trial number: test and validation run different numbers of trials, so it would tell them apart.
        observation = {
            "instruction": self.task["instruction"],
            "history": self.history,
            "max_steps": self.max_steps,
        }
        return protocol_message(self.id, "terminal", observation, fresh)

    def step(self, action: dict) -> bool:
        kind = action.get("type")
        if kind in ("answer", "message"):
            self.finished = True
        elif kind == "shell" and isinstance(action.get("command"), str):
            self.history.append({"command": action["command"], **self._run(action["command"])})
        else:
            self.history.append(
                {
                    "command": None,
                    "output": f"(not run: action {kind!r} is not a shell command or a final answer)",
                    "exit_code": None,
                    "timed_out": False,
                }
            )
        if not self.finished and (len(self.history) >= self.max_steps or self._time_left() <= 0):
            self.timeout = True
        if self.over:
            self._close()
            self._grade.start()
        return not self.over

    def fail(self, reason: str) -> None:
        self.failure = reason
        self._close()
        self._grade.start()

    def _time_left(self) -> float:
        return self.time_limit - (time.monotonic() - self.started) if self.started else self.time_limit

    def _run(self, command: str) -> dict:
        if self.shell is None:
            self.started = self.started or time.monotonic()
            limits = Limits(
                wall_seconds=self.time_limit + 5,
                cpu_seconds=self.time_limit + 5,
                memory_mb=MEMORY_MB,
                max_processes=MAX_PROCESSES,
            )
            self.shell = ShellSession(self.sandbox, self.app_dir, limits, self.image)
        return self.shell.run(command, timeout=max(0.5, self._time_left()))

    def _close(self) -> None:
        if self.shell is not None:
            self.shell_usage = self.shell.close()
            self.shell = None

    # --- scoring ----------------------------------------------------------------------------
    def grade(self) -> tuple[dict, str]:
        """The hidden tests' statuses and log on the final /app (whatever ended the episode)."""
        self._close()
        return self._grade.result()

    def _run_tests(self) -> tuple[dict, str]:
        """Run once, in the background once the episode is over; then drop the episode's folder."""
        limit = float(self.task.get("max_test_timeout_sec", 30))
        limits = Limits(
            wall_seconds=limit, cpu_seconds=limit, memory_mb=MEMORY_MB, max_processes=MAX_PROCESSES
        )
        try:
            if self.image is None:
                return grading.run_tests(self.sandbox, self.app_dir, self.task, limits)
            state = self.image
            return grading.run_tests(
                self.sandbox, None, self.task, limits, state.current, state.workdir, state.changes
            )
        finally:
            shutil.rmtree(self.folder, ignore_errors=True)
            if self.image is not None:
                self.image.release()

    def reward(self) -> float:
        return 1.0 if grading.resolved(self.grade()[0]) else 0.0

    def record(self) -> dict:
        statuses, log = self.grade()
        return common.trial_record(self) | {
            "history": self.history,
            "tests": statuses,
            "test_log_tail": log[-2000:],
        }
