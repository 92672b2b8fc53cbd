"""The light client the shipped harnesses use for the model server (standard library only, no torch).

    from vtb.serve.client import ModelClient
    model = ModelClient.from_env()
    texts = model.complete(["Q: 2+2?\nA:"], max_tokens=8, temperature=0)   # OpenAI's parameters
    texts = model.generate(["Q: 2+2?\nA:"], max_new_tokens=8)             # greedy by default

It speaks plain OpenAI completions over HTTP, so a harness may as well use the `openai` package
or any other client pointed at $OPENAI_BASE_URL. Errors come back as `ModelError` with the
server's message; a spent FLOPs budget is `BudgetSpent` (HTTP 429), which a harness may let
end the play: every episode still unanswered then scores 0.
"""

from __future__ import annotations

import functools
import http.client
import json
import os
from dataclasses import dataclass
from urllib.parse import urlsplit

MAX_PROMPTS = 256  # per request (the server's limit)


def user_turn(text: str) -> dict:
    return {"role": "user", "content": text}


class ModelError(RuntimeError):
    """The server refused a request or could not answer it."""

    def __init__(self, status: int, message: str):
        super().__init__(f"HTTP {status}: {message}")
        self.status = status


class BudgetSpent(ModelError):
    """The step's FLOPs budget is spent (HTTP 429)."""


@dataclass
class ModelClient:
    base_url: str  # e.g. http://127.0.0.1:8000/v1
    key: str
    timeout_s: float = 600.0

    @classmethod
    def from_env(cls) -> ModelClient:
        return cls(os.environ["OPENAI_BASE_URL"], os.environ.get("OPENAI_API_KEY", ""))

    def post(self, path: str, payload: dict) -> dict:
        """POST JSON to base_url + path (or to the server root for /tokenize, /detokenize)."""
        return self._call("POST", path, payload)

    def _call(self, method: str, path: str, payload: dict | None = None) -> dict:
        url = urlsplit(self.base_url)
        prefix = "" if path in ("/tokenize", "/detokenize") else url.path.rstrip("/")
        conn = http.client.HTTPConnection(url.hostname, url.port or 80, timeout=self.timeout_s)
        try:
            headers = {"Authorization": f"Bearer {self.key}", "Content-Type": "application/json"}
            conn.request(
                method,
                prefix + path,
                body=json.dumps(payload) if payload is not None else None,
                headers=headers,
            )
            response = conn.getresponse()
            body = response.read()
        finally:
            conn.close()
        try:
            data = json.loads(body)
        except ValueError:
            data = {}
        if response.status != 200:
            message = (data.get("error") or {}).get("message") if isinstance(data, dict) else None
            error = BudgetSpent if response.status == 429 else ModelError
            raise error(response.status, message or body[:300].decode(errors="replace"))
        return data

    def complete(self, prompts: list[str], **params) -> list[str]:
        """The completion text of each prompt (one request; n=1), in order.

        Params are OpenAI's (max_tokens, temperature, top_p, stop, seed ...) plus the server's
        top_k and truncate_prompt_tokens; prompts too long for the model's window are cut from
        the left unless the caller says otherwise (truncate_prompt_tokens=-1 by default).
        """
        if not prompts:
            return []
        body = {"model": "vtb-model", "prompt": prompts, "truncate_prompt_tokens": -1, **params}
        choices = sorted(self.post("/completions", body)["choices"], key=lambda c: c["index"])
        return [c["text"] for c in choices]

    def generate(
        self,
        prompts: list[str],
        *,
        max_new_tokens: int = 64,
        temperature: float = 0.0,
        top_p: float = 1.0,
        seed: int = 0,
        stop: list[str] | None = None,
    ) -> list[str]:
        """The engine's old call, over the API: greedy unless a temperature is given (OpenAI's default is 1)."""
        params = {"max_tokens": max_new_tokens, "temperature": temperature, "top_p": top_p, "seed": seed}
        out: list[str] = []
        for start in range(0, len(prompts), MAX_PROMPTS):
            out += self.complete(prompts[start : start + MAX_PROMPTS], stop=stop or None, **params)
        return out

    def user_prompts(self, texts: list[str], chat: bool | str = "auto") -> list[str]:
        """Each text as one user turn in the model's chat template, up to where the assistant starts.

        The server renders it (/tokenize with messages, as vLLM's does), so the text is exactly what
        /v1/chat/completions would prompt with, yet goes through complete()/generate(): batched, and
        open to continuation. chat=false, or "auto" with a model that has no template, keeps the
        texts as they are. The SFT trainer's chat_template setting wraps training prompts the same way.
        """
        if not texts or not chat or (chat == "auto" and not self.has_chat_template):
            return list(texts)
        return [
            self.detokenize(self.post("/tokenize", {"messages": [user_turn(t)]})["tokens"]) for t in texts
        ]

    @functools.cached_property
    def has_chat_template(self) -> bool:
        """Whether the served checkpoint has a chat template (the server refuses messages without one)."""
        try:
            self.post("/tokenize", {"messages": [user_turn(".")]})
        except ModelError as e:
            if e.status == 400:
                return False
            raise
        return True

    @functools.cached_property
    def spaced(self) -> bool:
        """Whether the model's tokenizer puts spaces between tokens when decoding (a word-level one)."""
        probe = '{"."}'
        return self.detokenize(self.tokenize(probe)) != probe

    def tokenize(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return self.post("/tokenize", {"prompt": text, "add_special_tokens": add_special_tokens})["tokens"]

    def detokenize(self, tokens: list[int]) -> str:
        return self.post("/detokenize", {"tokens": tokens})["prompt"]
