"""Orchestrator-side SWE episodes: the issue and the repository in, a patch out, hidden tests here.

The start message carries only what SWE-bench gives a model: the problem statement, the repo
name and the repository's files at base_commit (an allow-list: never `patch`, `test_patch`,
FAIL_TO_PASS or PASS_TO_PASS). The answer is a prediction in SWE-bench's form; grading applies
it with the fallback chain, adds the hidden tests only then, and runs them in a sandbox.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from vtb.domains.common import BackgroundGrade
from vtb.domains.swe import grading
from vtb.runner import SingleTurn
from vtb.sandbox.base import Limits, Sandbox

TEST_LIMITS = Limits(wall_seconds=20, cpu_seconds=20, memory_mb=2048, max_processes=128)


class SweEpisode(SingleTurn):
    def __init__(self, instance: dict, sandbox: Sandbox, scratch: Path, model_name: str = "vtb-system"):
        # No instance_id in the observation: it names the split (and a real instance); the
        # orchestrator renames the episode to an opaque id before the harness sees it.
        start = {
            "type": "start",
            "episode": instance["instance_id"],
            "domain": "swe",
            "observation": {
                "repo": instance["repo"],
                "problem_statement": instance["problem_statement"],
                "files": instance["files"],
            },
        }
        super().__init__(start)
        self.instance, self.sandbox, self.scratch, self.model_name = instance, sandbox, scratch, model_name
        self._graded = BackgroundGrade(self._grade)

    def prediction(self) -> dict:
        """The SWE-bench prediction this episode produced."""
        patch = (
            self.action.get("patch")
            if isinstance(self.action, dict) and self.action.get("type") == "patch"
            else None
        )
        return {
            "instance_id": self.id,
            "model_name_or_path": self.model_name,
            "model_patch": patch if isinstance(patch, str) else "",
        }

    def step(self, action: dict) -> bool:
        super().step(action)
        self._graded.start()  # in the background: the play goes on
        return False

    def fail(self, reason: str) -> None:
        super().fail(reason)
        self._graded.start()

    def grade(self) -> tuple[dict, str]:
        """SWE-bench's per-instance report.json content and the test log (graded once)."""
        return self._graded.result()

    def _grade(self) -> tuple[dict, str]:
        work = self.scratch / self.id
        try:
            return grading.grade(
                self.instance, self.prediction()["model_patch"], self.sandbox, TEST_LIMITS, work
            )
        finally:
            shutil.rmtree(work, ignore_errors=True)

    def reward(self) -> float:
        report = self.grade()[0]
        return 1.0 if report[self.id]["resolved"] else 0.0

    def record(self) -> dict:
        report, log = self.grade()
        return {
            "id": self.id,
            "reward": self.reward(),
            "failure": self.failure,
            "prediction": self.prediction(),
            "report": report[self.id],
            "test_log_tail": log[-2000:],
        }
