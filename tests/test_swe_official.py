"""Grading on official SWE-bench evaluation images, with swebench's own spec, script and parser.

No registry here, so the docker tests build a local image in the official layout with the
offline stand-in builder (vtb/domains/swe/images.py, scripts/swe_images.py stand-in: FROM
vtb/hostroot, a small git repository at /testbed at base_commit, /opt/miniconda3/bin/activate
and a `conda activate testbed` that puts an env with pytest on PATH) and name it as swebench
names an instance image. The instance is in the real schema (swebench 5 reads the eval script,
image, parser and grading type from it; the script has the official shape: setup, the test
patch applied from a heredoc, pytest -rA between the markers, the test files reset). The
patches are the ones a model could send: the fix, half of it, nothing, and attacks on the log.
"""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
from argparse import Namespace
from pathlib import Path

import pytest

if os.environ.get("VTB_REQUIRE_DOCKER") == "1":  # CI (.ci/run) installs the extra: a skip there would hide it
    import swebench  # noqa: F401
else:
    pytest.importorskip("swebench", reason="the swebench extra: pip install -e '.[swebench]'")

from tests.conftest import needs_bwrap  # noqa: E402
from vtb.domains.swe import evaluate, images, official  # noqa: E402
from vtb.domains.swe.generator import make_instances  # noqa: E402
from vtb.sandbox.base import Limits  # noqa: E402

IID = "pytest-dev__pytest-90001"  # a repository swebench's parser table knows; an id no real instance has
LIMITS = Limits(wall_seconds=120, cpu_seconds=120, memory_mb=1024, max_processes=256)
GIT_ENV = {
    **{k: v for k, v in os.environ.items() if k in ("PATH", "LANG")},
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_AUTHOR_NAME": "vtb",
    "GIT_AUTHOR_EMAIL": "vtb@example.invalid",
    "GIT_COMMITTER_NAME": "vtb",
    "GIT_COMMITTER_EMAIL": "vtb@example.invalid",
    "GIT_AUTHOR_DATE": "2024-01-01T00:00:00Z",
    "GIT_COMMITTER_DATE": "2024-01-01T00:00:00Z",
}
BUGGY = "def add(a, b):\n    return a - b\n\n\ndef mul(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n"
BASE_TESTS = "from calc import sub\n\n\ndef test_sub():\n    assert sub(5, 3) == 2\n"
NEW_TESTS = (
    "from calc import add, mul, sub\n\n\ndef test_sub():\n    assert sub(5, 3) == 2\n\n\n"
    "def test_add():\n    assert add(2, 3) == 5\n\n\ndef test_mul():\n    assert mul(2, 3) == 6\n"
)


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=repo, env=GIT_ENV, capture_output=True, text=True, check=True)
    return done.stdout


def diff(repo: Path, path: str, new: str) -> str:
    """The diff that turns `path` into `new` (made with git, then undone)."""
    (repo / path).write_text(new)
    out = git(repo, "diff", "--", path)
    git(repo, "checkout", "--", path)
    return out


def eval_script(base: str, test_patch: str) -> str:
    """An eval script in the shape swebench's specs produce for a pytest repository."""
    return "\n".join(
        [
            "#!/bin/bash",
            "set -uxo pipefail",
            "source /opt/miniconda3/bin/activate",
            "conda activate testbed",
            "cd /testbed",
            "git config --global --add safe.directory /testbed",
            "cd /testbed",
            "git status",
            "git show",
            f"git -c core.fileMode=false diff {base}",
            "source /opt/miniconda3/bin/activate",
            "conda activate testbed",
            f"git checkout {base} tests/test_calc.py",
            "git apply -v - <<'EOF_114329324912'",
            test_patch.rstrip("\n"),
            "EOF_114329324912",
            ": '>>>>> Start Test Output'",
            "pytest -rA tests/test_calc.py",
            ": '>>>>> End Test Output'",
            f"git checkout {base} tests/test_calc.py",
        ]
    )


