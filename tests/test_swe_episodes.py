"""Real SWE-bench instances in the bench: splits, shell episodes in official-layout images, grading.

The records are hand-written in the two public formats (tests/fixtures/swe_bench/):
verified_card.jsonl in the data set card's schema (SWE-bench/SWE-bench_Verified: FAIL_TO_PASS and
PASS_TO_PASS as JSON strings, difficulty, no eval_script), completed from task_repo/, a swebench
task repo (tasks/<instance_id>/task.yaml, eval.sh, ...: swebench 5's own source of an instance's
eval script, image and log parser); verified_current.jsonl as swebench 5 data sets carry them
(with image, eval_script, log_parser, eval_type). They describe test_swe_official's repository
(its commit is fixed: the same author, dates and files give the same base_commit), and the images
are its offline stand-in (scripts/swe_images.py stand-in), tagged once per instance id as
swebench names instance images. Each instance has its own repo name, so (repo, base_commit)
differs across splits as it must.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("swebench", reason="the swebench extra: pip install -e '.[swebench]'")

from tests.conftest import SHRUNK_BENCH  # noqa: E402
from tests.test_swe_official import IID, fixture_repo, git, official_image  # noqa: E402,F401
from vtb.config import SandboxConfig, TaskConfig  # noqa: E402
from vtb.domains import common  # noqa: E402
from vtb.domains.swe import evaluate, images, loaders, official, real, taskrepo  # noqa: E402
from vtb.domains.swe.domain import SweConfig, SweDomain  # noqa: E402
from vtb.preflight import Systems  # noqa: E402

SECRET_FIELDS = ("patch", "test_patch", "FAIL_TO_PASS", "PASS_TO_PASS")
FIXTURES = Path(__file__).parent / "fixtures" / "swe_bench"
CARD, CURRENT, TASK_REPO = (
    FIXTURES / "verified_card.jsonl",
    FIXTURES / "verified_current.jsonl",
    FIXTURES / "task_repo",
)
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def instances(fixture_repo, official_image) -> list[dict]:  # noqa: F811
    """The six hand-written records (card format 0-2, current 3-5), each id a stand-in image."""
    out = loaders.load_instances(str(CARD)) + loaders.load_instances(str(CURRENT))
    images.build_stand_in(fixture_repo["repo"], [i["instance_id"] for i in out])
    return out


def _episode(inst: dict, tmp_path, **kw) -> real.SweShellEpisode:
    from tests.conftest import sandbox_backend

    sandbox = sandbox_backend("docker")
    image = images.local_name(inst["instance_id"])
    return real.SweShellEpisode(
        inst, sandbox, tmp_path, image, max_steps=8, agent_seconds=60, task_repo=str(TASK_REPO), **kw
    )


def _play(ep: real.SweShellEpisode, actions: list[dict]) -> real.SweShellEpisode:
    for action in actions:
        if not ep.step(action):
            break
    else:
        ep.step({"type": "answer"})
    return ep


# --- no docker ----------------------------------------------------------------------------------
def test_the_start_message_carries_only_repo_and_problem_statement(fixture_repo):  # noqa: F811
    ep = real.SweShellEpisode(fixture_repo["instance"], None, None, "img")
    msg = ep.message(True)
    assert set(msg["observation"]) == {"repo", "problem_statement", "history", "max_steps"}
    text = json.dumps(msg)
    assert fixture_repo["instance"]["test_patch"] not in text and "test_mul" not in text


def _rec(iid: str, repo: str = "r/r", commit: str = "c") -> dict:
    return {
        "instance_id": iid,
        "repo": repo,
        "base_commit": commit,
        "patch": "",
        "test_patch": "",
        "problem_statement": iid,
        "FAIL_TO_PASS": [],
        "PASS_TO_PASS": [],
    }


def test_overlapping_splits_are_refused_naming_the_ids():
    with pytest.raises(ValueError, match=r"pool and test share instance_id a__b-1"):
        real.check_disjoint(
            {"pool": [_rec("a__b-1", commit="x")], "val": [], "test": [_rec("a__b-1", commit="y")]}
        )
    with pytest.raises(ValueError, match=r"val and test share \(repo, base_commit\): v-1 ~ t-1"):
        real.check_disjoint({"pool": [], "val": [_rec("v-1")], "test": [_rec("t-1")]})
    real.check_disjoint(
        {"pool": [_rec("p", commit="1")], "val": [_rec("v", commit="2")], "test": [_rec("t")]}
    )


def test_splits_from_their_own_files_or_a_fixed_cut(tmp_path):
    def write(name: str, recs: list[dict]) -> str:
        (tmp_path / name).write_text("".join(json.dumps(r) + "\n" for r in recs))
        return str(tmp_path / name)

    test = write("test.jsonl", [_rec(f"t-{i}", commit=f"t{i}") for i in range(5)])
    pool = write("pool.jsonl", [_rec(f"p-{i}", commit=f"p{i}") for i in range(8)])
    val = write("val.jsonl", [_rec(f"v-{i}", commit=f"v{i}") for i in range(3)])
    t, v, p = real.splits(
        SweConfig(name="swe", source="swe_bench", path=test, pool_path=pool, val_path=val, n_val=2)
    )
    assert [r["instance_id"] for r in t] == [f"t-{i}" for i in range(5)]  # the test file, whole
    assert [r["instance_id"] for r in v] == ["v-0", "v-1"] and len(p) == 8
    t, v, p = real.splits(SweConfig(name="swe", source="swe_bench", path=test, pool_path=pool, n_val=3))
    assert (
        len(t) == 5
        and len(v) == 3
        and len(p) == 5
        and not {r["instance_id"] for r in v} & {r["instance_id"] for r in p}
    )
    cut = SweConfig(name="swe", source="swe_bench", path=test, n_val=1, n_test=2)
    t, v, p = real.splits(cut)
    assert (len(t), len(v), len(p)) == (2, 1, 2) and real.splits(cut) == (t, v, p)  # fixed
    leak = write("leak.jsonl", [_rec("p-0", commit="p0"), _rec("x-9", commit="t3")])
    with pytest.raises(ValueError, match=r"pool and test share \(repo, base_commit\): x-9 ~ t-3"):
        real.splits(SweConfig(name="swe", source="swe_bench", path=test, pool_path=leak, n_val=1))
    with pytest.raises(ValueError, match="val_path needs task.pool_path"):
        real.splits(SweConfig(name="swe", source="swe_bench", path=test, val_path=val))
    assert isinstance(cut, TaskConfig)


def test_real_rows_and_pretraining_texts_need_no_files(fixture_repo):  # noqa: F811
    from vtb.domains.swe.kit import datatools

    rows = datatools.make_rows([fixture_repo["instance"]], 4, 0, flawed=0.0)
    assert rows and all(r["completion"] == "cat calc.py\n" for r in rows)
    assert rows[0]["prompt"].startswith("issue: ")
    by_prompt = datatools.index([fixture_repo["instance"]])
    assert all(datatools.is_correct(r, by_prompt) for r in rows)
    assert not datatools.is_correct({**rows[0], "completion": "cat tests/test_calc.py\n"}, by_prompt)


# --- docker -------------------------------------------------------------------------------------
@pytest.mark.docker
def test_a_gold_fix_made_with_shell_commands_resolves(instances, fixture_repo, tmp_path):  # noqa: F811
    gold = fixture_repo["gold"]
    ep = _play(
        _episode(instances[0], tmp_path),
        [
            {"type": "shell", "command": f"cat > /tmp/fix.diff <<'VTB_EOF'\n{gold}VTB_EOF"},
            {
                "type": "shell",
                "command": "git apply /tmp/fix.diff && printf 'n\\n' > NOTES.txt && git status --short",
            },
        ],
    )
    report = ep.grade()[0][instances[0]["instance_id"]]
    assert report["resolved"], ep.record()
    assert "calc.py" in ep.history[1]["output"]
    patch = ep.prediction()["model_patch"]
    assert "return a * b" in patch and "b/NOTES.txt" in patch  # new files are part of the diff


@pytest.mark.docker
def test_doing_nothing_does_not_resolve_and_an_explicit_patch_does(instances, fixture_repo, tmp_path):  # noqa: F811
    nothing = _play(_episode(instances[1], tmp_path / "n"), [])
    report = nothing.grade()[0][instances[1]["instance_id"]]
    assert not report["resolved"] and not report["patch_exists"]
    looked = _play(_episode(instances[2], tmp_path / "l"), [{"type": "shell", "command": "cat calc.py"}])
    assert not looked.reward() and "return a - b" in looked.history[0]["output"]
    sent = _play(_episode(instances[3], tmp_path / "p"), [{"type": "patch", "patch": fixture_repo["gold"]}])
    assert sent.reward() == 1.0, sent.record()


@pytest.mark.docker
def test_the_test_patch_never_enters_the_episodes_container(instances, tmp_path):
    assert "add(2, 3) == 5" in instances[4]["test_patch"]  # the control: what the grep looks for
    grep = (
        "grep -rIl --exclude-dir=proc --exclude-dir=sys --exclude-dir=dev -F -e 'add(2, 3) == 5' -e 'mul(2, 3) == 6' / "
        "2>/dev/null; git log --all --oneline | wc -l; echo grep-done"
    )
    ep = _play(_episode(instances[4], tmp_path), [{"type": "shell", "command": grep}])
    out = ep.history[0]["output"]
    assert "grep-done" in out and "/" not in out.replace("grep-done", ""), out
    assert not ep.reward()


# --- card-format records: the task repo's spec, the CLI's exit code, the preflight -------------
def test_the_hand_written_records_describe_the_stand_in_repository(fixture_repo):  # noqa: F811
    """The fixtures and the repository they describe agree (a drift fails here, not in a bench),
    and the task repo is well formed by swebench's own checker."""
    from swebench.task.checks import check_task_repo

    head = git(fixture_repo["repo"], "rev-parse", "HEAD").strip()
    card, current = loaders.load_instances(str(CARD)), loaders.load_instances(str(CURRENT))
    assert {r["base_commit"] for r in card + current} == {head}
    assert {r["patch"] for r in card + current} == {fixture_repo["gold"]}
    assert not any("eval_script" in r for r in card) and all(
        isinstance(r["FAIL_TO_PASS"], list) for r in card
    )
    raw = json.loads(CARD.read_text().splitlines()[0])
    assert isinstance(raw["FAIL_TO_PASS"], str) and raw["difficulty"] == "<15 min fix"  # the card's types
    assert check_task_repo(TASK_REPO) == []


