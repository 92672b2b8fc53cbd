"""What only the docker backend has: container cleanup (also after a killed orchestrator), images, GPUs.

The isolation guarantees themselves are tested on both backends in test_sandbox_isolation.py.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import sandbox_backend
from vtb.sandbox import Limits, runtime_mounts
from vtb.sandbox.docker import LABEL, _cgroup_dirs, _owner, owner_alive

ROOT = Path(__file__).resolve().parents[1]


def test_no_engine_is_a_clear_error(monkeypatch) -> None:
    from vtb.sandbox.docker import DockerSandbox

    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    with pytest.raises(RuntimeError, match=r"no Docker Engine answers.*dockerd --iptables=false"):
        DockerSandbox()


def test_owner_identity() -> None:
    assert owner_alive(_owner())
    ident, namespace = _owner().split("@")
    boot, pid, started = ident.split(":")
    assert not owner_alive(f"{boot}:{pid}:{int(started) + 1}@{namespace}")  # same pid, another process
    assert not owner_alive(f"other-boot:1:1@{namespace}") and not owner_alive("")
    assert not owner_alive(f"{boot}:{pid}:{int(started) + 1}")  # a label of before the namespace
    # An owner in another pid namespace (an orchestrator in a container, which cannot see the
    # host's processes, or the host seen from one): not judged from here, never removed.
    assert owner_alive(f"{boot}:1:1@pid:[1]")


@pytest.mark.docker
def test_an_orchestrator_in_a_container_leaves_the_hosts_containers_alone(tmp_path) -> None:
    """A DockerSandbox made in another pid namespace (here: bwrap's, as in the orchestrator image
    of the docker work pool) cleans up stale containers on the same engine: a running container
    of this live process must survive it. It was removed mid-step (issue 39's work pool, CI)."""
    import os
    import subprocess
    import sys

    sandbox = sandbox_backend("docker")
    proc = sandbox.start(["/bin/sleep", "60"], mounts=runtime_mounts(), limits=Limits(wall_seconds=120))
    try:
        other = subprocess.run(
            ["bwrap", "--dev-bind", "/", "/", "--unshare-pid", "--proc", "/proc", sys.executable, "-c",
             "import os; from vtb.sandbox.docker import DockerSandbox; DockerSandbox(); print(os.readlink('/proc/self/ns/pid'))"],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert other.returncode == 0, other.stderr[-2000:]
        assert other.stdout.strip() != os.readlink("/proc/self/ns/pid")  # it ran in another namespace
        mine = {"label": [LABEL, f"vtb.owner={_owner()}"]}
        assert len(sandbox.api.containers(filters=mine)) == 1  # still running
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.docker
def test_missing_image_names_the_build_script() -> None:
    from vtb.sandbox.docker import DockerSandbox

    sandbox_backend("docker")  # an engine answers
    with pytest.raises(RuntimeError, match=r"vtb/no-such-image.*scripts/build_images.sh"):
        DockerSandbox(image="vtb/no-such-image:latest")


@pytest.mark.docker
def test_containers_are_removed_after_success_failure_and_kill() -> None:
    sandbox = sandbox_backend("docker")
    mine = {"label": [LABEL, f"vtb.owner={_owner()}"]}
    assert sandbox.run(["/bin/true"], mounts=runtime_mounts(), limits=Limits()).returncode == 0
    assert sandbox.run(["/bin/sh", "-c", "exit 7"], mounts=runtime_mounts(), limits=Limits()).returncode == 7
    killed = sandbox.run(["/bin/sleep", "60"], mounts=runtime_mounts(), limits=Limits(wall_seconds=1))
    assert killed.killed == "wall"
    assert sandbox.api.containers(all=True, filters=mine) == []


class TwoGpus:
    """A stand-in for NVML (no GPU here): two devices, nobody on them."""

    def device_count(self) -> int:
        return 2

    def compute_pids(self, index: int) -> set[int]:
        return set()

    def utilization(self, index: int) -> float:
        return 0.0


@pytest.mark.docker
def test_gpu_passthrough_is_a_device_request(tmp_path) -> None:
    nvml = TwoGpus()
    config = sandbox_backend("docker", gpus="0,1", gpu_reader=nvml).host_config(
        runtime_mounts(), Limits(), tmp_path, "vtb-x"
    )
    (request,) = config["DeviceRequests"]
    assert request["DeviceIDs"] == ["0", "1"] and request["Capabilities"] == [["gpu"]]
    everything = sandbox_backend("docker", gpus="all", gpu_reader=nvml).host_config(
        runtime_mounts(), Limits(), tmp_path, "vtb-x"
    )
    assert everything["DeviceRequests"][0]["Count"] == -1
    plain = sandbox_backend("docker").host_config(
        runtime_mounts(), Limits(max_processes=64), tmp_path, "vtb-x"
    )
    assert not plain.get("DeviceRequests") and plain["NetworkMode"] == "none" and plain["ReadonlyRootfs"]
    assert plain["PidsLimit"] == 64 and plain["CapDrop"] == ["ALL"]


ORCHESTRATOR = """
import sys, time
sys.path.insert(0, {root!r})
from vtb.sandbox import Limits, runtime_mounts
from vtb.sandbox.docker import DockerSandbox
proc = DockerSandbox().start(["/bin/sleep", "300"], mounts=runtime_mounts(), limits=Limits(wall_seconds=600))
print(proc.id, proc._parent, flush=True)
time.sleep(600)
"""


def _outlived(api, cid: str, since: int) -> bool:
    """Whether the container was still there after its orchestrator died: running now, or removed
    meanwhile by another run's stale cleanup (a second xdist worker starting a docker sandbox,
    the very cleanup under test). That removal kills it through the engine, so its events hold a
    `kill` before the `destroy`; a container that ended with its orchestrator would not."""
    import docker

    try:
        return api.inspect_container(cid)["State"]["Running"]
    except docker.errors.NotFound:
        events = api.events(since=since, until=int(time.time()) + 1, filters={"container": cid}, decode=True)
        actions = [e.get("Action") or e.get("status") for e in events]
        return "kill" in actions and "destroy" in actions[actions.index("kill") :]


@pytest.mark.docker
def test_a_killed_orchestrator_leaves_no_container_once_the_next_run_starts() -> None:
    sandbox_backend("docker")  # the engine and image are there (else skip, or fail under VTB_REQUIRE_DOCKER)
    orchestrator = subprocess.Popen(
        [sys.executable, "-c", ORCHESTRATOR.format(root=str(ROOT))], stdout=subprocess.PIPE, text=True
    )
    cid, parent = orchestrator.stdout.readline().split()
    import docker

    api = docker.APIClient()
    assert api.inspect_container(cid)["State"]["Running"]
    os.kill(orchestrator.pid, signal.SIGKILL)  # mid-step, no chance to clean up
    orchestrator.wait()
    killed_at = int(time.time()) - 1
    time.sleep(0.5)
    assert _outlived(api, cid, killed_at)  # the container outlived its orchestrator

    sandbox_backend("docker")  # the next run starts
    assert api.containers(all=True, filters={"id": cid}) == []
    assert _cgroup_dirs(parent) == []


@pytest.mark.docker
@pytest.mark.parametrize("image", ["vtb/grading:latest", "vtb/research:latest"])
def test_a_self_contained_image_runs_steps_without_the_host_runtime(tmp_path, image) -> None:
    """runtime="image": the image's own Python and vtb; the host's runtime dirs are not mounted.

    Needs the images of `scripts/build_images.sh full` (about 10 minutes; CI does not build them).
    """
    import docker

    sandbox_backend("docker")
    try:
        docker.APIClient().inspect_image(image)
    except docker.errors.ImageNotFound:
        pytest.skip(f"{image} not built (scripts/build_images.sh full)")
    from vtb.sandbox import Mount

    sandbox = sandbox_backend("docker", image=image, runtime="image")
    ws = tmp_path / "ws"
    ws.mkdir()
    code = "import sys, vtb, torch; print(sys.prefix, vtb.__file__); open('/ws/out', 'w').write('ok')"
    result = sandbox.run(
        [sys.executable, "-c", code],
        mounts=[*runtime_mounts(), Mount(ws, "/ws", writable=True)],
        limits=Limits(wall_seconds=120, cpu_seconds=120),
        cwd="/ws",
    )
    assert result.returncode == 0, result.stderr
    assert (
        result.stdout.split() == ["/opt/vtb/.venv", "/opt/vtb/vtb/__init__.py"]
        or "site-packages/vtb" in result.stdout
    )
    assert (ws / "out").read_text() == "ok"
    host_python = sandbox.run(
        ["/bin/sh", "-c", f"test -e {sys.executable}"], mounts=runtime_mounts(), limits=Limits()
    )
    assert host_python.returncode != 0  # the orchestrator's interpreter is not visible inside
