"""SWE domain core: seeded instances, SWE-bench's patch chain, grading in bwrap, log parsing, loaders.

Grading semantics are checked on the `swebench` package's own test cases (tests/test_grading_*.py,
test_log_parsers_*.py of SWE-bench v5.0.2), re-stated here against our functions, and on real
`pytest -rA` output. The attack tests first show each attack works on a naive `python -m pytest`
run, then that grade() does not resolve it.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from vtb.domains.swe import generator, grading, loaders, patching
from vtb.domains.swe.grading import (
    FAIL_TO_PASS,
    PASS_TO_PASS,
    RESOLVED_FULL,
    RESOLVED_NO,
    RESOLVED_PARTIAL,
    eval_report,
    parse_log_pytest,
    resolution_status,
)
from vtb.sandbox.base import Limits

needs_bwrap = pytest.mark.skipif(
    shutil.which("bwrap") is None, reason="needs bubblewrap (scripts/install.sh)"
)
LIMITS = Limits(wall_seconds=60, cpu_seconds=60)
ALWAYS_PASS = """import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    outcome.get_result().outcome = "passed"
"""


@pytest.fixture(scope="module")
def instances() -> list[dict]:
    return generator.make_instances(11, 12, "core", set())


@pytest.fixture(scope="module")
def sandbox():
    if shutil.which("bwrap") is None:
        pytest.skip("needs bubblewrap")
    from vtb.sandbox.bwrap import BwrapSandbox

    return BwrapSandbox()


def by_bug(instances: list[dict], bug: str) -> dict:
    return next(i for i in instances if i["bug"] == bug)


def git(repo: Path, *args: str) -> str:
    env = {"PATH": "/usr/bin:/bin", **patching.GIT_ENV}
    return subprocess.run(
        ["git", *args], cwd=repo, env=env, capture_output=True, text=True, check=True
    ).stdout


def broken_function(inst: dict) -> str:
    """The source of the function the fix changes (def line to the next blank line)."""
    lines = inst["files"][inst["fix"]["path"]].splitlines()
    at = lines.index(inst["fix"]["old"])
    start = max(i for i in range(at + 1) if lines[i].startswith("def "))
    end = next((i for i in range(at, len(lines)) if not lines[i].strip()), len(lines))
    return "\n".join(lines[start:end])


# ---- the generator ----


def test_instances_follow_the_swe_bench_schema(instances):
    assert {i["bug"] for i in instances} == set(generator.BUGS)
    assert len({i["instance_id"] for i in instances}) == len(instances)
    for inst in instances:
        for key in (
            "instance_id",
            "repo",
            "base_commit",
            "patch",
            "test_patch",
            "problem_statement",
            "hints_text",
            "created_at",
            "version",
            "FAIL_TO_PASS",
            "PASS_TO_PASS",
            "environment_setup_commit",
            "bug",
            "files",
            "fix",
        ):
            assert key in inst, key
        pkg = inst["repo"].removeprefix("vtb-embedded/")
        assert inst["instance_id"].startswith(f"vtb__{pkg}-core-")
        assert inst["version"] == "0.1" and inst["hints_text"] == ""
        assert inst["environment_setup_commit"] == inst["base_commit"] and len(inst["base_commit"]) == 40
        f2p, p2p = json.loads(inst["FAIL_TO_PASS"]), json.loads(inst["PASS_TO_PASS"])
        assert f2p and p2p and all("::test_" in t and t.startswith("tests/test_") for t in f2p + p2p)
        fix = inst["fix"]
        assert inst["files"][fix["path"]].count(fix["old"]) == 1 and "\n" not in fix["old"] + fix["new"]
        assert inst["patch"] == patching.diff_from_edit(inst["files"], fix["path"], fix["old"], fix["new"])
        assert inst["patch"].startswith(f"diff --git a/{fix['path']} b/{fix['path']}\n")
        for test in f2p:  # the hidden tests only exist in the test patch
            name = test.split("::")[1]
            assert f"+def {name}():" in inst["test_patch"] and name not in "".join(inst["files"].values())
        # The issue names the function and its file; tests and README are in the repository.
        func = broken_function(inst).split("(")[0].removeprefix("def ")
        assert f"`{func}` in `{fix['path']}`" in inst["problem_statement"]
        assert "README.md" in inst["files"] and any(p.startswith("tests/test_") for p in inst["files"])
        modules = [p for p in inst["files"] if p.startswith(f"{pkg}/") and not p.endswith("__init__.py")]
        assert 2 <= len(modules) <= 4


def test_fix_shapes_per_template(instances):
    for inst in instances:
        old, new = inst["fix"]["old"].strip(), inst["fix"]["new"].strip()
        if inst["bug"] == "off_by_one":
            assert "range(1, " in old and new == old.replace(")", " + 1)", 1)
        elif inst["bug"] == "wrong_operator":
            assert new in (old.replace(" < ", " <= "), old.replace(" > ", " >= ")) and new != old
        elif inst["bug"] == "missing_edge_case":
            assert new.startswith(old + " if ") and new.endswith(" else 0.0")
        elif inst["bug"] == "wrong_default":
            assert old.startswith("def ") and old.split("=")[0] == new.split("=")[0]
        elif inst["bug"] == "swapped_arguments":
            (head, args), (new_head, new_args) = old.rstrip(")").split("(", 1), new.rstrip(")").split("(", 1)
            assert (
                head == new_head
                and args != new_args
                and sorted(args.split(", ")) == sorted(new_args.split(", "))
            )
        else:
            assert old.startswith("return ") and new.startswith("return ") and " " not in old[7:] + new[7:]


def test_generation_is_seeded_and_reproducible(instances):
    again = generator.make_instances(11, 12, "core", set())
    assert again == instances  # base_commit shas included
    other = generator.make_instances(12, 12, "core", set())
    assert [i["problem_statement"] for i in other] != [i["problem_statement"] for i in instances]


def test_make_repo_commits_base_commit(instances, tmp_path):
    for k, inst in enumerate(instances):
        repo = tmp_path / str(k)
        assert generator.make_repo(inst, repo) == inst["base_commit"]
        assert git(repo, "status", "--porcelain") == ""
        assert git(repo, "log", "--format=%an <%ae> %aI %cI").strip() == (
            f"vtb <vtb@example.invalid> {inst['created_at'][:-1]}+00:00 {inst['created_at'][:-1]}+00:00"
        )
    with pytest.raises(ValueError, match="not empty"):
        generator.make_repo(instances[0], tmp_path / "0")


def test_splits_are_disjoint():
    taken: set = set()
    splits = [
        generator.make_instances(s, n, p, taken)
        for s, n, p in ((1, 30, "test"), (2, 30, "val"), (3, 60, "train"))
    ]
    assert len(taken) == 120  # one key per instance, none shared
    sources = [{(i["bug"], broken_function(i)) for i in split} for split in splits]
    assert all(len(s) == len(split) for s, split in zip(sources, splits, strict=True))
    assert not (sources[0] & sources[1]) and not (sources[0] & sources[2]) and not (sources[1] & sources[2])
    ids = [i["instance_id"] for split in splits for i in split]
    assert len(set(ids)) == len(ids)


# ---- grading every template in the sandbox ----


@needs_bwrap
@pytest.mark.parametrize("bug", generator.BUGS)
def test_gold_resolves_empty_does_not_and_base_fails(instances, sandbox, tmp_path, bug):
    inst = by_bug(instances, bug)
    iid, f2p, p2p = inst["instance_id"], json.loads(inst["FAIL_TO_PASS"]), json.loads(inst["PASS_TO_PASS"])
    report, log = grading.grade(inst, inst["patch"], sandbox, LIMITS, tmp_path)
    result = report[iid]
    assert result["resolved"] and result["patch_successfully_applied"] and not result["patch_is_None"], log
    assert resolution_status(result["tests_status"]) == RESOLVED_FULL
    assert result["tests_status"][FAIL_TO_PASS] == {"success": f2p, "failure": []}
    assert result["tests_status"][PASS_TO_PASS] == {"success": p2p, "failure": []}

    for empty in ("", "  \n", None):
        report, _ = grading.grade(inst, empty, sandbox, LIMITS, tmp_path)
        assert report[iid] == {
            "patch_is_None": empty is None,
            "patch_exists": False,
            "patch_successfully_applied": False,
            "resolved": False,
        }

    # The base commit (a patch that only touches the README): FAIL_TO_PASS fails, PASS_TO_PASS passes.
    readme = inst["files"]["README.md"].splitlines()[0]
    noop = patching.diff_from_edit(inst["files"], "README.md", readme, readme + " (fork)")
    report, log = grading.grade(inst, noop, sandbox, LIMITS, tmp_path)
    tests = report[iid]["tests_status"]
    assert not report[iid]["resolved"] and report[iid]["patch_successfully_applied"], log
    assert tests[FAIL_TO_PASS] == {"success": [], "failure": f2p}
    assert tests[PASS_TO_PASS] == {"success": p2p, "failure": []}
    assert resolution_status(tests) == RESOLVED_NO


# ---- patch application ----


def small_repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    lines = [f"line {k}" for k in range(1, 21)]
    inst = {
        "files": {"a.txt": "\n".join(lines) + "\n", "b.txt": "keep\n"},
        "created_at": "2024-01-01T00:00:00Z",
    }
    generator.make_repo(inst, repo)
    return repo


FUZZY = """diff --git a/a.txt b/a.txt
--- a/a.txt
+++ b/a.txt
@@ -3,7 +3,7 @@
 line 3
 line four
 line 5