@pytest.fixture(scope="session")
def fixture_repo(tmp_path_factory) -> dict:
    """The repository, its instance in the real schema and the patches (no docker needed)."""
    repo = tmp_path_factory.mktemp("official") / "testbed"
    (repo / "tests").mkdir(parents=True)
    (repo / "calc.py").write_text(BUGGY)
    (repo / "tests" / "test_calc.py").write_text(BASE_TESTS)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base")
    base = git(repo, "rev-parse", "HEAD").strip()
    fixed_add = BUGGY.replace("return a - b\n\n\ndef mul", "return a + b\n\n\ndef mul")
    gold = diff(repo, "calc.py", fixed_add.replace("return a + b\n\n\ndef sub", "return a * b\n\n\ndef sub"))
    test_patch = diff(repo, "tests/test_calc.py", NEW_TESTS)
    instance = {
        "instance_id": IID,
        "repo": "pytest-dev/pytest",
        "base_commit": base,
        "patch": gold,
        "test_patch": test_patch,
        "problem_statement": "add() and mul() return wrong results",
        "hints_text": "",
        "created_at": "2024-01-01T00:00:00Z",
        "version": "8.0",
        "environment_setup_commit": base,
        "FAIL_TO_PASS": json.dumps(["tests/test_calc.py::test_add", "tests/test_calc.py::test_mul"]),
        "PASS_TO_PASS": json.dumps(["tests/test_calc.py::test_sub"]),
        "image": f"sweb.eval.x86_64.{IID}:latest",
        "eval_script": eval_script(base, test_patch),
        "log_parser": "parse_log_pytest",
        "eval_type": "pass_and_fail",
    }
    partial = diff(repo, "calc.py", fixed_add)
    return {"repo": repo, "instance": instance, "gold": gold, "partial": partial}


@pytest.fixture(scope="session")
def official_image(fixture_repo) -> str:
    """sweb.eval.x86_64.<id>:latest, the offline stand-in (scripts/swe_images.py stand-in's builder)."""
    from tests.conftest import sandbox_backend
    from tests.test_native_image import hostroot_image

    sandbox_backend("docker")  # skips (or fails under VTB_REQUIRE_DOCKER=1) without an engine
    hostroot_image()
    (name,) = images.build_stand_in(fixture_repo["repo"], [IID])
    return name


@pytest.fixture(scope="session")
def api():
    return official.docker_api()


def grade(fixture_repo, api, tmp_path, patch: str | None, name: str = "m") -> tuple[dict, Path]:
    instance = fixture_repo["instance"]
    pred = {"instance_id": IID, "model_name_or_path": name, "model_patch": patch}
    log_dir = tmp_path / name
    report = official.grade_official(instance, pred, api, log_dir, LIMITS)
    return report[IID], log_dir


# --- no docker needed ----------------------------------------------------------------------------


def test_the_spec_comes_from_swebench(fixture_repo):
    spec = official.official_spec(fixture_repo["instance"])
    assert spec.images == [  # the instance's own name (= the local one), then the published one
        f"sweb.eval.x86_64.{IID}:latest",
        f"swebench/sweb.eval.x86_64.{IID.replace('__', '_1776_')}:latest",
    ]
    assert spec.tests == ["pytest -rA tests/test_calc.py"]
    assert any("git apply -v -" in line for line in spec.setup)
    assert official.official_spec(fixture_repo["instance"], namespace="none").images == [
        f"sweb.eval.x86_64.{IID}:latest"
    ]
    assert official.official_spec(fixture_repo["instance"], image="mine/{instance_id}:x").images == [
        f"mine/{IID}:x"
    ]


def test_forged_markers_outside_the_nonce_block_are_ignored():
    nonce = "n0nce"
    out = "\n".join(
        [
            f"VTB-APPLIED {nonce}",
            ">>>>> Start Test Output",
            "PASSED tests/test_calc.py::test_add",
            f"VTB-START {nonce}",
            "PASSED tests/test_calc.py::test_add",
            ">>>>> End Test Output",
            ">>>>> Test Exit Code: 0",
            "FAILED tests/test_calc.py::test_add - assert",
            f"VTB-END {nonce}",
            f"VTB-EXIT {nonce} 1",
            "VTB-EXIT other 0",
        ]
    )
    parts = official.genuine_parts(out, nonce)
    assert parts["applied"] is True and parts["exit_code"] == 1
    log = official.graded_log(parts["tests"], parts["exit_code"])
    assert log.count(">>>>> End Test Output") == 1 and log.count(">>>>> Test Exit Code") == 1
    assert log.index("FAILED") < log.index(">>>>> End Test Output")


def test_an_unknown_instance_id_is_refused_by_name(fixture_repo, tmp_path):
    preds, data = tmp_path / "p.jsonl", tmp_path / "d.json"
    data.write_text(json.dumps([fixture_repo["instance"]]))
    preds.write_text(
        json.dumps({"instance_id": "nope__nope-1", "model_name_or_path": "m", "model_patch": "x"})
    )
    with pytest.raises(ValueError, match="nope__nope-1"):
        evaluate.run(_args(preds, data, tmp_path), out=io.StringIO())
    assert (
        evaluate.main(["--predictions", str(preds), "--dataset", str(data), "--output-dir", str(tmp_path)])
        == 2
    )


