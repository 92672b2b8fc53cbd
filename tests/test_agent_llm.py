"""agent=llm against a real local chat-completions server, acting in a real bwrap research sandbox."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.chat_server import ChatServer, Reply, error, text, tool_call
from tests.conftest import needs_bwrap
from vtb.agents import Feedback, make_agent
from vtb.agents.env import SandboxResearchEnv
from vtb.agents.llm import price_of
from vtb.config import AgentConfig
from vtb.ledger import LedgerSummary
from vtb.runner import research_mounts
from vtb.sandbox import make_sandbox
from vtb.sandbox.base import Limits

pytestmark = needs_bwrap()
KEY = "sk-test-0123456789abcdef"


@pytest.fixture
def env(tmp_path: Path) -> SandboxResearchEnv:
    ws, data, base = tmp_path / "ws", tmp_path / "data", tmp_path / "base"
    for d in (ws / "data", ws / "trainer", ws / "harness", data / "research", base):
        d.mkdir(parents=True)
    (ws / "trainer" / "config.json").write_text(json.dumps({"lr": 0.001, "epochs": 2}))
    (ws / "data" / "train.jsonl").write_text('{"prompt": "1+1", "completion": " 2"}\n')
    (data / "research" / "val.jsonl").write_text("{}\n")
    fb = Feedback(
        task="math",
        iteration=1,
        max_iterations=3,
        seed=0,
        history=[
            {
                "iteration": 0,
                "snapshot": "s0",
                "edits": {},
                "notes": "initial system",
                "val_score": 0.25,
                "charge": {},
            }
        ],
        budget=LedgerSummary(unit="flops", limit=1e13, used=1e12, left=9e12),
    )
    return SandboxResearchEnv(
        ws,
        tmp_path / "store",
        fb,
        make_sandbox("bwrap"),
        research_mounts(ws, data, base),
        Limits(wall_seconds=60, cpu_seconds=60),
    )


@pytest.fixture
def server():
    servers: list[ChatServer] = []

    def start(script: list, repeat_last: bool = False) -> ChatServer:
        servers.append(ChatServer(script, repeat_last))
        return servers[-1]

    yield start
    for s in servers:
        s.stop()


def _cfg(url: str, **kw) -> AgentConfig:
    prices = {"test-model": {"input": 3.0, "output": 15.0}}
    return AgentConfig(
        name="llm", base_url=url, model="test-model", api_key_env="VTB_TEST_KEY", prices=prices, **kw
    )


def _bump_lr(body: dict) -> Reply:
    """Write back the trainer config the agent just read, with a higher learning rate."""
    config = json.loads(body["messages"][-1]["content"])
    return tool_call("write_file", path="trainer/config.json", content=json.dumps({**config, "lr": 0.003}))


def test_tool_loop_edits_runs_and_charges(env, server, monkeypatch) -> None:
    monkeypatch.setenv("VTB_TEST_KEY", KEY)
    srv = server(
        [
            tool_call("list_files"),
            tool_call("read_file", path="trainer/config.json"),
            _bump_lr,
            tool_call("run", command="wc -l < data/train.jsonl; ls /data; uname -n"),
            tool_call("feedback"),
            tool_call("end_turn", notes="raised lr to 3e-3"),
        ]
    )
    result = make_agent(_cfg(srv.url)).turn(env)

    assert result.done is False and result.stopped is None and result.notes == "llm: raised lr to 3e-3"
    assert json.loads((env.workspace / "trainer" / "config.json").read_text()) == {"lr": 0.003, "epochs": 2}
    assert all(r["auth"] == f"Bearer {KEY}" for r in srv.requests) and len(srv.requests) == 6
    first = srv.requests[0]["body"]
    assert first["model"] == "test-model" and {t["function"]["name"] for t in first["tools"]} >= {
        "run",
        "end_turn",
    }
    system = first["messages"][0]["content"]
    assert "Iteration 1 of 3" in system and "trainer/config.json" in system and "| 0 | 0.250 |" in system
    tool_results = [m for m in srv.requests[-1]["body"]["messages"] if m["role"] == "tool"]
    assert "data/train.jsonl" in tool_results[0]["content"]  # list_files
    ran = json.loads(tool_results[3]["content"])  # the command ran in the sandbox: ro /data, its own hostname
    assert ran["returncode"] == 0 and ran["stdout"].split() == ["1", "val.jsonl", "vtb"]
    assert json.loads(tool_results[4]["content"])["history"][0]["val_score"] == 0.25
    # 6 calls x (1000 prompt + 50 completion) tokens at $3 / $15 per 1M
    assert env.charge.agent_tokens == 6 * 1050
    assert env.charge.agent_cost_usd == pytest.approx(6 * (1000 * 3 + 50 * 15) / 1e6)
    assert env.charge.cpu_seconds > 0  # the command's sandbox time is charged too
    assert [e["llm_call"] for e in env.log if "llm_call" in e] == [1, 2, 3, 4, 5, 6]


def test_step_limit_stops_the_turn(env, server) -> None:
    srv = server([tool_call("read_file", path="trainer/config.json")], repeat_last=True)
    result = make_agent(_cfg(srv.url, max_steps=3)).turn(env)
    assert result.stopped == "steps" and result.done is False and "3 model calls" in result.notes
    assert len(srv.requests) == 3 and env.charge.agent_tokens == 3 * 1050


def test_token_limit_stops_the_turn(env, server) -> None:
    big = {"prompt_tokens": 90_000, "completion_tokens": 10_000}
    srv = server([tool_call("list_files", usage=big)], repeat_last=True)
    result = make_agent(_cfg(srv.url, max_tokens=250_000)).turn(env)
    assert result.stopped == "tokens" and len(srv.requests) == 3  # 100k, 200k, 300k >= 250k: stop
    assert env.charge.agent_tokens == 300_000
    # each call may only ask for what is left of the turn's tokens
    assert [r["body"]["max_tokens"] for r in srv.requests] == [4096, 4096, 4096]
    assert env.charge.agent_cost_usd == pytest.approx(
        price_of(_cfg("").prices, "test-model", 270_000, 30_000)
    )


def test_bad_calls_become_tool_errors_and_text_gets_a_nudge(env, server) -> None:
    outside = tool_call("read_file", path="../../etc/passwd")
    bad_json = Reply(
        message={
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c9", "type": "function", "function": {"name": "run", "arguments": "{not json"}}
            ],
        }
    )
    srv = server(
        [text("Let me think."), outside, bad_json, tool_call("nope"), tool_call("end_turn", submit=True)]
    )
    result = make_agent(_cfg(srv.url)).turn(env)
    assert result.done is True  # submit=true ends the research
    msgs = srv.requests[-1]["body"]["messages"]
    assert msgs[3] == {
        "role": "user",
        "content": "Continue with a tool call. When your edits for this turn are done, call end_turn.",
    }
    tool_msgs = [m["content"] for m in msgs if m["role"] == "tool"]
    assert "outside the workspace" in tool_msgs[0]
    assert "not valid JSON" in tool_msgs[1] and "unknown tool 'nope'" in tool_msgs[2]


def test_missing_usage_is_estimated(env, server) -> None:
    no_usage = tool_call("list_files")
    no_usage.usage = None
    srv = server([no_usage, tool_call("end_turn")])
    make_agent(_cfg(srv.url)).turn(env)
    calls = [e for e in env.log if "llm_call" in e]
    assert calls[0]["estimated"] is True and calls[0]["prompt_tokens"] > 100  # the system prompt alone
    assert calls[1]["estimated"] is False


def test_endpoint_failure_ends_the_research_without_raising(env, server) -> None:
    srv = server([error(401)])
    result = make_agent(_cfg(srv.url)).turn(env)
    assert result.done is True and "HTTP 401" in result.notes and len(srv.requests) == 1
    assert result.error and "the endpoint failed" in result.error  # the bench ends errored (issue 39)


def test_an_endpoint_that_does_not_answer_or_lacks_the_model_is_refused_before_any_work(server) -> None:
    """agent=llm's preflight (run before provisioning): a dead endpoint ran a whole bench and
    submitted the initial system with exit 0, looking like agent=noop (issue 39)."""
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}/v1"
    with pytest.raises(
        ValueError, match=r"the endpoint does not answer .*Connection refused.*agent\.base_url"
    ):
        make_agent(_cfg(dead)).preflight()
    srv = server([])
    make_agent(_cfg(srv.url)).preflight()  # no model listing (404): the endpoint answers, that is all
    srv.models = ["other-model", "test-model"]
    make_agent(_cfg(srv.url)).preflight()
    srv.models = ["other-model"]
    with pytest.raises(ValueError, match=r"does not serve agent.model=test-model \(it lists: other-model\)"):
        make_agent(_cfg(srv.url)).preflight()
    assert srv.requests == []  # no chat request (no tokens) was spent on the checks


def test_missing_endpoint_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match=r"agent\.base_url=.*agent\.model="):
        make_agent(AgentConfig(name="llm"))


def test_price_table() -> None:
    prices = {"m": {"input": 2.0, "output": 8.0}, "default": {"input": 1.0, "output": 1.0}}
    assert price_of(prices, "m", 1_000_000, 500_000) == pytest.approx(6.0)
    assert price_of(prices, "other", 1_000_000, 0) == pytest.approx(1.0)
    assert price_of({}, "m", 10**9, 10**9) == 0.0
