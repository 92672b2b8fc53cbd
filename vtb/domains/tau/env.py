"""Orchestrator-side tau episodes: the tool database, the user simulator and the tau-bench reward.

The harness sees only the conversation (OpenAI-style messages), the tool schemas and the
policy; the database it acts on, the user's instruction and the gold database stay here.
Reward (tau-bench): 1 iff the episode ended (the user said ###STOP### or the agent transferred
to a human) within the step limit, the final database hash equals the hash after replaying the
gold actions on a fresh database, and every expected output string appears in the agent's
messages (case-insensitive, commas removed).

A tau2 task names its reward basis: the reward is then the product of those components only, as
tau2 computes it: DB (the hash above), COMMUNICATE (its communicate_info, said as above), ACTION
(every gold action made by the agent with the same arguments, in any order) and NL_ASSERTION
(statements a judge endpoint checks, task.judge_base_url). A component this run cannot evaluate
(NL_ASSERTION without a judge, ENV_ASSERTION) is recorded per episode as "not judged" and counted
in the split's `not_judged`, never silently taken as met or failed.
"""

from __future__ import annotations

import json

from vtb.domains import common
from vtb.domains.tau import grading
from vtb.domains.tau.tools import TOOL_SCHEMAS, call_tool, hash_db
from vtb.domains.tau.user import STOP
from vtb.runner import protocol_message

MAX_STEPS = 30  # agent actions per episode, as in tau-bench
NOT_JUDGED = "not judged"


class TauEpisode:
    def __init__(
        self,
        task: dict,
        trial: int,
        db: dict,
        gold_hash: str,
        user,
        policy: str,
        max_steps: int = MAX_STEPS,
        tools: list[dict] | None = None,
    ):
        self.id = f"{task['id']}.t{trial}"
        self.task, self.trial, self.gold_hash, self.user = task, trial, gold_hash, user
        self.policy, self.max_steps = policy, max_steps
        self.tools = TOOL_SCHEMAS if tools is None else tools
        self.judge = None  # tau2's NL-assertion judge (vtb/domains/tau/grading.py), when configured
        self._components: tuple[int, dict] | None = None  # (messages seen, components) cache
        self.db = json.loads(json.dumps(db))  # a deep copy, several times faster than copy.deepcopy
        self.steps = 0
        self.finished = False  # ended by the user (###STOP###) or a transfer to a human
        self.timeout = False  # hit the step limit
        self.failure: str | None = None  # the harness gave no valid action (or the user simulator failed)
        self.messages: list[dict] = []
        try:
            self.messages.append({"role": "user", "content": user.reset(task, trial)})
        except Exception as e:  # an LLM user simulator can fail: that costs this episode only
            self.failure = f"user simulator: {type(e).__name__}: {e}"

    @property
    def over(self) -> bool:
        return self.finished or self.timeout or self.failure is not None

    # --- runner.Episode ---------------------------------------------------------------------
    def message(self, fresh: bool) -> dict:
        observation: dict = {"messages": self.messages}
        if fresh:
            observation |= {"tools": self.tools, "policy": self.policy}
        return protocol_message(self.id, "tau", observation, fresh)

    def step(self, action: dict) -> bool:
        self.steps += 1
        kind = action.get("type")
        if kind == "tool_call":
            self._tool_call(action.get("name"), action.get("arguments", {}))
        elif kind in ("message", "answer"):
            content = action.get("content")
            content = content if isinstance(content, str) else json.dumps(content)
            self.messages.append({"role": "assistant", "content": content})
            try:
                reply = self.user.step(content)
            except Exception as e:  # an LLM user simulator can fail: that ends this episode only
                self.failure = f"user simulator: {type(e).__name__}: {e}"
                return False
            self.messages.append({"role": "user", "content": reply})
            if STOP in reply:
                self.finished = True
        else:
            self.messages.append({"role": "assistant", "content": ""})
            self.messages.append(
                {"role": "user", "content": f"(no reply: action type {kind!r} is not a tool call or message)"}
            )
        if not self.finished and self.steps >= self.max_steps:
            self.timeout = True
        return not (self.finished or self.timeout)

    def _tool_call(self, name, arguments) -> None:
        call_id = f"call_{self.steps}"
        shown = arguments if isinstance(arguments, dict) else {"_raw": arguments}
        self.messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {"name": str(name), "arguments": json.dumps(shown)},
                    }
                ],
            }
        )
        result = (
            call_tool(self.db, name, arguments)
            if isinstance(name, str)
            else "Error: tool name must be a string"
        )
        self.messages.append({"role": "tool", "tool_call_id": call_id, "name": str(name), "content": result})
        if name == "transfer_to_human_agents" and not result.startswith("Error"):
            self.finished = True

    def fail(self, reason: str) -> None:
        self.failure = reason

    # --- scoring ----------------------------------------------------------------------------
    def agent_texts(self) -> list[str]:
        return [m["content"] for m in self.messages if m["role"] == "assistant" and m.get("content")]

    def reward(self) -> float:
        if not self.finished or self.timeout or self.failure:
            return 0.0
        if "reward_basis" not in self.task:  # tau-bench's reward: the database and the outputs
            return float(self._db_matches() and self._said(self.task.get("outputs", [])))
        values = [v for v in self.components().values() if v != NOT_JUDGED]
        return float(all(v == 1.0 for v in values))

    def components(self) -> dict[str, float | str]:
        """tau2: each reward_basis component, 1.0 / 0.0, or NOT_JUDGED; {} for other tasks."""
        basis = self.task.get("reward_basis")
        if basis is None or not self.finished:
            return {}
        if self._components is not None and self._components[0] == len(self.messages):
            return self._components[1]
        out: dict[str, float | str] = {}
        for name in basis:
            if name == "DB":
                out[name] = float(self._db_matches())
            elif name == "COMMUNICATE":
                out[name] = float(self._said(self.task.get("outputs", [])))
            elif name == "ACTION":
                out[name] = float(self._gold_actions_made())
            elif name == "NL_ASSERTION":
                out[name] = self._nl_assertions()
            else:
                out[name] = NOT_JUDGED
        self._components = (len(self.messages), out)
        return out

    def not_judged(self) -> list[str]:
        return [name for name, value in self.components().items() if value == NOT_JUDGED]

    def _db_matches(self) -> bool:
        return hash_db(self.db) == self.gold_hash

    def _said(self, outputs: list[str]) -> bool:
        return grading.said(outputs, self.agent_texts())

    def _gold_actions_made(self) -> bool:
        return grading.gold_actions_made(self.task["actions"], self.messages)

    def _nl_assertions(self) -> float | str:
        assertions = self.task.get("nl_assertions") or []
        if not assertions:
            return 1.0  # as tau2: nothing to assert
        if self.judge is None:
            return NOT_JUDGED
        try:
            return float(all(self.judge.verdicts(self.messages, assertions)))
        except RuntimeError:  # JudgeError: the episode records it as not judged
            return NOT_JUDGED

    def record(self) -> dict:
        extra = {"reward_basis": self.components()} if "reward_basis" in self.task else {}
        return common.trial_record(self) | {"steps": self.steps, "messages": self.messages} | extra
