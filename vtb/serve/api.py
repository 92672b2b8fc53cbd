"""The request and reply shapes of the model server: OpenAI's completions and chat APIs, vLLM's extras.

Pure functions, no model: a request body is checked field by field against the server's limits
and turned into a `Request`, or refused with an `ApiError` that names the field and the limit
(the reply a client gets, in OpenAI's error format). Replies are built from the engine's
`Completion`s here too, so the server module only moves bytes and batches.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field

MODEL_NAME = "vtb-model"  # what /v1/models lists; a request may name any model (there is one)


@dataclass(frozen=True)
class Limits:
    """What one request may ask for (serve.* in the run config)."""

    max_tokens: int = 1024  # per completion
    max_prompts: int = 256  # prompts in one /v1/completions request
    max_n: int = 16  # completions per prompt
    max_body_bytes: int = 8 << 20
    max_logprobs: int = 5


class ApiError(Exception):
    """A refused request: HTTP status and OpenAI's error object."""

    def __init__(
        self, status: int, message: str, kind: str = "invalid_request_error", param: str | None = None
    ):
        super().__init__(message)
        self.status, self.kind, self.param = status, kind, param

    def body(self) -> dict:
        code = {401: "invalid_api_key", 404: "not_found", 429: "insufficient_quota"}.get(self.status)
        return {"error": {"message": str(self), "type": self.kind, "param": self.param, "code": code}}


@dataclass
class Request:
    """One checked completions or chat request."""

    kind: str  # "completions" or "chat"
    prompts: list[str] | None = None  # completions: the prompts (a chat request is rendered later)
    messages: list[dict] | None = None
    max_tokens: int = 16
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    n: int = 1
    stop: list[str] = field(default_factory=list)
    seed: int = 0
    logprobs: int | None = None  # completions: int; chat: top_logprobs when logprobs is true
    echo_model: str = MODEL_NAME
    truncate: int | None = None  # truncate_prompt_tokens: keep that many last tokens (-1: the window's share)

    def sampling_key(self) -> tuple:
        """Requests with equal keys can share one engine call (a micro-batch)."""
        return (
            self.max_tokens,
            self.temperature,
            self.top_p,
            self.top_k,
            tuple(self.stop),
            self.seed,
            self.logprobs,
        )


def _number(body: dict, name: str, default, kind, low, high):
    value = body.get(name, default)
    if value is None:
        value = default
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or (kind is int and not isinstance(value, int))
    ):
        raise ApiError(
            400,
            f"{name} must be {'an integer' if kind is int else 'a number'}, got {value!r:.50}",
            param=name,
        )
    if not low <= value <= high:
        raise ApiError(400, f"{name}={value} is outside [{low}, {high}]", param=name)
    return kind(value)


def _stop(body: dict) -> list[str]:
    stop = body.get("stop")
    if stop is None:
        return []
    stops = [stop] if isinstance(stop, str) else stop
    if not isinstance(stops, list) or len(stops) > 4 or not all(isinstance(s, str) for s in stops):
        raise ApiError(400, "stop must be a string or a list of at most 4 strings", param="stop")
    return [s for s in stops if s]


def parse(kind: str, body: object, limits: Limits) -> Request:
    """Check a completions or chat body; raise ApiError naming the first bad field."""
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object")
    if body.get("stream"):
        raise ApiError(400, "stream=true is not supported by this server; send stream=false", param="stream")
    req = Request(kind)
    req.max_tokens = _number(
        body, "max_tokens" if kind == "completions" else _chat_max(body), 16, int, 0, limits.max_tokens
    )
    req.temperature = _number(body, "temperature", 1.0, float, 0.0, 2.0)
    req.top_p = _number(body, "top_p", 1.0, float, 1e-6, 1.0)
    req.top_k = _number(body, "top_k", 0, int, -1, 1 << 20)
    req.top_k = max(0, req.top_k)  # vLLM: -1 (or 0) means all tokens
    req.n = _number(body, "n", 1, int, 1, limits.max_n)
    req.seed = _number(body, "seed", 0, int, -(1 << 63), (1 << 63) - 1)
    req.stop = _stop(body)
    if isinstance(body.get("model"), str):
        req.echo_model = body["model"][:200]
    if body.get("truncate_prompt_tokens") is not None:
        req.truncate = _number(body, "truncate_prompt_tokens", -1, int, -1, 1 << 20)
        if req.truncate == 0:
            raise ApiError(
                400, "truncate_prompt_tokens must be -1 or at least 1", param="truncate_prompt_tokens"
            )
    if kind == "completions":
        req.prompts = _prompts(body.get("prompt"), limits)
        if body.get("logprobs") is not None:
            req.logprobs = _number(body, "logprobs", 0, int, 0, limits.max_logprobs)
        if len(req.prompts) * req.n > limits.max_prompts:
            raise ApiError(
                400,
                f"{len(req.prompts)} prompts x n={req.n} is over {limits.max_prompts} completions per request",
                param="n",
            )
    else:
        req.messages = messages(body.get("messages"))
        if body.get("logprobs"):
            req.logprobs = _number(body, "top_logprobs", 0, int, 0, limits.max_logprobs)
    return req


