"""What a dispatched sweep accepts from shared result storage, and the small rules of dispatch
(which mode, which GPUs, which paths a worker uses), without a server."""

from __future__ import annotations

import json
import math

import pytest

from vtb.bench_result import BenchResult
from vtb.codesign import CORNERS
from vtb.result_check import MAX_RESULT_BYTES, BadResult, check_result, parse_record

GOOD = {
    "run_id": "math-noop-s0-50dc7845",
    "task": "math",
    "agent": "noop",
    "model": "tiny",
    "seed": 0,
    "initial": {"test_score": 0.1, "val_score": 0.2},
    "submitted": {
        "test_score": 0.3,
        "val_score": 0.25,
        "iteration": 2,
        "flagged_by_null_model": False,
        "base_model_test_score": None,
        "item_rewards": {"test-0000": 1.0, "test-0001": 0.0},
        "pass^2": 0.5,
    },
    "reference": None,
    "budget": {
        "used": 3.8e9,
        "limit": 5e12,
        "unit": "flops",
        "flops": 3.8e9,
        "cpu_seconds": 12.5,
        "gpu_seconds": 0.0,
        "agent_tokens": 0,
        "agent_cost_usd": 0.0,
    },
    "contamination": {"flagged": False},
    "location": {"host": "machine-a", "path": "/srv/vtb/runs/math-noop-s0-50dc7845"},
}
EXPECTED = {"run_id": GOOD["run_id"], "task": "math", "agent": "noop", "seed": 0}


def _with(path: str, value) -> dict:
    out = json.loads(json.dumps(GOOD))
    *parents, last = path.split(".")
    node = out
    for p in parents:
        node = node[p]
    if value is KeyError:
        del node[last]
    else:
        node[last] = value
    return out


def test_a_sound_result_passes_and_both_stored_forms_parse() -> None:
    typed = check_result(GOOD, EXPECTED)  # read typed: the copy a sweep keeps is its JSON
    assert typed.submitted.score.test_score == GOOD["submitted"]["test_score"]
    assert BenchResult.from_json(typed.to_json()) == typed  # the copy reads back as the same result
    bare = json.dumps(GOOD).encode()
    record = json.dumps({"metadata": {"serializer": {"type": "json"}}, "result": json.dumps(GOOD)}).encode()
    assert parse_record(bare, "json") == GOOD == parse_record(record, "json")


@pytest.mark.parametrize(
    ("path", "value", "reason"),
    [
        ("submitted.test_score", 7.0, "submitted.test_score"),
        ("submitted.test_score", math.nan, "finite"),
        ("submitted.test_score", "0.9", "not a number"),
        ("submitted.test_score", True, "not a number"),
        ("initial.test_score", -0.1, "initial.test_score"),
        ("submitted.item_rewards", {"a": math.inf}, "item_rewards"),
        ("submitted.pass^2", 2, "pass^2"),
        ("submitted.iteration", -1, "iteration"),
        ("budget.flops", math.inf, "budget.flops"),
        ("budget.used", -5.0, "budget.used"),
        ("budget.unit", "bananas", "budget.unit"),
        ("seed", 1.5, "seed"),
        ("run_id", "../../etc", "run_id"),
        ("run_id", "a/b", "run_id"),
        ("task", "", "task"),
        ("reference", {"test_score": None}, "reference.test_score"),
        ("contamination", {"flagged": "no"}, "contamination"),
        ("location", KeyError, "location"),
        ("location.host", 5, "location.host"),
        ("budget", [], "budget"),
    ],
)
def test_a_malformed_result_is_refused_with_its_reason(path, value, reason) -> None:
    with pytest.raises(BadResult, match=reason.replace("^", r"\^")):
        check_result(_with(path, value), EXPECTED)


def _grid(**changes) -> dict:
    corners = [{"corner": c, "test_score": 0.1, "item_rewards": {"test-0000": 0.0}} for c in CORNERS]
    return {"corners": corners, "effects": {}, "verdict": "additive", **changes}


def test_the_co_design_grid_is_checked_like_the_scores() -> None:
    """The leaderboard pools a result's grid (analysis.grid): its corners and verdict are checked too."""
    assert check_result(_with("analysis", {"grid": _grid(), "path": None}), EXPECTED).analysis
    assert check_result(_with("analysis", {"grid": None}), EXPECTED)  # a run without the grid
    bad = [
        (_grid(verdict="<img src=x>"), "verdict"),
        (_grid(corners=_grid()["corners"][:7]), "corners"),
        (_grid(corners=_grid()["corners"][:7] + [_grid()["corners"][0]]), "each once"),
        (_grid(corners=[{**c, "test_score": math.nan} for c in _grid()["corners"]]), "test_score"),
        (_grid(corners=[{**c, "item_rewards": {"a": 9.0}} for c in _grid()["corners"]]), "item_rewards"),
        ("not a grid", "analysis.grid"),
    ]
    for grid, reason in bad:
        with pytest.raises(BadResult, match=reason):
            check_result(_with("analysis", {"grid": grid}), EXPECTED)


def test_a_result_of_another_run_is_refused() -> None:
    with pytest.raises(BadResult, match="seed is '1', the sweep dispatched '0'"):
        check_result(_with("seed", 1), EXPECTED)