def test_a_card_record_takes_its_eval_script_from_the_task_repo_or_is_refused_by_name():
    card = loaders.load_instances(str(CARD))
    spec = official.official_spec(card[0], task_repo=str(TASK_REPO))
    assert spec.tests == ["pytest -rA tests/test_calc.py"]
    assert spec.images[0] == "swebench/sweb.eval.x86_64.pytest-dev_1776_pytest-91000:latest"
    assert spec.spec.log_parser == "parse_log_pytest" and spec.spec.FAIL_TO_PASS == card[0]["FAIL_TO_PASS"]
    with pytest.raises(
        ValueError, match=r"pytest-dev__pytest-91000: the record has no eval_script.*task\.task_repo"
    ):
        official.official_spec(card[0])
    other = {**card[1], "base_commit": "0" * 40}
    with pytest.raises(ValueError, match=r"pytest-dev__pytest-91001: the task repo .* has base_commit 'a784"):
        official.official_spec(other, task_repo=str(TASK_REPO))
    current = loaders.load_instances(str(CURRENT))[0]
    with pytest.raises(
        ValueError,
        match=r"91003: no log_parser field, and swebench knows no log parser for repo 'vtb-test/calc3'",
    ):
        official.official_spec({**current, "log_parser": ""})
    unknown = {**card[2], "instance_id": "astropy__astropy-12907"}
    with pytest.raises(ValueError, match=r"astropy__astropy-12907: not in the task repo"):
        taskrepo.complete(unknown, str(TASK_REPO))