def _chat_max(body: dict) -> str:
    return "max_completion_tokens" if body.get("max_completion_tokens") is not None else "max_tokens"


def _prompts(prompt: object, limits: Limits) -> list[str]:
    prompts = [prompt] if isinstance(prompt, str) else prompt
    if not isinstance(prompts, list) or not prompts or not all(isinstance(p, str) for p in prompts):
        raise ApiError(400, "prompt must be a string or a non-empty list of strings", param="prompt")
    if len(prompts) > limits.max_prompts:
        raise ApiError(
            400, f"{len(prompts)} prompts is over {limits.max_prompts} per request", param="prompt"
        )
    return prompts


def messages(messages: object) -> list[dict]:
    if not isinstance(messages, list) or not messages:
        raise ApiError(400, "messages must be a non-empty list", param="messages")
    out = []
    for m in messages:
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise ApiError(400, "each message needs a role (string) and content", param="messages")
        content = m.get("content")
        if isinstance(content, list):  # content parts: keep the text ones
            content = "".join(
                p.get("text", "") for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)
            )
        if not isinstance(content, str | type(None)):
            raise ApiError(400, "message content must be a string or a list of text parts", param="messages")
        out.append({"role": m["role"][:50], "content": content or ""})
    return out


def completion_reply(req: Request, choices: list, kind: str) -> dict:
    """The reply body for a request whose completions (engine `Completion`s, prompt-major) are ready."""
    created = int(time.time())
    prompt_tokens = sum(c.prompt_tokens for i, c in enumerate(choices) if i % req.n == 0)
    completion_tokens = sum(c.completion_tokens for c in choices)
    usage = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }
    if kind == "completions":
        items = [
            {
                "index": i,
                "text": c.text,
                "logprobs": _completion_logprobs(c) if req.logprobs is not None else None,
                "finish_reason": c.finish_reason,
            }
            for i, c in enumerate(choices)
        ]
        return {
            "id": f"cmpl-{uuid.uuid4().hex}",
            "object": "text_completion",
            "created": created,
            "model": req.echo_model,
            "choices": items,
            "usage": usage,
        }
    items = [
        {
            "index": i,
            "message": {"role": "assistant", "content": c.text},
            "logprobs": _chat_logprobs(c) if req.logprobs is not None else None,
            "finish_reason": c.finish_reason,
        }
        for i, c in enumerate(choices)
    ]
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion",
        "created": created,
        "model": req.echo_model,
        "choices": items,
        "usage": usage,
    }


def _completion_logprobs(c) -> dict:
    offsets, at = [], 0
    for t in c.tokens or []:
        offsets.append(at)
        at += len(t)
    return {
        "tokens": c.tokens,
        "token_logprobs": c.token_logprobs,
        "top_logprobs": c.top_logprobs,
        "text_offset": offsets,
    }


def _chat_logprobs(c) -> dict:
    return {
        "content": [
            {"token": t, "logprob": lp, "top_logprobs": [{"token": k, "logprob": v} for k, v in top.items()]}
            for t, lp, top in zip(c.tokens or [], c.token_logprobs or [], c.top_logprobs or [], strict=True)
        ]
    }


def models_reply(max_model_len: int) -> dict:
    return {
        "object": "list",
        "data": [
            {
                "id": MODEL_NAME,
                "object": "model",
                "created": 0,
                "owned_by": "vtb",
                "max_model_len": max_model_len,
            }
        ],
    }
