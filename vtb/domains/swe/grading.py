"""SWE-bench grading: apply the model patch, then the hidden tests, run pytest, compare to the gold lists.

Semantics follow the `swebench` package (v5.0.2, harness/grading.py and log_parsers/python.py):
a test absent from the log is a failure; XFAIL counts as passed; a SKIPPED FAIL_TO_PASS test is a
failure while a SKIPPED PASS_TO_PASS test is maintained; resolved means RESOLVED_FULL. As in
SWE-bench, the test files the test patch touches are reset to the base commit before it is applied
(model edits to them are overridden), and a log that reports no failure while pytest exited
non-zero is not graded (a patch printing its own PASSED lines).

Pytest itself is hardened against files the model patch adds, because all of them would run in
the test process before any test does:
- `--noconftest`: a conftest.py that rewrites every report to "passed" is the classic attack, and
  the generated repositories need no conftest;
- `-c /dev/null --rootdir /repo`: pytest.ini / pyproject.toml / tox.ini / setup.cfg in the repo are
  ignored (their `addopts` could load a plugin from the repo); the package is put on sys.path with
  `-o pythonpath=/repo` instead;
- `python -P`: the repo is not on sys.path at start-up, so a `pytest.py` in it cannot shadow pytest;
- PYTEST_DISABLE_PLUGIN_AUTOLOAD: only pytest's own plugins, whatever the venv has installed;
- the repository is mounted read-only for the run, so code imported early cannot rewrite the test
  files collected after it.
What remains is the patched package itself, which runs inside the test process by design: it could
still forge a passing run (e.g. rewrite the exit status); the sandbox bounds that to the score.
"""

from __future__ import annotations

import json
import logging
import re
import shlex
import shutil
import sys
from pathlib import Path

from vtb.domains.swe.generator import make_repo
from vtb.domains.swe.patching import GIT_ENV, apply_patch
from vtb.sandbox.base import Limits, Mount, Sandbox
from vtb.sandbox.runtime import runtime_mounts

log = logging.getLogger(__name__)

# swebench.harness.constants.TestStatus values and the report keys.
PASSED, FAILED, SKIPPED, ERROR, XFAIL = "PASSED", "FAILED", "SKIPPED", "ERROR", "XFAIL"
STATUSES = (FAILED, PASSED, SKIPPED, ERROR, XFAIL)
FAIL_TO_PASS, PASS_TO_PASS, FAIL_TO_FAIL, PASS_TO_FAIL = (
    "FAIL_TO_PASS",
    "PASS_TO_PASS",
    "FAIL_TO_FAIL",
    "PASS_TO_FAIL",
)
RESOLVED_FULL, RESOLVED_PARTIAL, RESOLVED_NO = "RESOLVED_FULL", "RESOLVED_PARTIAL", "RESOLVED_NO"
START_TEST_OUTPUT, END_TEST_OUTPUT = ">>>>> Start Test Output", ">>>>> End Test Output"
TEST_EXIT_CODE, TESTS_TIMEOUT = ">>>>> Test Exit Code", ">>>>> Tests Timed Out"
PYTEST_FLAGS = (
    "-rA",
    "-p",
    "no:cacheprovider",
    "--noconftest",
    "-c",
    "/dev/null",
    "--rootdir",
    "/repo",
    "-o",
    "pythonpath=/repo",
)
PYTEST_ENV = {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "PYTHONHASHSEED": "0"}
_SKIP_SUMMARY_COUNT = re.compile(r"^\[\d+\]$")


def parse_log_pytest(log: str) -> dict[str, str]:
    """{test id: status} from `pytest -rA` output: lines that start with a status word.

    As swebench: the test id is the second token (a FAILED line's " - message" is cut first), and
    pytest's `SKIPPED [N] file:line: reason` summary is not a test.
    """
    statuses = {}
    for line in log.split("\n"):
        if not line.startswith(STATUSES):
            continue
        if line.startswith(FAILED):
            line = line.replace(" - ", " ")
        parts = line.split()
        if len(parts) <= 1:
            continue
        if parts[0] == SKIPPED and _SKIP_SUMMARY_COUNT.match(parts[1]):
            continue
        statuses[parts[1]] = parts[0]
    return statuses


def _resolve(case: str, statuses: dict[str, str]) -> str | None:
    """The status-map key for `case`; a parametrised id cut short (unclosed '[') may prefix-match.

    SWE-bench Verified holds such truncated ids; swebench accepts a prefix match when all matches
    agree on pass versus fail.
    """
    if case in statuses:
        return case
    if case.count("[") > case.count("]"):
        matches = [k for k in statuses if k.startswith(case)]
        if matches and len({statuses[k] in (PASSED, XFAIL) for k in matches}) == 1:
            return matches[0]
    return None


