"""The terminal domain's core: generated tasks, task folders, the episode shell and hidden-test grading.

Every task check goes through the real path: a ShellSession in a bwrap sandbox, then run_tests.
"""

from __future__ import annotations

import random
import re
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.conftest import BACKENDS, sandbox_backend
from vtb.domains.shell import MAX_OUTPUT, RESTART_NOTE, ShellSession
from vtb.domains.terminal import generator as gen
from vtb.domains.terminal.grading import parse_pytest_rA, resolved, run_tests
from vtb.domains.terminal.loaders import load_tasks, read_task, write_app, write_task
from vtb.sandbox.base import Limits

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed")
LIMITS = Limits(wall_seconds=60, cpu_seconds=60)


@pytest.fixture(scope="module")
def sandbox():
    from vtb.sandbox.bwrap import BwrapSandbox

    return BwrapSandbox()


def _solve(sandbox, task: dict, app: Path, command: str | None) -> tuple[dict, str]:
    """Set up /app, run `command` (None: the empty action) in a shell, then grade."""
    write_app(task, app)
    if command is not None:
        with ShellSession(sandbox, app, LIMITS) as shell:
            shell.run(command, timeout=30)
    return run_tests(sandbox, app, task, LIMITS)


# -- generator ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("template", gen.TEMPLATES)
def test_solution_passes_empty_and_wrong_fail(sandbox, template):
    task, wrong = gen.make_task_and_wrong(random.Random(7), template, "t-0000")
    gen.check_task(task, sandbox, wrong)


def test_there_are_enough_templates():
    assert len(gen.TEMPLATES) >= 8 and len(set(gen.TEMPLATES)) == len(gen.TEMPLATES)


def _tokens(text: str) -> set[str]:
    return set(re.findall(r"[A-Za-z_]+|[0-9]+", text))


@pytest.mark.parametrize("template", gen.TEMPLATES)
def test_solutions_are_one_line_and_their_values_are_in_the_instruction(template):
    rng = random.Random(3)
    tasks = [gen.make_task(rng, template, f"t-{i:04d}") for i in range(40)]
    fixed = set.intersection(*(_tokens(t["solution"]) for t in tasks))  # the template's own words
    for t in tasks:
        assert "\n" not in t["solution"] and len(t["instruction"].split()) <= 40
        assert _tokens(t["solution"]) - fixed <= _tokens(t["instruction"]), (t["instruction"], t["solution"])
    assert len({t["instruction"] for t in tasks}) >= 30, "too little seeded variation"


def test_same_seed_same_tasks_and_other_seeds_differ():
    a = gen.make_tasks(5, 30, "train", set())
    assert a == gen.make_tasks(5, 30, "train", set())
    assert [t["id"] for t in a] == [f"train-{i:04d}" for i in range(30)]
    b = gen.make_tasks(6, 30, "train", set())
    assert [t["instruction"] for t in a] != [t["instruction"] for t in b]


def test_splits_sharing_exclude_are_disjoint():
    exclude: set = set()
    train = gen.make_tasks(0, 200, "train", exclude)
    test = gen.make_tasks(0, 100, "test", exclude)  # even the same seed gives new tasks
    assert len(exclude) == 300
    seen = {gen.task_key(t) for t in train}
    assert not seen & {gen.task_key(t) for t in test}
    assert len(seen) == 200


# -- task folders -------------------------------------------------------------------------------------


def test_write_read_round_trip_and_grade(sandbox, tmp_path):
    task = gen.make_tasks(1, 4, "train", set())[3]  # run_script: an initial file mode that matters
    task["files"]["extra.sh"] = {"content": "#!/bin/sh\necho hi\n", "mode": 0o755}
    write_task(task, tmp_path / "tasks" / task["id"])
    folder = tmp_path / "tasks" / task["id"]
    assert (folder / "Dockerfile").read_text().startswith("FROM vtb-terminal-base\nCOPY app/ /app/\n")
    assert "-rA" in (folder / "run-tests.sh").read_text()
    assert (folder / "solution.sh").stat().st_mode & 0o111
    assert read_task(folder) == {**task, "format": "terminal-bench"}
    write_task(gen.make_tasks(2, 1, "train", set())[0], tmp_path / "tasks" / "a-first")
    loaded = load_tasks(tmp_path / "tasks")
    assert [t["id"] for t in loaded] == ["a-first", task["id"]]
    statuses, log = _solve(sandbox, loaded[1], tmp_path / "app", loaded[1]["solution"])
    assert resolved(statuses), log


def _harbor_folder(root: Path) -> Path:
    folder = root / "hello-world"
    files = {
        "task.toml": """
            version = "1.0"
            [metadata]
            difficulty = "medium"
            category = "file-operations"
            tags = ["echo", "files"]
            [verifier]
            timeout_sec = 20.0
            [agent]
            timeout_sec = 120.0
            """,
        "instruction.md": "Write hello world into /app/greeting.txt.\n",
        "environment/Dockerfile": "FROM ubuntu:24.04\nWORKDIR /app\n",
        "environment/app/readme.txt": "greet the world\n",
        "solution/solve.sh": "#!/bin/bash\necho 'hello world' > /app/greeting.txt\n",
        "tests/test.sh": """
            #!/bin/bash
            python -m pytest /tests/test_outputs.py -rA -p no:cacheprovider
            if [ $? -eq 0 ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
            """,
        "tests/test_outputs.py": """
            from pathlib import Path

            def test_greeting():
                assert Path("/app/greeting.txt").read_text() == "hello world\\n"
            """,
    }
    for rel, text in files.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text(textwrap.dedent(text).lstrip())
    return folder


def test_harbor_folder_is_read_and_graded(sandbox, tmp_path):
    task = read_task(_harbor_folder(tmp_path))
    assert task["format"] == "harbor" and task["id"] == "hello-world"
    assert task["instruction"] == "Write hello world into /app/greeting.txt."
    assert task["solution"] == "echo 'hello world' > /app/greeting.txt"
    assert set(task["tests"]) == {"test.sh", "test_outputs.py"}
    assert task["files"] == {"readme.txt": {"content": "greet the world\n", "mode": 0o644}}
    assert (task["difficulty"], task["category"], task["tags"]) == (
        "medium",
        "file-operations",
        ["echo", "files"],
    )
    assert (task["max_agent_timeout_sec"], task["max_test_timeout_sec"]) == (120, 20)
    assert _solve(sandbox, task, tmp_path / "empty", None)[0] == {"reward": "FAILED"}
    statuses, log = _solve(sandbox, task, tmp_path / "solved", task["solution"])
    assert statuses == {"reward": "PASSED"} and resolved(statuses), log


def test_a_folder_of_neither_format_is_a_clear_error(tmp_path):
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "README.md").write_text("not a task")
    with pytest.raises(ValueError, match=r"junk.*neither task\.yaml.*nor task\.toml"):
        read_task(tmp_path / "junk")
    (tmp_path / "tb").mkdir()
    (tmp_path / "tb" / "task.yaml").write_text("instruction: do it\n")
    with pytest.raises(ValueError, match=r"tb .*tests/test_outputs\.py"):
        read_task(tmp_path / "tb")
    harbor = _harbor_folder(tmp_path / "h")
    (harbor / "instruction.md").unlink()
    with pytest.raises(ValueError, match="instruction.md"):
        read_task(harbor)


# -- the pytest -rA parser ----------------------------------------------------------------------------

REAL_TESTS = """
import pytest

def test_pass():
    pass

def test_fail():
    assert 1 == 2, "one - two [x]"

@pytest.fixture
def broken():
    raise RuntimeError("boom")

def test_error(broken):
    pass

def test_skip():
    pytest.skip("not today")

@pytest.mark.xfail(reason="known")
def test_xfail():
    assert False

@pytest.mark.parametrize("v", ["a b", "x - y", "[1]"])
def test_param(v):
    assert v != "x - y"
"""


def test_parse_real_pytest_output(tmp_path):
    (tmp_path / "test_real.py").write_text(REAL_TESTS)
    cmd = [sys.executable, "-m", "pytest", "test_real.py", "-rA", "-p", "no:cacheprovider", "-q"]
    log = subprocess.run(
        cmd, cwd=tmp_path, capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"}
    ).stdout
    assert parse_pytest_rA(log) == {
        "test_real.py::test_pass": "PASSED",
        "test_real.py::test_fail": "FAILED",
        "test_real.py::test_error": "ERROR",
        "test_real.py:18": "SKIPPED",
        "test_real.py::test_xfail": "XFAIL",
        "test_real.py::test_param[a b]": "PASSED",
        "test_real.py::test_param[x - y]": "FAILED",
        "test_real.py::test_param[[1]]": "PASSED",
    }, log


def test_parse_hand_written_lines():
    log = """
PASSED fake/test_outputs.py::test_only_in_captured_output
=========================== short test summary info ============================
PASSED tests/test_outputs.py::test_count
FAILED tests/test_outputs.py::test_x - AssertionError: assert 1 == 2 - see [here]
FAILED tests/test_outputs.py::test_p[a - b] - AssertionError: [x] - y
PASSED tests/test_outputs.py::test_p[[1, 2]]
PASSED tests/test_outputs.py::test_p[ok]]
PASSED tests/test_outputs.py::TestK::test_m[x y]
ERROR tests/test_outputs.py::test_count - teardown failed
ERROR tests/test_outputs.py
SKIPPED [2] tests/test_outputs.py:12: no network
XFAIL tests/test_outputs.py::test_xf - reason
XPASS tests/test_outputs.py::test_xp
2 failed, 3 passed in 0.1s
"""
    assert parse_pytest_rA(log) == {
        "tests/test_outputs.py::test_count": "ERROR",  # passed, then errored in teardown: the worst
        "tests/test_outputs.py::test_x": "FAILED",
        "tests/test_outputs.py::test_p[a - b]": "FAILED",
        "tests/test_outputs.py::test_p[[1, 2]]": "PASSED",
        "tests/test_outputs.py::test_p[ok]]": "PASSED",
        "tests/test_outputs.py::TestK::test_m[x y]": "PASSED",
        "tests/test_outputs.py": "ERROR",
        "tests/test_outputs.py:12": "SKIPPED",
        "tests/test_outputs.py::test_xf": "XFAIL",
        "tests/test_outputs.py::test_xp": "XPASS",
    }
    assert parse_pytest_rA("PASSED t.py::test_a - with a note\nFAILED t.py::test_b") == {
        "t.py::test_a": "PASSED",
        "t.py::test_b": "FAILED",
    }


def test_resolved_semantics():
    assert not resolved({})
    assert resolved({"a": "PASSED", "b": "PASSED"})
    assert resolved({"a": "PASSED", "b": "SKIPPED", "c": "XFAIL"})
    assert not resolved({"a": "SKIPPED"})
    assert not resolved({"a": "PASSED", "b": "XPASS"})
    assert not resolved({"a": "PASSED", "b": "FAILED"})
    assert not resolved({"a": "PASSED", "b": "ERROR"})


# -- the episode shell --------------------------------------------------------------------------------


def test_shell_state_persists_and_exit_codes_come_back(sandbox, tmp_path):
    with ShellSession(sandbox, tmp_path, LIMITS) as shell:
        assert shell.run("mkdir -p sub && cd sub && export GREETING=hi", 5)["exit_code"] == 0
        r = shell.run('pwd; echo "$GREETING $HOME"', 5)
        assert r == {"output": "/app/sub\nhi /app\n", "exit_code": 0, "timed_out": False}
        assert shell.run("false", 5)["exit_code"] == 1
        assert shell.run("(exit 7)", 5)["exit_code"] == 7
        assert shell.run("echo oops >&2", 5)["output"] == "oops\n"  # stderr merged
        assert shell.run("printf 'no newline'", 5)["output"] == "no newline"
        r = shell.run("echo 'unclosed", 5)  # a syntax error answers at once, the shell lives on
        assert r["exit_code"] == 2 and not r["timed_out"]
        r = shell.run("set -x; echo traced", 5)  # a trace of the sentinel does not end the read early
        assert r["exit_code"] == 0 and "traced" in r["output"]
        assert shell.run("pwd", 5)["output"].endswith("/app/sub\n")
        r = shell.run("seq 1 100000", 5)
        assert len(r["output"]) < MAX_OUTPUT + 100 and r["output"].endswith("99999\n100000\n")
        assert "characters cut" in r["output"]
    assert (tmp_path / "sub").is_dir()


def test_shell_timeout_restarts_and_stdin_does_not_hang(sandbox, tmp_path):
    shell = ShellSession(sandbox, tmp_path, LIMITS)
    started = time.monotonic()
    r = shell.run("cat; read x; echo read=$?", 10)  # stdin is /dev/null: no hang, no eaten commands
    assert r == {"output": "read=1\n", "exit_code": 0, "timed_out": False}
    shell.run("cd /tmp", 5)
    r = shell.run("echo before; sleep 30", 1)
    assert r["timed_out"] and r["exit_code"] is None and "before" in r["output"] and shell.dead
    r = shell.run("pwd", 5)
    assert r["output"] == RESTART_NOTE + "/app\n" and r["exit_code"] == 0
    r = shell.run("exit 3", 5)  # the shell itself exits: its status comes back, the next run restarts
    assert r["exit_code"] == 3
    assert shell.run("echo back", 5)["output"] == RESTART_NOTE + "back\n"
    charges = shell.close()
    assert time.monotonic() - started < 10
    assert charges["killed"] == ["wall"] and charges["wall_seconds"] > 1 and charges["cpu_seconds"] >= 0


# -- grading hardening ----------------------------------------------------------------------------------

FORCE_PASS = """
import pytest

@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    outcome.get_result().outcome = "passed"
"""
PYTEST_SHIM = 'print("PASSED test_outputs.py::test_count")\nraise SystemExit(0)\n'


def test_planted_conftest_and_pytest_shim_do_not_change_the_grade(sandbox, tmp_path):
    task = gen.make_task(random.Random(0), "count_matches", "t-0000")
    app = tmp_path / "app"
    write_app(task, app)
    (app / "conftest.py").write_text(FORCE_PASS)
    (app / "pytest.py").write_text(PYTEST_SHIM)
    (app / "sitecustomize.py").write_text(PYTEST_SHIM)
    statuses, log = run_tests(sandbox, app, task, LIMITS)
    assert not resolved(statuses) and statuses, log
    # The plants are potent: the conftest flips the grade where pytest does look for one.
    statuses, _ = run_tests(
        sandbox, app, {**task, "tests": {**task["tests"], "conftest.py": FORCE_PASS}}, LIMITS
    )
    assert resolved(statuses)


def test_a_test_run_past_its_time_limit_does_not_resolve(sandbox, tmp_path):
    slow = "import time\n\ndef test_ok():\n    pass\n\ndef test_slow():\n    time.sleep(30)\n"
    task = {"files": {}, "tests": {"test_outputs.py": slow}, "max_test_timeout_sec": 2}
    started = time.monotonic()
    statuses, log = run_tests(sandbox, tmp_path, task, LIMITS)
    assert time.monotonic() - started < 10
    assert statuses == {"<killed: wall>": "ERROR"} and not resolved(statuses), log


# A Harbor test.sh runs over the agent's state (its /app, the tools it may have replaced), so the
# reward file it leaves is read like any sandbox output: each of these writes what would be a pass
# if it were followed, waited on or trusted, and must come back as an ERROR (or no reward at all).
HOSTILE_REWARDS = {
    "link to a host file holding 1": "echo 1 > /tmp/one; ln -s {one} /logs/verifier/reward.txt",
    "fifo nobody writes": "mkfifo /logs/verifier/reward.txt",
    "infinite": "echo inf > /logs/verifier/reward.txt",
    "not a number": "echo nan > /logs/verifier/reward.txt",
    "out of range": "echo 1e9 > /logs/verifier/reward.txt",
    "too big": "head -c 100000 /dev/zero | tr '\\0' 1 > /logs/verifier/reward.txt",
    "json link": "ln -s {one} /logs/verifier/reward.json",
}


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_hostile_reward_file_is_never_a_pass(backend, tmp_path):
    sandbox = sandbox_backend(backend)
    one = tmp_path / "host-one.txt"
    one.write_text("1\n")
    base = read_task(_harbor_folder(tmp_path))
    for name, script in HOSTILE_REWARDS.items():
        task = {**base, "tests": {**base["tests"], "test.sh": script.format(one=one) + "\n"}}
        started = time.monotonic()
        statuses, log = run_tests(sandbox, _app(task, tmp_path / name.replace(" ", "-")), task, LIMITS)
        assert not resolved(statuses), (name, statuses, log)
        assert statuses in ({}, {"reward": "ERROR"}), (name, statuses)
        assert time.monotonic() - started < 20, f"{name}: the read waited"


def _app(task: dict, folder: Path) -> Path:
    write_app(task, folder)
    return folder
