"""The whole bench on a shrunken math config: a real Prefect flow, real bwrap sandboxes, real training."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import GREEDY_EXTRA, needs_bwrap, sandbox_backend, small_config, small_overrides
from vtb import result_files

pytestmark = [pytest.mark.slow, needs_bwrap()]
ROOT = Path(__file__).resolve().parents[1]


def _result(cfg) -> dict:
    runs = Path(cfg.runs_dir)
    (run_dir,) = [p for p in runs.iterdir() if p.is_dir() and not p.name.startswith(".")]
    return result_files.load_result(run_dir / "result.json")  # its per-item rewards joined in


def _headline(result: dict) -> dict:
    keep = ("task", "agent", "seed", "initial", "submitted", "reference", "iterations", "gains_by_part")
    out = {k: result[k] for k in keep}
    out["flops"] = result["budget"]["flops"]
    return out


def test_run_record_is_complete(greedy_run):
    cfg, result, _ = greedy_run
    run_dir = Path(result["record"])
    for name in (
        "config.json",
        "manifest.json",
        "grading.json",
        "ledger.jsonl",
        "result.json",
        "report.md",
        "scores.png",
        "timings.json",
        "iterations/00.json",
        "submission/harness/harness.py",
        "submission/model/config.json",
    ):
        assert (run_dir / name).exists(), name
    assert result == result_files.load_result(run_dir / "result.json")  # the file and its rewards file
    for row in ("initial", "submitted", "reference"):  # the fixture's run grades a reference system
        assert 0.0 <= result[row]["test_score"] <= 1.0
    assert 0.0 <= result["submitted"]["base_model_test_score"] <= 1.0  # the base-model check ran
    assert "Base-model check" in (run_dir / "report.md").read_text()
    scan = result["contamination"]  # the default greedy submission is scanned and not flagged
    assert scan["flagged"] is False and scan["scanned"]["files"] >= 2
    assert scan["splits"]["test"]["canary_checked"] and scan["splits"]["test"]["decidable"] > 0
    assert "## Contamination scan" in (run_dir / "report.md").read_text()
    grading = json.loads((run_dir / "grading.json").read_text())
    assert grading["submitted"]["engine"] == "transformers"  # the engine each grade ran on is recorded
    iteration = json.loads((run_dir / "iterations/00.json").read_text())
    assert iteration["val"]["engine"] == "transformers"
    assert (
        result["budget"]["unit"] == "flops"
        and 0 < result["budget"]["used"] <= result["budget"]["limit"] * 1.01
    )
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["submitted"]["parts"].keys() == {"data", "trainer", "harness"}
    assert len(manifest["candidates"]) == result["iterations"] + 1


def test_the_grid_and_the_path_are_in_the_record(greedy_run):
    """Issue 22: the co-design grid and the path's test scores (on by default) of a real run: 8
    mixes graded on the test split, the corners that are the initial and submitted systems scored
    as those were, the path ending at the submission, none of it in the agent's ledger."""
    from vtb import codesign

    _, result, _ = greedy_run
    run_dir = Path(result["record"])
    grid, path = result["analysis"]["grid"], result["analysis"]["path"]
    scores = {c["corner"]: c["test_score"] for c in grid["corners"]}
    assert list(scores) == list(codesign.CORNERS) and all(0.0 <= s <= 1.0 for s in scores.values())
    assert scores["000"] == result["initial"]["test_score"]
    assert scores["111"] == result["submitted"]["test_score"]
    assert grid["effects"]["together"] == pytest.approx(scores["111"] - scores["000"])
    assert grid["effects"] == codesign.effects(scores).to_json() and grid["verdict_line"]
    assert (
        len({c["snapshot"] for c in grid["corners"]}) == grid["distinct_systems"] == 2 ** len(grid["changed"])
    )
    assert path[0]["iteration"] == 0 and path[-1]["iteration"] == result["submitted"]["iteration"]
    assert path[-1]["test_score"] == result["submitted"]["test_score"]
    assert [s["val_score"] for s in path] == sorted(s["val_score"] for s in path)
    ledger = [json.loads(line)["step"] for line in (run_dir / "ledger.jsonl").read_text().splitlines()]
    assert "play-test" not in ledger and ledger.count("train") == len(
        {c.get("train_key") for c in _iterations(run_dir) if c.get("train_key")}
    )
    report = (run_dir / "report.md").read_text()
    assert "## Co-design grid and path" in report and "Cumulative gain along the path" in report
    assert (run_dir / "analysis.png").is_file()


def _iterations(run_dir: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((run_dir / "iterations").glob("*.json"))]


