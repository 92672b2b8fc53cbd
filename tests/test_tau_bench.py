"""`task=tau` end to end, shrunk: a real Prefect flow, real bwrap sandboxes, real training, real episodes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import needs_bwrap

pytestmark = [pytest.mark.slow, needs_bwrap()]

TAU_SMALL = [
    "task=tau",
    "task.n_users=20",
    "task.n_pool=40",
    "task.n_val=8",
    "task.n_test=8",
    "task.initial_data_size=16",
    "model.n_layer=1",  # the tests read what the run did, not how well it trained
    "model.n_embd=32",
    "model.pretrain_steps=5",
    "model.pretrain_texts=200",
    "trainer.epochs=1",
    "agent.max_iterations=3",
    "budget.limit=5e12",
    "base_model_check=false",  # checked on the math e2e run; one play per system fewer here
    "analysis.grid=false",  # the grid and the path are domain-blind: checked on the math e2e run
    "analysis.path=false",
    "+budget.flops_per_cpu_second=1e9",  # no calibration for this domain's shape: the floor is tested on math
]


@pytest.fixture(scope="module")
def tau_run(tmp_path_factory, prefect_server):

    from flows.bench import run_bench
    from vtb.compose import compose_config

    tmp = tmp_path_factory.mktemp("tau")
    overrides = [*TAU_SMALL, f"runs_dir={tmp / 'runs'}", f"cache_dir={tmp / 'cache'}"]
    cfg = compose_config(overrides)
    return cfg, run_bench(cfg).to_json()


def test_tau_run_reports_pass_k_for_every_system(tau_run):
    cfg, result = tau_run
    assert result["task"] == "tau"
    for row in ("initial", "submitted", "reference"):
        assert set(result[row]) >= {"test_score", "pass^1", "pass^2"}
        assert result[row]["pass^2"] <= result[row]["pass^1"] == pytest.approx(result[row]["test_score"])
    grading = json.loads((Path(result["record"]) / "grading.json").read_text())
    assert grading["submitted"]["n"] == cfg.task.n_test * cfg.task.trials
    assert grading["submitted"]["null_model_score"] == 0.0 and not grading["submitted"]["flagged"]
    # the written check ran on greedy's submission (the repair harness), from grading's transcript
    check = result["submitted"]["provenance"]
    assert check["check"] == "written" and check["n"] == cfg.task.n_test * cfg.task.trials, check
    assert result["submitted"]["flagged_by_provenance"] is False, check
    sample = json.loads((Path(result["record"]) / "private" / "samples.json").read_text())["submitted"][0]
    assert sample["messages"][0]["role"] == "user" and "reward" in sample


def test_greedy_edits_all_three_parts_of_a_tau_system(tau_run):
    cfg, result = tau_run
    run_dir = Path(result["record"])
    edited = {}
    for it in (1, 2, 3):
        entry = json.loads((run_dir / "iterations" / f"{it:02d}.json").read_text())
        edited.update(entry["edits"])
    assert {"harness", "data", "trainer"} <= set(edited)
    trajectories = "".join(p.read_text() for p in (run_dir / "trajectories").glob("*.json"))
    assert "vtb.domains.tau.kit.datatools demos" in trajectories  # the data edit ran as a sandboxed command
    assert (run_dir / "submission" / "harness" / "harness.py").exists()
    report = (run_dir / "report.md").read_text()
    assert "pass^2" in report and "by template" in report