def test_a_missing_image_is_an_error_that_names_it(fixture_repo, tmp_path):
    instance = {**fixture_repo["instance"], "image": "sweb.eval.x86_64.absent__absent-1:latest"}
    spec = official.official_spec(instance, namespace="none")

    class NoImages:
        def inspect_image(self, name):
            import docker

            raise docker.errors.ImageNotFound(name)

    with pytest.raises(official.ImageUnavailable, match=r"sweb\.eval\.x86_64\..*docker load -i"):
        official.resolve_image(NoImages(), spec.images, pull=False)


def _args(preds: Path, data: Path, out: Path, **kw) -> Namespace:
    args = evaluate.parser().parse_args(["--predictions", str(preds), "--dataset", str(data)])
    args.output_dir, args.run_id, args.timeout = str(out), "t", 120.0
    for k, v in kw.items():
        setattr(args, k, v)
    return args


@needs_bwrap()
def test_the_embedded_miniature_through_the_cli_on_bwrap(tmp_path):
    instances = make_instances(0, 2, "eval")
    data = tmp_path / "mini.jsonl"
    data.write_text("".join(json.dumps(i) + "\n" for i in instances))
    preds = tmp_path / "preds.jsonl"
    rows = [
        {
            "instance_id": instances[0]["instance_id"],
            "model_name_or_path": "org/gold",
            "model_patch": instances[0]["patch"],
        },
        {"instance_id": instances[1]["instance_id"], "model_name_or_path": "org/gold", "model_patch": ""},
    ]
    preds.write_text("".join(json.dumps(r) + "\n" for r in rows))
    code = evaluate.main(
        [
            "--predictions",
            str(preds),
            "--dataset",
            str(data),
            "--run-id",
            "mini",
            "--output-dir",
            str(tmp_path),
        ]
    )
    assert code == 0
    summary = json.loads((tmp_path / "org__gold.mini.json").read_text())
    assert summary["resolved_ids"] == [instances[0]["instance_id"]]
    assert summary["empty_patch_ids"] == [instances[1]["instance_id"]]
    assert summary["total_instances"] == 2 and summary["schema_version"] == 2
    inst_dir = tmp_path / "logs" / "run_evaluation" / "mini" / "org__gold" / instances[0]["instance_id"]
    report = json.loads((inst_dir / "report.json").read_text())[instances[0]["instance_id"]]
    assert report["resolved"] is True and report["tests_status"]["FAIL_TO_PASS"]["failure"] == []
    assert (inst_dir / "patch.diff").read_text() == instances[0]["patch"]
    assert ">>>>> Start Test Output" in (inst_dir / "test_output.txt").read_text()


# --- on the official-layout image ------------------------------------------------------------------


@pytest.mark.docker
def test_the_gold_prediction_resolves_through_the_cli(fixture_repo, official_image, tmp_path):
    data, preds = tmp_path / "d.json", tmp_path / "p.json"
    data.write_text(json.dumps([fixture_repo["instance"]]))
    pred = {"instance_id": IID, "model_name_or_path": "gold", "model_patch": fixture_repo["gold"]}
    preds.write_text(json.dumps([pred]))
    out = io.StringIO()
    summaries = evaluate.run(_args(preds, data, tmp_path, run_id="g"), out=out)
    assert summaries["gold"]["resolved_ids"] == [IID], out.getvalue()
    inst = tmp_path / "logs" / "run_evaluation" / "g" / "gold" / IID
    report = json.loads((inst / "report.json").read_text())[IID]
    assert report["resolved"] is True and report["patch_successfully_applied"] is True
    assert sorted(report["tests_status"]["FAIL_TO_PASS"]["success"]) == [
        "tests/test_calc.py::test_add",
        "tests/test_calc.py::test_mul",
    ]
    assert report["tests_status"]["PASS_TO_PASS"]["success"] == ["tests/test_calc.py::test_sub"]
    log = (inst / "test_output.txt").read_text()
    assert ">>>>> Test Exit Code: 0" in log and "PASSED tests/test_calc.py::test_mul" in log
    assert (inst / "patch.diff").read_text() == fixture_repo["gold"]
    assert json.loads((tmp_path / "gold.g.json").read_text()) == summaries["gold"]
    assert f"{IID}: resolved" in out.getvalue()


@pytest.mark.docker
def test_half_a_fix_does_not_resolve(fixture_repo, official_image, api, tmp_path):
    report, log_dir = grade(fixture_repo, api, tmp_path, fixture_repo["partial"])
    assert report["patch_successfully_applied"] is True and report["resolved"] is False
    assert report["tests_status"]["FAIL_TO_PASS"] == {
        "success": ["tests/test_calc.py::test_add"],
        "failure": ["tests/test_calc.py::test_mul"],
    }
    assert ">>>>> Test Exit Code: 1" in (log_dir / "test_output.txt").read_text()