def test_the_stored_bytes_are_bounded_json_of_the_json_serializer() -> None:
    with pytest.raises(BadResult, match="only 'json'"):
        parse_record(json.dumps(GOOD).encode(), "pickle")
    with pytest.raises(BadResult, match="limit"):
        parse_record(b" " * (MAX_RESULT_BYTES + 1), "json")
    with pytest.raises(BadResult, match="not valid JSON"):
        parse_record(b"[" * 100_000, "json")
    with pytest.raises(BadResult, match="not valid JSON"):
        parse_record(b"\x80\x04K\x01.", "json")  # a pickle


def test_a_local_key_outside_the_result_storage_is_not_read(tmp_path) -> None:
    from flows.dispatch import _under

    root = tmp_path / "storage"
    assert _under(root, str(root / "abc")) == "abc"
    for key in ("/etc/passwd", str(root / ".." / "x"), "relative/key", str(tmp_path / "storage2" / "x")):
        with pytest.raises(BadResult, match="outside"):
            _under(root, key)


def test_a_bench_whose_process_exits_before_it_starts_says_where_the_cause_is() -> None:
    """Prefect gets only the exit status of a flow run whose process dies before the bench starts
    (a pull step into a missing folder, a broken image): the row says whose output holds why."""
    from uuid import uuid4

    from prefect.client.schemas.objects import FlowRun
    from prefect.states import Crashed, Failed

    from flows.dispatch import Job, outcome_of

    job = Job(run="math-noop-s0-abc", overrides=[], expected={}, tags=[], tries=2)
    exited = "Process exited with status code: 1. Process exited with a general error."
    row = outcome_of(FlowRun(flow_id=uuid4(), state=Crashed(message=exited)), job, "docker-a")
    assert row.state == "crashed" and row.error.startswith(exited) and row.result is None
    assert "the cause is in the output of worker docker-a on its machine" in row.error
    failed = outcome_of(FlowRun(flow_id=uuid4(), state=Failed(message="RunError: x")), job, "docker-a")
    assert failed.error == "RunError: x"  # the bench's own error says why already


def test_dispatch_mode_follows_prefect_api_url(monkeypatch) -> None:
    from flows.sweep import SweepConfig, dispatch_mode

    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    assert dispatch_mode(SweepConfig()) == "inline"
    monkeypatch.setenv("PREFECT_API_URL", "http://127.0.0.1:4200/api")
    assert dispatch_mode(SweepConfig()) == "deployment"
    assert dispatch_mode(SweepConfig(dispatch="inline")) == "inline"
    with pytest.raises(ValueError, match="dispatch"):
        dispatch_mode(SweepConfig(dispatch="threads"))


def test_a_worker_takes_gpus_and_paths_from_its_environment(tmp_path, monkeypatch) -> None:
    from flows.bench import job_config
    from flows.gpu import limit_name, worker_gpus
    from vtb.build import default_run_id
    from vtb.compose import compose_config

    assert worker_gpus({"VTB_GPUS": "0,1", "CUDA_VISIBLE_DEVICES": "5"}) == ["0", "1"]
    assert worker_gpus({"VTB_GPUS": "0,1;2,3"}) == ["0,1", "2,3"]
    assert worker_gpus({"CUDA_VISIBLE_DEVICES": "2,3"}) == ["2", "3"]
    assert worker_gpus({"CUDA_VISIBLE_DEVICES": "-1"}) == [] == worker_gpus({})
    assert limit_name("0,1", "Node.A") == "vtb-gpu-node-a-0-1"

    overrides = ["agent=noop", "seed=2", f"runs_dir={tmp_path / 'sweep-runs'}"]
    monkeypatch.setenv("VTB_RUNS_DIR", str(tmp_path / "machine-runs"))
    monkeypatch.delenv("VTB_CACHE_DIR", raising=False)
    cfg = job_config(overrides)
    assert cfg.runs_dir == str(tmp_path / "machine-runs")  # the machine's, not the sweep's
    assert cfg.run_id == default_run_id(compose_config(overrides))  # the id the sweep computed
    assert job_config(config=json.loads(json.dumps(_asdict(compose_config(overrides))))).run_id == cfg.run_id
    with pytest.raises(ValueError, match="either"):
        job_config(overrides, {"seed": 1})


def _asdict(cfg) -> dict:
    from dataclasses import asdict

    return asdict(cfg)


def test_a_result_drawn_on_another_test_split_is_refused():
    """A worker whose salt differs from the sweep's drew another test split: refused, with the fix."""
    from vtb.result_check import BadResult, check_result

    good = GOOD | {"test_split": {"kind": "hidden", "salt_sha256": "a" * 64}}
    check_result(good, {"test_split": {"kind": "hidden", "salt_sha256": "a" * 64}})
    with pytest.raises(BadResult, match="drew another test split .*same salt file, or \\$VTB_TEST_SALT"):
        check_result(good, {"test_split": {"kind": "hidden", "salt_sha256": "b" * 64}})
    with pytest.raises(BadResult, match="test_split.salt_sha256 is not a sha256"):
        check_result(good | {"test_split": {"kind": "hidden", "salt_sha256": "x"}})
