"""The research and grading sandboxes as the pipeline mounts them: attacks fail, are recorded, the run goes on."""

from __future__ import annotations

import os
import socket
import threading
from pathlib import Path

import pytest

from tests.conftest import BACKENDS, sandbox_backend
from vtb import runner
from vtb.agents import Feedback
from vtb.agents.env import SandboxResearchEnv
from vtb.sandbox.base import Limits

LIMITS = Limits(wall_seconds=30, cpu_seconds=30)
# research commands: the filesystem-wide grep below must finish, on a loaded machine too (10-15 s idle)
RESEARCH_LIMITS = Limits(wall_seconds=180, cpu_seconds=180)


@pytest.fixture
def layout(tmp_path):
    """A workspace, research data (pool + val) and hidden test labels, as provision lays them out."""
    data = tmp_path / "data"
    (data / "research").mkdir(parents=True)
    (data / "hidden").mkdir()
    (data / "research" / "val.jsonl").write_text('{"question": "q", "answer": "#### 1"}\n')
    (data / "research" / "pool.jsonl").write_text('{"question": "p", "answer": "#### 2"}\n')
    (data / "hidden" / "test.jsonl").write_text('{"question": "t", "answer": "#### SECRET-ANSWER"}\n')
    ws, base = tmp_path / "ws", tmp_path / "base"
    ws.mkdir()
    base.mkdir()
    (base / "config.json").write_text("{}")
    return {"data": data, "ws": ws, "base": base, "secret": data / "hidden" / "test.jsonl"}


@pytest.fixture(params=BACKENDS)
def backend(request) -> str:
    return request.param


@pytest.fixture
def research(layout, backend):
    sandbox = sandbox_backend(backend)
    mounts = runner.research_mounts(layout["ws"], layout["data"], layout["base"])
    fb = Feedback(task="math", iteration=1, max_iterations=1, seed=0)
    return SandboxResearchEnv(layout["ws"], layout["ws"], fb, sandbox, mounts, RESEARCH_LIMITS)


@pytest.mark.parametrize(
    "command",
    [
        "cat {secret}",
        "cat /ws/../{rel}",
        "cat /data/../hidden/test.jsonl",
        "cat /proc/{pid}/root{secret}",
        "cat /proc/1/root{secret}",
        # the whole filesystem the sandbox sees (not the kernel's /proc and /sys, which never end)
        "grep -r --exclude-dir=proc --exclude-dir=sys SECRET-ANSWER / 2>/dev/null",
    ],
)
def test_research_commands_cannot_read_the_test_split(research, layout, command):
    cmd = command.format(secret=layout["secret"], rel=layout["secret"].relative_to("/"), pid=os.getpid())
    out = research.run(cmd)
    assert "SECRET-ANSWER" not in out["stdout"] + out["stderr"]
    assert out["returncode"] != 0
    if command.startswith("grep"):  # a search cut short by the wall clock would prove nothing
        assert out["killed"] is None and out["returncode"] in (1, 2), out  # 2: unreadable files met
    assert research.log[-1]["command"] == cmd  # the attempt is in the turn's trajectory


def test_research_sandbox_sees_pool_val_and_base_only(research):
    out = research.run("ls /data; ls /base")
    assert out["returncode"] == 0
    assert sorted(out["stdout"].split()) == ["config.json", "pool.jsonl", "val.jsonl"]


def test_research_commands_cannot_reach_the_host_loopback(research):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]
    accepted = []
    threading.Thread(target=lambda: accepted.append(server.accept()), daemon=True).start()
    code = f"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=3); print('CONNECTED')"
    out = research.run(f'python3 -c "{code}"')
    server.close()
    assert "CONNECTED" not in out["stdout"] and out["returncode"] != 0 and not accepted
    assert any("refused" in d.lower() or "unreachable" in d.lower() for d in out["denials"]), out


@pytest.mark.parametrize("target", ["/data/x", "/base/x", "/usr/x", "/ws/../escape"])
def test_research_commands_cannot_write_outside_the_workspace(research, layout, target):
    out = research.run(f"echo pwned > {target}")
    assert out["returncode"] != 0 and out["denials"]
    assert not (layout["data"] / "research" / "x").exists() and not (layout["base"] / "x").exists()
    assert research.run("echo ok > /ws/inside")["returncode"] == 0
    assert (layout["ws"] / "inside").read_text() == "ok\n"


ATTACK_HARNESS = """
import glob, json, os, sys
found = []
for pattern in ["/*/test.jsonl", "/*/*/test.jsonl", "/proc/*/root/*/hidden/*", "{secret}"]:
    for path in glob.glob(pattern, recursive=True):
        try:
            found.append(open(path).read())
        except OSError as e:
            print(f"denied: {{e}}", file=sys.stderr)
try:
    open("{secret}").read()
except OSError as e:
    print(f"attempt: {{e}}", file=sys.stderr)
for line in sys.stdin:
    msg = json.loads(line)
    if msg["type"] == "start":
        pending = msg
    if msg["type"] == "flush":
        print(json.dumps({{"episode": pending["episode"], "action": {{"type": "answer", "content": repr(found)}}}}), flush=True)
    if msg["type"] == "close":
        break
"""


def test_grading_harness_cannot_read_expected_answers(tmp_path, layout, backend):
    harness = tmp_path / "harness"
    harness.mkdir()
    (harness / "harness.py").write_text(ATTACK_HARNESS.format(secret=layout["secret"]))
    messages = [{"type": "start", "episode": "t-1", "domain": "math", "observation": {"question": "t"}}]
    out = runner.play(
        sandbox_backend(backend),
        harness,
        runner.NoModel(),
        messages,
        limits=LIMITS,
        round_timeout_s=20,
        per_episode_timeout_s=1,
    )
    assert out.actions["t-1"]["content"] == "[]"  # found nothing
    assert any("No such file" in d for d in out.denials)  # the attempt is recorded


def _fake_harness(tmp_path: Path, body: str) -> Path:
    d = tmp_path / "h"
    d.mkdir(exist_ok=True)
    (d / "harness.py").write_text(
        "import json, sys, time\nfrom vtb.protocol import serve\n"
        f"def answer(m):\n{body}\n"
        "serve(lambda batch: [answer(m) for m in batch])\n"
    )
    return d


@pytest.mark.parametrize(
    "body",
    [
        "    if m['episode'] == 'e3': raise SystemExit(1)\n    return {'type': 'answer', 'content': m['episode']}",
        "    if m['episode'] == 'e3': time.sleep(1000)\n    return {'type': 'answer', 'content': m['episode']}",
        "    print('garbage', flush=True)\n    return {'type': 'answer', 'content': m['episode']}"
        " if m['episode'] != 'e3' else {'type': 'nonsense'}",
    ],
    ids=["crash", "hang", "garbage"],
)
def test_a_failing_harness_costs_only_its_episodes(tmp_path, layout, body, backend):
    harness = _fake_harness(tmp_path, body)
    messages = [{"type": "start", "episode": f"e{i}", "observation": {}} for i in range(6)]
    out = runner.play(
        sandbox_backend(backend),
        harness,
        runner.NoModel(),
        messages,
        limits=LIMITS,
        round_timeout_s=3,
        per_episode_timeout_s=0.5,
    )
    assert sorted(out.actions) == ["e0", "e1", "e2", "e4", "e5"]
    assert all(out.actions[e]["content"] == e for e in out.actions)
    assert out.crashes >= 1
