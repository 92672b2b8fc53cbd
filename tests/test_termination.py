"""SIGTERM stops a bench or a sweep the way Ctrl-C does: nothing it started outlives it, on both backends.

Schedulers stop jobs with SIGTERM. Before flows/signals.py a bench died on the spot and left its
Prefect temporary API server running (one per stopped run) and its docker sandboxes to the next
run's clean-up, and a stopped inline sweep ran every queued bench before it ended.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from flows.signals import INTERRUPTED
from tests.conftest import TINY_OVERRIDES, sandbox_backend
from vtb.sandbox.docker import LABEL
from vtb.sandbox.proctree import read_stat, tree

ROOT = Path(__file__).resolve().parents[1]


def _containers_of(pid: int) -> list[str]:
    """Ids of the vtb sandbox containers that process `pid` owns (label vtb.owner = boot:pid:start)."""
    import docker

    api = docker.APIClient()
    try:
        found = api.containers(all=True, filters={"label": LABEL})
    finally:
        api.close()
    return [
        c["Id"] for c in found if (c.get("Labels") or {}).get("vtb.owner", "").split(":")[1:2] == [str(pid)]
    ]


def _sandbox_running(pid: int, backend: str) -> bool:
    if backend == "docker":
        return bool(_containers_of(pid))
    for p in tree(pid):
        try:
            if Path(f"/proc/{p.pid}/comm").read_text().strip() == "bwrap":
                return True
        except OSError:
            continue
    return False


def _bench(tmp_path: Path, backend: str) -> list[str]:
    return [
        *("-m", "flows.bench", *TINY_OVERRIDES, f"sandbox={backend}"),
        f"runs_dir={tmp_path / 'runs'}",
        f"cache_dir={tmp_path / 'cache'}",
    ]


def _sweep(tmp_path: Path, backend: str) -> list[str]:
    """Two benches, one at a time: the second is queued when the signal comes, and must not start."""
    overrides = json.dumps([*TINY_OVERRIDES, f"sandbox={backend}"])
    return [
        *("-m", "flows.sweep", "agents=[noop,greedy]", "seeds=[0]", "dispatch=inline", "max_parallel=1"),
        f"overrides={overrides}",
        f"runs_dir={tmp_path / 'runs'}",
        f"cache_dir={tmp_path / 'cache'}",
    ]


@pytest.mark.parametrize(
    "command,backend",
    [
        ("bench", "bwrap"),
        pytest.param("bench", "docker", marks=pytest.mark.docker),
        ("sweep", "bwrap"),
    ],
)
def test_sigterm_stops_a_run_and_everything_it_started(tmp_path, command, backend) -> None:
    sandbox_backend(backend)  # a missing backend skips here (or fails, where CI requires it)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("PREFECT_API_URL", None)  # its own temporary server: the process that used to leak
    cmd = [sys.executable, *(_bench if command == "bench" else _sweep)(tmp_path, backend)]
    log = (tmp_path / "run.log").open("w")
    proc = subprocess.Popen(
        cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    try:
        deadline = time.monotonic() + 300
        # a sandbox of the flow run's (the reproducibility probe may start one before the flow)
        while "Beginning flow run" not in (tmp_path / "run.log").read_text() or not _sandbox_running(
            proc.pid, backend
        ):
            assert proc.poll() is None, (tmp_path / "run.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "no sandbox started in 300 s"
            time.sleep(0.2)
        started = [p for p in tree(proc.pid) if p.pid != proc.pid]
        assert started, "the run had started nothing to leave behind"
        os.kill(proc.pid, signal.SIGTERM)  # the run's own process only, as `kill <pid>` does
        proc.wait(timeout=90)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()
    output = (tmp_path / "run.log").read_text()
    assert proc.returncode == INTERRUPTED, (proc.returncode, output[-3000:])
    assert "Crashed" in output, output[-3000:]  # Prefect saw the stop: the run is not left Running
    deadline = time.monotonic() + 15
    while True:
        alive = [p.pid for p in started if (now := read_stat(p.pid)) is not None and now.start == p.start]
        left = _containers_of(proc.pid) if backend == "docker" else []
        if not alive and not left:
            break
        assert time.monotonic() < deadline, f"still running after the run ended: {alive} {left}"
        time.sleep(0.2)
    assert not list((tmp_path / "runs").glob("*/result.json"))
    if command == "sweep":
        assert "math-greedy" not in output, "the queued bench started after the signal"