async def _prefect_view(cfg, run_id: str):
    """The fixture's flow run as the Prefect API holds it: the run, its task runs, logs and artifacts.

    Runs are found by name and by their runs_dir (a server reused across sessions may hold runs of
    the same config from before); the earliest is the fixture's own (a later one is the cached rerun)."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import (
        ArtifactFilter,
        ArtifactFilterFlowRunId,
        FlowRunFilter,
        FlowRunFilterId,
        FlowRunFilterName,
        LogFilter,
        LogFilterFlowRunId,
    )
    from prefect.client.schemas.sorting import LogSort

    async with get_client() as client:
        runs = await client.read_flow_runs(
            flow_run_filter=FlowRunFilter(name=FlowRunFilterName(any_=[run_id]))
        )
        ours = [r for r in runs if r.parameters["cfg"]["runs_dir"] == cfg.runs_dir]
        run = min(ours, key=lambda r: r.created)
        by_run = FlowRunFilter(id=FlowRunFilterId(any_=[run.id]))
        task_runs = await client.read_task_runs(flow_run_filter=by_run)
        logs = await client.read_logs(
            log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[run.id])), sort=LogSort.TIMESTAMP_ASC
        )
        artifacts = await client.read_artifacts(
            artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[run.id]))
        )
        return run, task_runs, logs, artifacts


def test_the_prefect_ui_shows_what_the_bench_did(greedy_run):
    """Issue 21 through the Prefect API: the run's tags, task runs named by what they are, the
    bench's own lines in the run's log, and the budget progress artifact at the final figure."""
    import asyncio

    cfg, result, _ = greedy_run
    run, task_runs, logs, artifacts = asyncio.run(_prefect_view(cfg, result["run_id"]))
    assert set(run.tags) == {"task:math", "agent:greedy", "seed:0", "model:tiny", "sandbox:bwrap"}
    # its task runs carry none: each tag costs a queued concurrency-limit check before the step
    assert task_runs and not [(t.name, t.tags) for t in task_runs if t.tags]

    names = {t.name for t in task_runs}
    iters = [
        json.loads(p.read_text()) for p in sorted((Path(result["record"]) / "iterations").glob("*.json"))
    ]
    trained = [it["iteration"] for it in iters if it["train"]]
    expected = {"provision-data", "provision-model", *{f"turn-it{it['iteration']}" for it in iters[1:]}}
    validated = [it["iteration"] for it in iters if it["val"]]
    # a train step per new weights: an iteration that changed only the harness reuses an earlier
    # iteration's (one task run per key and run, vtb/bench.py Bench.train)
    new_weights = [it["iteration"] for it in iters if it["train"] and it["train_key"] not in
                   {e["train_key"] for e in iters[: it["iteration"]]}]  # fmt: skip
    assert len(new_weights) < len(trained)  # greedy's harness-only turns (calculator, vote)
    expected |= {f"train-it{i}" for i in new_weights} | {f"val-it{i}" for i in validated}
    assert expected <= names, (expected - names, names)
    assert not {f"train-it{i}" for i in trained if i not in new_weights} & names
    system = "submitted" if result["submitted"]["iteration"] else "initial"  # one system: one play each
    grading = {
        f"grade-{system}",
        "grade-reference",
        "grade-submitted-null-check",  # the checks play for the submission only
        "grade-submitted-base-model",
    }
    assert grading <= names and "train-reference" in names, names
    assert not [name for name in names if re.fullmatch(r"(play|train|agent-turn)-[0-9a-f]{3}", name)]

    ours = [log.message for log in logs if log.name == "vtb.progress"]
    for i in trained:  # the terminal's iteration lines, in the run's log
        assert any(f"iteration {i}: val " in m and "; budget " in m and " FLOPs" in m for m in ours), ours
    assert any("[train] " in m for m in ours) and any("[play val] " in m for m in ours), ours

    [budget] = [a for a in artifacts if a.type == "progress"]
    assert budget.key == f"budget-{result['run_id'].lower()}"
    used, limit = result["budget"]["used"], result["budget"]["limit"]
    assert float(budget.data) == round(100 * used / limit, 1)  # the final figure, not the first
    [table] = [a for a in artifacts if a.key == f"iterations-{result['run_id'].lower()}"]  # one card,
    rows = json.loads(table.data)  # updated in place while it ran: its last state has every iteration
    assert [r["iteration"] for r in rows] == [it["iteration"] for it in iters]
    assert not [r for r in rows if "\\" in r["notes"] + r["edits"]]  # plain text: no markdown escapes


def test_greedy_edits_several_parts_and_keeps_the_best(greedy_run):
    cfg, result, _ = greedy_run
    iters = [
        json.loads(p.read_text()) for p in sorted((Path(result["record"]) / "iterations").glob("*.json"))
    ]
    edited = {part for it in iters for part in it["edits"]}
    assert len(edited) >= 2, edited
    best = max(it["val_score"] for it in iters if it["val_score"] is not None)
    assert result["submitted"]["val_score"] == best
    assert result["submitted"]["val_score"] >= result["initial"]["val_score"]
    assert result["submitted"]["flagged_by_null_model"] is False
    # The provenance audit ran on greedy's submission (its calculator harness, votes and all) and
    # found its answers the model's: no false positive (issue 37 point 1).
    audit = result["submitted"]["provenance"]
    assert result["submitted"]["flagged_by_provenance"] is False and audit["informative"] > 0, audit
    assert audit["unswapped"] == 0, audit


def test_same_config_again_is_served_from_cache(greedy_run):
    from flows.bench import run_bench

    cfg, first, _ = greedy_run
    start = time.monotonic()
    again = run_bench(cfg).to_json()
    took = time.monotonic() - start
    assert _headline(again) == _headline(first)
    timings = json.loads((Path(again["record"]) / "timings.json").read_text())
    assert all(t["cached"] for t in timings["steps"]), [t for t in timings["steps"] if not t["cached"]]
    assert took < 60


# An agent that submits the initial system, and a budget spent before the first turn: the core's
# unit tests with fake steps (tests/test_bench_core.py) cover both without a whole bench each.


def _bench_cmd(tmp: Path) -> list[str]:
    """The command line of the `greedy_run` fixture's bench, run in a fresh process and folder."""
    return [sys.executable, "-m", "flows.bench", *small_overrides(tmp, "greedy", 0, *GREEDY_EXTRA)]


