"""An LLM-played customer for tau-bench episodes, over any OpenAI-compatible chat-completions endpoint.

tau-bench scores an agent by how it serves a simulated customer who knows a hidden instruction,
so the simulator must stay in character, reveal facts only when asked, never invent any, and say
"###STOP###" when its goal is met. Requests go through `vtb.chat.ChatClient` (plain HTTP, retries
for transient faults); a persistent failure raises UserSimulatorError, which the caller records as
a failed episode rather than letting it crash the run.
"""

from __future__ import annotations

from vtb.chat import ChatClient, ChatError, usage_of

STOP = "###STOP###"
AGENT_GREETING = "Hi! How can I help you today?"

SYSTEM_PROMPT = """You are role-playing a customer who is contacting a customer-service agent by chat.
Stay in character as the customer for the whole conversation: you are not the agent and you do not
do the agent's work.

Your situation and goal:
{instruction}

Rules:
- Write only the customer's next message: one short line, in natural everyday language.
- Do not state the whole situation at once. Give a detail only when the agent asks for it or when
  the current step needs it.
- Never invent facts (names, ids, emails, addresses, order numbers, preferences) that are not in
  your situation above. If the agent asks for something you were not given, say you do not know it.
- Do not copy the text above word for word; say it in your own words.
- When your goal is fully satisfied, or you are transferred to a human, or nothing more can be done,
  reply with exactly ###STOP### and nothing else."""


class UserSimulatorError(RuntimeError):
    """The user simulator's endpoint could not produce a reply."""


class LLMUser:
    """A customer simulator with tau-bench's interface: reset(instruction), then step(agent_message)."""

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key_env: str = "OPENAI_API_KEY",
        temperature: float = 0.0,
        timeout_s: float = 60.0,
        max_turns: int = 12,
        retry_backoff_s: float = 0.5,
    ) -> None:
        self.client = ChatClient(
            base_url, model, api_key_env, timeout_s=timeout_s, retry_backoff_s=retry_backoff_s
        )
        self.temperature = temperature
        self.max_turns = max_turns
        self.usage = {"prompt_tokens": 0, "completion_tokens": 0}  # summed over the object's life
        self.messages: list[dict] = []
        self.turns = 0

    def reset(self, instruction: str) -> str:
        """Start a conversation for `instruction`; returns the customer's first message."""
        self.messages = [
            {"role": "system", "content": SYSTEM_PROMPT.format(instruction=instruction)},
            {"role": "user", "content": AGENT_GREETING},
        ]
        self.turns = 0
        return self._reply()

    def step(self, agent_message: str) -> str:
        """The customer's reply to `agent_message`; "###STOP###" once done or after max_turns replies."""
        if not self.messages:
            raise RuntimeError("LLMUser.step called before reset")
        if self.turns >= self.max_turns:
            return STOP
        self.messages.append({"role": "user", "content": agent_message})
        return self._reply()

    def _reply(self) -> str:
        try:
            body = self.client.complete(self.messages, temperature=self.temperature)
        except ChatError as err:
            raise UserSimulatorError(f"user simulator {err}") from err
        try:
            content = body["choices"][0]["message"]["content"] or ""
        except (KeyError, IndexError, TypeError):
            raise UserSimulatorError(
                f"{self.client.url}: response has no choices[0].message.content: {body!r:.200}"
            ) from None
        prompt, completion = usage_of(body) or (0, 0)
        self.usage["prompt_tokens"] += prompt
        self.usage["completion_tokens"] += completion
        content = content.strip()
        self.messages.append({"role": "assistant", "content": content})
        self.turns += 1
        return content
