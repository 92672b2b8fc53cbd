"""The bubblewrap backend's own parts: preflight, mounts, output capture, metering (its
per-call overhead is a benchmark, not a test: scripts/bench_sandbox.py).

The isolation guarantees themselves are in test_sandbox_isolation.py (shared by all backends).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest

import vtb
from vtb.sandbox import Limits, Mount, make_sandbox, monitor, proctree, runtime_mounts
from vtb.sandbox import bwrap as bw
from vtb.sandbox import cgroup as cgroups
from vtb.sandbox.base import SandboxStartError
from vtb.sandbox.output import StderrCollector, read_bounded
from vtb.sandbox.runtime import SANDBOX_CODE

needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed")
LIMITS = Limits(wall_seconds=30, cpu_seconds=30)


def test_unknown_backend_names_the_known_ones():
    with pytest.raises(ValueError, match="bwrap"):
        make_sandbox("firecracker")


def test_preflight_explains_a_missing_bwrap():
    with pytest.raises(RuntimeError, match="apt-get install bubblewrap"):
        bw.preflight("/nonexistent/bwrap-for-test")


def _fake_bwrap(tmp_path: Path, body: str) -> str:
    exe = tmp_path / "bwrap"
    exe.write_text(f"#!/bin/sh\n{body}\n")
    exe.chmod(0o755)
    return str(exe)


def test_preflight_explains_missing_user_namespaces(tmp_path):
    exe = _fake_bwrap(tmp_path, 'echo "bwrap: No permissions to create new namespace" >&2; exit 1')
    with pytest.raises(RuntimeError, match="user namespaces must be allowed") as e:
        bw.preflight(exe)
    assert "No permissions to create new namespace" in str(e.value)


def test_preflight_falls_back_without_disable_userns(tmp_path):
    exe = _fake_bwrap(tmp_path, 'case "$*" in *--disable-userns*) exit 1;; esac; exit 0')
    assert bw.preflight(exe) is False


def test_runtime_mounts_are_read_only_and_never_the_repo():
    mounts = runtime_mounts()
    targets = {m.target for m in mounts}
    vtb_dir = str(Path(vtb.__file__).resolve().parent)
    assert str(Path(vtb_dir).parent) not in targets  # never the repo: only the layout
    assert {f"{vtb_dir}/{rel}" for rel in SANDBOX_CODE} <= targets
    assert not any(m.writable for m in mounts)
    # Each path at its own location, but /etc (a copy of what programs need) and the package dir
    # (an empty read-only skeleton of the layout).
    assert [m.target for m in mounts if m.target != str(m.source)] == ["/etc", vtb_dir]
    for prefix in (sys.prefix, sys.base_prefix):
        assert any(prefix == t or prefix.startswith(t + "/") for t in targets)
    assert runtime_mounts() is not mounts  # callers may append to their own list


@pytest.mark.parametrize("target", ["/", "ws", "/ws/../etc", "/proc/x", "/dev", "/run/vtb", "/run/vtb/x"])
def test_bad_mount_targets_are_rejected(tmp_path, target):
    with pytest.raises(ValueError):
        bw.check_mount(Mount(tmp_path, target))


def test_missing_mount_source_is_rejected(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        bw.check_mount(Mount(tmp_path / "nope", "/ws"))


def test_read_bounded_keeps_head_and_tail():
    r, w = os.pipe()

    def write() -> None:
        with os.fdopen(w, "w") as f:
            f.write("H" * 1000 + "M" * 200_000 + "T" * 1000)

    writer = threading.Thread(target=write)
    writer.start()
    with os.fdopen(r) as f:
        out = read_bounded(f, 100_000)
    writer.join()
    assert out.startswith("H" * 1000) and out.endswith("T" * 1000)
    assert "characters of output dropped" in out and len(out) < 200_000


def test_stderr_collector_finds_denials_across_chunks():
    r, w = os.pipe()
    collector = StderrCollector(r)
    for part in (
        b"ok line\ncat: /x: No such ",
        b"file or directory\n",
        b"y" * 200_000,
        b"\nlast: Permission denied",
    ):
        os.write(w, part)
    os.close(w)
    tail = collector.result()
    assert collector.denials == ["cat: /x: No such file or directory", "last: Permission denied"]
    assert len(tail) <= 64 * 1024 and tail.endswith("Permission denied")


def test_proctree_finds_and_meters_children():
    burn = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass\nprint('burnt', flush=True)\ntime.sleep(30)"
    child = subprocess.Popen([sys.executable, "-c", burn], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline() == "burnt\n"
        tree = proctree.tree(os.getpid())
        mine = [p for p in tree if p.pid == child.pid]
        assert len(mine) == 1 and proctree.cpu_seconds(mine) >= 0.29
        proctree.kill(mine)
        assert child.wait(5) == -9
    finally:
        child.kill()
        child.wait()


@needs_bwrap
def test_threads_reach_the_environment():
    sandbox = make_sandbox("bwrap", threads=3)
    result = sandbox.run(
        ["sh", "-c", "echo $OMP_NUM_THREADS $VTB_THREADS"], mounts=runtime_mounts(), limits=LIMITS
    )
    assert result.stdout.split() == ["3", "3"]


@needs_bwrap
def test_host_secrets_under_etc_are_masked():
    if not os.path.exists("/etc/shadow"):
        pytest.skip("no /etc/shadow on this host")
    result = make_sandbox("bwrap").run(["cat", "/etc/shadow"], mounts=runtime_mounts(), limits=LIMITS)
    assert result.stdout == "" and "root:" not in result.stderr


@needs_bwrap
def test_private_output_dir_is_removed(monkeypatch, tmp_path):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    sandbox = make_sandbox("bwrap")
    result = sandbox.run(["sh", "-c", 'echo "{}" > $VTB_USAGE_FILE'], mounts=runtime_mounts(), limits=LIMITS)
    assert result.returncode == 0 and result.usage == {}
    assert list(tmp_path.iterdir()) == []


@needs_bwrap
def test_launch_failure_is_a_start_error(monkeypatch, tmp_path):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    sandbox = make_sandbox("bwrap")
    sandbox._exe = str(tmp_path / "gone" / "bwrap")
    with pytest.raises(SandboxStartError):
        sandbox.start(["true"], mounts=runtime_mounts(), limits=LIMITS)
    assert list(tmp_path.iterdir()) == []


@needs_bwrap
def test_ram_backed_dirs_are_capped():
    sandbox = make_sandbox("bwrap", tmp_mb=8)
    if not sandbox.hardened:
        pytest.skip("this bwrap cannot size a tmpfs (needs >= 0.8)")
    script = (
        "head -c 20000000 /dev/zero > /tmp/big; echo $?; head -c 20000000 /dev/zero > /dev/shm/big; echo $?"
    )
    result = sandbox.run(["sh", "-c", script], mounts=runtime_mounts(), limits=LIMITS)
    assert result.stdout.split() == ["1", "1"] and "No space left on device" in result.stderr


@needs_bwrap
def test_parallel_sandboxes_from_threads_stay_apart(tmp_path):
    sandbox = make_sandbox("bwrap")
    results: dict[int, str] = {}

    def one(i: int) -> None:
        ws = tmp_path / f"ws{i}"
        ws.mkdir()
        (ws / "id").write_text(str(i))
        mounts = runtime_mounts() + [Mount(ws, "/ws", writable=True)]
        results[i] = sandbox.run(
            ["sh", "-c", "sleep 0.2; cat /ws/id; ls /ws"], mounts=mounts, limits=LIMITS
        ).stdout

    threads = [threading.Thread(target=one, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert results == {i: f"{i}id\n" for i in range(4)}


@needs_bwrap
def test_works_without_pidfd(monkeypatch):
    monkeypatch.setattr(monitor, "_pidfd", lambda pid: None)  # kernels before 5.3
    sandbox = make_sandbox("bwrap")
    assert sandbox.run(["true"], mounts=runtime_mounts(), limits=LIMITS).returncode == 0
    result = sandbox.run(["sleep", "10"], mounts=runtime_mounts(), limits=Limits(wall_seconds=0.5))
    assert result.killed == "wall" and result.wall_seconds < 2


@pytest.fixture
def made_cgroups(monkeypatch) -> list[Path]:
    """The cgroups (CPU, memory, pids) this test's sandboxes make, by the paths the makers return.

    Other processes (the suite's other worker) make and remove theirs meanwhile, so a parent's
    listing before and after says nothing of ours."""
    made: list[Path] = []

    def recorded(make):
        def wrapper(*args, **kwargs):
            out = make(*args, **kwargs)
            if out is not None:
                made.append(Path(getattr(out, "path", out)))
            return out

        return wrapper

    for name in ("create", "create_memory", "create_pids"):
        monkeypatch.setattr(cgroups, name, recorded(getattr(cgroups, name)))
    return made


@needs_bwrap
def test_cgroups_are_removed_after_each_sandbox(made_cgroups):
    """Every cgroup these sandboxes made is gone after them."""
    sandbox = make_sandbox("bwrap")
    if not sandbox.exact_cpu:
        pytest.skip("no cgroup metering on this host")
    made = made_cgroups
    sandbox.run(["sh", "-c", "sleep 0.3 &"], mounts=runtime_mounts(), limits=LIMITS)
    sandbox.run(["sleep", "5"], mounts=runtime_mounts(), limits=Limits(wall_seconds=0.3))
    assert any(p.name.startswith("vtb-sandbox-") or p.name.startswith("vtb-mem-") for p in made), made
    assert [p for p in made if p.exists()] == []


@needs_bwrap
def test_without_cgroup_metering_short_steps_are_still_metered():
    sandbox = make_sandbox("bwrap", exact_cpu=False)
    assert not sandbox.exact_cpu
    burn = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.15: pass"
    result = sandbox.run([sys.executable, "-c", burn], mounts=runtime_mounts(), limits=LIMITS)
    assert result.returncode == 0 and result.cpu_seconds >= 0.15


@needs_bwrap
@pytest.mark.parametrize(
    "bomb", [":(){ :|:& };:; sleep 20", "while true; do (sleep 100 &); done"], ids=["classic", "orphans"]
)
def test_a_fork_bomb_is_stopped_by_the_process_cap(bomb):
    sandbox = make_sandbox("bwrap")
    limits = Limits(wall_seconds=30, cpu_seconds=30, max_processes=64)
    result = sandbox.run(["/bin/bash", "-c", bomb], mounts=runtime_mounts(), limits=limits)
    assert result.killed == "procs" and result.wall_seconds < 10
    after = sandbox.run(["/bin/bash", "-c", "echo alive"], mounts=runtime_mounts(), limits=limits)
    assert after.stdout == "alive\n" and after.killed is None


@needs_bwrap
def test_the_process_cap_leaves_modest_work_alone_and_its_cgroup_is_removed(made_cgroups):
    sandbox = make_sandbox("bwrap")
    limits = Limits(wall_seconds=30, cpu_seconds=30, max_processes=64)
    work = "for i in $(seq 20); do sleep 0.2 & done; wait; echo done"
    result = sandbox.run(["/bin/bash", "-c", work], mounts=runtime_mounts(), limits=limits)
    assert result.stdout == "done\n" and result.killed is None
    assert [
        p for p in made_cgroups if p.exists()
    ] == []  # the pids cgroup (or the memory one holding the cap)
