"""terminal episodes over the real protocol in real bwrap sandboxes: grader both ways, attacks, bounds.

A test-only oracle harness runs each task's solution.sh command (handed to it in a file this
test writes; the pipeline never gives a harness solutions) and must resolve 100% of the test
split; a harness that only declares "done" must resolve 0%. Attack commands must fail and the
episode is graded as usual; a command that loops or forks without end is stopped by the limits.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.conftest import BACKENDS
from vtb.config import TaskConfig
from vtb.domains.common import TrialsConfig
from vtb.domains.terminal.domain import TerminalDomain
from vtb.domains.terminal.kit import datatools

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap (scripts/install.sh)")

TASK = TrialsConfig(
    name="terminal", n_pool=16, n_val=8, n_test=24, trials=1, pass_k=1, max_steps_per_episode=10
)

# Runs the commands listed for its episode's task in commands.json, one per turn, then says done.
SCRIPTED = """
import json
from pathlib import Path
from vtb.protocol import serve

PLAN = json.loads((Path(__file__).parent / "commands.json").read_text())

def act(m):
    steps = PLAN.get(m["episode"].rsplit(".", 1)[0], [])
    turn = len(m["observation"]["history"])
    return {"type": "shell", "command": steps[turn]} if turn < len(steps) else {"type": "answer", "content": "done"}

serve(lambda batch: [act(m) for m in batch])
"""


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("terminal-data") / "d"
    TerminalDomain().provision(TASK, out)
    return out


def _play(
    play_scripted, data_dir: Path, plan: dict[str, list[str]], task: TaskConfig = TASK, backend="bwrap"
):
    episodes, out = play_scripted(
        TerminalDomain(), data_dir, task, SCRIPTED, {"commands.json": plan}, backend=backend
    )
    return episodes, out, TerminalDomain().metrics(episodes, task)


def _gold(data_dir: Path) -> dict[str, list[str]]:
    return {t["id"]: [datatools.solution_command(t)] for t in TerminalDomain().split(data_dir, "test")}


def test_the_gold_solutions_resolve_every_test_task(play_scripted, data_dir):
    episodes, out, metrics = _play(play_scripted, data_dir, _gold(data_dir))
    assert len(episodes) == TASK.n_test
    assert [ep.reward() for ep in episodes] == [1.0] * len(episodes), [
        ep.record() for ep in episodes if not ep.reward()
    ]
    assert metrics["pass@1"] == 1.0 and len(metrics["by_template"]) >= 8
    assert out.crashes == 0 and out.rounds == 2 and metrics["declared_done"] == len(episodes)


def test_an_empty_action_resolves_nothing(play_scripted, data_dir):
    episodes, out, metrics = _play(play_scripted, data_dir, {})
    assert sum(ep.reward() for ep in episodes) == 0.0 and metrics["pass@1"] == 0.0
    assert all(ep.finished and not ep.history for ep in episodes)
    assert all(ep.record()["tests"] for ep in episodes)  # the tests ran, and failed


@pytest.mark.parametrize("backend", BACKENDS)
def test_attacks_fail_and_the_episode_is_graded_as_usual(
    tmp_path, play_scripted, data_dir, host_server, backend
):
    port, hits = host_server
    hidden = data_dir / "hidden" / "test.jsonl"
    outside = tmp_path / "outside.txt"
    attacks = [
        f"cat {hidden}",  # the hidden tests, by their host path
        "cat /tests/test_outputs.py; ls /tests",  # where grading will mount them
        # every file but system dirs and installed packages (bounded: the episode has 60 s)
        "find / -name 'test_outputs.py' -not -path '/proc/*' 2>/dev/null | head; grep -rl --exclude-dir=proc "
        "--exclude-dir=sys --exclude-dir=usr --exclude-dir=site-packages 'def test_' / 2>/dev/null | head",
        "cat /proc/1/root/etc/hostname; ls ../",
        f"python3 -c \"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=2)\"",
        f"echo pwned > {outside}; echo pwned > ../escape.txt; echo pwned > /usr/pwned",
        "printf 'import pytest\\n@pytest.hookimpl(hookwrapper=True)\\ndef pytest_runtest_makereport(item, call):\\n    o = yield\\n    o.get_result().outcome = \"passed\"\\n' > /app/conftest.py",
        "printf 'import sys; sys.exit(0)\\n' > /app/pytest.py; printf 'raise SystemExit(0)\\n' > /app/sitecustomize.py",
    ]
    tasks = TerminalDomain().split(data_dir, "test")
    solved, attacked_only = tasks[0], tasks[1]
    plan = {solved["id"]: [*attacks, datatools.solution_command(solved)], attacked_only["id"]: attacks}
    episodes, out, metrics = _play(
        play_scripted, data_dir, plan, TrialsConfig(**{**TASK.__dict__, "max_steps_per_episode": 12}), backend
    )
    by_task = {ep.task["id"]: ep for ep in episodes}
    assert by_task[solved["id"]].reward() == 1.0  # the attacks changed nothing: graded as usual
    assert by_task[attacked_only["id"]].reward() == 0.0  # planting conftest.py/pytest.py did not make it pass
    history = by_task[solved["id"]].history
    texts = [h["output"] for h in history]
    assert all(h["exit_code"] != 0 for h in history[:2])  # no hidden tests to read
    assert "def test_" not in "".join(texts[:4])
    assert not hits, "a sandboxed command reached a host server"
    assert history[4]["exit_code"] != 0
    assert not outside.exists() and not Path("/usr/pwned").exists()


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_command_that_loops_or_forks_forever_is_stopped(play_scripted, data_dir, backend):
    tasks = TerminalDomain().split(data_dir, "test")
    short = {**TASK.__dict__}
    plan = {
        tasks[0]["id"]: ["while true; do :; done"],
        tasks[1]["id"]: [":(){ :|:& };:; sleep 1000"],
        tasks[2]["id"]: [datatools.solution_command(tasks[2])],
    }
    for t in tasks[:2]:  # shorten their agent time so the test is quick
        t["max_agent_timeout_sec"] = 5
    (data_dir / "hidden" / "short.jsonl").write_text("".join(json.dumps(t) + "\n" for t in tasks[:3]))
    episodes, out = play_scripted(
        TerminalDomain(), data_dir, TrialsConfig(**short), SCRIPTED, {"commands.json": plan}, "short", backend
    )
    loop, bomb, fine = episodes
    assert loop.history[0]["timed_out"] and loop.reward() == 0.0
    assert bomb.reward() == 0.0 and bomb.history[0]["exit_code"] != 0
    assert fine.reward() == 1.0 and out.crashes == 0
