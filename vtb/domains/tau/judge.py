"""The judge of tau2's natural-language assertions, over any OpenAI-compatible chat endpoint.

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