def test_a_large_refusal_names_ten_instances_then_the_rest_by_id():
    """Verified has 500 instances: a refusal lists ten in full and the others by id, once."""
    from vtb.domains.swe import checks

    card = loaders.load_instances(str(CARD))[0]
    many = [{**card, "instance_id": f"pytest-dev__pytest-{8000 + k}"} for k in range(12)]
    problems = checks.real_problems(many, SweConfig(name="swe", source="swe_bench"), api=None)
    assert len(problems) == 11 and problems[9].where == "instance pytest-dev__pytest-8009"
    assert problems[10].where == "2 more"
    assert problems[10].what.endswith("instance pytest-dev__pytest-8010, instance pytest-dev__pytest-8011")


@pytest.mark.docker
def test_the_cli_grades_card_records_with_a_task_repo_and_exits_1_when_an_instance_errors(
    instances, tmp_path, capsys
):
    """Card records: without --task-repo each is an error by name and the exit code is 1 (it was
    0, with 'error 3' in the summary); with it, the gold patches resolve and the exit code is 0."""
    preds = tmp_path / "gold.jsonl"
    rows = [
        {"instance_id": i["instance_id"], "model_name_or_path": "gold", "model_patch": i["patch"]}
        for i in instances[:3]
    ]
    preds.write_text("".join(json.dumps(r) + "\n" for r in rows))
    argv = [
        "--predictions",
        str(preds),
        "--dataset",
        str(CARD),
        "--output-dir",
        str(tmp_path),
        "--timeout",
        "120",
    ]
    assert evaluate.main([*argv, "--run-id", "bare"]) == 1
    out = capsys.readouterr()
    assert (
        "pytest-dev__pytest-91000: error: the record has no eval_script (the data set card's schema)"
        in out.out
    )
    assert "3 instance(s) could not be graded" in out.err
    assert evaluate.main([*argv, "--run-id", "repo", "--task-repo", str(TASK_REPO)]) == 0
    summary = json.loads((tmp_path / "gold.repo.json").read_text())
    assert summary["resolved_instances"] == 3 and summary["error_instances"] == 0, summary