def test_killed_run_resumes_to_the_same_result(tmp_path, greedy_run):
    """SIGKILL during a training step, start again: the same scores and FLOPs as the uninterrupted run.

    The killed run starts on a copy of the module's greedy run's cache (the same config) less the
    last candidate's training (its cached result and checkpoint): the steps before it are served
    from the cache, the kill lands in that real training step, and the resumed run must train it
    again and book the same charge."""
    cfg, first, _ = greedy_run
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("PREFECT_API_URL", None)
    killed = tmp_path / "killed"
    shutil.copytree(cfg.cache_dir, killed / "cache", symlinks=True)
    iterations = sorted((Path(first["record"]) / "iterations").glob("*.json"))
    last = [json.loads(p.read_text()) for p in iterations if json.loads(p.read_text())["train_key"]][-1]
    cached = killed / "cache" / "prefect" / last["train_key"]
    assert cached.is_file(), sorted(p.name for p in (killed / "cache" / "prefect").iterdir())[:20]
    cached.unlink()
    copied = killed / "cache" / Path(last["checkpoint"]).relative_to(cfg.cache_dir)
    assert copied.name == "checkpoint" and copied.is_dir(), copied
    shutil.rmtree(copied.parent)  # checkpoints/<key>: the checkpoint and its training log

    proc = subprocess.Popen(
        _bench_cmd(killed),
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    output = []
    for line in proc.stdout:
        output.append(line)
        if "[train]" in line:
            os.killpg(proc.pid, signal.SIGKILL)
            break
    proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL, "".join(output[-30:])
    assert not list((killed / "runs").glob("*/result.json"))
    subprocess.run(_bench_cmd(killed), cwd=ROOT, env=env, check=True, capture_output=True, timeout=900)

    a = greedy_run[1]
    b = result_files.load_result(next((killed / "runs").glob("*/result.json")))
    assert _headline(a) == _headline(b)
    timings = json.loads(next((killed / "runs").glob("*/timings.json")).read_text())
    assert [t["step"] for t in timings["steps"] if not t["cached"]] == ["train"]  # it did train again


@pytest.mark.slow
@pytest.mark.docker
def test_a_bench_run_scores_the_same_on_both_backends(tmp_path, greedy_run) -> None:
    """The shared greedy run (bwrap) again on docker, on its own cache: same val and test scores.
    (In this file, beside the run it shares: pytest-xdist keeps a file on one worker.)

    The docker run leaves out the reference and the null / base-model checks: they change
    neither the initial and submitted systems' scores nor the budgeted FLOPs.
    """
    from flows.bench import run_bench

    sandbox_backend("docker")
    cfg = small_config(tmp_path / "docker", "greedy", 0, "sandbox=docker", "task.n_test=60")  # as greedy_run
    bwrap, docker = greedy_run[1], run_bench(cfg).to_json()
    for row in ("initial", "submitted"):
        assert bwrap[row]["test_score"] == docker[row]["test_score"], (row, bwrap[row], docker[row])
        assert bwrap[row]["val_score"] == docker[row]["val_score"]
    # The FLOPs the engines and the server count are the same; what the budget charged may differ
    # by FLOPs-floor charges, which follow metered CPU (the shared run trains its reference
    # alongside, so its plays see more contention than this one's).
    assert _counted_flops(bwrap) == _counted_flops(docker)
    assert json.loads((Path(docker["record"]) / "config.json").read_text())["sandbox"]["backend"] == "docker"


def _counted_flops(result: dict) -> float:
    """The budgeted steps' counted FLOPs (ledger.jsonl's flops_reported), floors left out."""
    lines = (Path(result["record"]) / "ledger.jsonl").read_text().splitlines()
    return sum(json.loads(line)["charge"]["flops_reported"] for line in lines)
