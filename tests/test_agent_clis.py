"""The real agent CLIs (installed by scripts/install_agents.sh) driven through research turns.

Each CLI runs with its shipped config (conf/agent/<name>.yaml) plus one override,
`agent.base_url`, pointing it at tests/api_server.py on the host's 127.0.0.1: the scripted
model asks for one shell command that edits trainer/config.json (aider, which has no tools,
gets the same edit as a SEARCH/REPLACE block), then ends. Checked for each: the edit landed,
every model call reached the server through the egress proxy (logged, one entry each), the
key arrived in the header that vendor's API uses, and the tokens were parsed and charged.

A CLI that is not installed skips, except under VTB_REQUIRE_CLIS=1 (set by .ci/run), where it fails.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.api_server import ApiServer, Step, edit_block
from tests.conftest import BACKENDS, bare_research_env, small_config
from vtb.agents import make_agent
from vtb.agents.cli import agents_dir
from vtb.agents.env import SandboxResearchEnv
from vtb.record import md_text

EDIT = (
    "python3 -c \"import json; p='trainer/config.json'; c=json.load(open(p)); c['epochs']=3; "
    "json.dump(c, open(p, 'w'), indent=2)\""
)


# config name -> binary, key variable, (header, value format) the vendor API reads, API path, base suffix
CLIS = {
    "claude_code": ("claude", "ANTHROPIC_API_KEY", ("x-api-key", "{}"), "/v1/messages", ""),
    "codex": ("codex", "OPENAI_API_KEY", ("authorization", "Bearer {}"), "/v1/responses", "/v1"),
    "aider": ("aider", "ANTHROPIC_API_KEY", ("x-api-key", "{}"), "/v1/messages", ""),
    "opencode": ("opencode", "ANTHROPIC_API_KEY", ("x-api-key", "{}"), "/v1/messages", "/v1"),
    "gemini_cli": ("gemini", "GEMINI_API_KEY", ("x-goog-api-key", "{}"), "GenerateContent", ""),
}
KEY = "sk-real-cli-7d3f9a1c5e2b"
# Hosts a CLI calls on its own that its config cannot switch off: refused and logged (see its config).
NOISE = {
    "codex": {"github.com", "api.github.com", "chatgpt.com"},
    "opencode": {"registry.npmjs.org", "github.com"},
}


def installed(name: str) -> None:
    binary = CLIS[name][0]
    if not (agents_dir() / "bin" / binary).exists():
        message = f"{binary} is not installed: scripts/install_agents.sh {binary}"
        if os.environ.get("VTB_REQUIRE_CLIS") == "1":
            pytest.fail(message)
        pytest.skip(message)


def script(name: str) -> list[Step]:
    """One edit, then a final message: aider has no tools and gets the edit as SEARCH/REPLACE text."""
    return [Step(text=edit_block) if name == "aider" else Step(shell=EDIT)]


def model_calls(server: ApiServer, name: str) -> list[dict]:
    return server.calls(CLIS[name][3])


def check_calls(server: ApiServer, name: str, egress: list[dict]) -> None:
    """The key in the vendor's header on every call; each call logged by the proxy on its own."""
    header, value = CLIS[name][2]
    calls = model_calls(server, name)
    assert calls, f"{name} never called the model: {server.requests}"
    assert all(r["headers"].get(header) == value.format(KEY) for r in calls), [r["headers"] for r in calls]
    port = server.server_address[1]
    logged = [e for e in egress if e["port"] == port and e["allowed"]]
    assert len(logged) == len(server.requests) and all(e["requests"] == 1 for e in logged), (
        egress,
        server.requests,
    )
    assert {e["path"] for e in logged} >= {r["path"] for r in calls}


def _bare_env(tmp_path: Path, backend: str) -> tuple[SandboxResearchEnv, Path]:
    return bare_research_env(tmp_path, backend, {"lr": 0.001, "epochs": 1}, limits=(150, 300))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", list(CLIS))
