"""SIGTERM stops a bench the way Ctrl-C does: nothing it started outlives it, on both backends.

Schedulers stop jobs with SIGTERM. Before flows/signals.py a bench died on the spot and left its
Prefect temporary API server running (one per stopped run) and its docker sandboxes to the next
run's clean-up.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import BACKENDS, TINY_OVERRIDES, sandbox_backend
from vtb.sandbox.proctree import read_stat, tree

ROOT = Path(__file__).resolve().parents[1]


def _containers_of(pid: int) -> list[str]:
    """Ids of the vtb sandbox containers that process `pid` owns (label vtb.owner = boot:pid:start)."""
    import docker

    api = docker.APIClient()
    try:
        found = api.containers(all=True, filters={"label": "vtb.sandbox"})
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


@pytest.mark.parametrize("backend", BACKENDS)
def test_sigterm_stops_a_bench_and_everything_it_started(tmp_path, backend) -> None:
    sandbox_backend(backend)  # a missing backend skips here (or fails, where CI requires it)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("PREFECT_API_URL", None)  # its own temporary server: the process that used to leak
    cmd = [
        sys.executable,
        "-m",
        "flows.bench",
        *TINY_OVERRIDES,
        f"sandbox={backend}",
        f"runs_dir={tmp_path / 'runs'}",
        f"cache_dir={tmp_path / 'cache'}",
    ]
    log = (tmp_path / "bench.log").open("w")
    proc = subprocess.Popen(
        cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    try:
        deadline = time.monotonic() + 300
        while not _sandbox_running(proc.pid, backend):
            assert proc.poll() is None, (tmp_path / "bench.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "no sandbox started in 300 s"
            time.sleep(0.2)
        started = [p for p in tree(proc.pid) if p.pid != proc.pid]
        assert started, "the bench had started nothing to leave behind"
        os.kill(proc.pid, signal.SIGTERM)  # the bench's own process only, as `kill <pid>` does
        proc.wait(timeout=90)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()
    output = (tmp_path / "bench.log").read_text()
    assert proc.returncode not in (0, -signal.SIGTERM), (proc.returncode, output[-3000:])
    assert "Crashed" in output, output[-3000:]  # Prefect saw the stop: the run is not left Running
    deadline = time.monotonic() + 15
    while True:
        alive = [p.pid for p in started if (now := read_stat(p.pid)) is not None and now.start == p.start]
        left = _containers_of(proc.pid) if backend == "docker" else []
        if not alive and not left:
            break
        assert time.monotonic() < deadline, f"still running after the bench ended: {alive} {left}"
        time.sleep(0.2)
    assert not list((tmp_path / "runs").glob("*/result.json"))
