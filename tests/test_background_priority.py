"""The reference system trains in a background thread at a lower priority (vtb/bench.py `run`).

Its sandboxes must get that priority on both backends (bwrap inherits the thread's nice at
fork; docker gets the matching CPU shares), so the research's steps keep most of the CPU.
"""

from __future__ import annotations

import sys
from concurrent.futures import ThreadPoolExecutor

import pytest
from conftest import BACKENDS, sandbox_backend

from vtb.bench import BACKGROUND_NICE, lower_priority
from vtb.sandbox import runtime_mounts
from vtb.sandbox.base import Limits

NICE = [sys.executable, "-c", "import os; print(os.nice(0)); input()"]


def _start(sandbox):
    proc = sandbox.start(NICE, mounts=runtime_mounts(), limits=Limits(wall_seconds=60))
    return proc


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_sandbox_started_by_the_background_runs_at_its_lower_priority(backend) -> None:
    sandbox = sandbox_backend(backend)

    def background():
        lower_priority()
        return _start(sandbox)

    with ThreadPoolExecutor(1) as pool:
        niced = pool.submit(background).result()
    normal = _start(sandbox)
    try:
        if backend == "bwrap":
            seen = [p.stdout.readline().strip() for p in (niced, normal)]
            assert seen == [str(BACKGROUND_NICE), "0"], seen
        else:  # dockerd starts the container: its CPU weight carries the priority
            shares = [sandbox.api.inspect_container(p.id)["HostConfig"]["CpuShares"] for p in (niced, normal)]
            assert shares[0] == int(1024 / 1.25**BACKGROUND_NICE) and shares[1] in (0, None)
    finally:
        for p in (niced, normal):
            p.stdin.close()
            p.wait(timeout=30)
