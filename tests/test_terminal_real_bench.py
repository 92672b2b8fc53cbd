"""`task=terminal task.source=terminal_bench` end to end on hand-written task folders in the published layouts.

tests/fixtures/terminal/ holds four tasks of each kind, written by hand as the public repositories
lay them out: Terminal-Bench (task.yaml, docker-compose.yaml, Dockerfile `COPY app/ /app/`,
run-tests.sh, solution.sh, tests/test_outputs.py), Harbor copy-only (task.toml with its
[environment] table, instruction.md, environment/Dockerfile + environment/app/, solution/solve.sh,
tests/test.sh) and Harbor built (`RUN` steps in environment/Dockerfile: sandbox=docker, its base
mapped to vtb/hostroot). Each runs a whole shrunken bench (real Prefect flow, sandboxes, training,
grading by the tasks' own tests); the refusals stop a bench at preflight, before the base model.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

from tests.conftest import needs_bwrap
from vtb.preflight import PreflightError

pytestmark = [pytest.mark.slow, needs_bwrap()]

FIXTURES = Path(__file__).parent / "fixtures" / "terminal"
HOSTROOT_BASES = (
    'task.base_images=["python:3.13-slim=vtb/hostroot:latest","ubuntu:24.04=vtb/hostroot:latest"]'
)
TINY = [
    "task=terminal",
    "task.source=terminal_bench",
    "task.n_val=1",
    "task.n_test=1",
    "task.initial_data_size=8",
    "model.n_layer=1",
    "model.n_embd=32",
    "model.pretrain_steps=5",
    "model.pretrain_texts=100",
    "trainer.epochs=1",
    "agent=noop",
    "budget.limit=5e12",
    "reference=false",
    "null_model_check=false",
    "base_model_check=false",
    "analysis.grid=false",
    "analysis.path=false",
    "+budget.flops_per_cpu_second=1e9",  # no calibration for this shape
]


def bench(tmp: Path, path: Path, *extra: str) -> tuple[dict, float]:
    """One shrunken bench on the task folders under `path`; (result, wall seconds)."""
    from flows.bench import run_bench
    from vtb.compose import compose_config

    cfg = compose_config(
        [*TINY, f"task.path={path}", f"runs_dir={tmp / 'runs'}", f"cache_dir={tmp / 'cache'}", *extra]
    )
    start = time.monotonic()
    result = run_bench(cfg)
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
    assert "split pool: has 0 items, the config asks for 1" in msg, msg
    assert "at least 3" in msg and "point task.path at a larger data set" in msg
    store = tmp_path / "cache" / "snapshots"
    assert not store.exists() or not any(store.iterdir())  # no system was written


def test_terminal_bench_copy_only_runs_whole_on_bwrap(tmp_path, prefect_server):
    result, wall = bench(tmp_path, FIXTURES / "terminal_bench")
    print(f"terminal_bench noop bwrap: {wall:.1f}s", result["initial"], result["submitted"])
    assert 0.0 <= result["submitted"]["test_score"] <= 1.0
