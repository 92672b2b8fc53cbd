"""A minimal client for OpenAI-compatible chat-completions endpoints (vLLM, hosted APIs, local servers).

Plain HTTP over the standard library, so the same code talks to a test server on 127.0.0.1, a
vLLM `serve` endpoint or a hosted API without extra packages. The API key is read from a
named environment variable at request time and is never stored on the object, so nothing
that serialises a client (or its config) can leak it. Transient failures (connection errors,
HTTP 5xx/408/429) are retried with a short backoff; anything else raises `ChatError` at once.
"""

from __future__ import annotations

import http.client
import json
import os
import time
import urllib.error
import urllib.request
from dataclasses import dataclass

RETRY_STATUS = {408, 429}


class ChatError(RuntimeError):
    """The endpoint could not produce a reply (after the retries a transient fault gets)."""


@dataclass
class ChatClient:
    base_url: str  # e.g. http://localhost:8000/v1 (the /chat/completions path is appended)
    model: str
    api_key_env: str | None = "OPENAI_API_KEY"  # no Authorization header when unset or empty
    timeout_s: float = 60.0
    retries: int = 2
    retry_backoff_s: float = 0.5

    @property
    def url(self) -> str:
        return self.base_url.rstrip("/") + "/chat/completions"

    def complete(self, messages: list[dict], **params) -> dict:
        """POST one chat-completions request; returns the parsed response body."""
        return self.post({"model": self.model, "messages": messages, **params})

    def post(self, payload: dict) -> dict:
        headers = {"Content-Type": "application/json"}
        key = os.environ.get(self.api_key_env) if self.api_key_env else None
        if key:
            headers["Authorization"] = f"Bearer {key}"
        data = json.dumps(payload).encode()
        for attempt in range(self.retries + 1):
            request = urllib.request.Request(self.url, data=data, headers=headers, method="POST")
            try:
                with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                    body = json.loads(response.read())
                if not isinstance(body, dict):
                    raise ChatError(f"{self.url}: response is not a JSON object: {body!r:.200}")
                return body
            except urllib.error.HTTPError as err:
                detail = err.read().decode(errors="replace")[:200]
                cause = f"HTTP {err.code} {err.reason}: {detail}"
                transient = err.code >= 500 or err.code in RETRY_STATUS
            except (OSError, http.client.HTTPException) as err:  # refused, reset, timed out, cut short
                cause, transient = f"{type(err).__name__}: {err}", True
            except json.JSONDecodeError as err:
                cause, transient = f"response is not JSON ({err.msg})", False
            if not transient or attempt == self.retries:
                break
            time.sleep(self.retry_backoff_s * 2**attempt)
        raise ChatError(f"request to {self.url} failed after {attempt + 1} attempt(s): {cause}")

    def models(self, timeout_s: float = 10.0) -> list[str] | None:
        """GET <base_url>/models once: the names served, or None where the endpoint has no listing
        (HTTP 404/405). Raises ChatError when the endpoint cannot be reached, refuses the key or
        fails (what a run would otherwise learn at its first turn, after provisioning)."""
        headers = {}
        key = os.environ.get(self.api_key_env) if self.api_key_env else None
        if key:
            headers["Authorization"] = f"Bearer {key}"
        url = self.base_url.rstrip("/") + "/models"
        try:
            request = urllib.request.Request(url, headers=headers, method="GET")
            with urllib.request.urlopen(request, timeout=timeout_s) as response:
                body = json.loads(response.read(1 << 20))
        except urllib.error.HTTPError as err:
            if err.code in (404, 405, 501):  # answers, but lists nothing
                return None
            raise ChatError(f"{url}: HTTP {err.code} {err.reason}") from None
        except (OSError, http.client.HTTPException) as err:
            raise ChatError(f"{url}: {type(err).__name__}: {err}") from None
        except ValueError:
            return None  # answers, but not with a JSON listing
        data = body.get("data") if isinstance(body, dict) else None
        if not isinstance(data, list):
            return None
        return [str(m.get("id")) for m in data if isinstance(m, dict) and m.get("id")][:1000]


def usage_of(body: dict) -> tuple[int, int] | None:
    """(prompt_tokens, completion_tokens) of a response, or None when it reports no usage."""
    usage = body.get("usage")
    if not isinstance(usage, dict):
        return None
    try:
        return int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0)
    except (TypeError, ValueError):
        return None
