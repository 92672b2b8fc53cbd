"""`task=terminal` and `task=swe` end to end, shrunk: real Prefect flows, bwrap sandboxes, training, grading."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import needs_bwrap

pytestmark = [pytest.mark.slow, needs_bwrap()]

SMALL = [
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
TASKS = {
    "terminal": [
        "task=terminal",
        "task.n_pool=40",
        "task.n_val=8",
        "task.n_test=8",
        "task.initial_data_size=16",
    ],
    "swe": ["task=swe", "task.n_pool=30", "task.n_val=6", "task.n_test=6", "task.initial_data_size=12"],
}


def _run(tmp: Path, task: str) -> tuple:

    from flows.bench import run_bench
    from vtb.compose import compose_config

    overrides = [*TASKS[task], *SMALL, f"runs_dir={tmp / 'runs'}", f"cache_dir={tmp / 'cache'}"]
    cfg = compose_config(overrides)
    return cfg, run_bench(cfg).to_json()


def _edited_parts(run_dir: Path) -> set[str]:
    edited: dict = {}
    for it in (1, 2, 3):
        edited.update(json.loads((run_dir / "iterations" / f"{it:02d}.json").read_text())["edits"])
    return set(edited)


def test_terminal_run_grades_every_system_with_hidden_tests(tmp_path_factory, prefect_server):
    cfg, result = _run(tmp_path_factory.mktemp("terminal"), "terminal")
    run_dir = Path(result["record"])
    for row in ("initial", "submitted", "reference"):
        assert 0.0 <= result[row]["test_score"] <= 1.0 and "pass@1" in result[row]
    grading = json.loads((run_dir / "grading.json").read_text())
    assert grading["submitted"]["n"] == cfg.task.n_test * cfg.task.trials
    assert grading["submitted"]["null_model_score"] == 0.0
    sample = json.loads((run_dir / "private" / "samples.json").read_text())["submitted"][0]
    assert sample["tests"] and "history" in sample  # the hidden tests ran after the episode
    assert {"harness", "data", "trainer"} <= _edited_parts(run_dir)
    # The provenance audit ran on greedy's submission (seed 0) and did not flag it (issue 37).
    audit = result["submitted"]["provenance"]
    print(f"\n[terminal] submitted {result['submitted']['test_score']:.3f}, provenance audit: {audit}")
    assert result["submitted"]["flagged_by_provenance"] is False and audit["unswapped"] == 0, audit
    assert "vtb.domains.terminal.kit.datatools from-pool" in "".join(
        p.read_text() for p in (run_dir / "trajectories").glob("*.json")
    )


def test_swe_run_writes_swe_bench_reports(tmp_path_factory, prefect_server):
    cfg, result = _run(tmp_path_factory.mktemp("swe"), "swe")
    run_dir = Path(result["record"])
    for row in ("initial", "submitted", "reference"):
        assert 0.0 <= result[row]["test_score"] <= 1.0
    summary = json.loads((run_dir / "private" / "grading" / "submitted" / "report.json").read_text())
    assert summary["total_instances"] == cfg.task.n_test
    assert summary["resolved_instances"] == round(result["submitted"]["test_score"] * cfg.task.n_test)
    reports = list((run_dir / "private" / "grading" / "submitted" / "logs").glob("*/report.json"))
    assert len(reports) == cfg.task.n_test
    first = json.loads(reports[0].read_text())
    assert set(next(iter(first.values()))) >= {"patch_exists", "patch_successfully_applied", "resolved"}
    assert (run_dir / "private" / "grading" / "submitted" / "predictions.jsonl").exists()
    assert {"harness", "data", "trainer"} <= _edited_parts(run_dir)
    # The written check ran on greedy's submission (seed 0), from grading's own transcript, and
    # did not flag it: its patches are built from the model's edit lines (issue 37).
    check = result["submitted"]["provenance"]
    print(f"\n[swe] submitted {result['submitted']['test_score']:.3f}, written check: {check}")
    assert check["check"] == "written" and check["n"] == cfg.task.n_test, check
    assert result["submitted"]["flagged_by_provenance"] is False, check
    assert (run_dir / "private" / "grading" / "submitted" / "written_check.json").is_file()
    assert "Written check" in (run_dir / "report.md").read_text()
