"""A real HTTP server on 127.0.0.1 that speaks OpenAI chat-completions, replying from a script.

Stands in for a remote LLM API (the one thing tests cannot have here). Each POST to
/v1/chat/completions pops the next scripted reply; every request is recorded with its
Authorization header, so tests can check what was sent and with which key.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Reply:
    status: int = 200
    message: dict = field(default_factory=lambda: {"role": "assistant", "content": ""})
    usage: dict | None = field(default_factory=lambda: {"prompt_tokens": 10, "completion_tokens": 3})


def text(content: str, **usage: int) -> Reply:
    return Reply(message={"role": "assistant", "content": content}, usage=usage or Reply().usage)


def tool_call(name: str, call_id: str = "call_1", usage: dict | None = None, **arguments: object) -> Reply:
    call = {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}
    return Reply(
        message={"role": "assistant", "content": None, "tool_calls": [call]},
        usage=usage or {"prompt_tokens": 1000, "completion_tokens": 50},
    )


def error(status: int) -> Reply:
    return Reply(status=status)


class ChatServer(ThreadingHTTPServer):
    """Replies from `script`: a `Reply`, or a function of the request body returning one."""

    def __init__(self, script: list, repeat_last: bool = False) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.script = list(script)
        self.repeat_last = repeat_last  # keep answering with the last reply once the script is used up
        self.requests: list[dict] = []  # chat-completions requests (a GET /models is not one)
        self.models: list[str] | None = None  # GET /models lists these; None: 404, as servers without it
        self._lock = threading.Lock()
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"

    def next_reply(self, body: dict) -> Reply:
        with self._lock:
            if len(self.script) > 1 or not self.repeat_last:
                reply = self.script.pop(0)
            else:
                reply = self.script[0]
        return reply(body) if callable(reply) else reply

    def stop(self) -> None:
        self.shutdown()
        self.server_close()


class _Handler(BaseHTTPRequestHandler):
    server: ChatServer

    def do_GET(self) -> None:  # noqa: N802
        listed = self.server.models
        if not self.path.rstrip("/").endswith("/models") or listed is None:
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        data = json.dumps({"object": "list", "data": [{"id": m, "object": "model"} for m in listed]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.requests.append(
            {"path": self.path, "auth": self.headers.get("Authorization"), "body": body}
        )
        reply = self.server.next_reply(body)
        if reply.status == 200:
            out = {
                "id": "chatcmpl-test",
                "object": "chat.completion",
                "model": body.get("model"),
                "choices": [{"index": 0, "message": reply.message, "finish_reason": "stop"}],
            }
            if reply.usage is not None:
                out["usage"] = reply.usage
        else:
            out = {"error": {"message": "overloaded"}}
        data = json.dumps(out).encode()
        self.send_response(reply.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass
