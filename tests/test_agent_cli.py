"""The egress proxy and agent=cli: allowlist, logging, no direct network, key scrubbing."""

from __future__ import annotations

import json
import os
import socket
import stat
import sys
from pathlib import Path

import pytest

from tests.conftest import BACKENDS, bare_research_env, needs_bwrap
from vtb.agents import make_agent
from vtb.agents.cli import fill
from vtb.agents.cli_usage import parse_usage
from vtb.agents.env import redact, scrub_workspace, secret_values
from vtb.config import AgentConfig
from vtb.sandbox.egress import EgressProxy, allowed, parse_allow

KEY = "sk-cli-fedcba9876543210"


def test_allowlist_rules() -> None:
    rules = parse_allow(["api.anthropic.com", "127.0.0.1:8000", "*.example.org"])
    assert allowed(rules, "api.anthropic.com", 443) and allowed(rules, "API.anthropic.com", 80)
    assert not allowed(rules, "api.anthropic.com", 22)  # no port given: 443 and 80 only
    assert allowed(rules, "127.0.0.1", 8000) and not allowed(rules, "127.0.0.1", 8001)
    assert allowed(rules, "a.b.example.org", 443) and not allowed(rules, "example.org.evil.com", 443)
    with pytest.raises(ValueError, match="host or host:port"):
        parse_allow(["https://api.openai.com/v1"])


def _ask(path: Path, request: bytes) -> bytes:
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(str(path))
        s.sendall(request)
        out = b""
        while chunk := s.recv(4096):
            out += chunk
    return out


def test_proxy_connect_and_plain_http_are_logged(tmp_path, web, host_server) -> None:
    allowed_srv, other = web
    a_port, o_port = allowed_srv.server_address[1], other.server_address[1]
    t_port, _ = host_server
    with EgressProxy([f"127.0.0.1:{a_port}", f"127.0.0.1:{t_port}"], tmp_path / "eg") as proxy:
        got = _ask(
            proxy.path, f"GET http://127.0.0.1:{a_port}/x?y=1 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode()
        )
        assert got.startswith(b"HTTP/1.0 200") and got.endswith(b"hello /x?y=1")
        tunnel = _ask(proxy.path, f"CONNECT 127.0.0.1:{t_port} HTTP/1.1\r\n\r\n".encode())
        assert tunnel == b"HTTP/1.1 200 Connection established\r\n\r\nHOST-SERVER-DATA"
        refused = _ask(proxy.path, f"GET http://127.0.0.1:{o_port}/secret HTTP/1.1\r\n\r\n".encode())
        assert refused.startswith(b"HTTP/1.1 403") and b"allowlist" in refused
        assert _ask(proxy.path, b"GET /relative HTTP/1.1\r\n\r\n").startswith(b"HTTP/1.1 400")
    assert other.hits == [] and allowed_srv.hits == ["/x?y=1"]
    log = [(e["method"], e["port"], e["allowed"], e["status"]) for e in proxy.log]
    assert log == [
        ("GET", a_port, True, "done"),
        ("CONNECT", t_port, True, "done"),
        ("GET", o_port, False, "refused"),
        ("GET /relative HTTP/1.1", None, False, "bad-request"),
    ]
    assert proxy.log[0]["bytes_down"] > 0 and proxy.log[1]["bytes_down"] == len(b"HOST-SERVER-DATA")
    assert not proxy.path.exists()


def test_usage_from_cli_output() -> None:
    claude = [
        '{"type":"system"}',
        "not json",
        '{"type":"result","total_cost_usd":0.42,"usage":{"input_tokens":100,"cache_read_input_tokens":900,'
        '"output_tokens":50}}',
    ]
    u = parse_usage(claude, "claude")
    assert (u.prompt, u.completion, u.cost_usd, u.source) == (1000, 50, 0.42, "self-reported")
    verbose = "[" + ", ".join(['{"type":"system"}', claude[2]]) + "]"  # --output-format json --verbose
    assert parse_usage([verbose], "claude").prompt == 1000
    codex = ['{"type":"turn.completed","usage":{"input_tokens":10,"output_tokens":5}}'] * 2
    assert (parse_usage(codex, "codex").prompt, parse_usage(codex, "codex").completion) == (20, 10)
    opencode = [
        '{"type":"step_finish","part":{"tokens":{"input":100,"output":5,"reasoning":2,'
        '"cache":{"read":50,"write":10}},"cost":0.01}}'
    ] * 2
    u = parse_usage(opencode, "opencode")
    assert (u.prompt, u.completion, u.cost_usd) == (320, 14, 0.02)
    gemini = json.dumps(
        {
            "response": "ok",
            "stats": {
                "models": {
                    "a": {"tokens": {"prompt": 900, "candidates": 40, "thoughts": 10}},
                    "b": {"tokens": {"prompt": 100, "candidates": 0}},
                }
            },
        },
        indent=2,
    )
    u = parse_usage(gemini.splitlines(), "gemini")  # pretty-printed over many lines
    assert (u.prompt, u.completion, u.cost_usd) == (1000, 50, None)
    aider = [
        "Tokens: 2.4k sent, 27 received. Cost: $0.0076 message, $0.0076 session.",
        "Tokens: 1.2k sent, 3.0k cache write, 800 cache hit, 1.1k received. Cost: $0.01 message, $0.02 session.",
    ]
    u = parse_usage(aider, "aider")
    assert (u.prompt, u.completion, u.source) == (2400 + 5000, 27 + 1100, "self-reported (rounded)")
    assert u.cost_usd == pytest.approx(0.0176)
    assert parse_usage(claude, "none").source == "none" and parse_usage(["junk"], "claude").prompt == 0


def test_cli_config_errors_name_the_fix(monkeypatch) -> None:
    with pytest.raises(ValueError, match="agent.command"):
        make_agent(AgentConfig(name="cli"))
    with pytest.raises(ValueError, match="not on the sandbox's PATH.*npm install -g x"):
        make_agent(
            AgentConfig(name="x", factory="cli", command="no-such-cli -p", install_hint="npm install -g x")
        )
    monkeypatch.delenv("VTB_NO_KEY", raising=False)
    with pytest.raises(ValueError, match="set VTB_NO_KEY"):
        make_agent(AgentConfig(name="cli", command="true", env=["VTB_NO_KEY"]))
    assert fill("a {prompt_file} ${HOME} {x}", prompt_file="/p") == "a /p ${HOME} {x}"


def test_redaction(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("VTB_K", KEY)
    monkeypatch.setenv("VTB_SHORT", "abc")
    secrets = secret_values(["VTB_K", "VTB_SHORT", "VTB_UNSET"])
    assert secrets == {"VTB_K": KEY}  # too short to be a key: left alone
    assert redact({"a": [f"x{KEY}y", 3]}, secrets) == {"a": ["x[redacted:VTB_K]y", 3]}
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "leak.txt").write_text(f"key={KEY}\n")
    (tmp_path / "ok.txt").write_text("nothing\n")
    assert scrub_workspace(tmp_path, secrets) == ["d/leak.txt"]
    assert (tmp_path / "d" / "leak.txt").read_text() == "key=[redacted:VTB_K]\n"


STAND_IN = """#!/usr/bin/env python3
# A stand-in CLI agent: reads its prompt, uses the network three ways, leaks its key, edits a file.
import json, os, socket, sys, urllib.request
prompt = open(sys.argv[1]).read()
print("prompt ok" if "Iteration" in prompt else "prompt missing")
for name, url in (("allowed", "http://127.0.0.1:{a}/api"), ("refused", "http://127.0.0.1:{o}/exfil")):
    try:
        print(name, urllib.request.urlopen(url, timeout=10).status, flush=True)
    except Exception as e:
        print(name, "failed", e, flush=True)
try:
    socket.create_connection(("127.0.0.1", {o}), timeout=5)  # not allowlisted: nothing listens inside
    print("direct connected")
except OSError as e:
    print("direct failed", e)
print("my key is", os.environ.get("VTB_CLI_KEY"), file=sys.stderr)
open("data/notes.txt", "w").write("key " + os.environ["VTB_CLI_KEY"] + "\\n")
cfg = json.load(open("trainer/config.json"))
cfg["epochs"] = 3
json.dump(cfg, open("trainer/config.json", "w"))
open(".submit", "w").close()
print(json.dumps({{"type": "result", "total_cost_usd": 0.25, "usage": {{"input_tokens": 700, "output_tokens": 30}}}}))
"""


def write_stand_in(folder: Path, allowed_port: int, other_port: int) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "fake-cli"
    script.write_text(STAND_IN.format(a=allowed_port, o=other_port))
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


@pytest.mark.parametrize("backend", BACKENDS)
def test_cli_turn_through_the_proxy(tmp_path, web, monkeypatch, backend) -> None:
    allowed_srv, other = web
    a_port, o_port = allowed_srv.server_address[1], other.server_address[1]
    monkeypatch.setenv("VTB_CLI_KEY", KEY)
    script = write_stand_in(tmp_path / "cli", a_port, o_port)
    cfg = AgentConfig(
        name="fake",
        factory="cli",
        command=f"{script} {{prompt_file}}",
        allow_hosts=[f"127.0.0.1:{a_port}", f"localhost:{a_port}"],
        env=["VTB_CLI_KEY"],
        mounts=[str(script.parent)],
        usage="claude",
    )
    env, ws = bare_research_env(tmp_path, backend, {"epochs": 2})
    result = make_agent(cfg).turn(env)

    assert result.done is True and result.notes == "fake: exited 0, submitted"
    assert not (ws / ".submit").exists()
    (run,) = [e for e in env.log if "agent_command" in e]
    out = {
        (line["stream"], line["line"].split(" ")[0] + " " + line["line"].split(" ")[1])
        for line in run["output"]
    }
    assert {
        ("stdout", "prompt ok"),
        ("stdout", "allowed 200"),
        ("stdout", "refused failed"),
        ("stdout", "direct failed"),
        ("stderr", "my key"),
    } <= out
    assert all(isinstance(line["t"], float) for line in run["output"])
    assert allowed_srv.hits == ["/api"] and other.hits == []
    assert [(e["port"], e["allowed"]) for e in env.egress] == [(a_port, True), (o_port, False)]
    assert json.loads((ws / "trainer" / "config.json").read_text()) == {"epochs": 3}
    assert env.charge.agent_tokens == 730 and env.charge.agent_cost_usd == pytest.approx(0.25)
    assert env.charge.cpu_seconds > 0


@needs_bwrap()
def test_cli_without_allowlist_has_no_network(tmp_path, web, monkeypatch) -> None:
    allowed_srv, other = web
    monkeypatch.setenv("VTB_CLI_KEY", KEY)
    script = write_stand_in(tmp_path / "cli", allowed_srv.server_address[1], other.server_address[1])
    cfg = AgentConfig(
        name="cli", command=f"{script} {{prompt_file}}", env=["VTB_CLI_KEY"], mounts=[str(script.parent)]
    )
    env, _ = bare_research_env(tmp_path, "bwrap")
    make_agent(cfg).turn(env)
    (run,) = [e for e in env.log if "agent_command" in e]
    lines = [line["line"] for line in run["output"]]
    assert any(line.startswith("allowed failed") for line in lines), lines
    assert allowed_srv.hits == [] and env.egress == []
    assert os.environ["VTB_CLI_KEY"] == KEY and sys.executable  # the key stayed in the orchestrator's env


def test_proxy_logs_each_plain_request_and_plain_http_inside_a_tunnel(tmp_path, web) -> None:
    allowed_srv, other = web
    a_port, o_port = allowed_srv.server_address[1], other.server_address[1]
    with EgressProxy([f"127.0.0.1:{a_port}"], tmp_path / "eg") as proxy:
        for path in ("/one", "/two"):  # origin form, named by Host: what a forwarded port receives
            got = _ask(proxy.path, f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{a_port}\r\n\r\n".encode())
            assert got.endswith(f"hello {path}".encode())
        inner = f"CONNECT 127.0.0.1:{a_port} HTTP/1.1\r\n\r\nGET /tunnelled HTTP/1.1\r\nHost: x\r\n\r\n"
        assert _ask(proxy.path, inner.encode()).endswith(b"hello /tunnelled")
        spoof = _ask(proxy.path, f"GET /spoof HTTP/1.1\r\nHost: 127.0.0.1:{o_port}\r\n\r\n".encode())
        assert spoof.startswith(b"HTTP/1.1 403")
        two = f"GET /two-hosts HTTP/1.1\r\nHost: 127.0.0.1:{a_port}\r\nHost: 127.0.0.1:{o_port}\r\n\r\n"
        assert _ask(proxy.path, two.encode()).startswith(b"HTTP/1.1 400")
    assert other.hits == [] and allowed_srv.hits == ["/one", "/two", "/tunnelled"]
    log = [(e["method"], e["path"], e["requests"], e.get("tunnel", False), e["status"]) for e in proxy.log]
    assert log[:4] == [
        ("GET", "/one", 1, False, "done"),
        ("GET", "/two", 1, False, "done"),
        ("GET", "/tunnelled", 1, True, "done"),
        ("GET", "/spoof", 1, False, "refused"),
    ]
    assert log[4][-1] == "bad-request"


FORWARD_ATTACK = """#!/usr/bin/env python3
# Inside the sandbox: use the bridge's relay of the host's loopback port to reach other ports.
import socket, sys, urllib.request
a, o = {a}, {o}
opener = urllib.request.build_opener(urllib.request.ProxyHandler({{}}))  # no proxy: straight to 127.0.0.1
print("direct", opener.open(f"http://127.0.0.1:{{a}}/direct", timeout=10).status, flush=True)
print("localhost", opener.open(f"http://localhost:{{a}}/localhost", timeout=10).status, flush=True)
for name, raw in (("spoofed-host", f"GET /spoof HTTP/1.1\\r\\nHost: 127.0.0.1:{{o}}\\r\\n\\r\\n"),
                  ("absolute-url", f"GET http://127.0.0.1:{{o}}/abs HTTP/1.1\\r\\n\\r\\n"),
                  ("connect", f"CONNECT 127.0.0.1:{{o}} HTTP/1.1\\r\\n\\r\\n")):
    s = socket.create_connection(("127.0.0.1", a), timeout=10)
    s.sendall(raw.encode())
    print(name, s.recv(200).split(b"\\r\\n")[0].decode(), flush=True)
try:
    socket.create_connection(("127.0.0.1", o), timeout=5)
    print("other-port connected")
except OSError:
    print("other-port refused")
try:  # the CLI's own install folder (as .agents/ is) is mounted read-only
    open(__file__ + ".patched", "w")
    print("install writable")
except OSError:
    print("install read-only")
"""


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_forwarded_loopback_port_reaches_only_its_allowlisted_target(tmp_path, web, backend) -> None:
    from tests.conftest import cli_turn_env

    allowed_srv, other = web
    a_port, o_port = allowed_srv.server_address[1], other.server_address[1]
    cfg, env = cli_turn_env(
        tmp_path,
        backend,
        FORWARD_ATTACK.format(a=a_port, o=o_port),
        allow_hosts=[f"127.0.0.1:{a_port}", f"localhost:{a_port}"],
    )
    make_agent(cfg).turn(env)
    (run,) = [e for e in env.log if "agent_command" in e]
    said = [line["line"] for line in run["output"] if line["stream"] == "stdout"]
    assert said == [
        "direct 200",
        "localhost 200",
        "spoofed-host HTTP/1.1 403 Forbidden",
        "absolute-url HTTP/1.1 403 Forbidden",
        "connect HTTP/1.1 403 Forbidden",
        "other-port refused",
        "install read-only",
    ], run["output"]
    assert allowed_srv.hits == ["/direct", "/localhost"] and other.hits == []
    assert [(e["port"], e["allowed"]) for e in env.egress] == [(a_port, True)] * 2 + [(o_port, False)] * 3


def test_check_cli_resolves_the_binary_the_sandbox_will_run(tmp_path, monkeypatch) -> None:
    from vtb.agents.cli import check_cli, mount_dirs, sandbox_path

    def tool(path: Path, text: str = "#!/bin/sh\necho hi\n") -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        path.chmod(0o755)
        return path

    monkeypatch.setenv("VTB_AGENTS_DIR", str(tmp_path / "no-agents"))
    host_only = tool(tmp_path / "host-bin" / "mycli")  # on the host's PATH only
    monkeypatch.setenv("PATH", f"{host_only.parent}:{os.environ['PATH']}")
    with pytest.raises(ValueError, match="not on the sandbox's PATH.*which the sandbox does not see"):
        check_cli(AgentConfig(name="x", factory="cli", command="mycli -p"))

    outside = tool(tmp_path / "elsewhere" / "real-cli")  # a mounted link whose target is not mounted
    (tmp_path / "mnt").mkdir()
    (tmp_path / "mnt" / "linked").symlink_to(outside)
    with pytest.raises(ValueError, match="outside every folder the sandbox mounts"):
        check_cli(AgentConfig(name="x", factory="cli", command="linked", mounts=[str(tmp_path / "mnt")]))

    tool(tmp_path / "mnt2" / "bin" / "needs-node", "#!/usr/bin/env no-such-interpreter\n")
    with pytest.raises(ValueError, match="runs `no-such-interpreter`, which the sandbox does not see"):
        check_cli(AgentConfig(name="x", factory="cli", command="needs-node", mounts=[str(tmp_path / "mnt2")]))

    agents = tmp_path / "agents"  # what scripts/install_agents.sh makes: mounted, its bin/ on PATH
    tool(agents / "npm" / "cli.js", "#!/usr/bin/env sh\necho hi\n")
    (agents / "bin").mkdir()
    (agents / "bin" / "fake").symlink_to("../npm/cli.js")
    monkeypatch.setenv("VTB_AGENTS_DIR", str(agents))
    cfg = AgentConfig(name="x", factory="cli", command="fake -p {prompt_file}")
    check_cli(cfg)
    assert mount_dirs(cfg) == [agents.resolve()] and sandbox_path(cfg).startswith(f"{agents.resolve()}/bin:")
    with pytest.raises(ValueError, match="inside HOME"):
        check_cli(AgentConfig(name="x", factory="cli", command="fake", home_files={"../../etc/x": ""}))
    with pytest.raises(ValueError, match="agent.base_url"):
        check_cli(AgentConfig(name="x", factory="cli", command="fake", base_url="api.example.com"))


@pytest.mark.parametrize("rel", ["/etc/passwd", "../outside.json", ".config/../../x"])
def test_home_files_must_stay_inside_home(rel) -> None:
    """Refused when the config is checked (before any work) and again when the turn writes them."""
    from vtb.agents.cli import check_cli
    from vtb.agents.env import home_path

    with pytest.raises(ValueError, match="must be a path inside HOME"):
        check_cli(AgentConfig(name="x", factory="cli", command="true", home_files={rel: "{}"}))
    with pytest.raises(ValueError, match="must be a path inside HOME"):
        home_path(rel)
    assert home_path(".gemini/settings.json") == Path(".gemini/settings.json")


def test_a_flood_of_half_sent_requests_costs_the_orchestrator_a_bounded_number_of_threads(
    tmp_path, web, monkeypatch
) -> None:
    """Was: one orchestrator thread per connection, no header timeout, no cap: 3000 half-sent
    requests made 3011 threads in 2 s and left no log entry."""
    import threading
    import time

    from vtb.sandbox import egress

    monkeypatch.setattr(egress, "HEADER_TIMEOUT_S", 1.0)
    allowed_srv, _ = web
    before = threading.active_count()
    with EgressProxy([f"127.0.0.1:{allowed_srv.server_address[1]}"], tmp_path / "eg") as proxy:
        held = []
        for _ in range(300):
            s = socket.socket(socket.AF_UNIX)
            s.connect(str(proxy.path))
            try:
                s.sendall(b"GET http://127.0.0.1/ HTTP/1.1\r\nHost: 127")  # never finished
            except (BrokenPipeError, ConnectionResetError):
                pass  # past the cap: refused with 503 and closed before this was sent
            held.append(s)
        peak = threading.active_count() - before
        time.sleep(2.5)  # past the header timeout
        for s in held:
            s.close()
        statuses = [e["status"] for e in proxy.log]
    assert peak <= egress.MAX_CONNECTIONS + 2, peak
    assert statuses.count("header-timeout") == egress.MAX_CONNECTIONS  # the held ones, closed in time
    assert statuses.count("too-many-connections") == 300 - egress.MAX_CONNECTIONS  # each refused, logged
    print(f"\n300 half-sent requests: {peak} proxy threads at the peak (was one per connection)")


def test_pipelined_and_malformed_requests_are_logged_and_never_forwarded(tmp_path, web) -> None:
    """Was: a second request pipelined behind the first went upstream unlogged (and unchecked), and
    a `Host :` header (space before the colon) passed."""
    allowed_srv, other = web
    a_port, o_port = allowed_srv.server_address[1], other.server_address[1]
    with EgressProxy([f"127.0.0.1:{a_port}"], tmp_path / "eg") as proxy:
        pipelined = (
            f"GET /first HTTP/1.1\r\nHost: 127.0.0.1:{a_port}\r\n\r\n"
            f"GET /second HTTP/1.1\r\nHost: 127.0.0.1:{a_port}\r\n\r\n"
        )
        assert _ask(proxy.path, pipelined.encode()).endswith(b"hello /first")
        body = b'{"a": 1}'
        post = (
            f"GET /post HTTP/1.1\r\nHost: 127.0.0.1:{a_port}\r\nContent-Length: {len(body)}\r\n\r\n".encode()
        )
        _ask(proxy.path, post + body + f"GET /smuggled HTTP/1.1\r\nHost: 127.0.0.1:{o_port}\r\n\r\n".encode())
        spaced = f"GET /spaced HTTP/1.1\r\nHost : 127.0.0.1:{o_port}\r\nHost: 127.0.0.1:{a_port}\r\n\r\n"
        assert _ask(proxy.path, spaced.encode()).startswith(b"HTTP/1.1 400")
        folded = f"GET /folded HTTP/1.1\r\nHost: 127.0.0.1:{a_port}\r\n x: y\r\n\r\n"
        assert _ask(proxy.path, folded.encode()).startswith(b"HTTP/1.1 400")
    assert allowed_srv.hits == ["/first", "/post"] and other.hits == []
    log = [(e["method"], e["status"]) for e in proxy.log]
    assert log == [
        ("GET", "done"),
        ("GET /second HTTP/1.1", "pipelined-refused"),
        ("GET", "done"),  # its body forwarded, the request smuggled behind it not
        ("GET /smuggled HTTP/1.1", "pipelined-refused"),
        ("GET /spaced HTTP/1.1", "bad-request"),
        ("GET /folded HTTP/1.1", "bad-request"),
    ]


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_cli_that_fails_ends_its_turn_with_an_error_the_bench_ends_the_run_on(tmp_path, backend) -> None:
    """A CLI that exits non-zero by itself (an API error, a crash) reports `error`: the bench ends
    the run errored rather than scoring the initial system as its result (issue 39); one that
    exits 0, or that a limit stopped, does not."""
    from tests.conftest import cli_turn_env

    cfg, env = cli_turn_env(
        tmp_path, backend, "#!/bin/bash\necho 'API Error: 401 invalid x-api-key'\nexit 3\n"
    )
    result = make_agent(cfg).turn(env)
    assert result.error == "hostile exited 3: API Error: 401 invalid x-api-key", result
    (tmp_path / "ok").mkdir()
    cfg, env = cli_turn_env(tmp_path / "ok", backend, "#!/bin/bash\necho fine\n")
    assert make_agent(cfg).turn(env).error is None
