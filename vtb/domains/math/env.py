"""Orchestrator-side episode logic of the math domain: one question in, one answer out.

The start message is built from an allow-list (the question, and "format": how answers are
graded, "boxed" or "gsm8k", as a benchmark's instructions say), so no answer, final value or
solution field can ever reach the harness, whatever the problem dict carries.
"""

from __future__ import annotations

from vtb.domains.math import grading
from vtb.runner import SingleTurn, protocol_message


class MathEnv:
    """Single-turn episodes of the harness protocol (vtb/protocol.py)."""

    domain = "math"

    def start_message(self, problem: dict) -> dict:
        fmt = "boxed" if problem.get("answer_format") == "boxed" else "gsm8k"
        return protocol_message(problem["id"], self.domain, {"question": problem["question"], "format": fmt})

    def reward(self, problem: dict, action: dict | None, metric: str) -> float:
        """The grader's score for an `answer` action; anything else earns 0."""
        if not isinstance(action, dict) or action.get("type") != "answer":
            return 0.0
        content = action.get("content")
        if not isinstance(content, str):
            return 0.0
        return grading.score(content, problem, metric)


class MathEpisode(SingleTurn):
    """One question, one answer; the reward is the grader's score of that answer."""

    def __init__(self, problem: dict, metric: str, env: MathEnv):
        super().__init__(env.start_message(problem))
        self.problem, self.metric, self.env = problem, metric, env

    def reward(self) -> float:
        return self.env.reward(self.problem, self.action, self.metric)

    def record(self) -> dict:
        return {"id": self.id, "reward": self.reward(), "action": self.action, "failure": self.failure}
