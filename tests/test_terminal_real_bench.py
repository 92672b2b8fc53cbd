"""`task=terminal task.source=terminal_bench` whole, on hand-written task folders in the published layouts.

tests/fixtures/terminal/ holds four tasks of each kind, written by hand as the public repositories
lay them out: Terminal-Bench (task.yaml, docker-compose.yaml, Dockerfile `COPY app/ /app/`,
run-tests.sh, solution.sh, tests/test_outputs.py), Harbor copy-only (task.toml with its
[environment] table, instruction.md, environment/Dockerfile + environment/app/, solution/solve.sh,
tests/test.sh) and Harbor built (`RUN` steps in environment/Dockerfile: sandbox=docker, its base
mapped to vtb/hostroot). Each runs a whole shrunken bench (real Prefect flow, sandboxes, training,
grading by the tasks' own tests); the refusals stop a bench at preflight, before the base model.
"""

from __future__ import annotations

import json
import re
import shutil
import time
from pathlib import Path

import pytest

from tests.conftest import SHRUNK_BENCH, needs_bwrap, sandbox_backend
from vtb.preflight import PreflightError

pytestmark = [pytest.mark.slow, needs_bwrap()]

FIXTURES = Path(__file__).parent / "fixtures" / "terminal"
TB_BASE = "ghcr.io/laude-institute/t-bench/python-3-13:20250620"
HOSTROOT_BASES = (  # the published bases, mapped to the offline stand-in (scripts/build_images.sh hostroot)
    f'task.base_images=["python:3.13-slim=vtb/hostroot:latest","{TB_BASE}=vtb/hostroot:latest"]'
)
TINY = [
    "task=terminal",
    "task.source=terminal_bench",
    "task.n_val=1",
    "task.n_test=1",
    "task.initial_data_size=8",
    "task.max_steps_per_episode=2",  # a play of the untrained model ends in two commands
    *SHRUNK_BENCH,
    "model.pretrain_texts=100",
    "agent=noop",
    "null_model_check=false",
]


def bench(tmp: Path, path: Path, *extra: str, cache: Path | None = None) -> tuple[dict, float]:
    """One shrunken bench on the task folders under `path`; (result, wall seconds)."""
    from flows.bench import run_bench
    from vtb.compose import compose_config

    cache = cache or tmp / "cache"
    cfg = compose_config(
        [*TINY, f"task.path={path}", f"runs_dir={tmp / 'runs'}", f"cache_dir={cache}", *extra]
    )
    start = time.monotonic()
    result = run_bench(cfg).to_json()
    return result, time.monotonic() - start


def copy_tasks(dest: Path, source: str, names: list[str] | None = None) -> Path:
    """A folder of some fixture tasks of one kind, to edit one without touching the fixtures."""
    for task in sorted((FIXTURES / source).iterdir()):
        if names is None or task.name in names:
            shutil.copytree(task, dest / task.name)
    return dest


def test_a_two_task_folder_is_refused_before_any_system_is_written(tmp_path, prefect_server):
    # Two tasks, one for val and one for test: nothing is left for the pool. The initial system's
    # rows were drawn from that empty pool (ZeroDivisionError in datatools.make_rows).
    tasks = copy_tasks(tmp_path / "tasks", "terminal_bench", ["count-lines", "sort-names"])
    with pytest.raises(PreflightError) as err:
        bench(tmp_path, tasks)
    msg = str(err.value)
    assert "split pool: has 0 items, 1 needed" in msg, msg
    assert "at least 3" in msg and "point task.path at a larger data set" in msg
    store = tmp_path / "cache" / "snapshots"
    assert not store.exists() or not any(store.iterdir())  # no system was written


def scores(result: dict) -> dict:
    return {row: result[row]["test_score"] for row in ("initial", "submitted")}


def graded_by_their_own_tests(result: dict) -> list[dict]:
    """The submitted system's graded test episodes, each run through its task's own tests."""
    grading = json.loads((Path(result["record"]) / "grading.json").read_text())
    assert "samples" not in grading["submitted"]  # test episodes only in private/
    samples = json.loads((Path(result["record"]) / "private" / "samples.json").read_text())["submitted"]
    assert samples and all(s["tests"] for s in samples), samples
    return samples


@pytest.fixture(scope="module")
def tb_cache(tmp_path_factory) -> Path:
    """One cache for the Terminal-Bench noop and greedy benches: greedy reuses the data, the base
    model and the initial system's steps (content-keyed), as a sweep over agents would."""
    return tmp_path_factory.mktemp("tb-cache")


def test_terminal_bench_folders_run_a_whole_bench_on_bwrap(tmp_path, tb_cache, prefect_server):
    result, wall = bench(tmp_path, FIXTURES / "terminal_bench", cache=tb_cache)
    print(f"terminal_bench noop bwrap: {wall:.1f} s, {scores(result)}")
    samples = graded_by_their_own_tests(result)
    assert all(t.startswith("test_outputs.py::test_") for s in samples for t in s["tests"]), samples
    preflight = json.loads((Path(result["record"]) / "preflight.json").read_text())
    assert preflight["checked"] == ["splits", "domain terminal"]


