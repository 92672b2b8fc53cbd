"""A real HTTP server on 127.0.0.1 that speaks three LLM APIs, for driving the real agent CLIs.

Stands in for the remote APIs (the one thing tests cannot have here):

- Anthropic Messages, `POST /v1/messages` (streamed as server-sent events or one JSON body):
  Claude Code, aider and OpenCode with an Anthropic model;
- OpenAI Responses, `POST /v1/responses` (streamed): Codex CLI;
- OpenAI chat completions, `POST /v1/chat/completions` (streamed or not): aider and OpenCode
  with an OpenAI-compatible model, and agent=llm;
- Gemini API, `POST /v1beta/models/<m>:streamGenerateContent` (and `:generateContent`): Gemini CLI.

Each model call gets the next `Step` of the script (then `final` forever): a shell command
run through the tool the client offered (Claude Code's `Bash`, Codex's `shell`), or plain text
for a client that edits from the model's text (aider). Every request is recorded with its
path and headers, so a test sees which key arrived in which header.
"""

from __future__ import annotations

import json
import re
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

USAGE = {"input": 1000, "output": 50}  # tokens each reply reports
SHELL_TOOLS = ("Bash", "bash", "shell", "shell_command", "exec_command", "run_shell_command")


@dataclass
class Step:
    """One model reply: `shell` through the client's shell tool, or `text` to a client without tools.

    A request that offers no tools while the step has only `shell` (a CLI's side call: a session
    title, a routing question) gets a short text and leaves the step for the next call.
    """

    shell: str | None = None
    text: str | Callable[[dict], str] | None = None  # a function of the request body, or fixed

    def reply_text(self, body: dict) -> str:
        return (self.text(body) if callable(self.text) else self.text) or "Done."


class ApiServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, script: list[Step], final: Step | None = None) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.script = list(script)
        self.final = final or Step(text="Done: the trainer config is edited.")
        self.side_calls = 0
        self.requests: list[dict] = []
        self._lock = threading.Lock()
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def next_step(self, body: dict) -> Step:
        with self._lock:
            step = self.script[0] if self.script else self.final
            if _tool(body) is None and step.text is None:
                self.side_calls += 1
                return Step(text="Editing the trainer config")
            if self.script:
                self.script.pop(0)
            return step

    def calls(self, path: str) -> list[dict]:
        """The recorded model calls to one API path (query strings ignored)."""
        return [r for r in self.requests if r["path"].split("?")[0].endswith(path)]

    def stop(self) -> None:
        self.shutdown()
        self.server_close()


def _texts(value: object) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _texts(v)]
    if isinstance(value, list):
        return [t for v in value for t in _texts(v)]
    return []


def edit_block(body: dict, key: str = "epochs", value: int = 3) -> str:
    """aider's edit setting `key` in trainer/config.json, from the file text the request carries
    (aider sends the files it edits in the chat): a SEARCH/REPLACE block where its system prompt
    asks for those (the diff format), else the whole new file (the whole format)."""
    pattern = re.compile(rf'^([ \t]*)"{key}": *([^,\n]*?)(,?)[ \t]*$', re.M)
    texts = _texts(body)
    diff = any("SEARCH/REPLACE" in t for t in texts)
    for text in texts:
        if not (found := pattern.search(text)):
            continue
        indent, old, comma = found.groups()
        search, replace = f'{indent}"{key}": {old}{comma}', f'{indent}"{key}": {value}{comma}'
        if diff:
            return f"trainer/config.json\n```\n<<<<<<< SEARCH\n{search}\n=======\n{replace}\n>>>>>>> REPLACE\n```\n"
        fence = text.rfind("```", 0, found.start()), text.find("```", found.end())
        whole = text[text.index("\n", fence[0]) + 1 : fence[1]].replace(search, replace).rstrip("\n")
        return f"trainer/config.json\n```\n{whole}\n```\n"
    return "I could not find the trainer config."


