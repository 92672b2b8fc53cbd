"""LLMUser against a real local HTTP server that speaks the chat-completions protocol."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest

from tests.chat_server import ChatServer, error, text
from vtb.domains.tau.llm_user import STOP, LLMUser, UserSimulatorError

INSTRUCTION = "You are Yusuf Rossi in 19122 and want to cancel order #W1234567 because you no longer need it."


@pytest.fixture
def serve() -> Iterator:
    servers = []

    def start(script: list[tuple[int, str]]) -> ChatServer:
        server = ChatServer([text(c) if status == 200 else error(status) for status, c in script])
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


def test_conversation_roles_auth_and_usage(serve, monkeypatch) -> None:
    monkeypatch.setenv("SIM_KEY", "sk-test")
    server = serve([(200, "I want to cancel order #W1234567"), (200, " yes \n"), (200, STOP)])
    user = LLMUser(server.url + "/", "sim-model", api_key_env="SIM_KEY", temperature=0.3)
    assert user.reset(INSTRUCTION) == "I want to cancel order #W1234567"
    assert user.step("Sure. Can you confirm the cancellation?") == "yes"
    assert user.step("Done, your order is cancelled.") == STOP
    assert user.usage == {"prompt_tokens": 30, "completion_tokens": 9}

    assert [r["path"] for r in server.requests] == ["/v1/chat/completions"] * 3
    assert all(r["auth"] == "Bearer sk-test" for r in server.requests)
    last = server.requests[-1]["body"]
    assert last["model"] == "sim-model" and last["temperature"] == 0.3
    system, *turns = last["messages"]
    assert system["role"] == "system" and INSTRUCTION in system["content"] and STOP in system["content"]
    assert [m["role"] for m in turns] == ["user", "assistant", "user", "assistant", "user"]
    assert [m["content"] for m in turns[1:]] == [
        "I want to cancel order #W1234567",
        "Sure. Can you confirm the cancellation?",
        "yes",
        "Done, your order is cancelled.",
    ]


def test_no_auth_header_without_key_and_max_turns(serve, monkeypatch) -> None:
    monkeypatch.delenv("SIM_KEY", raising=False)
    server = serve([(200, "hello"), (200, "my zip is 19122")])
    user = LLMUser(server.url, "m", api_key_env="SIM_KEY", max_turns=2)
    assert user.reset(INSTRUCTION) == "hello"
    assert user.step("What is your zip?") == "my zip is 19122"
    assert user.step("Anything else?") == STOP  # third reply would exceed max_turns: no request made
    assert len(server.requests) == 2 and server.requests[0]["auth"] is None


def test_server_errors_are_retried(serve) -> None:
    server = serve([(500, ""), (503, ""), (200, "I want to cancel order #W1234567")])
    user = LLMUser(server.url, "m", retry_backoff_s=0.01)
    assert user.reset(INSTRUCTION) == "I want to cancel order #W1234567"
    assert len(server.requests) == 3 and user.usage == {"prompt_tokens": 10, "completion_tokens": 3}


def test_persistent_server_error_raises(serve) -> None:
    server = serve([(500, "")] * 3)
    user = LLMUser(server.url, "m", retry_backoff_s=0.01)
    with pytest.raises(
        UserSimulatorError, match=r"/v1/chat/completions failed after 3 attempt\(s\): HTTP 500"
    ):
        user.reset(INSTRUCTION)


def test_dead_port_raises_quickly() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    user = LLMUser(f"http://127.0.0.1:{port}/v1", "m", timeout_s=0.5, retry_backoff_s=0.01)
    start = time.monotonic()
    with pytest.raises(
        UserSimulatorError, match=rf"127\.0\.0\.1:{port}/v1/chat/completions failed .*refused"
    ):
        user.reset(INSTRUCTION)
    assert time.monotonic() - start < 5