-line 6
+line SIX
 line 7
 line 8
 line 9
"""  # context "line four" does not match "line 4": git apply refuses, patch --fuzz applies


@pytest.mark.parametrize("sandboxed", [False, True])
def test_fallback_chain_applies_a_fuzzy_patch(tmp_path, sandboxed, request):
    sb = request.getfixturevalue("sandbox") if sandboxed else None
    repo = small_repo(tmp_path)
    check = subprocess.run(
        ["git", "apply", "--check", "-"], input=FUZZY, cwd=repo, capture_output=True, text=True
    )
    assert check.returncode != 0
    ok, log = patching.apply_patch(repo, FUZZY, sb, LIMITS)
    assert ok, log
    assert (
        "Failed to apply patch: git apply --verbose --reject" in log and ">>>>> Applied Patch (patch " in log
    )
    assert "line SIX" in (repo / "a.txt").read_text()
    assert git(repo, "status", "--porcelain") == " M a.txt\n"  # no .orig / .rej left behind


@pytest.mark.parametrize("sandboxed", [False, True])
def test_failed_patches_leave_the_tree_untouched(tmp_path, sandboxed, request):
    sb = request.getfixturevalue("sandbox") if sandboxed else None
    repo = small_repo(tmp_path)
    half = FUZZY.replace("line four", "line 4").replace(
        "line 9\n", "line 9\n@@ -15,3 +15,3 @@\n line X\n-line Y\n+line Z\n line W\n"
    )
    for patch in ("this is not a diff\n", half):
        ok, log = patching.apply_patch(repo, patch, sb, LIMITS)
        assert not ok and log.rstrip().endswith(">>>>> Patch Apply Failed"), log
        assert (
            git(repo, "status", "--porcelain", "--untracked-files=all") == ""
        )  # partial hunks and .rej undone
    assert patching.apply_patch(repo, " \n", sb, LIMITS) == (False, "empty patch")


@needs_bwrap
def test_unsafe_paths_are_refused(tmp_path, sandbox):
    repo = small_repo(tmp_path)
    hook = patching.file_diff(".git/hooks/post-checkout", None, "#!/bin/sh\necho owned\n")
    outside = patching.file_diff("../outside.txt", None, "x\n")
    link = "diff --git a/l b/l\nnew file mode 120000\n--- /dev/null\n+++ b/l\n@@ -0,0 +1 @@\n+/etc\n\\ No newline at end of file\n"
    for patch in (hook, outside, link):
        ok, log = patching.apply_patch(repo, patch, sandbox, LIMITS)
        assert not ok and "refused" in log
    assert not (repo / ".git/hooks/post-checkout").exists() and not (tmp_path / "outside.txt").exists()


def test_diff_from_edit_applies_like_the_edit(instances, tmp_path):
    for k, inst in enumerate(instances[:6]):
        fix, repo = inst["fix"], tmp_path / str(k)
        generator.make_repo(inst, repo)
        patch = patching.diff_from_edit(inst["files"], fix["path"], fix["old"], fix["new"])
        subprocess.run(["git", "apply", "-"], input=patch, cwd=repo, check=True, text=True)
        assert (repo / fix["path"]).read_text() == inst["files"][fix["path"]].replace(fix["old"], fix["new"])
    files = instances[0]["files"]
    with pytest.raises(ValueError, match="0 times"):
        patching.diff_from_edit(files, "README.md", "no such text", "x")
    with pytest.raises(ValueError, match="2 times"):
        patching.diff_from_edit({"f.py": "x = 1\nx = 1\n"}, "f.py", "x = 1", "x = 2")
    with pytest.raises(ValueError, match="no file"):
        patching.diff_from_edit(files, "missing.py", "a", "b")


def test_file_diff_handles_new_files_and_missing_final_newline(tmp_path):
    repo = tmp_path / "r"
    generator.make_repo({"files": {"a.txt": "one\ntwo"}, "created_at": "2024-01-01T00:00:00Z"}, repo)
    patch = patching.file_diff("a.txt", "one\ntwo", "one\n2\n") + patching.file_diff(
        "new/b.txt", None, "hi\n"
    )
    assert "\\ No newline at end of file" in patch and "new file mode 100644" in patch
    subprocess.run(["git", "apply", "-"], input=patch, cwd=repo, check=True, text=True)
    assert (repo / "a.txt").read_text() == "one\n2\n" and (repo / "new/b.txt").read_text() == "hi\n"
    assert patching.file_diff("a.txt", "same\n", "same\n") == ""


# ---- log parsing and reports: swebench's own test cases ----


def test_parse_log_pytest_swebench_cases():
    # test_log_parsers_skip_summary.py: `SKIPPED [N] file:line: reason` is not a test ...
    log = "SKIPPED [1] tests/test_a.py:12: needs network\nPASSED tests/test_a.py::test_real\nSKIPPED [23] tests/test_b.py:4: unsupported platform\n"
    assert parse_log_pytest(log) == {"tests/test_a.py::test_real": "PASSED"}
    # ... but a real SKIPPED node id is, and the wrapped-progress "[100%]" artefact is kept.
    assert parse_log_pytest("SKIPPED tests/test_a.py::test_flaky") == {
        "tests/test_a.py::test_flaky": "SKIPPED"
    }
    assert parse_log_pytest("PASSED [100%]") == {"[100%]": "PASSED"}
    # test_log_parsers_python.py: bare status words (captured output) are ignored.
    assert parse_log_pytest("PASSED\nFAILED\n PASSED\nPASSED b.py::t") == {"b.py::t": "PASSED"}
    # The " - message" suffix of FAILED lines; every TestStatus value; the last line for a test wins.
    log = (
        "FAILED tests/t.py::test_a - AssertionError: 1 - 2\nERROR tests/t.py::test_b - ValueError\n"
        "XFAIL tests/t.py::test_c - reason\nXPASS tests/t.py::test_d\nPASSED tests/t.py::test_e\n"
        "FAILED tests/t.py::test_e"
    )
    assert parse_log_pytest(log) == {
        "tests/t.py::test_a": "FAILED",
        "tests/t.py::test_b": "ERROR",
        "tests/t.py::test_c": "XFAIL",
        "tests/t.py::test_e": "FAILED",
    }


def test_eval_report_swebench_cases():
    # test_grading_skipped.py: a skipped F2P test is a failure, a skipped P2P test is maintained.
    report = eval_report({"t_a": "SKIPPED", "t_b": "SKIPPED", "t_c": "PASSED"}, ["t_a", "t_b"], ["t_c"])
    assert report[FAIL_TO_PASS] == {"success": [], "failure": ["t_a", "t_b"]}
    assert resolution_status(report) == RESOLVED_NO
    report = eval_report({"t_a": "PASSED", "t_c": "SKIPPED"}, ["t_a"], ["t_c"])
    assert (
        report[PASS_TO_PASS] == {"success": ["t_c"], "failure": []}
        and resolution_status(report) == RESOLVED_FULL
    )
    # XFAIL passes; a test missing from the log fails; the SWE-bench report shape.
    report = eval_report({"a": "XFAIL", "p": "PASSED"}, ["a", "missing"], ["p", "gone"])
    assert report == {
        FAIL_TO_PASS: {"success": ["a"], "failure": ["missing"]},
        PASS_TO_PASS: {"success": ["p"], "failure": ["gone"]},
        "FAIL_TO_FAIL": {"success": [], "failure": []},
        "PASS_TO_FAIL": {"success": [], "failure": []},
    }
    assert resolution_status(report) == RESOLVED_NO  # a P2P test broke
    assert (
        resolution_status(eval_report({"a": "PASSED", "b": "FAILED", "p": "PASSED"}, ["a", "b"], ["p"]))
        == RESOLVED_PARTIAL
    )
    assert resolution_status(eval_report({}, [], [])) == RESOLVED_FULL  # empty lists count as 1, as swebench
    # test_grading_truncated_ids.py: ids cut mid-parameter prefix-match when unambiguous.
    truncated = "tests/test_a.py::test_x[log(photon"
    assert eval_report({truncated + " / m**2 s)]": "PASSED"}, [truncated], [])[FAIL_TO_PASS]["success"] == [
        truncated
    ]
    mixed = {
        "tests/test_a.py::test_x[args1-None]": "PASSED",
        "tests/test_a.py::test_x[args1-No-value]": "FAILED",
    }
    assert eval_report(mixed, ["tests/test_a.py::test_x[args1-No"], [])[FAIL_TO_PASS]["success"] == []
    balanced = {"tests/test_a.py::test_x[case-1-extended]": "PASSED"}
    assert eval_report(balanced, ["tests/test_a.py::test_x[case-1]"], [])[FAIL_TO_PASS]["failure"] == [
        "tests/test_a.py::test_x[case-1]"
    ]


def test_parse_real_pytest_output(tmp_path):
    (tmp_path / "test_mix.py").write_text(
        "import pytest\n\n\ndef test_ok():\n    pass\n\n\ndef test_bad():\n    assert 1 == 2, 'a - b'\n\n\n"
        "@pytest.mark.skip(reason='later')\ndef test_skip():\n    pass\n\n\n"
        "@pytest.mark.xfail\ndef test_xfail():\n    assert False\n\n\n"
        "@pytest.fixture\ndef broken():\n    raise RuntimeError('setup')\n\n\ndef test_error(broken):\n    pass\n\n\n"
        "@pytest.mark.parametrize('x', [1, 2])\ndef test_param(x):\n    assert x == 1\n"
    )
    argv = [sys.executable, "-m", "pytest", "-rA", "-p", "no:cacheprovider", "test_mix.py"]
    done = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True)
    # pytest -rA reports skips as `SKIPPED [1] test_mix.py:13: later`, which swebench's parser drops:
    # a skipped test is absent from the map, so it grades as a failure (F2P and P2P alike).
    assert parse_log_pytest(done.stdout) == {
        "test_mix.py::test_ok": "PASSED",
        "test_mix.py::test_bad": "FAILED",
        "test_mix.py::test_xfail": "XFAIL",
        "test_mix.py::test_error": "ERROR",
        "test_mix.py::test_param[1]": "PASSED",
        "test_mix.py::test_param[2]": "FAILED",
    }


def test_run_summary():
    def rep(iid, **kw):
        base = {
            "patch_is_None": False,
            "patch_exists": True,
            "patch_successfully_applied": True,
            "resolved": False,
        }
        return {iid: {**base, **kw}}

    reports = {
        "a": rep("a", resolved=True),
        "b": rep("b"),
        "c": rep("c", patch_exists=False)["c"],
        "d": rep("d", patch_successfully_applied=False),
    }
    summary = grading.run_summary(reports, ["a", "b", "c", "d", "e"])
    assert summary["schema_version"] == 2
    counts = {
        k: summary[f"{k}_instances"]
        for k in (
            "total",
            "submitted",
            "completed",
            "resolved",
            "unresolved",
            "empty_patch",
            "error",
            "incomplete",
        )
    }
    assert counts == {
        "total": 5,
        "submitted": 4,
        "completed": 2,
        "resolved": 1,
        "unresolved": 1,
        "empty_patch": 1,
        "error": 1,
        "incomplete": 1,
    }
    assert (summary["resolved_ids"], summary["unresolved_ids"], summary["completed_ids"]) == (
        ["a"],
        ["b"],
        ["a", "b"],
    )
    assert (summary["empty_patch_ids"], summary["error_ids"], summary["incomplete_ids"]) == (
        ["c"],
        ["d"],
        ["e"],
    )


# ---- attacks on the grading ----


def naive_statuses(inst: dict, patch: str, tmp_path: Path) -> dict:
    """What a plain `python -m pytest -rA` in the patched repo reports (our own attack code, run here)."""
    repo = tmp_path / "naive"
    shutil.rmtree(repo, ignore_errors=True)
    generator.make_repo(inst, repo)
    for p in (inst["test_patch"], patch):
        assert patching.apply_patch(repo, p)[0]
    files = [t.split("::")[0] for t in json.loads(inst["FAIL_TO_PASS"])]
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-rA", "-p", "no:cacheprovider", *files],
        cwd=repo,
        capture_output=True,
        text=True,
    )
    return parse_log_pytest(done.stdout)


def attacks(inst: dict) -> dict[str, str]:
    f2p = json.loads(inst["FAIL_TO_PASS"]) + json.loads(inst["PASS_TO_PASS"])
    fake = "import sys\n\n" + "".join(f"print('PASSED {t}')\n" for t in f2p) + "sys.exit(0)\n"
    return {
        "conftest": patching.file_diff("conftest.py", None, ALWAYS_PASS)
        + patching.file_diff("tests/conftest.py", None, ALWAYS_PASS),
        "ini_plugin": patching.file_diff(
            "pytest.ini", None, "[pytest]\npythonpath = .\naddopts = -p evilplugin\n"
        )
        + patching.file_diff("evilplugin.py", None, ALWAYS_PASS),
        "pytest_shadow": patching.file_diff("pytest.py", None, fake),
    }


@needs_bwrap
@pytest.mark.parametrize("attack", ["conftest", "ini_plugin", "pytest_shadow"])
def test_files_that_force_passes_do_not_resolve(instances, sandbox, tmp_path, attack):
    inst = by_bug(instances, "off_by_one")
    patch = attacks(inst)[attack]
    hidden = json.loads(inst["FAIL_TO_PASS"])[0]
    assert naive_statuses(inst, patch, tmp_path)[hidden] == "PASSED"  # the attack is real
    report, log = grading.grade(inst, patch, sandbox, LIMITS, tmp_path)
    result = report[inst["instance_id"]]
    assert not result["resolved"], log
    assert result["tests_status"][FAIL_TO_PASS]["failure"] == [hidden]
    # With the bug fixed as well, the same files do no harm.
    report, log = grading.grade(inst, inst["patch"] + patch, sandbox, LIMITS, tmp_path)
    assert report[inst["instance_id"]]["resolved"], log


@needs_bwrap
def test_edits_to_the_test_files_are_overridden(instances, sandbox, tmp_path):
    inst = by_bug(instances, "wrong_return")
    path = json.loads(inst["FAIL_TO_PASS"])[0].split("::")[0]
    names = [t.split("::")[1] for t in json.loads(inst["FAIL_TO_PASS"]) + json.loads(inst["PASS_TO_PASS"])]
    trivial = "".join(f"def {n}():\n    pass\n\n\n" for n in names)
    edit = patching.file_diff(path, inst["files"][path], trivial)
    report, log = grading.grade(inst, edit, sandbox, LIMITS, tmp_path)
    assert (
        not report[inst["instance_id"]]["resolved"]
        and report[inst["instance_id"]]["patch_successfully_applied"]
    ), log
    report, log = grading.grade(inst, inst["patch"] + edit, sandbox, LIMITS, tmp_path)
    assert report[inst["instance_id"]]["resolved"], log


@needs_bwrap
def test_forged_pass_lines_are_not_graded(instances, sandbox, tmp_path):
    inst = by_bug(instances, "missing_edge_case")
    path, hidden = inst["fix"]["path"], json.loads(inst["FAIL_TO_PASS"])[0]
    first = inst["files"][path].splitlines()[0]
    forge = f"{first}\nimport atexit\n\natexit.register(print, 'PASSED {hidden}')"
    report, log = grading.grade(
        inst, patching.diff_from_edit(inst["files"], path, first, forge), sandbox, LIMITS, tmp_path
    )
    result = report[inst["instance_id"]]
    assert (
        not result["resolved"] and not result["patch_successfully_applied"] and "tests_status" not in result
    )
    assert "not graded" in log


@needs_bwrap
def test_patch_that_hangs_the_tests_is_stopped(instances, sandbox, tmp_path):
    inst = by_bug(instances, "wrong_default")
    path = inst["fix"]["path"]
    first = inst["files"][path].splitlines()[0]
    hang = patching.diff_from_edit(inst["files"], path, first, f"{first}\nwhile True:\n    pass")
    report, log = grading.grade(inst, hang, sandbox, Limits(wall_seconds=3, cpu_seconds=3), tmp_path)
    assert not report[inst["instance_id"]]["resolved"] and ">>>>> Tests Timed Out" in log


@needs_bwrap
def test_patch_into_dot_git_is_refused_by_grade(instances, sandbox, tmp_path):
    inst = by_bug(instances, "swapped_arguments")
    hook = patching.file_diff(".git/config", None, "[core]\n\tfsmonitor = touch /repo/owned\n")
    report, log = grading.grade(inst, inst["patch"] + hook, sandbox, LIMITS, tmp_path)
    result = report[inst["instance_id"]]
    assert result["patch_exists"] and not result["patch_successfully_applied"] and not result["resolved"]
    assert "refused" in log


# ---- loaders ----


def swe_records() -> list[dict]:
    record = {
        "repo": "astropy/astropy",
        "base_commit": "a" * 40,
        "patch": "diff --git a/x b/x\n",
        "test_patch": "diff --git a/t b/t\n",
        "problem_statement": "Bug",
        "hints_text": "",
        "created_at": "2023-01-01T00:00:00Z",
        "version": "5.1",
        "environment_setup_commit": "b" * 40,
    }
    return [
        {
            **record,
            "instance_id": "astropy__astropy-1",
            "FAIL_TO_PASS": '["t.py::test_a"]',
            "PASS_TO_PASS": "[]",
        },
        {
            **record,
            "instance_id": "astropy__astropy-2",
            "FAIL_TO_PASS": ["t.py::test_b"],
            "PASS_TO_PASS": ["t.py::test_c"],
        },
    ]


def test_load_json_jsonl_and_parquet(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    records = swe_records()
    (tmp_path / "a.json").write_text(json.dumps(records))
    (tmp_path / "a.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records) + "\n")
    as_strings = [
        {
            **r,
            "FAIL_TO_PASS": json.dumps(loaders._tests(r["FAIL_TO_PASS"], "", "")),
            "PASS_TO_PASS": json.dumps(loaders._tests(r["PASS_TO_PASS"], "", "")),
        }
        for r in records
    ]
    pq.write_table(pa.Table.from_pylist(as_strings), tmp_path / "a.parquet")  # the Hub stores JSON strings
    for name in ("a.json", "a.jsonl", "a.parquet"):
        loaded = loaders.load_instances(str(tmp_path / name))
        assert [i["instance_id"] for i in loaded] == ["astropy__astropy-1", "astropy__astropy-2"]
        assert [i["FAIL_TO_PASS"] for i in loaded] == [["t.py::test_a"], ["t.py::test_b"]]
        assert [i["PASS_TO_PASS"] for i in loaded] == [[], ["t.py::test_c"]]
        assert loaded[0]["version"] == "5.1" and loaded[0]["base_commit"] == "a" * 40


def test_loader_errors_name_file_record_and_field(tmp_path, monkeypatch):
    records = swe_records()
    del records[1]["test_patch"]
    path = tmp_path / "bad.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    with pytest.raises(
        ValueError,
        match=r"bad\.jsonl: record 1 \(astropy__astropy-2\) is missing required field 'test_patch'",
    ):
        loaders.load_instances(str(path))
    (tmp_path / "bad.json").write_text(json.dumps([{**swe_records()[0], "FAIL_TO_PASS": "not json"}]))
    with pytest.raises(ValueError, match="'FAIL_TO_PASS' is a string but not a JSON list"):
        loaders.load_instances(str(tmp_path / "bad.json"))
    with pytest.raises(ValueError, match="no such file"):
        loaders.load_instances(str(tmp_path / "missing.jsonl"))

    import datasets

    def offline(*args, **kwargs):
        raise ConnectionError("Couldn't reach the Hugging Face Hub")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    with pytest.raises(ValueError, match="needs network access"):
        loaders.load_instances("princeton-nlp/SWE-bench_Verified")


def test_generated_instances_load_back(instances, tmp_path):
    path = tmp_path / "gen.jsonl"
    path.write_text("".join(json.dumps(i) + "\n" for i in instances))
    loaded = loaders.load_instances(str(path))
    assert [i["FAIL_TO_PASS"] for i in loaded] == [json.loads(i["FAIL_TO_PASS"]) for i in instances]
    assert grading.decode_test_ids(loaded[0]["PASS_TO_PASS"]) == json.loads(instances[0]["PASS_TO_PASS"])


def test_real_instances_are_provisioned_and_refused_on_bwrap(tmp_path):
    """Real instances are read, split and written; only sandbox=docker can play them."""
    from vtb.compose import compose_config
    from vtb.domains.registry import get_domain

    record = {
        "instance_id": "octo__repo-1",
        "repo": "octo/repo",
        "base_commit": "a" * 40,
        "patch": "",
        "test_patch": "",
        "problem_statement": "it breaks",
        "FAIL_TO_PASS": '["t::a"]',
        "PASS_TO_PASS": "[]",
    }
    path = tmp_path / "verified.jsonl"
    path.write_text(json.dumps(record) + "\n")
    cfg = compose_config(["task=swe", "task.source=swe_bench", f"task.path={path}", "task.n_val=0"])
    domain = get_domain("swe")
    assert domain.provision(cfg.task, tmp_path / "data") == {"pool": 0, "val": 0, "test": 1}
    domain.check_sandbox(tmp_path / "data", "docker")
    with pytest.raises(ValueError, match=r"octo__repo-1.*sandbox=docker"):
        domain.check_sandbox(tmp_path / "data", "bwrap")
