"""Real SWE-bench instances in the bench: splits, shell episodes in official-layout images, grading.

The images are test_swe_official's offline stand-in (FROM vtb/hostroot: /testbed at base_commit, a
conda stand-in with pytest), tagged once per instance id as swebench names instance images. Each
instance has its own repo name, so (repo, base_commit) differs across splits as it must.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("swebench", reason="the swebench extra: pip install -e '.[swebench]'")

from tests.test_swe_official import IID, fixture_repo, official_image  # noqa: E402,F401
from vtb.config import TaskConfig  # noqa: E402
from vtb.domains.swe import real  # noqa: E402
from vtb.domains.swe.domain import SweConfig  # noqa: E402

SECRET_FIELDS = ("patch", "test_patch", "FAIL_TO_PASS", "PASS_TO_PASS")


def _instance(base: dict, k: int) -> dict:
    iid = f"pytest-dev__pytest-9100{k}"
    return {
        **base,
        "instance_id": iid,
        "repo": f"vtb-test/calc{k}",
        "problem_statement": f"{base['problem_statement']} in calc.py (report {k})",
        "image": f"sweb.eval.x86_64.{iid}:latest",
    }


@pytest.fixture(scope="module")
def instances(fixture_repo, official_image) -> list[dict]:  # noqa: F811
    """Six instances in the real schema, each id a tag of the one stand-in image."""
    import docker

    client = docker.from_env()
    out = [_instance(fixture_repo["instance"], k) for k in range(6)]
    for inst in out:
        client.images.get(official_image).tag(inst["image"].split(":")[0], "latest")
    return out


def _episode(inst: dict, tmp_path, **kw) -> real.SweShellEpisode:
    from tests.conftest import sandbox_backend

    sandbox = sandbox_backend("docker")
    return real.SweShellEpisode(inst, sandbox, tmp_path, inst["image"], max_steps=8, agent_seconds=60, **kw)


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


FIXED_HARNESS = Path(__file__).parent / "fixtures" / "swe_fixed_patches"


@pytest.mark.slow
@pytest.mark.docker
def test_a_shrunk_bench_grades_gold_partial_and_empty_predictions_as_swe_bench_does(
    instances,
    fixture_repo,  # noqa: F811
    tmp_path,
    prefect_server,
    monkeypatch,  # noqa: F811
):
    """task=swe task.source=swe_bench sandbox=docker, agent=noop, whose system plays fixed patches.

    The test split is task.path whole (task.pool_path given): instance 0 gets the gold patch,
    instance 1 half of it, instance 2 no edit. The bench's hidden-test grading must resolve the
    first only, apply the second without resolving it, and mark the third an empty patch, in
    SWE-bench's per-instance reports and its run summary.
    """
    import shutil

    from flows.bench import run_bench
    from vtb.compose import compose_config
    from vtb.domains.swe.domain import SweDomain

    harness = tmp_path / "harness"
    shutil.copytree(FIXED_HARNESS, harness)
    patches = {"0": fixture_repo["gold"], "1": fixture_repo["partial"]}
    (harness / "config.json").write_text(json.dumps({"patches": patches}))
    monkeypatch.setattr(SweDomain, "harness_for", lambda self, task, system: harness)
    test, pool = tmp_path / "verified.jsonl", tmp_path / "pool.jsonl"
    test.write_text("".join(json.dumps(i) + "\n" for i in instances[:3]))
    pool.write_text("".join(json.dumps(i) + "\n" for i in instances[3:]))
    overrides = [
        "task=swe",
        "task.source=swe_bench",
        f"task.path={test}",
        f"task.pool_path={pool}",
        "task.n_val=1",
        "task.initial_data_size=8",
        "task.max_steps_per_episode=4",
        "task.agent_seconds=60",
        "task.grade_seconds=120",
        "sandbox=docker",
        "agent=noop",
        "model.n_layer=2",
        "model.n_embd=64",
        "model.pretrain_steps=10",
        "model.pretrain_texts=200",
        "budget.limit=5e12",
        "reference=false",
        "null_model_check=false",
        "base_model_check=false",
        "+budget.flops_per_cpu_second=1e9",
        f"runs_dir={tmp_path / 'runs'}",
        f"cache_dir={tmp_path / 'cache'}",
    ]
    result = run_bench(compose_config(overrides))
    graded = Path(result["record"]) / "grading" / "submitted"
    summary = json.loads((graded / "report.json").read_text())
    ids = [i["instance_id"] for i in instances[:3]]
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
    samples = json.loads((Path(result["record"]) / "grading.json").read_text())["submitted"]["samples"]
    assert len(samples) == 3
    outputs = [h["output"] for s in samples for h in s["history"]]
    assert any("return a - b" in out for out in outputs), samples  # the harness read /testbed/calc.py