def test_terminal_bench_greedy_edits_a_system_on_real_folders(tmp_path, tb_cache, prefect_server):
    result, wall = bench(
        tmp_path, FIXTURES / "terminal_bench", "agent=greedy", "agent.max_iterations=1", cache=tb_cache
    )
    print(f"terminal_bench greedy bwrap: {wall:.1f} s, {scores(result)}")
    edits = json.loads((Path(result["record"]) / "iterations" / "01.json").read_text())["edits"]
    assert edits, "the greedy agent made no edit"
    graded_by_their_own_tests(result)


def test_harbor_copy_only_folders_run_a_whole_bench_on_bwrap(tmp_path, prefect_server):
    result, wall = bench(tmp_path, FIXTURES / "harbor_copy")
    print(f"harbor copy-only noop bwrap: {wall:.1f} s, {scores(result)}")
    assert all(set(s["tests"]) == {"reward"} for s in graded_by_their_own_tests(result))


@pytest.mark.docker
def test_harbor_built_folders_run_a_whole_bench_on_docker(tmp_path, prefect_server):
    sandbox_backend("docker")  # skips without an engine (fails under VTB_REQUIRE_DOCKER=1)
    result, wall = bench(tmp_path, FIXTURES / "harbor_built", "sandbox=docker", HOSTROOT_BASES)
    print(f"harbor built noop docker: {wall:.1f} s, {scores(result)}")
    assert all(set(s["tests"]) == {"reward"} for s in graded_by_their_own_tests(result))


# --- refused at preflight, before the base model: each ran to a late failure or a false 0 before ---
PUBLISHED_TEST_SH = """#!/bin/bash

apt-get update
apt-get install -y curl

curl -LsSf https://astral.sh/uv/0.9.5/install.sh | sh

source $HOME/.local/bin/env

uvx -p 3.13 -w pytest==8.4.1 pytest /tests/test_outputs.py -rA

if [ $? -eq 0 ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
"""


def refusal(tmp_path: Path, tasks: Path, *extra: str) -> tuple[str, float]:
    start = time.monotonic()
    with pytest.raises(PreflightError) as err:
        bench(tmp_path, tasks, *extra)
    store = tmp_path / "cache" / "models"
    assert not store.exists() or not any(store.iterdir()), "a base model was provisioned"
    return str(err.value), time.monotonic() - start


def test_tests_that_cannot_run_offline_are_refused_by_the_gold_check(tmp_path, prefect_server):
    # Harbor's published test.sh installs uv with curl first: offline, even the gold solution scores
    # 0, and so would every system (the bench printed 0.000 with exit code 0).
    tasks = copy_tasks(tmp_path / "tasks", "harbor_copy")
    for test_sh in tasks.glob("*/tests/test.sh"):
        test_sh.write_text(PUBLISHED_TEST_SH)
    msg, wall = refusal(tmp_path, tasks)
    print(f"refused in {wall:.1f} s:\n{msg}")
    assert re.search(r"item \S+ \(gold check\): its gold solution does not pass its own tests", msg), msg
    assert "curl or uv" in msg and "Fix:" in msg and "Traceback" not in msg


def test_a_multi_container_task_is_refused_by_name(tmp_path, prefect_server):
    tasks = copy_tasks(tmp_path / "tasks", "terminal_bench")
    compose = tasks / "sort-names" / "docker-compose.yaml"
    compose.write_text(
        compose.read_text()
        + "    depends_on:\n      - server\n\n  server:\n    build:\n      context: server\n"
        + '    command: [ "python3", "-m", "http.server", "8000" ]\n'
    )
    msg, wall = refusal(tmp_path, tasks)
    print(f"refused in {wall:.1f} s:\n{msg}")
    assert "task sort-names: its docker-compose.yaml declares the services client, server" in msg, msg
    assert "multi-container" in msg and msg.count("Fix:") == 1


@pytest.mark.docker
def test_a_dockerfile_that_cannot_build_is_refused_before_any_budget(tmp_path, prefect_server):
    # Offline, a RUN step that downloads fails; before, the bench trained and validated first and
    # failed at the first play of that task (at grading, for a test task).
    sandbox_backend("docker")
    tasks = copy_tasks(tmp_path / "tasks", "terminal_bench")
    for dockerfile in tasks.glob("*/Dockerfile"):
        dockerfile.write_text(
            f"FROM {TB_BASE}\n\nWORKDIR /app\n\nCOPY app/ /app/\n\n"
            "RUN echo 'fetching pandas' && python3 -m pip install --no-cache-dir pandas==2.2.3\n"
        )
    msg, wall = refusal(tmp_path, tasks, "sandbox=docker", HOSTROOT_BASES)
    print(f"refused in {wall:.1f} s:\n{msg}")
    refused = re.findall(r"task (\S+): its image build failed", msg)
    assert len(refused) == 2, msg  # the val and the test task: the pool's are never played
    assert "fetching pandas" in msg and "task.build_network=host" in msg, msg
