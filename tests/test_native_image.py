"""A task's own image run as published (DockerSandbox.with_image): what it may and may not do.

Real SWE-bench instances and Dockerfile-built Terminal-Bench / Harbor tasks run in their own
images, with their own programs and a writable root. These tests run in vtb/hostroot (a
self-contained root copied from this host, the offline stand-in for a public image) and check
that the image's programs work as published while the sandbox's walls stay: no network, no
capabilities, nothing of the host, a disk cap on the writable layer, and snapshots that keep
files but no processes.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import sandbox_backend
from vtb.sandbox.base import Limits, Mount

pytestmark = pytest.mark.docker
HOSTROOT = "vtb/hostroot:latest"
LIMITS = Limits(wall_seconds=60, cpu_seconds=60, memory_mb=512, max_processes=64)


def hostroot_image() -> str:
    """vtb/hostroot, built here when missing (scripts/build_images.sh hostroot: offline, seconds)."""
    if subprocess.run(["docker", "image", "inspect", HOSTROOT], capture_output=True).returncode != 0:
        root = Path(__file__).resolve().parents[1]
        subprocess.run([str(root / "scripts" / "build_images.sh"), "hostroot"], check=True, cwd=root)
    return HOSTROOT


@pytest.fixture(scope="module")
def native():
    return sandbox_backend("docker").with_image(hostroot_image())


def test_the_images_own_programs_run_and_its_root_is_writable(native):
    done = native.run(
        [
            "bash",
            "-c",
            "git --version && python3 -m pytest --version && echo ok > /etc/written && cat /etc/written",
        ],
        mounts=[],
        limits=LIMITS,
    )
    assert done.returncode == 0, done.stderr
    assert "git version" in done.stdout and "ok" in done.stdout


def test_the_walls_stay(native, tmp_path, host_server):
    port, hits = host_server
    secret = tmp_path / "secret.txt"
    secret.write_text("host secret")
    script = f"""
        grep CapEff /proc/self/status
        cat {secret} 2>&1 || echo no-host-file
        ls /proc/net/dev >/dev/null && tail -n +3 /proc/net/dev | cut -d: -f1
        python3 -c "import socket; socket.create_connection(('127.0.0.1', {port}), timeout=2)" 2>&1 | tail -1
        mount -t tmpfs x /mnt 2>&1 | tail -1
    """
    done = native.run(["bash", "-c", script], mounts=[], limits=LIMITS)
    out = done.stdout
    assert "CapEff:\t0000000000000000" in out, out
    assert "host secret" not in out and "no-host-file" in out
    assert [line.strip() for line in out.splitlines() if line.strip() in ("lo", "eth0")] == ["lo"]
    assert "refused" in out.lower() or "unreachable" in out.lower(), out
    assert not hits, "the container reached the host's loopback"


def test_the_writable_layer_is_capped(tmp_path):
    small = sandbox_backend("docker").with_image(hostroot_image(), disk_mb=20)
    started = time.monotonic()
    done = small.run(["bash", "-c", "head -c 60000000 /dev/zero > /big; sleep 50"], mounts=[], limits=LIMITS)
    assert done.killed == "disk", (done.killed, done.stderr)
    assert time.monotonic() - started < 30


def test_a_snapshot_keeps_the_files_and_none_of_the_processes(native, tmp_path):
    proc = native.start(
        ["bash", "-c", "echo state > /root/kept; (sleep 300 &); echo ready; sleep 300"],
        mounts=[],
        limits=LIMITS,
    )
    assert proc.stdout.readline().strip() == "ready"
    ref = native.snapshot(proc)
    proc.kill()
    proc.wait()
    try:
        again = native.with_image(ref)
        shown = tmp_path / "shown"
        shown.mkdir()
        done = again.run(
            ["bash", "-c", "cat /root/kept; ls /proc | grep -c '^[0-9]' > /out/n"],
            mounts=[Mount(shown, "/out", writable=True)],
            limits=LIMITS,
        )
        assert done.stdout.strip() == "state", done.stderr
        assert int((shown / "n").read_text()) <= 3  # bash, its ls and grep: no sleep came along
    finally:
        native.remove_image(ref)
    assert subprocess.run(["docker", "image", "inspect", ref], capture_output=True).returncode != 0
