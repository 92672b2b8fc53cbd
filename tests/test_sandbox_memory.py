"""One memory cap for everything a sandbox holds: its processes and its RAM-backed /tmp and /dev/shm.

Before, Limits.memory_mb was an RLIMIT_AS per process in bwrap, so a sandbox could still fill
4 GiB of /tmp and 4 GiB of /dev/shm beyond it. Now a per-sandbox memory cgroup (bwrap, where the
host allows it; the container's own under docker) counts the tmpfs pages too and the tree is
killed as "memory" past the cap; without a cgroup ("bwrap-rlimit") each tmpfs is half the cap.
The host's shared memory (tmpfs pages, /proc/meminfo Shmem) is watched throughout: it never grows
by more than the cap and is back once the sandbox has ended.
"""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

import pytest

from tests.conftest import sandbox_backend
from vtb.sandbox import runtime_mounts
from vtb.sandbox.base import Limits

CAP_MB = 256
LIMITS = Limits(wall_seconds=30, cpu_seconds=30, memory_mb=CAP_MB)
SLACK_MB = 64  # other processes on a shared CI machine may move Shmem a little
PY = sys.executable
# Fills /dev/shm, then /tmp, 600 MB each (2.3x the cap each), then holds them; prints what it wrote.
FILL = (
    "for d in /dev/shm /tmp; do head -c 600000000 /dev/zero > $d/fill; echo $d $(wc -c < $d/fill); done;"
    " sleep 1; echo held"
)
ALLOCATE = "b = bytearray({mb} << 20); b[::4096] = b'x' * len(b[::4096]); print('allocated', flush=True)"


@pytest.fixture(params=["bwrap", "bwrap-rlimit", pytest.param("docker", marks=pytest.mark.docker)])
def variant(request) -> str:
    """bwrap with a memory cgroup (where the host allows one), bwrap without one, docker."""
    return request.param


@pytest.fixture
def backend(variant):
    if variant == "bwrap-rlimit":
        return sandbox_backend("bwrap", memory_cgroup=False)
    sandbox = sandbox_backend(variant)
    if variant == "bwrap" and not getattr(sandbox, "memory_cgroup", True):
        pytest.skip("this host does not let us create memory cgroups (bwrap-rlimit covers it)")
    return sandbox


def capped(variant: str) -> bool:
    """Whether the whole tree is capped (memory cgroup or container) rather than per process."""
    return variant != "bwrap-rlimit"


def shmem_mb() -> float:
    for line in open("/proc/meminfo"):
        if line.startswith("Shmem:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no Shmem in /proc/meminfo")


def run_watched(backend, argv: list[str], limits: Limits = LIMITS):
    """Run argv in the sandbox; return (result, most Shmem grew meanwhile, Shmem growth afterwards)."""
    before, most, stop = shmem_mb(), [0.0], threading.Event()

    def watch() -> None:
        while not stop.is_set():
            most[0] = max(most[0], shmem_mb() - before)
            time.sleep(0.01)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        result = backend.run(argv, mounts=runtime_mounts(), limits=limits)
    finally:
        stop.set()
        watcher.join()
    time.sleep(0.2)  # the tmpfs goes with the sandbox's mount namespace
    return result, most[0], shmem_mb() - before


def test_filling_tmp_and_shm_stays_within_the_cap(backend, variant):
    result, most, after = run_watched(backend, ["sh", "-c", FILL])
    assert most < CAP_MB + SLACK_MB, (most, result)
    assert after < SLACK_MB, after  # nothing left behind on the host
    if capped(variant):
        assert result.killed == "memory" and "held" not in result.stdout, result
    else:  # each tmpfs is half the cap: writes past it fail, the program goes on
        assert result.killed is None and "No space left on device" in result.stderr, result
        sizes = [int(line.split()[1]) for line in result.stdout.splitlines() if line.startswith("/")]
        assert len(sizes) == 2 and sum(sizes) <= CAP_MB << 20, result.stdout


def test_allocating_past_the_cap_is_stopped(backend, variant):
    result, _, _ = run_watched(backend, [PY, "-c", ALLOCATE.format(mb=2 * CAP_MB)])
    assert result.returncode != 0 and "allocated" not in result.stdout
    if capped(variant):
        assert result.killed == "memory", result
    else:  # RLIMIT_AS per process
        assert "MemoryError" in result.stderr, result


def test_the_whole_tree_dies_on_a_memory_kill(backend, variant):
    """The kernel's OOM killer picks one process; the sandbox's sleeper goes with it, at once."""
    if not capped(variant):
        pytest.skip("without a cgroup each process has its own cap and nothing is killed")
    script = f'sleep 20 & {PY} -c "{ALLOCATE.format(mb=2 * CAP_MB)}"; wait'
    result, _, _ = run_watched(backend, ["sh", "-c", script])
    assert result.killed == "memory" and result.wall_seconds < 10, result


def test_a_program_within_the_cap_runs_normally(backend, variant):
    script = f'head -c 60000000 /dev/zero > /dev/shm/a && head -c 30000000 /dev/zero > /tmp/b && {PY} -c "{ALLOCATE.format(mb=60)}"'
    result, most, after = run_watched(backend, ["sh", "-c", script])
    assert result.returncode == 0 and result.killed is None, result
    assert result.stdout.strip() == "allocated"
    assert most > 80 and after < SLACK_MB, (most, after)


def test_rlimit_as_is_off_where_a_cgroup_caps_memory(backend, variant):
    """RLIMIT_AS breaks CUDA's big virtual reservations: only the fallback sets it."""
    if backend.name == "docker":
        pytest.skip("docker never sets RLIMIT_AS")
    result = backend.run(["sh", "-c", "ulimit -v"], mounts=runtime_mounts(), limits=LIMITS)
    expected = "unlimited" if capped(variant) else str(CAP_MB * 1024)
    assert result.stdout.strip() == expected, result


def test_the_default_run_has_a_memory_cap():
    """So that the default run cannot exhaust a 24 GiB machine."""
    from tests.conftest import small_config
    from vtb.config import SandboxConfig

    assert SandboxConfig().memory_mb is not None and SandboxConfig().memory_mb <= 8192
    for backend in ("bwrap", "docker"):
        cfg = small_config(Path("/tmp"), "noop", 0, f"sandbox={backend}")
        assert cfg.sandbox.memory_mb == SandboxConfig().memory_mb
