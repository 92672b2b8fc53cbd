"""scripts/gpu_smoke.py's verdict on fake grading figures: it fails on a fallback from vLLM, on
any unanswered episode, on more than one harness restart and past its time budget, and passes
only a clean run. (The smoke itself needs a GPU: scripts/gpu_smoke.sh.)
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "gpu_smoke.py"


@pytest.fixture(scope="module")
def smoke():
    spec = importlib.util.spec_from_file_location("gpu_smoke", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # defines functions only: torch, vLLM and DeepSpeed load in main()
    return module


def _grades(**vllm) -> dict[str, dict]:
    clean = {"answered": 200, "restarts": 0, "failed": {}}
    return {
        "vllm": {"engine_ran": "vllm", **clean, **vllm},
        "transformers": {"engine_ran": "transformers", **clean},
    }


def test_a_clean_run_passes(smoke):
    assert smoke.smoke_failures(_grades(), 200, elapsed_s=300.0, budget_s=360.0) == []
    assert smoke.smoke_failures(_grades(restarts=1), 200) == []  # one restart is allowed


def test_a_fallback_to_transformers_fails(smoke):
    ran = "transformers (fallback from vllm: no CUDA GPU is visible (set sandbox.gpus to pass one through))"
    failures = smoke.smoke_failures(_grades(engine_ran=ran), 200)
    assert (
        len(failures) == 1
        and failures[0].startswith("vllm: the grading ran on")
        and "fallback" in failures[0]
    )
    assert smoke.smoke_failures(_grades(engine_ran=""), 200)  # a server that said nothing is not vLLM


def test_the_cpu_plumbing_check_expects_the_fallback(smoke):
    ran = "transformers (fallback from vllm: the vllm package cannot be imported)"
    assert smoke.smoke_failures(_grades(engine_ran=ran), 200, expect_vllm=False) == []
    assert smoke.smoke_failures(_grades(), 200, expect_vllm=False)  # real vLLM in --cpu mode is wrong


def test_unanswered_episodes_fail(smoke):
    failures = smoke.smoke_failures(_grades(answered=199), 200)
    assert failures == ["vllm: 1 of 200 episodes unanswered ()"]
    failures = smoke.smoke_failures(_grades(answered=200, failed={"e7": "the harness crashed"}), 200)
    assert len(failures) == 1 and "e7: the harness crashed" in failures[0]


def test_more_than_one_restart_fails(smoke):
    failures = smoke.smoke_failures(_grades(restarts=2), 200)
    assert failures == ["vllm: 2 harness restarts (at most 1)"]


def test_a_missing_engine_row_and_the_time_budget_fail(smoke):
    grades = _grades()
    del grades["transformers"]
    assert smoke.smoke_failures(grades, 200) == ["transformers: not graded"]
    assert smoke.smoke_failures(_grades(), 200, elapsed_s=500.0, budget_s=360.0) == [
        "took 500 s, over its 360 s budget"
    ]
