"""Orchestrator-side terminal episodes: a sandboxed shell per episode, hidden tests at the end.

The harness sees the instruction and the commands it ran with their output; it answers with
`{"type": "shell", "command": ...}` or declares the task done with `{"type": "answer"}`. Each
episode has its own /app folder (a copy of the task's files) and its own persistent shell in a
fresh sandbox with no network. The hidden tests never enter that sandbox: they are copied into
another one, read-only, only after the agent is done (grading.run_tests), as Terminal-Bench does.
Resolved = every parsed test passed.

A task's own limits (Harbor's [environment], loaders.py "resources") replace the defaults:
memory_mb caps the shell and the tests on every backend; on docker, a task built from its
Dockerfile also gets cpus as its containers' CPU quota and storage_mb as the cap on their
writable layer (killed="disk" past it). A copy-only task's /app is a host folder: storage_mb
does not apply there, nor cpus on bwrap (its CPU-seconds and wall limits do).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from vtb.domains import common
from vtb.domains.common import BackgroundGrade
from vtb.domains.shell import ImageState, ShellTurns
from vtb.domains.terminal import grading
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
        resources = task.get("resources") or {}
        self.memory_mb = int(resources.get("memory_mb") or MEMORY_MB)
        native = {"cpus": resources.get("cpus"), "disk_mb": resources.get("storage_mb")}
        native = {k: v for k, v in native.items() if v}
        self.image = ImageState(sandbox, *image, native=native) if image else None
        if self.image is None:
            materialize(task.get("files", {}), self.app_dir)
        self._grade = BackgroundGrade(self._run_tests)
        self.turns = ShellTurns(
            sandbox,
            None if self.image else self.app_dir,
            self.image,
            max_steps=max_steps,
            seconds=float(task.get("max_agent_timeout_sec", 60)),
            memory_mb=self.memory_mb,
            max_processes=MAX_PROCESSES,
            on_over=self._grade.start,
        )

    history = property(lambda self: self.turns.history)
    finished = property(lambda self: self.turns.finished)
    timeout = property(lambda self: self.turns.timeout)
    failure = property(lambda self: self.turns.failure)
    over = property(lambda self: self.turns.over)

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
        return self.turns.step(action)

    def fail(self, reason: str) -> None:
        self.turns.fail(reason)

    # --- scoring ----------------------------------------------------------------------------
    def grade(self) -> tuple[dict, str]:
        """The hidden tests' statuses and log on the final /app (whatever ended the episode)."""
        self.turns.close()
        return self._grade.result()

    def _run_tests(self) -> tuple[dict, str]:
        """Run once, in the background once the episode is over; then drop the episode's folder."""
        limit = float(self.task.get("max_test_timeout_sec", 30))
        limits = Limits(
            wall_seconds=limit, cpu_seconds=limit, memory_mb=self.memory_mb, max_processes=MAX_PROCESSES
        )
        try:
            if self.image is None:
                return grading.run_tests(self.sandbox, self.app_dir, self.task, limits)
            state = self.image
            return grading.run_tests(
                state.test_sandbox(), None, self.task, limits, state.current, state.workdir, state.changes
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