def _data(tmp_path: Path, val: list[dict], test: list[dict]) -> Path:
    common.write_splits(tmp_path / "data", val + test, val, test, public=("instance_id",))
    return tmp_path / "data"


def _preflight(data: Path, **task) -> list:
    cfg = SweConfig(name="swe", source="swe_bench", grade_seconds=120, **task)
    return SweDomain().preflight(cfg, data, Systems(data, None), SandboxConfig(backend="docker"))


@pytest.mark.docker
def test_the_preflight_passes_card_and_current_records_and_grades_one_gold_item(instances, tmp_path):
    data = _data(tmp_path, instances[3:4], instances[:3])
    started = time.monotonic()
    assert _preflight(data, task_repo=str(TASK_REPO)) == []
    assert time.monotonic() - started < 60  # seconds: one gold grading


@pytest.mark.docker
def test_the_preflight_names_each_instance_without_eval_script_or_image_and_a_gold_that_does_not_resolve(
    instances,
    fixture_repo,  # noqa: F811
    tmp_path,
):
    """The late failures, refused before any budget: a card record with no task repo, an instance
    whose image is not here, and an image/script that the instance's own gold patch fails on."""
    problems = _preflight(_data(tmp_path / "a", instances[3:4], instances[:3]))
    text = "\n".join(map(str, problems))
    assert [p.where for p in problems] == [f"instance pytest-dev__pytest-9100{k}" for k in range(3)], text
    assert "swebench cannot make its eval script" in text and "set task.task_repo=" in text
    absent = {
        **instances[4],
        "instance_id": "pytest-dev__pytest-99999",
        "repo": "vtb-test/absent",
        "image": "",
    }
    (problem,) = _preflight(_data(tmp_path / "b", instances[3:4], [absent]))
    assert problem.where == "instance pytest-dev__pytest-99999"
    assert "image swebench/sweb.eval.x86_64.pytest-dev_1776_pytest-99999:latest is not here" in problem.what
    assert "python scripts/swe_images.py build --task-repo" in problem.fix and "stand-in" in problem.fix
    wrong = {**instances[5], "patch": fixture_repo["partial"]}  # its "gold" fixes add() only
    (problem,) = _preflight(_data(tmp_path / "c", instances[3:4], [wrong]))
    assert "its gold patch does not resolve" in problem.what and "test_mul" in problem.what, problem


# --- scripts/swe_images.py: swebench's builder online, the stand-in offline ------------------------
def _script(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """scripts/swe_images.py as a user runs it (in `cwd`: swebench writes its build logs there)."""
    return subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "swe_images.py"), *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd,
    )


