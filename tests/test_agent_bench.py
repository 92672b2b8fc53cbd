"""Whole bench runs (real Prefect flow, bwrap, training) driven by agent=llm and agent=cli.

The LLM is a real HTTP server on 127.0.0.1 speaking chat-completions with scripted tool calls;
the CLI is a stand-in script that uses the network through the egress proxy.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.chat_server import ChatServer, Reply, tool_call
from tests.conftest import needs_bwrap, small_config
from tests.test_agent_cli import write_stand_in

pytestmark = [pytest.mark.slow, needs_bwrap()]
LLM_KEY = "sk-e2e-llm-5f0c2d9a7b"
CLI_KEY = "sk-e2e-cli-8e1a4b6c3d"


def _files(run_dir: Path) -> list[Path]:
    return [p for p in run_dir.rglob("*") if p.is_file()]


def _assert_key_absent(run_dir: Path, key: str) -> None:
    leaks = [str(p) for p in _files(run_dir) if key.encode() in p.read_bytes()]
    assert leaks == [], leaks


def _bump_lr(body: dict) -> Reply:
    """Write back the trainer config the agent just read, with a higher learning rate and more epochs."""
    config = json.loads(body["messages"][-1]["content"])
    new = {**config, "lr": 3e-3, "epochs": 3, "lr_schedule": "cosine"}
    return tool_call("write_file", path="trainer/config.json", content=json.dumps(new, indent=2))


def test_llm_agent_drives_a_bench_run(tmp_path, shared_bench_cache, prefect_server, monkeypatch) -> None:
    from flows.bench import run_bench

    monkeypatch.setenv("VTB_E2E_KEY", LLM_KEY)
    server = ChatServer(
        [
            tool_call("read_file", path="trainer/config.json"),  # turn 1: read, edit, end
            _bump_lr,
            tool_call("end_turn", notes="lr 3e-3, 3 epochs, cosine"),
            tool_call("list_files"),  # turn 2: never ends its turn; stopped after agent.max_steps calls
        ],
        repeat_last=True,
    )
    try:
        cfg = small_config(
            tmp_path,
            "llm",
            0,
            f"agent.base_url={server.url}",
            "agent.model=testmodel",
            "agent.api_key_env=VTB_E2E_KEY",
            "agent.max_iterations=2",
            "agent.max_steps=4",
            "+agent.prices.testmodel={input: 3.0, output: 15.0}",
            f"cache_dir={shared_bench_cache}",
        )
        result = run_bench(cfg).to_json()
    finally:
        server.stop()
    run_dir = Path(result["record"])
    assert len(server.requests) == 3 + 4 and all(r["auth"] == f"Bearer {LLM_KEY}" for r in server.requests)

    it1, it2 = (json.loads((run_dir / "iterations" / f"0{i}.json").read_text()) for i in (1, 2))
    assert it1["edits"] == {"trainer": ["config.json"]} and it1["val_score"] is not None
    assert it1["agent"]["tokens"] == 3 * 1050 and it1["agent"]["stopped"] is None
    assert it2["agent"]["stopped"] == "steps" and it2["agent"]["tokens"] == 4 * 1050
    assert it2["val_score"] is not None  # the stopped turn's workspace is still trained and validated
    assert it1["agent"]["cost_usd"] == pytest.approx(3 * (1000 * 3.0 + 50 * 15.0) / 1e6)

    # charged to the ledger and reported; the run went on to selection and grading
    assert result["budget"]["agent_tokens"] == 7 * 1050
    assert result["budget"]["agent_cost_usd"] == pytest.approx(7 * 0.00375)
    agent_rows = [json.loads(line) for line in (run_dir / "ledger.jsonl").read_text().splitlines()]
    assert sum(r["charge"]["agent_tokens"] for r in agent_rows if r["step"] == "agent") == 7 * 1050
    assert 0.0 <= result["submitted"]["test_score"] <= 1.0 and (run_dir / "grading.json").exists()
    report = (run_dir / "report.md").read_text()
    assert "trainer: config.json" in report and f"| 3150 (metered) | ${3 * 0.00375:.4f} |" in report
    assert (
        f"7350 tokens, ${7 * 0.00375:.4f}" in report
        and "stopped at the turn's limit of 4 model calls" in report
    )
    trajectory = json.loads((run_dir / "trajectories" / "01.json").read_text())
    assert [e["llm_call"] for e in trajectory if "llm_call" in e] == [1, 2, 3]
    assert json.loads((run_dir / "submission" / "trainer" / "config.json").read_text())["lr"] == 3e-3 or (
        result["submitted"]["iteration"] == 0
    )
    _assert_key_absent(run_dir, LLM_KEY)
    assert (
        "VTB_E2E_KEY" in (run_dir / "config.json").read_text()
    )  # the variable's name is recorded, not its value


def test_cli_agent_network_goes_only_through_the_proxy(
    tmp_path, shared_bench_cache, web, prefect_server, monkeypatch
) -> None:
    from flows.bench import run_bench

    allowed_srv, other = web
    a_port, o_port = allowed_srv.server_address[1], other.server_address[1]
    monkeypatch.setenv("VTB_CLI_KEY", CLI_KEY)
    script = write_stand_in(tmp_path / "cli-install", a_port, o_port)
    cfg = small_config(
        tmp_path, "cli", 0, "agent.max_iterations=2", "agent.usage=claude", f"cache_dir={shared_bench_cache}"
    )
    cfg.agent.command = f"{script} {{prompt_file}}"
    cfg.agent.allow_hosts = [f"127.0.0.1:{a_port}"]
    cfg.agent.env = ["VTB_CLI_KEY"]
    cfg.agent.mounts = [str(script.parent)]
    result = run_bench(cfg).to_json()
    run_dir = Path(result["record"])

    assert result["iterations"] == 1  # the stand-in created .submit: research ends after its turn
    it1 = json.loads((run_dir / "iterations" / "01.json").read_text())
    assert it1["edits"]["trainer"] == ["config.json"] and it1["notes"] == "cli: exited 0, submitted"
    assert it1["agent"]["tokens"] == 730 and it1["agent"]["cost_usd"] == pytest.approx(0.25)
    egress = [json.loads(line) for line in (run_dir / "egress.jsonl").read_text().splitlines()]
    assert [(e["iteration"], e["port"], e["allowed"], e["status"]) for e in egress] == [
        (1, a_port, True, "done"),
        (1, o_port, False, "refused"),
    ]
    assert allowed_srv.hits == ["/api"] and other.hits == []  # refused and direct requests never arrived
    (run,) = [
        e for e in json.loads((run_dir / "trajectories" / "01.json").read_text()) if "agent_command" in e
    ]
    said = [(line["stream"], line["line"]) for line in run["output"]]
    assert ("stdout", "allowed 200") in said and ("stdout", "prompt ok") in said
    assert any(s == "stdout" and text.startswith("refused failed") and "403" in text for s, text in said)
    assert any(s == "stdout" and text.startswith("direct failed") for s, text in said)
    assert ("stderr", "my key is [redacted:VTB_CLI_KEY]") in said
    assert "[redacted:VTB_CLI_KEY]" in (run_dir / "workspace" / "data" / "notes.txt").read_text()
    _assert_key_absent(run_dir, CLI_KEY)
    assert 0.0 <= result["submitted"]["test_score"] <= 1.0