def _passed(case: str, statuses: dict[str, str]) -> bool:
    key = _resolve(case, statuses)
    return key is not None and statuses[key] in (PASSED, XFAIL)


def _maintained(case: str, statuses: dict[str, str]) -> bool:
    key = _resolve(case, statuses)
    return _passed(case, statuses) or (key is not None and statuses[key] == SKIPPED)


def _failed(case: str, statuses: dict[str, str]) -> bool:
    key = _resolve(case, statuses)
    return key is None or statuses[key] in (FAILED, ERROR, SKIPPED)


def eval_report(statuses: dict[str, str], fail_to_pass: list, pass_to_pass: list) -> dict:
    """swebench's get_eval_tests_report (pass-and-fail type): success/failure lists per category."""
    report = {}
    for key, cases, ok in ((FAIL_TO_PASS, fail_to_pass, _passed), (PASS_TO_PASS, pass_to_pass, _maintained)):
        success = [c for c in cases if ok(c, statuses)]
        failure = [c for c in cases if not ok(c, statuses) and _failed(c, statuses)]
        report[key] = {"success": success, "failure": failure}
    report[FAIL_TO_FAIL] = {"success": [], "failure": []}
    report[PASS_TO_FAIL] = {"success": [], "failure": []}
    return report


def _ratio(part: dict) -> float:
    total = len(part["success"]) + len(part["failure"])
    return 1.0 if total == 0 else len(part["success"]) / total


def resolution_status(report: dict) -> str:
    """FULL when every FAIL_TO_PASS and PASS_TO_PASS test passes, PARTIAL when only some F2P do."""
    f2p, p2p = _ratio(report[FAIL_TO_PASS]), _ratio(report[PASS_TO_PASS])
    if f2p == 1 and p2p == 1:
        return RESOLVED_FULL
    if 0 < f2p < 1 and p2p == 1:
        return RESOLVED_PARTIAL
    return RESOLVED_NO


def decode_test_ids(value: str | list) -> list[str]:
    """A FAIL_TO_PASS / PASS_TO_PASS field as a list, whether stored JSON-encoded or not."""
    return json.loads(value) if isinstance(value, str) else list(value)


def patch_files(patch: str) -> tuple[list[str], list[str]]:
    """(files the patch changes that exist before it, files it creates), from its git headers."""
    existing, created = [], []
    for block in re.split(r"^(?=diff --git )", patch, flags=re.M):
        m = re.match(r"diff --git a/(\S+) b/(\S+)", block)
        if m:
            (created if re.search(r"^--- /dev/null", block, flags=re.M) else existing).append(m.group(2))
    return existing, created


def grade(
    instance: dict, model_patch: str | None, sandbox: Sandbox, limits: Limits, workdir: Path
) -> tuple[dict, str]:
    """Grade one model patch on a generated instance: (SWE-bench report.json dict, log text).

    The repository is rebuilt at base_commit from instance["files"] in workdir/repo. The model
    patch goes first, then the test patch (never the other way round, so the model cannot see or
    pre-empt it), then pytest on the test patch's files. Every step that touches model-controlled
    files runs in the sandbox. `tests_status` is present only when the tests ran and their log
    could be graded, as in SWE-bench.
    """
    if sandbox is None:
        raise ValueError("grade() runs untrusted code: pass a sandbox")
    iid = instance["instance_id"]
    result = {
        "patch_is_None": model_patch is None,
        "patch_exists": False,
        "patch_successfully_applied": False,
        "resolved": False,
    }
    report = {iid: result}
    if model_patch is None or not model_patch.strip():
        return report, "empty patch: nothing to apply, tests not run"
    result["patch_exists"] = True
    repo = Path(workdir) / "repo"
    if repo.exists():
        shutil.rmtree(repo)
    head = make_repo(instance, repo)
    if head != instance.get("base_commit", head):
        log.warning("%s: rebuilt repository is %s, not base_commit %s", iid, head, instance["base_commit"])
    applied, apply_log = apply_patch(repo, model_patch, sandbox, limits)
    logs = [apply_log.rstrip()]
    if not applied:
        return report, "\n".join(logs)
    ok, test_log = _apply_test_patch(repo, instance["test_patch"], head, sandbox, limits)
    logs.append(test_log.rstrip())
    if not ok:
        return report, "\n".join(logs)
    statuses, run_log = _run_tests(repo, instance["test_patch"], sandbox, limits)
    logs.append(run_log)
    if statuses is None:
        return report, "\n".join(logs)
    result["patch_successfully_applied"] = True
    tests = eval_report(
        statuses, decode_test_ids(instance[FAIL_TO_PASS]), decode_test_ids(instance[PASS_TO_PASS])
    )
    result["resolved"] = resolution_status(tests) == RESOLVED_FULL
    result["tests_status"] = tests
    return report, "\n".join(logs)