@pytest.mark.docker
def test_the_online_builder_is_swebenchs_and_says_why_it_cannot_build_here(tmp_path):
    """Here (no network, no buildx) swebench's builder cannot build: exit 1, saying why and what to do."""
    done = _script("build", "--task-repo", str(TASK_REPO), "-i", "pytest-dev__pytest-91000", cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    assert "needs network" in done.stderr and "stand-in" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.docker
def test_the_stand_in_script_tags_a_datasets_images_checked_against_base_commit(
    instances,
    fixture_repo,  # noqa: F811
    tmp_path,
):
    done = _script(
        "stand-in", "--testbed", str(fixture_repo["repo"]), "--dataset", str(CURRENT), cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [images.local_name(f"pytest-dev__pytest-9100{k}") for k in (3, 4, 5)]
    moved = tmp_path / "moved.jsonl"
    moved.write_text(
        json.dumps({**json.loads(CURRENT.read_text().splitlines()[0]), "base_commit": "f" * 40}) + "\n"
    )
    done = _script("stand-in", "--testbed", str(fixture_repo["repo"]), "--dataset", str(moved), cwd=tmp_path)
    assert (
        done.returncode == 2
        and "not at the base_commit of pytest-dev__pytest-91003 (ffffffffffff)" in done.stderr
    )


FIXED_HARNESS = Path(__file__).parent / "fixtures" / "swe_fixed_patches"


def _bench_overrides(tmp_path: Path, *extra: str) -> list[str]:
    """task=swe on the hand-written records: the card file is the test split (whole), the
    current-format file the pool (val: one of it), both graded in their official-layout images."""
    return [
        "task=swe",
        "task.source=swe_bench",
        f"task.path={CARD}",
        f"task.pool_path={CURRENT}",
        "task.n_val=1",
        "task.n_test=3",
        "task.initial_data_size=8",
        "task.max_steps_per_episode=4",
        "task.agent_seconds=60",
        "task.grade_seconds=120",
        "sandbox=docker",
        "agent=noop",
        *SHRUNK_BENCH,
        "model.pretrain_texts=100",
        "null_model_check=false",
        f"runs_dir={tmp_path / 'runs'}",
        f"cache_dir={tmp_path / 'cache'}",
        *extra,
    ]


@pytest.mark.slow
@pytest.mark.docker
def test_a_shrunk_bench_on_card_and_current_records_grades_gold_partial_and_empty_as_swe_bench_does(
    instances,
    fixture_repo,  # noqa: F811
    tmp_path,
    prefect_server,
    monkeypatch,
):
    """task=swe task.source=swe_bench sandbox=docker agent=noop, whose system plays fixed patches.

    The test split is the card-format file whole (task.pool_path given), completed from the task
    repo (task.task_repo): instance 0 gets the gold patch, instance 1 half of it, instance 2 no
    edit. The bench's hidden-test grading must resolve the first only, apply the second without
    resolving it, and mark the third an empty patch, in SWE-bench's per-instance reports and its
    run summary. The val instance is a current-format record (its own eval_script) sent its gold
    patch: val 1.0. First the same bench without the task repo: refused at preflight, by name.
    """
    import shutil

    from flows.bench import run_bench
    from vtb.compose import compose_config
    from vtb.preflight import PreflightError

    started = time.monotonic()
    with pytest.raises(PreflightError) as refused:
        run_bench(compose_config(_bench_overrides(tmp_path / "refused")))
    refusal_s = time.monotonic() - started
    message = str(refused.value)
    assert "task=swe cannot give a true score, so nothing was run or spent (3 problems)" in message, message
    for k in range(3):
        assert f"instance pytest-dev__pytest-9100{k}: swebench cannot make its eval script" in message
    assert "set task.task_repo=" in message and "Traceback" not in message
    print(f"refused at preflight in {refusal_s:.1f} s")

    harness = tmp_path / "harness"
    shutil.copytree(FIXED_HARNESS, harness)
    gold, partial = fixture_repo["gold"], fixture_repo["partial"]
    patches = {"0": gold, "1": partial, "3": gold, "4": gold, "5": gold}
    (harness / "config.json").write_text(json.dumps({"patches": patches}))
    monkeypatch.setattr(SweDomain, "harness_for", lambda self, task, system: harness)
    started = time.monotonic()
    result = run_bench(compose_config(_bench_overrides(tmp_path, f"task.task_repo={TASK_REPO}"))).to_json()
    print(f"bench in {time.monotonic() - started:.1f} s: {json.dumps(result)[:2000]}")
    record = Path(result["record"])
    assert json.loads((record / "preflight.json").read_text())["checked"] == ["splits", "domain swe"]
    graded = record / "private" / "grading" / "submitted"
    summary = json.loads((graded / "report.json").read_text())
    ids = [f"pytest-dev__pytest-9100{k}" for k in range(3)]
    assert summary["total_instances"] == 3, summary
    assert summary["resolved_ids"] == [ids[0]], summary
    assert summary["unresolved_ids"] == [ids[1]], summary
    assert summary["empty_patch_ids"] == [ids[2]], summary
    reports = {}
    for path in (graded / "logs").glob("*/report.json"):
        reports.update(json.loads(path.read_text()))
    assert sorted(reports) == ids
    assert reports[ids[0]]["resolved"]
    assert reports[ids[1]]["patch_successfully_applied"] and not reports[ids[1]]["resolved"]
    assert not reports[ids[2]]["patch_exists"] and not reports[ids[2]]["resolved"]
    samples = json.loads((record / "private" / "samples.json").read_text())["submitted"]
    assert len(samples) == 3
    outputs = [h["output"] for s in samples for h in s["history"]]
    assert any("return a - b" in out for out in outputs), samples  # the harness read /testbed/calc.py
