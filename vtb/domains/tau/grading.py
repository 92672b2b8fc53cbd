"""Grading a tau episode's conversation: the outputs it said, the gold actions it made (tau2's
COMMUNICATE and ACTION), and the judge of tau2's natural-language assertions over any
OpenAI-compatible chat endpoint. The database check and the reward's rule are the episode's
(vtb/domains/tau/env.py), which calls these.

tau2 tasks may put NL_ASSERTION in their reward basis: statements about the conversation ("Agent
should not approve the cancellation") that only a reader can check. The judge reads the transcript
and answers, for each statement, whether the agent satisfied it, as a JSON list of booleans in
the statements' order. Any answer it cannot read is a JudgeError, recorded on the episode as not
judged: a guessed verdict would be a plausible number that is not a fact.
"""

from __future__ import annotations

import json
import re

from vtb.chat import ChatClient, ChatError

PROMPT = """You grade a recorded customer-service chat between an agent and a customer.
For each numbered statement below, decide whether the AGENT's behaviour in the chat satisfies it.
Reply with only a JSON list of true/false values, one per statement, in order (e.g. [true, false]).

Chat:
{transcript}

Statements:
{statements}"""


def said(outputs: list[str], agent_texts: list[str]) -> bool:
    """Every expected output appears in some agent message (case-insensitive, commas removed), as tau-bench."""
    texts = [t.lower().replace(",", "") for t in agent_texts]
    return all(any(o.lower().replace(",", "") in text for text in texts) for o in outputs)


def gold_actions_made(gold_actions: list[dict], messages: list[dict]) -> bool:
    """Every gold action was called by the agent with the same arguments (those of its
    `compare_args` when given), in any order, as tau2's ACTION component."""
    calls = []
    for m in messages:
        for call in m.get("tool_calls") or []:
            try:
                arguments = json.loads(call["function"]["arguments"])
            except (json.JSONDecodeError, TypeError):
                continue
            calls.append((call["function"]["name"], arguments))

    def made(gold: dict) -> bool:
        keys = gold.get("compare_args")
        for name, arguments in calls:
            if name != gold["name"] or not isinstance(arguments, dict):
                continue
            keys_now = arguments.keys() if keys is None else keys
            if {k: arguments.get(k) for k in keys_now} == {k: gold["kwargs"].get(k) for k in keys_now}:
                return True
        return False

    return all(made(gold) for gold in gold_actions)


class JudgeError(RuntimeError):
    """The judge gave no usable verdict."""


class Judge:
    def __init__(
        self, base_url: str, model: str, api_key_env: str = "OPENAI_API_KEY", timeout_s: float = 60.0
    ):
        self.client = ChatClient(base_url, model, api_key_env, timeout_s=timeout_s)

    def verdicts(self, messages: list[dict], assertions: list[str]) -> list[bool]:
        """One verdict per assertion; raises JudgeError when the endpoint fails or answers off-format."""
        transcript = "\n".join(
            f"{m['role']}: {m.get('content') or json.dumps(m.get('tool_calls'))}" for m in messages
        )
        statements = "\n".join(f"{i + 1}. {a}" for i, a in enumerate(assertions))
        prompt = PROMPT.format(transcript=transcript, statements=statements)
        try:
            body = self.client.complete([{"role": "user", "content": prompt}], temperature=0.0)
            content = body["choices"][0]["message"]["content"] or ""
        except (ChatError, KeyError, IndexError, TypeError) as err:
            raise JudgeError(f"judge {self.client.url}: {err}") from None
        match = re.search(r"\[[^\[\]]*\]", content)
        try:
            values = json.loads(match.group(0)) if match else None
        except json.JSONDecodeError:
            values = None
        if not (isinstance(values, list) and len(values) == len(assertions)):
            raise JudgeError(
                f"judge {self.client.url}: no list of {len(assertions)} booleans in {content!r:.120}"
            )
        if not all(isinstance(v, bool) for v in values):
            raise JudgeError(f"judge {self.client.url}: non-boolean verdicts {values!r:.120}")
        return values