def _apply_test_patch(
    repo: Path, test_patch: str, head: str, sandbox: Sandbox, limits: Limits
) -> tuple[bool, str]:
    """Reset the files the test patch touches to the base commit (removing ones it creates), apply it."""
    existing, created = patch_files(test_patch)
    steps = ["exec 2>&1", "set -e"]
    if existing:
        quoted = " ".join(shlex.quote(f) for f in existing)
        steps.append(f"git -c core.hooksPath=/dev/null checkout {shlex.quote(head)} -- {quoted}")
    if created:
        steps.append("rm -rf -- " + " ".join(shlex.quote(f) for f in created))
    mounts = [*runtime_mounts(), Mount(repo, "/repo", writable=True)]
    done = sandbox.run(
        ["/bin/sh", "-c", "\n".join(steps)], mounts=mounts, limits=limits, cwd="/repo", env=GIT_ENV
    )
    reset_log = ">>>>> Reset test files\n" + done.stdout + done.stderr
    if done.returncode != 0 or done.killed:
        return False, reset_log + ">>>>> Reset Failed"
    applied, apply_log = apply_patch(repo, test_patch, sandbox, limits)
    return applied, f"{reset_log}>>>>> Test patch\n{apply_log}"


def _run_tests(repo: Path, test_patch: str, sandbox: Sandbox, limits: Limits) -> tuple[dict | None, str]:
    """Run pytest on the test patch's files; (statuses, log), statuses None when the log is unusable."""
    existing, created = patch_files(test_patch)
    files = [f for f in existing + created if f.endswith(".py")]
    argv = [sys.executable, "-P", "-m", "pytest", *PYTEST_FLAGS, *files]
    mounts = [*runtime_mounts(), Mount(repo, "/repo", writable=False)]
    done = sandbox.run(argv, mounts=mounts, limits=limits, cwd="/repo", env=PYTEST_ENV)
    text = f"{START_TEST_OUTPUT}\n{done.stdout}{done.stderr}\n{END_TEST_OUTPUT}\n{TEST_EXIT_CODE}: {done.returncode}"
    if done.killed:
        return None, f"{text}\n{TESTS_TIMEOUT} ({done.killed} limit)"
    statuses = parse_log_pytest(done.stdout)
    if not statuses:
        return None, f"{text}\nno test results in the log"
    if done.returncode != 0 and not any(s in (FAILED, ERROR) for s in statuses.values()):
        return None, f"{text}\nthe log reports no failure but pytest exited {done.returncode}: not graded"
    return statuses, text


def run_summary(reports: dict, instance_ids: list) -> dict:
    """SWE-bench's run report (schema_version 2) over `instance_ids`.

    `reports` maps instance_id to its grade() report, either the inner dict or grade()'s whole
    {instance_id: {...}}. As in SWE-bench, an instance whose patch did not apply is an error, not
    an unresolved instance; here so is one whose test log could not be graded.
    """
    ids = {k: set() for k in ("completed", "resolved", "unresolved", "empty_patch", "error", "incomplete")}
    for iid in instance_ids:
        if iid not in reports:
            ids["incomplete"].add(iid)
            continue
        report = reports[iid]
        report = report.get(iid, report) if isinstance(report, dict) else {}
        if not report.get("patch_exists"):
            ids["empty_patch"].add(iid)
        elif not report.get("patch_successfully_applied"):
            ids["error"].add(iid)
        else:
            ids["completed"].add(iid)
            ids["resolved" if report.get("resolved") else "unresolved"].add(iid)
    submitted = [iid for iid in instance_ids if iid in reports]
    summary = {
        "total_instances": len(instance_ids),
        "submitted_instances": len(submitted),
        **{
            f"{k}_instances": len(ids[k])
            for k in ("completed", "resolved", "unresolved", "empty_patch", "error")
        },
        "incomplete_instances": len(ids["incomplete"]),
    }
    summary.update({f"{k}_ids": sorted(v) for k, v in ids.items()})
    summary["submitted_ids"] = sorted(submitted)
    summary["schema_version"] = 2
    return summary