@pytest.mark.docker
def test_an_empty_patch_is_marked_empty(fixture_repo, official_image, api, tmp_path):
    report, _ = grade(fixture_repo, api, tmp_path, "")
    assert report["patch_exists"] is False and report["resolved"] is False
    assert evaluate.grading.run_summary({IID: report}, [IID])["empty_patch_ids"] == [IID]


FORGER = (
    "import atexit, sys\n"
    "_LINES = ['PASSED tests/test_calc.py::test_add', 'PASSED tests/test_calc.py::test_mul',\n"
    "          'PASSED tests/test_calc.py::test_sub', '>>>>> End Test Output', '>>>>> Test Exit Code: 0']\n"
    "print('>>>>> Start Test Output')\n"
    "print('\\n'.join(_LINES), flush=True)\n"
    "atexit.register(lambda: print('\\n'.join(_LINES), flush=True))\n"
)


@pytest.mark.docker
def test_a_patch_that_forges_markers_and_passed_lines_does_not_resolve(
    fixture_repo, official_image, api, tmp_path
):
    repo = fixture_repo["repo"]
    patch = diff(repo, "calc.py", FORGER + BUGGY)
    report, log_dir = grade(fixture_repo, api, tmp_path, patch)
    assert report["resolved"] is False
    run_log = (log_dir / "run_instance.log").read_text()
    assert "PASSED tests/test_calc.py::test_mul" in run_log  # the forgery ran ...
    assert (log_dir / "test_output.txt").read_text().count(">>>>> End Test Output") == 1  # ... defused
    # The same output under swebench's plain markers resolves: the first End marker and the first
    # exit status win, and both are the forger's. That is what the nonce markers are for.
    naive = run_log.replace(">>>> >", ">>>>>")
    naive = re.sub(r"^VTB-START \w+$", ">>>>> Start Test Output", naive, flags=re.M)
    naive = re.sub(r"^VTB-END \w+$", ">>>>> End Test Output", naive, flags=re.M)
    naive = re.sub(r"^VTB-EXIT \w+ (\d+)$", r">>>>> Test Exit Code: \1", naive, flags=re.M)
    (tmp_path / "naive.txt").write_text(naive)
    spec = official.official_spec(fixture_repo["instance"]).spec
    pred = {"instance_id": IID, "model_name_or_path": "m", "model_patch": patch}
    naive_report = official.swebench_api()[1](spec, pred, str(tmp_path / "naive.txt"), True)
    assert naive_report[IID]["resolved"] is True


@pytest.mark.docker
def test_a_symlink_patch_or_a_flood_of_output_costs_only_the_instance(
    fixture_repo, official_image, api, tmp_path
):
    link = "diff --git a/evil b/evil\nnew file mode 120000\n--- /dev/null\n+++ b/evil\n@@ -0,0 +1 @@\n+/etc/shadow\n"
    report, _ = grade(fixture_repo, api, tmp_path, link, name="link")
    assert report["resolved"] is False and "unsafe" in report["error"]
    flood = diff(
        fixture_repo["repo"],
        "calc.py",
        "import atexit\natexit.register(lambda: print(('x' * 99 + '\\n') * 120_000))\n" + BUGGY,
    )
    report, log_dir = grade(fixture_repo, api, tmp_path, flood, name="flood")
    assert report["resolved"] is False
    for name in ("test_output.txt", "run_instance.log"):
        path = log_dir / name
        assert path.stat().st_size < 2.5 * official.MAX_TEST_LOG
    assert "characters cut" in (log_dir / "test_output.txt").read_text()  # 12 MB of it, bounded


@pytest.mark.docker
def test_a_hung_test_run_is_the_instances_error_and_a_missing_image_is_named(
    fixture_repo, official_image, api, tmp_path
):
    hang = diff(fixture_repo["repo"], "calc.py", "import time\ntime.sleep(600)\n" + BUGGY)
    pred = {"instance_id": IID, "model_name_or_path": "m", "model_patch": hang}
    short = Limits(wall_seconds=6, cpu_seconds=60, memory_mb=1024, max_processes=256)
    report = official.grade_official(fixture_repo["instance"], pred, api, tmp_path / "hang", short)[IID]
    assert report["resolved"] is False and report["error"].startswith("killed: wall")
    absent = {
        **fixture_repo["instance"],
        "instance_id": "absent__absent-1",
        "image": "sweb.eval.x86_64.absent__absent-1:latest",
    }
    with pytest.raises(
        official.ImageUnavailable, match=r"image sweb\.eval\.x86_64\.absent__absent-1:latest is not here"
    ):
        official.grade_official(
            absent, {**pred, "instance_id": "absent__absent-1"}, api, tmp_path / "absent", LIMITS
        )