def _tool(body: dict) -> tuple[str, str] | None:
    """(tool name, API flavour) of the shell tool the client offered, if any."""
    tools = list(body.get("tools") or [])
    tools += [f for t in tools for f in t.get("functionDeclarations") or []]  # Gemini's nesting
    for tool in tools:
        name = tool.get("name") or (tool.get("function") or {}).get("name")
        if name in SHELL_TOOLS:
            return name, "array" if name == "shell" else "string"
    return None


def _shell_args(name: str, flavour: str, command: str) -> dict:
    if flavour == "array":  # Codex's `shell`: argv plus workdir
        return {"command": ["bash", "-lc", command]}
    key = "cmd" if name == "exec_command" else "command"
    return {key: command, "description": "edit the trainer config"}


class _Handler(BaseHTTPRequestHandler):
    server: ApiServer
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        self._record(None)
        self._json(404, {"error": {"type": "not_found", "message": f"no {self.path} here"}})

    def do_POST(self) -> None:  # noqa: N802
        length = int(self.headers.get("Content-Length") or 0)
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
        except ValueError:
            body = {}
        self._record(body)
        path = self.path.split("?")[0]
        if path.endswith("/messages/count_tokens"):
            return self._json(200, {"input_tokens": USAGE["input"]})
        if path.endswith("/messages"):
            return self._anthropic(body, self.server.next_step(body))
        if path.endswith("/responses"):
            return self._responses(body, self.server.next_step(body))
        if path.endswith("/chat/completions"):
            return self._chat(body, self.server.next_step(body))
        if path.endswith(":countTokens"):
            return self._json(200, {"totalTokens": USAGE["input"]})
        if path.endswith(("GenerateContent", "generateContent")):
            return self._gemini(body, self.server.next_step(body), stream="stream" in path)
        self._json(404, {"error": {"type": "not_found", "message": f"no {path} here"}})

    def _record(self, body: dict | None) -> None:
        headers = {k.lower(): v for k, v in self.headers.items()}
        self.server.requests.append(
            {"method": self.command, "path": self.path, "headers": headers, "body": body}
        )

    # -- Anthropic Messages ------------------------------------------------------------------

    def _anthropic(self, body: dict, step: Step) -> None:
        tool = _tool(body)
        msg_id = f"msg_{uuid.uuid4().hex[:12]}"
        if step.shell and tool:
            block = {
                "type": "tool_use",
                "id": f"toolu_{uuid.uuid4().hex[:12]}",
                "name": tool[0],
                "input": _shell_args(*tool, step.shell),
            }
            stop = "tool_use"
        else:
            block, stop = {"type": "text", "text": step.reply_text(body)}, "end_turn"
        usage = {"input_tokens": USAGE["input"], "output_tokens": USAGE["output"]}
        message = {
            "id": msg_id,
            "type": "message",
            "role": "assistant",
            "model": body.get("model", "m"),
            "content": [block],
            "stop_reason": stop,
            "stop_sequence": None,
            "usage": usage,
        }
        if not body.get("stream"):
            return self._json(200, message)
        start = {**message, "content": [], "stop_reason": None, "usage": {**usage, "output_tokens": 1}}
        if block["type"] == "tool_use":
            opened = {**block, "input": {}}
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
        else:
            opened = {"type": "text", "text": ""}
            delta = {"type": "text_delta", "text": block["text"]}
        self._sse(
            [
                ("message_start", {"type": "message_start", "message": start}),
                ("content_block_start", {"type": "content_block_start", "index": 0, "content_block": opened}),
                ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta}),
                ("content_block_stop", {"type": "content_block_stop", "index": 0}),
                (
                    "message_delta",
                    {
                        "type": "message_delta",
                        "delta": {"stop_reason": stop, "stop_sequence": None},
                        "usage": {"output_tokens": USAGE["output"]},
                    },
                ),
                ("message_stop", {"type": "message_stop"}),
            ]
        )

    # -- OpenAI Responses --------------------------------------------------------------------

    def _responses(self, body: dict, step: Step) -> None:
        tool = _tool(body)
        rid = f"resp_{uuid.uuid4().hex[:12]}"
        if step.shell and tool:
            item = {
                "type": "function_call",
                "id": f"fc_{uuid.uuid4().hex[:12]}",
                "status": "completed",
                "call_id": f"call_{uuid.uuid4().hex[:12]}",
                "name": tool[0],
                "arguments": json.dumps(_shell_args(*tool, step.shell)),
            }
        else:
            item = {
                "type": "message",
                "id": f"msg_{uuid.uuid4().hex[:12]}",
                "status": "completed",
                "role": "assistant",
                "content": [{"type": "output_text", "text": step.reply_text(body), "annotations": []}],
            }
        usage = {
            "input_tokens": USAGE["input"],
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": USAGE["output"],
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": USAGE["input"] + USAGE["output"],
        }
        response = {
            "id": rid,
            "object": "response",
            "model": body.get("model", "m"),
            "status": "in_progress",
            "output": [],
        }
        self._sse(
            [
                ("response.created", {"type": "response.created", "response": response}),
                (
                    "response.output_item.added",
                    {"type": "response.output_item.added", "output_index": 0, "item": item},
                ),
                (
                    "response.output_item.done",
                    {"type": "response.output_item.done", "output_index": 0, "item": item},
                ),
                (
                    "response.completed",
                    {
                        "type": "response.completed",
                        "response": {**response, "status": "completed", "output": [item], "usage": usage},
                    },
                ),
            ]
        )

    # -- OpenAI chat completions -------------------------------------------------------------

    def _chat(self, body: dict, step: Step) -> None:
        tool = _tool(body)
        if step.shell and tool:
            call = {
                "id": f"call_{uuid.uuid4().hex[:12]}",
                "type": "function",
                "function": {"name": tool[0], "arguments": json.dumps(_shell_args(*tool, step.shell))},
            }
            message, finish = {"role": "assistant", "content": None, "tool_calls": [call]}, "tool_calls"
        else:
            message, finish = {"role": "assistant", "content": step.reply_text(body)}, "stop"
        usage = {
            "prompt_tokens": USAGE["input"],
            "completion_tokens": USAGE["output"],
            "total_tokens": USAGE["input"] + USAGE["output"],
        }
        base = {"id": f"chatcmpl-{uuid.uuid4().hex[:12]}", "model": body.get("model", "m"), "created": 0}
        if not body.get("stream"):
            choice = {"index": 0, "message": message, "finish_reason": finish}
            return self._json(200, {**base, "object": "chat.completion", "choices": [choice], "usage": usage})
        delta = dict(message)
        if "tool_calls" in delta:
            delta["tool_calls"] = [{"index": 0, **c} for c in delta["tool_calls"]]
        chunk = {**base, "object": "chat.completion.chunk"}
        events = [
            (None, {**chunk, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}),
            (None, {**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]}),
            (None, {**chunk, "choices": [], "usage": usage}),
        ]
        self._sse(events, done=True)

    # -- Gemini API ------------------------------------------------------------------------------

    def _gemini(self, body: dict, step: Step, stream: bool) -> None:
        tool = _tool(body)
        if step.shell and tool:
            part = {"functionCall": {"name": tool[0], "args": _shell_args(*tool, step.shell)}}
        else:
            part = {"text": step.reply_text(body)}
        usage = {
            "promptTokenCount": USAGE["input"],
            "candidatesTokenCount": USAGE["output"],
            "totalTokenCount": USAGE["input"] + USAGE["output"],
        }
        out = {
            "candidates": [
                {"content": {"role": "model", "parts": [part]}, "finishReason": "STOP", "index": 0}
            ],
            "usageMetadata": usage,
            "modelVersion": "test",
        }
        if stream:
            return self._sse([(None, out)])
        self._json(200, out)

    # -- wire ----------------------------------------------------------------------------------

    def _json(self, status: int, obj: dict) -> None:
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _sse(self, events: list[tuple[str | None, dict]], done: bool = False) -> None:
        chunks = [
            (f"event: {name}\n" if name else "") + f"data: {json.dumps(data)}\n\n" for name, data in events
        ]
        if done:
            chunks.append("data: [DONE]\n\n")
        data = "".join(chunks).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass
