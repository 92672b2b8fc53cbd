"""Hidden-test grading of a terminal task: run its tests against the final /app, in a sandbox.

The tests are the task's, trusted; /app is the agent's, not. So the tests are copied into a
fresh directory mounted read-only at /tests, pytest runs from there with `-P` (no cwd or script
dir on sys.path), its rootdir and conftest search pinned to /tests, no cache, no plugin
autoloading and no bytecode writes. Whatever the agent planted in /app (a conftest.py, a
pytest.py shim, sitecustomize.py) is never on any path pytest or Python looks at.

Terminal-Bench tasks are graded like Terminal-Bench's pytest parser: per-test statuses from the
`-rA` short summary. Harbor tasks run their tests/test.sh, which writes a reward to
/logs/verifier/reward.txt (or reward.json); their only "test" is that reward. Note that many
published Harbor test.sh scripts install pytest with curl/uv first, which the offline sandbox
cannot do; ours needs them to use the Python on PATH.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import sys
import tempfile
from pathlib import Path, PurePosixPath

from vtb import safefs
from vtb.domains.terminal.loaders import write_files
from vtb.sandbox.base import Limits, Mount, Sandbox
from vtb.sandbox.runtime import runtime_mounts

STATUSES = ("PASSED", "FAILED", "ERROR", "SKIPPED", "XFAIL", "XPASS")
NEUTRAL = ("SKIPPED", "XFAIL")  # checked nothing, but did not fail either (pytest's own exit status)
SUMMARY_RE = re.compile(r"^=+ short test summary info =+\s*$", re.MULTILINE)
SKIP_RE = re.compile(r"^\[\d+\] (.+?:\d+): ")  # "SKIPPED [1] test_x.py:8: reason"
SEVERITY = {"PASSED": 0, "SKIPPED": 1, "XFAIL": 1, "XPASS": 2, "FAILED": 3, "ERROR": 3}
MESSAGE = " - "
MAX_LOG_CHARS = 20000
MAX_PARSED_CHARS = 1 << 20  # the end of a test log parsed for statuses (the summary is at the end)
MAX_REWARD_BYTES = 4096  # a reward file holds one number
TEST_ENV = {
    "PYTHONDONTWRITEBYTECODE": "1",
    "PYTHONSAFEPATH": "1",  # also for any `python` a Harbor test.sh starts
    "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",  # task tests use the standard library and pytest only
    "TEST_DIR": "/tests",
}


def parse_pytest_rA(log: str) -> dict[str, str]:
    """Test id -> status from pytest's `-rA` short summary (the last one in the log).

    Ids are node ids as printed (`tests/test_outputs.py::test_count[a b]`); a skip line names
    its location (`test_x.py:8`) and a collection error its file. A test listed twice (passed,
    then errored in teardown) keeps its worst status. Without a summary header every line of
    the log is read, so hand-written summary lines parse too.
    """
    headers = list(SUMMARY_RE.finditer(log))
    body = log[headers[-1].end() :] if headers else log
    out: dict[str, str] = {}
    for line in body.splitlines():
        status, _, rest = line.strip().partition(" ")
        if status not in STATUSES or not rest.strip():
            continue
        test_id = _test_id(status, rest.strip())
        if test_id and SEVERITY[status] >= SEVERITY[out.get(test_id, "PASSED")]:
            out[test_id] = status
    return out


def _test_id(status: str, rest: str) -> str:
    """The node id at the start of `rest`, without the " - message" that may follow it."""
    if status == "SKIPPED" and (m := SKIP_RE.match(rest)):
        return m.group(1)
    before_message = rest.split(MESSAGE, 1)[0]
    start = before_message.find("[")
    if "::" not in rest or start < 0:
        return before_message
    # Parametrized: the id may itself hold " - " and brackets. Prefer the bracket that closes the
    # first "[", else the first "]" that ends the line or is followed by a message.
    ends = [
        i for i, c in enumerate(rest) if c == "]" and (i + 1 == len(rest) or rest.startswith(MESSAGE, i + 1))
    ]
    depth = 0
    for i in range(start, len(rest)):
        depth += {"[": 1, "]": -1}.get(rest[i], 0)
        if depth == 0:
            if i in ends:
                return rest[: i + 1]
            break
    return rest[: ends[0] + 1] if ends else before_message


def resolved(statuses: dict[str, str]) -> bool:
    """Whether the task is solved: some test PASSED and none FAILED, ERRORed or XPASSed.

    SKIPPED and XFAIL count as neither (pytest's exit status treats them the same way), but a
    run of only skips is not a solve. An XPASS fails: the state is not what the author expected.
    """
    values = list(statuses.values())
    return "PASSED" in values and all(v == "PASSED" or v in NEUTRAL for v in values)


# What a built task's tests run on (they share the agent's filesystem, as in Terminal-Bench):
# changing or deleting an existing file here, or adding one of these names, forges the run.
RUNNER_TREES = ("/usr/", "/bin/", "/sbin/", "/lib/", "/lib64/", "/opt/", "/etc/ld.so.")
RUNNER_NAMES = re.compile(
    r"(^|/)(sitecustomize\.py|usercustomize\.py|conftest\.py|[^/]*\.pth|pytest\.ini|tox\.ini|setup\.cfg"
    r"|pyproject\.toml)$|/(_pytest|pytest|pluggy|py)(\.py|/|$)|/s?bin/(bash|sh|python[0-9.]*|pytest|py\.test|env|uv|uvx)$"
)
MODIFIED, ADDED, DELETED = 0, 1, 2  # docker's diff kinds


def runner_tampering(changes: list[dict]) -> list[str]:
    """The paths in a built task's final layer that alter what its tests run with.

    Files the agent adds elsewhere are its work (a `pip install` adds files under /usr);
    a file it changes or deletes under the system trees, or a name that Python, pytest or the
    shell picks up by itself (a .pth, a conftest.py, a bash earlier on PATH), is not. A
    directory shows as modified when something in it changes: those are skipped. (A package
    whose install adds a .pth file is refused too: here it cannot be told from a forgery.)
    """
    changes = [c for c in changes if isinstance(c, dict)]
    parents = {p for c in changes for p in PurePosixPath(str(c.get("Path", ""))).parents}
    out = []
    for c in changes:
        path, kind = str(c.get("Path", "")), c.get("Kind")
        if PurePosixPath(path) in parents:
            continue
        if RUNNER_NAMES.search(path) and kind in (ADDED, MODIFIED):
            out.append(path)
        elif path.startswith(RUNNER_TREES) and kind in (MODIFIED, DELETED):
            out.append(path)
    return sorted(set(out))


def run_tests(
    sandbox: Sandbox,
    app_dir: Path | None,
    task: dict,
    limits: Limits,
    image: str | None = None,
    workdir: str = "/app",
    changes: list[dict] | None = None,
) -> tuple[dict[str, str], str]:
    """Grade the state in `app_dir`; returns (statuses, log). Call after the agent's shell is closed.

    `image`: a task built from its Dockerfile is graded in a fresh container from the state the
    agent left (the final shell's snapshot; `sandbox` is then that snapshot's view with the task's
    limits, shell.ImageState.test_sandbox), with the tests mounted at /tests only now, by the
    format's own rule: Terminal-Bench's `bash /tests/run-tests.sh` (or pytest on test_outputs.py
    when the task has none), Harbor's `bash /tests/test.sh`.
    The wall limit is the task's max_test_timeout_sec; a killed run or a pytest exit code that
    contradicts an all-passed summary adds an "<...>": "ERROR" entry, so it never resolves; so
    does a final state that tampered with the test runner (`changes`: runner_tampering).
    """
    tampered = runner_tampering(changes or [])
    if tampered:
        shown = ", ".join(tampered[:5]) + (" ..." if len(tampered) > 5 else "")
        return {"<changed the test runner's files>": "ERROR"}, f"[tests not run: the agent changed {shown}]"
    limits = dataclasses.replace(limits, wall_seconds=float(task.get("max_test_timeout_sec", 30)))
    harbor = task.get("format") == "harbor"
    with tempfile.TemporaryDirectory(prefix="vtb-grade-") as tmp:
        tests, logs = Path(tmp) / "tests", Path(tmp) / "verifier"
        tests.mkdir()
        logs.mkdir()
        write_files(task["tests"], tests)
        if image is None:
            runner, cwd = sandbox, "/tests"
            mounts = runtime_mounts() + [Mount(tests, "/tests"), Mount(Path(app_dir), "/app", writable=True)]
            argv = [sys.executable, "-P", "-m", "pytest", "/tests/test_outputs.py", "-rA"]
            argv += ["-p", "no:cacheprovider", "--rootdir=/tests", "--confcutdir=/tests", "-q"]
        else:
            runner, cwd, mounts = sandbox, workdir, [Mount(tests, "/tests")]
            logs.chmod(0o777)  # the image's own user writes the reward (the folder's parent is private)
            if "run_tests" in task and not harbor:
                (tests / "run-tests.sh").write_text(task["run_tests"])
                argv = ["bash", "/tests/run-tests.sh"]
            else:
                argv = ["python3", "-m", "pytest", "/tests/test_outputs.py", "-rA", "-p", "no:cacheprovider"]
        if harbor:
            argv = ["bash", "/tests/test.sh"]
            mounts.append(Mount(logs, "/logs/verifier", writable=True))
        result = runner.run(argv, mounts=mounts, limits=limits, cwd=cwd, env=TEST_ENV)
        log = result.stdout[-MAX_LOG_CHARS:] + (
            "\n--- stderr ---\n" + result.stderr[-4000:] if result.stderr else ""
        )
        statuses = _reward(logs) if harbor else parse_pytest_rA(result.stdout[-MAX_PARSED_CHARS:])
    if result.killed:
        statuses[f"<killed: {result.killed}>"] = "ERROR"
        log += f"\n[tests killed: {result.killed} limit]"
    elif not harbor and result.returncode != 0 and resolved(statuses):
        statuses[f"<pytest exit code {result.returncode}>"] = "ERROR"
    return statuses, log


def _reward(logs: Path) -> dict[str, str]:
    """{"reward": PASSED/FAILED} from the verifier's reward file; {} if it wrote none.

    The file is written by code that ran over the agent's state, so it is read like any
    sandbox output: no link followed, at most MAX_REWARD_BYTES, and the value must be a finite
    number in [0, 1] (a NaN, an "inf" or a 1e9 is an ERROR, never a pass).
    """
    for name in ("reward.txt", "reward.json"):
        try:
            data = safefs.read_in(logs, name, MAX_REWARD_BYTES).decode("utf-8")
        except FileNotFoundError:
            continue
        except (OSError, UnicodeDecodeError):  # a link, a FIFO, a device, too big, not text
            return {"reward": "ERROR"}
        try:
            value = float(data.strip()) if name == "reward.txt" else float(json.loads(data)["reward"])
        except (ValueError, KeyError, TypeError, RecursionError):
            return {"reward": "ERROR"}
        if not math.isfinite(value) or not 0 <= value <= 1:
            return {"reward": "ERROR"}
        return {"reward": "PASSED" if value >= 1 else "FAILED"}
    return {}