def test_a_real_cli_turn_edits_through_the_proxy(tmp_path, monkeypatch, name, backend) -> None:
    installed(name)
    monkeypatch.setenv(CLIS[name][1], KEY)
    server = ApiServer(script(name))
    try:
        cfg = small_config(tmp_path, name, 0, f"agent.base_url={server.base}{CLIS[name][4]}").agent
        cfg.turn_wall_s = 120
        env, ws = _bare_env(tmp_path, backend)
        result = make_agent(cfg).turn(env)
    finally:
        server.stop()
    (run,) = [e for e in env.log if "agent_command" in e]
    said = "\n".join(line["line"] for line in run["output"])[-3000:]
    assert run["returncode"] == 0, said
    assert json.loads((ws / "trainer" / "config.json").read_text())["epochs"] == 3, said
    check_calls(server, name, env.egress)
    assert env.charge.agent_tokens > 0 and result.usage.startswith("self-reported"), said
    if name != "aider":  # aider counts tokens with its own tokenizer; the others report the API's
        assert env.charge.agent_tokens == 1050 * len(
            [r for r in model_calls(server, name) if r["body"].get("tools")]
        )
    refused = {e["host"] for e in env.egress if not e["allowed"]}
    assert refused <= NOISE.get(name, set()), f"{name} called hosts its config should turn off: {refused}"


def _files(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and not p.is_symlink()]


@pytest.mark.slow
@pytest.mark.parametrize("name", ["claude_code", "codex", "aider"])
def test_a_real_cli_drives_a_bench_run(
    tmp_path, shared_bench_cache, prefect_server, monkeypatch, name
) -> None:
    """A whole shrunken bench with the shipped config and only the endpoint override (bwrap)."""
    from flows.bench import run_bench

    installed(name)
    monkeypatch.setenv(CLIS[name][1], KEY)
    shared = shared_bench_cache
    server = ApiServer(script(name))
    try:
        cfg = small_config(
            tmp_path,
            name,
            0,
            f"agent.base_url={server.base}{CLIS[name][4]}",
            "agent.max_iterations=1",
            f"cache_dir={shared}",
        )
        result = run_bench(cfg).to_json()
    finally:
        server.stop()
    run_dir = Path(result["record"])
    it1 = json.loads((run_dir / "iterations" / "01.json").read_text())
    assert it1["edits"]["trainer"] == ["config.json"], it1
    assert json.loads((run_dir / "workspace" / "trainer" / "config.json").read_text())["epochs"] == 3
    egress = [json.loads(line) for line in (run_dir / "egress.jsonl").read_text().splitlines()]
    check_calls(server, name, egress)
    assert it1["agent"]["tokens"] > 0 and it1["agent"]["usage"].startswith("self-reported")
    rows = [json.loads(line) for line in (run_dir / "ledger.jsonl").read_text().splitlines()]
    assert sum(r["charge"]["agent_tokens"] for r in rows if r["step"] == "agent") == it1["agent"]["tokens"]
    shown = f"{it1['agent']['tokens']} ({md_text(it1['agent']['usage'])})"
    assert f"| {shown} |" in (run_dir / "report.md").read_text()
    leaks = [str(p) for p in [*_files(run_dir), *_files(shared)] if KEY.encode() in p.read_bytes()]
    assert leaks == []


def test_aider_on_an_openai_compatible_server(tmp_path, monkeypatch) -> None:
    """aider against a chat-completions endpoint (a user's vLLM server): litellm's openai/ route."""
    installed("aider")
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    server = ApiServer(script("aider"))
    try:
        cfg = small_config(
            tmp_path,
            "aider",
            0,
            "agent.model=openai/served-model",
            "agent.env=[OPENAI_API_KEY]",
            f"agent.base_url={server.base}/v1",
            '+agent.set_env.OPENAI_API_BASE="{base_url}"',
        ).agent
        cfg.turn_wall_s = 120
        env, ws = _bare_env(tmp_path, "bwrap")
        result = make_agent(cfg).turn(env)
    finally:
        server.stop()
    (run,) = [e for e in env.log if "agent_command" in e]
    said = "\n".join(line["line"] for line in run["output"])[-3000:]
    assert json.loads((ws / "trainer" / "config.json").read_text())["epochs"] == 3, said
    calls = server.calls("/v1/chat/completions")
    assert calls and all(r["headers"].get("authorization") == f"Bearer {KEY}" for r in calls)
    assert calls[0]["body"]["model"] == "served-model" and result.usage == "self-reported (rounded)"
