"""The Docker backend: each sandboxed process is a fresh container, removed when it ends.

Same `Sandbox` interface and the same guarantees as bwrap (tests/test_sandbox_isolation.py
runs on both): the container starts from the runtime image (scripts/build_images.sh; a near
empty root) with the same mounts as a bwrap sandbox (system dirs, the Python runtime and `vtb`
read-only, the workspace read-write), `network_mode="none"`, a read-only root, all
capabilities dropped, no-new-privileges, private size-capped /tmp and /dev/shm, and the host's
uid. Limits are enforced from outside: wall time, CPU-seconds of the whole container (read from
a per-sandbox parent cgroup, which keeps the count after the container is gone, so a short step
is metered too), FLOPs from the usage file, a pids cap and ONE memory cap for everything the
container holds (its processes and its /tmp and /dev/shm tmpfs pages, which the kernel charges to
the container's cgroup, each tmpfs sized within the cap; no swap): an OOM kill in the container
kills it all as "memory", and with GPUs the GPU-seconds of the host pids in the container's cgroups (NVML: gpu.py).

Every container carries labels naming its owner process; a new `DockerSandbox` removes the
containers of owners that are gone, so killing the orchestrator mid-step leaves nothing running
once the next run starts.
"""

from __future__ import annotations

import atexit
import copy
import functools
import glob
import logging
import os
import shutil
import socket
import struct
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

from vtb.sandbox import SANDBOXES
from vtb.sandbox.base import USAGE_FILE, Limits, Mount, SandboxResult, SandboxStartError
from vtb.sandbox.bwrap import check_mount
from vtb.sandbox.cgroup import MemoryCgroup
from vtb.sandbox.gpu import GpuMeter, NvmlReader, sandbox_gpus
from vtb.sandbox.monitor import POLL_S, _flops, read_usage, run_to_end, wait_or_kill
from vtb.sandbox.output import StderrCollector
from vtb.sandbox.runtime import masked_paths, runtime_mounts, sandbox_env

log = logging.getLogger(__name__)

IMAGE = "vtb/runtime:latest"  # made by scripts/build_images.sh (offline, seconds)
IMAGE_PREFIX = "/opt/vtb/.venv"  # where containers/*.Dockerfile install the project (runtime="image")
LABEL = "vtb.sandbox"
CGROUP_ROOT = Path("/sys/fs/cgroup")
NATIVE_DISK_MB = 4096  # a native container's own layer, at most (with_image)
NATIVE_OWN_ENV = ("PATH", "HOME")
DISK_CHECK_S = 2.0  # measuring a layer walks it: not at every poll
BUILD_HINT = "build it with `scripts/build_images.sh` (offline, no registry needed)"
ENGINE_HINT = (
    "start a Docker Engine (Debian: `apt-get install docker.io`, then as root "
    "`dockerd --iptables=false --bridge=none &`) or use sandbox=bwrap"
)


def cpu_shares() -> int | None:
    """The container's CPU weight for the calling thread's nice (None at 0 or below: docker's default).

    A bwrap sandbox inherits its starter's niceness at fork; a container is started by dockerd,
    so a background thread's lower priority (vtb/bench.py) is passed on as cgroup CPU shares,
    the kernel's own weight for that nice (1024 at 0, /1.25 per step).
    """
    nice = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    return max(2, int(1024 / 1.25**nice)) if nice > 0 else None


def _owner() -> str:
    """This process as '<boot id>:<pid>:<start time>@<pid namespace>': a pid reused after a reboot
    or exit differs, and so does the same pid seen from another namespace."""
    return f"{_boot_id()}:{os.getpid()}:{_start_time(os.getpid())}@{_pid_namespace()}"


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return "?"


def _pid_namespace() -> str:
    try:
        return os.readlink("/proc/self/ns/pid")  # e.g. pid:[4026531836]
    except OSError:
        return "?"


def _start_time(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return ""


def owner_alive(owner: str) -> bool:
    """Whether the process that owns a container may still run it.

    Only a process of this pid namespace can be looked up here: an orchestrator running in a
    container (the docker work pool's image) sees none of the host's processes, and took every
    host bench's containers for stale ones and removed them mid-step (a training killed with
    137). An owner in another namespace counts as alive: its containers are its own to remove."""
    ident, _, namespace = owner.partition("@")
    if namespace and namespace != _pid_namespace():
        return True
    boot, _, rest = ident.partition(":")
    pid, _, started = rest.partition(":")
    return boot == _boot_id() and pid.isdigit() and _start_time(int(pid)) == started != ""


def _cgroup_dirs(parent: str) -> list[str]:
    return glob.glob(str(CGROUP_ROOT / "*" / parent)) + glob.glob(str(CGROUP_ROOT / parent))


def _cgroup_cpu(parent: str) -> float | None:
    """CPU-seconds of everything that ran under the parent cgroup (v1 cpuacct or v2 cpu.stat)."""
    for path in (
        CGROUP_ROOT / "cpuacct" / parent / "cpuacct.usage",
        CGROUP_ROOT / "cpu,cpuacct" / parent / "cpuacct.usage",
    ):
        try:
            return int(path.read_text()) / 1e9
        except (OSError, ValueError):
            pass
    try:
        for line in (CGROUP_ROOT / parent / "cpu.stat").read_text().splitlines():
            if line.startswith("usage_usec "):
                return int(line.split()[1]) / 1e6
    except (OSError, ValueError):
        pass
    return None


def _cgroup_pids(parent: str) -> set[int]:
    """Host pids of every process in the parent cgroup and below it (the container's own cgroup)."""
    pids: set[int] = set()
    for top in _cgroup_dirs(parent):
        for d, _, _ in os.walk(top):
            try:
                pids.update(int(p) for p in Path(d, "cgroup.procs").read_text().split())
            except (OSError, ValueError):
                pass
    return pids


def _memory_cgroup(pid: int) -> MemoryCgroup | None:
    """The memory cgroup of a host process (the container's init): v1's memory hierarchy or v2.

    Looked up through /proc rather than under the parent: on v1 the engine nests the container's
    memory cgroup below its own, wherever the engine itself was started.
    """
    try:
        lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            cand = MemoryCgroup(CGROUP_ROOT / "memory" / path.lstrip("/"), v2=False)
        elif controllers == "":
            cand = MemoryCgroup(CGROUP_ROOT / path.lstrip("/"), v2=True)
        else:
            continue
        if (cand.path / ("memory.events" if cand.v2 else "memory.oom_control")).exists():
            return cand
    return None


def _remove_cgroup(parent: str, timeout: float = 2.0) -> None:
    deadline = time.monotonic() + timeout
    for d in sorted(_cgroup_dirs(parent), key=len, reverse=True):
        while True:
            try:
                os.rmdir(d)
                break
            except FileNotFoundError:
                break
            except OSError:
                if time.monotonic() > deadline:
                    break
                time.sleep(0.05)


def cleanup_stale(api) -> list[str]:
    """Remove vtb containers whose owner process is gone (a killed orchestrator); their ids."""
    return _remove_where(api, lambda owner: not owner_alive(owner))


def engine_client():
    """A low-level client of the Docker Engine at $DOCKER_HOST (the local socket by default)."""
    import docker

    return docker.APIClient(base_url=os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock"))


def cleanup_own() -> list[str]:
    """Remove this process's vtb containers; their ids. Run at exit (registered by DockerSandbox):
    a bench stopped by Ctrl-C or SIGTERM ends while steps in other threads still have theirs."""
    mine = _owner()
    try:
        api = engine_client()
        try:
            return _remove_where(api, lambda owner: owner == mine)
        finally:
            api.close()
    except Exception as e:  # noqa: BLE001 (at exit: log and go on; the next run removes what is left)
        log.warning("could not remove this process's sandbox containers: %s", e)
        return []


def _remove_where(api, owned_by) -> list[str]:
    """Remove the vtb containers whose `vtb.owner` label satisfies `owned_by`, and their cgroups."""
    removed = []
    for c in api.containers(all=True, filters={"label": LABEL}):
        labels = c.get("Labels") or {}
        if not owned_by(labels.get("vtb.owner", "")):
            continue
        try:
            api.remove_container(c["Id"], force=True)
            removed.append(c["Id"])
        except Exception as e:  # noqa: BLE001 (already gone, or the engine refused: log and go on)
            log.warning("could not remove sandbox container %s: %s", c["Id"][:12], e)
        if labels.get("vtb.cgroup"):
            _remove_cgroup(labels["vtb.cgroup"])
    return removed


@functools.cache
def _register_exit_cleanup() -> None:
    """cleanup_own at exit, registered once per process (by the first DockerSandbox)."""
    atexit.register(cleanup_own)


@SANDBOXES.register("docker")
class DockerSandbox:
    """`Sandbox` backed by a Docker Engine (the `docker` SDK, low-level API).

    gpus: None (no GPU), "all", or device ids such as "0,1": passed as a device request; every
    container then gets a GPU-seconds meter reading `gpu_reader` (default: NVML, see gpu.py).
    runtime="host" (default): the image only needs mount points; programs come from the host
    runtime mounts, exactly as in a bwrap sandbox, so both backends run the same code with the
    same paths. runtime="image": a self-contained image (containers/*.Dockerfile) brings its
    own Python stack and `vtb`; the host runtime mounts are left out and the orchestrator's
    Python is replaced by the image's.
    """

    name = "docker"

    def __init__(
        self,
        threads: int = 1,
        image: str = IMAGE,
        gpus: str | None = None,
        runtime: str = "host",
        max_stdout_chars: int = 8 << 20,
        tmp_mb: int = 4096,
        client=None,
        gpu_reader: NvmlReader | None = None,
        reproducible: bool = True,
    ) -> None:
        import docker

        self.threads, self.reproducible = threads, reproducible
        if runtime not in ("host", "image"):  # "native" only through with_image
            raise ValueError(f"sandbox.runtime={runtime!r} is not one of host, image")
        self.image = image
        self.disk_mb, self.keep, self.cpus = NATIVE_DISK_MB, False, None
        self.gpus = gpus
        self._gpu_set = sandbox_gpus(gpus, gpu_reader)  # checked before any engine work
        self.runtime = runtime
        self.max_stdout_chars = max_stdout_chars
        self.tmp_mb = tmp_mb
        self._docker = docker
        try:
            self.api = client or engine_client()
            self.api.ping()
        except Exception as e:  # noqa: BLE001 (any failure to reach the engine means the same to the user)
            raise RuntimeError(f"sandbox=docker: no Docker Engine answers ({e}); {ENGINE_HINT}") from e
        try:
            self.api.inspect_image(image)
        except docker.errors.ImageNotFound:
            raise RuntimeError(f"sandbox=docker: image {image} is missing; {BUILD_HINT}") from None
        cleanup_stale(self.api)
        _register_exit_cleanup()

    def with_image(
        self, image: str, disk_mb: int = NATIVE_DISK_MB, keep: bool = False, cpus: float | None = None
    ) -> DockerSandbox:
        """This sandbox, starting its containers from a task's own image, as published.

        For environments that exist only as an image (SWE-bench's per-instance images, a
        Terminal-Bench or Harbor task built from its Dockerfile): the image's own programs,
        PATH, HOME and user, and its root writable, in the container's own layer, which goes
        with the container. Nothing of the host is mounted but what the caller passes. The
        rest is every sandbox's: no network, no capabilities, no new privileges, limits metered
        from outside, and the layer's size capped at `disk_mb` (killed="disk"), since a writable
        root is disk the memory cap does not see. keep=True: a container that ends stays (its
        files, none of its processes) until `proc.remove()`, so `snapshot` can take a state its
        shell left by exiting or by being killed. cpus: the container's CPU quota (docker's
        `--cpus`: its processes together get that many cores' time), as a task's own
        environment asks for (Harbor's [environment] cpus); None = no quota.
        """
        try:
            self.api.inspect_image(image)
        except self._docker.errors.ImageNotFound:
            raise RuntimeError(f"sandbox=docker: image {image} is missing (build or pull it first)") from None
        view = copy.copy(self)
        view.image, view.runtime, view.disk_mb, view.keep, view.cpus = image, "native", disk_mb, keep, cpus
        return view

    def snapshot(self, proc: DockerProcess, repository: str = "vtb-snapshot") -> str:
        """An image of a running container's filesystem (not its processes): the id, to run from.

        How a state outlives its shell: a restarted shell, or the hidden tests that run after
        the agent is done, start from the state the agent left, with none of its processes.
        Remove it with `remove_image` when done.
        """
        tag = uuid.uuid4().hex[:16]
        self.api.commit(proc.id, repository=repository, tag=tag)
        return f"{repository}:{tag}"

    def remove_image(self, ref: str) -> None:
        try:
            self.api.remove_image(ref, force=True, noprune=False)
        except self._docker.errors.APIError as e:
            log.warning("could not remove image %s: %s", ref, e)

    def host_config(self, mounts: list[Mount], limits: Limits, out_dir: Path, parent: str) -> dict:
        types = self._docker.types

        def bind(target: str, source: str, read_only: bool):
            return types.Mount(target, source, type="bind", read_only=read_only, propagation="rprivate")

        binds = [bind(m.target, str(m.source), not m.writable) for m in mounts]
        binds.append(bind(os.path.dirname(USAGE_FILE), str(out_dir), False))
        files, dirs = masked_paths(mounts)
        binds += [bind(f, "/dev/null", True) for f in files]
        # Within the memory cap: the cgroup counts tmpfs pages anyway; the size only makes a write
        # past it fail (ENOSPC) rather than kill the container.
        size = f"size={min(self.tmp_mb, limits.memory_mb) if limits.memory_mb else self.tmp_mb}m"
        tmpfs = {"/tmp": size, "/dev/shm": size, **{d: "ro,size=1k" for d in dirs}}
        requests = None
        if not self.gpus:  # as in bwrap, no /sys (host devices, and a slow tree for `grep -r /`)
            tmpfs["/sys"] = "ro,size=1k"
        else:
            ids = None if self.gpus == "all" else [g.strip() for g in str(self.gpus).split(",")]
            requests = [
                types.DeviceRequest(count=-1 if ids is None else None, device_ids=ids, capabilities=[["gpu"]])
            ]
        return self.api.create_host_config(
            mounts=binds,
            tmpfs=tmpfs,
            network_mode="none",
            read_only=self.runtime != "native",  # native: the image's root, in the container's layer
            cap_drop=["ALL"],
            security_opt=["no-new-privileges"],
            pids_limit=limits.max_processes,
            mem_limit=f"{limits.memory_mb}m" if limits.memory_mb else None,
            memswap_limit=f"{limits.memory_mb}m" if limits.memory_mb else None,  # = memory: no swap
            cgroup_parent=parent,
            device_requests=requests,
            ipc_mode="private",
            cpu_shares=cpu_shares(),
            nano_cpus=round(self.cpus * 1e9) if self.cpus else None,
        )

    def start(
        self,
        argv: list[str],
        *,
        mounts: list[Mount],
        limits: Limits,
        cwd: str = "/",
        env: dict[str, str] | None = None,
    ) -> DockerProcess:
        if not argv:
            raise ValueError("empty argv")
        for m in mounts:
            check_mount(m)
        given = env or {}
        env = sandbox_env(self.threads, limits, env, self.reproducible)
        if self.runtime == "native":  # the image's own PATH and HOME (its ENV), unless asked otherwise
            env = {k: v for k, v in env.items() if k not in NATIVE_OWN_ENV or k in given}
        if self.runtime == "image":
            mounts, argv, env = self._in_image(mounts, argv, env)
        out_dir = Path(tempfile.mkdtemp(prefix="vtb-out-"))
        parent = f"vtb-{uuid.uuid4().hex[:16]}"
        labels = {LABEL: "1", "vtb.owner": _owner(), "vtb.cgroup": parent}
        cid = None
        try:
            created = self.api.create_container(
                self.image,
                argv,
                stdin_open=True,
                detach=False,
                environment=env,
                working_dir=cwd,
                user=None if self.runtime == "native" else f"{os.getuid()}:{os.getgid()}",
                hostname="vtb",
                labels=labels,
                host_config=self.host_config(mounts, limits, out_dir, parent),
            )
            cid = created["Id"]
            sock = self.api.attach_socket(cid, params={"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1})
            started = time.monotonic()
            self.api.start(cid)
        except self._docker.errors.APIError as e:
            if cid:
                self.api.remove_container(cid, force=True)
            shutil.rmtree(out_dir, ignore_errors=True)
            _remove_cgroup(parent)
            raise SandboxStartError(f"docker could not start the sandbox container: {e}") from e
        gpu = self._gpu_set.meter(started) if self._gpu_set is not None else None
        disk = self.disk_mb if self.runtime == "native" else None
        return DockerProcess(self.api, cid, sock, limits, out_dir, parent, started, gpu, disk, self.keep)

    def _in_image(
        self, mounts: list[Mount], argv: list[str], env: dict
    ) -> tuple[list[Mount], list[str], dict]:
        """Swap the host runtime for the image's: its own /usr, Python and `vtb` package."""
        host = {m.target for m in runtime_mounts()}
        python = f"{IMAGE_PREFIX}/bin/python"
        argv = [python if a == sys.executable else a for a in argv[:1]] + argv[1:]
        path = env["PATH"].replace(f"{sys.prefix}/bin", f"{IMAGE_PREFIX}/bin")
        return [m for m in mounts if m.target not in host], argv, {**env, "PATH": path}

    def run(
        self,
        argv: list[str],
        *,
        mounts: list[Mount],
        limits: Limits,
        cwd: str = "/",
        env: dict[str, str] | None = None,
        input: str | None = None,
    ) -> SandboxResult:
        proc = self.start(argv, mounts=mounts, limits=limits, cwd=cwd, env=env)
        return run_to_end(proc, input, self.max_stdout_chars)


class DockerProcess:
    """Implements `SandboxProcess` for a started container: pipes, limits, removal, result."""

    def __init__(
        self,
        api,
        cid: str,
        sock,
        limits: Limits,
        out_dir: Path,
        parent: str,
        started: float,
        gpu: GpuMeter | None = None,
        disk_mb: int | None = None,
        keep: bool = False,
    ):
        self._api, self.id, self._limits, self._keep = api, cid, limits, keep
        self._disk_mb, self._disk_checked = disk_mb, 0.0
        self._gpu, self._gpu_pids = gpu, set()
        self._out_dir, self._parent, self._started = out_dir, parent, started
        self._sock = getattr(sock, "_sock", sock)  # the raw socket under the SDK's wrapper
        in_r, in_w = os.pipe()
        out_r, out_w = os.pipe()
        err_r, self._err_w = os.pipe()
        self.stdin = os.fdopen(in_w, "w", encoding="utf-8", errors="replace", buffering=1)
        self.stdout = os.fdopen(out_r, "r", encoding="utf-8", errors="replace")
        self._stderr = StderrCollector(err_r)
        self._lock = threading.RLock()
        self._done = threading.Event()
        self._killed: str | None = None
        self._returncode: int | None = None
        self._ended: float | None = None
        self._cpu = 0.0
        self._memcg: MemoryCgroup | None = None  # the container's, found at the first check
        self._result: SandboxResult | None = None
        threading.Thread(target=self._pump_stdin, args=(in_r,), daemon=True).start()
        threading.Thread(target=self._demux, args=(out_w,), daemon=True).start()
        threading.Thread(target=self._watch, name="vtb-docker-monitor", daemon=True).start()

    # -- streams --------------------------------------------------------------------------------

    def _pump_stdin(self, fd: int) -> None:
        try:
            while chunk := os.read(fd, 65536):
                self._sock.sendall(chunk)
        except OSError:
            pass
        finally:
            os.close(fd)
            try:
                self._sock.shutdown(socket.SHUT_WR)  # the container's stdin sees EOF
            except OSError:
                pass

    def _demux(self, out_w: int) -> None:
        """Split Docker's multiplexed stream (8-byte headers: stream id, size) into stdout and stderr."""
        buf = b""
        try:
            while True:
                while len(buf) < 8 or len(buf) < 8 + struct.unpack(">I", buf[4:8])[0]:
                    chunk = self._sock.recv(65536)
                    if not chunk:
                        return
                    buf += chunk
                kind, size = buf[0], struct.unpack(">I", buf[4:8])[0]
                payload, buf = buf[8 : 8 + size], buf[8 + size :]
                try:
                    os.write(self._err_w if kind == 2 else out_w, payload)
                except BrokenPipeError:
                    pass  # nobody reads stdout any more: drop it, keep draining
        except OSError:
            pass
        finally:
            os.close(out_w)
            os.close(self._err_w)

    # -- the SandboxProcess protocol ---------------------------------------------------------

    def poll(self) -> int | None:
        return self._returncode if self._done.is_set() else None

    def wait(self, timeout: float | None = None) -> SandboxResult:
        wait_or_kill(self._done, self.kill, timeout)
        return self._finish()

    def kill(self, reason: str = "closed") -> None:
        with self._lock:
            if self._done.is_set():
                return
            if self._killed is None:
                self._killed = reason
            try:
                self._api.kill(self.id)
            except Exception:  # noqa: BLE001 (already stopped)
                pass

    # -- monitoring ---------------------------------------------------------------------------

    def _watch(self) -> None:
        import requests

        deadline = self._started + self._limits.wall_seconds
        try:
            while True:
                try:
                    status = self._api.wait(self.id, timeout=POLL_S)
                    self._ended = time.monotonic()
                    self._returncode = int(status.get("StatusCode", 255))
                    break
                except (requests.exceptions.ReadTimeout, requests.exceptions.ConnectionError):
                    pass
                if self._killed is None:
                    self._check_limits(deadline)
        except Exception as e:  # noqa: BLE001 (the engine went away: the step failed, the run goes on)
            log.warning("docker sandbox %s: lost the container (%s)", self.id[:12], e)
            self._returncode = self._returncode if self._returncode is not None else 255
            self._killed = self._killed or "closed"
        finally:
            self._cpu = max(self._cpu, _cgroup_cpu(self._parent) or 0.0)
            if self._gpu is not None:  # the last interval: charged if the container held a GPU before it
                self._gpu.sample(self._gpu_pids, self._ended or time.monotonic())
            try:
                if self._api.inspect_container(self.id)["State"].get("OOMKilled"):
                    self._killed = self._killed or "memory"  # the tree hit its memory cap
            except Exception:  # noqa: BLE001 (gone already: nothing more to learn)
                pass
            if not self._keep:
                self.remove()
            _remove_cgroup(self._parent)
            self._done.set()

    def remove(self) -> None:
        """Remove the container (done on exit, unless the sandbox keeps ended containers)."""
        try:
            self._api.remove_container(self.id, force=True)
        except Exception as e:  # noqa: BLE001
            log.warning("could not remove sandbox container %s: %s", self.id[:12], e)

    def _check_limits(self, deadline: float) -> None:
        self._cpu = max(self._cpu, _cgroup_cpu(self._parent) or 0.0)
        if self._gpu is not None:
            pids = _cgroup_pids(self._parent)
            self._gpu_pids = pids or self._gpu_pids
            self._gpu.sample(pids, time.monotonic())
        if time.monotonic() >= deadline:
            self.kill("wall")
        elif self._limits.memory_mb and self._oom_killed():
            self.kill("memory")  # the kernel killed one process past the cap: the rest go with it
        elif self._cpu > self._limits.cpu_seconds:
            self.kill("cpu")
        elif self._limits.max_processes is not None and self._fork_refused():
            self.kill("procs")
        elif self._gpu is not None and self._gpu.over(self._limits.gpu_seconds):
            self.kill("gpu")
        elif self._limits.max_flops is not None and (
            _flops(read_usage(self._out_dir / "usage.json")) > self._limits.max_flops
        ):
            self.kill("flops")
        elif self._disk_mb is not None and self._over_disk():
            self.kill("disk")

    def _over_disk(self) -> bool:
        """Whether the container's own layer holds more than its cap (checked every DISK_CHECK_S)."""
        now = time.monotonic()
        if now - self._disk_checked < DISK_CHECK_S:
            return False
        self._disk_checked = now
        try:
            found = self._api.containers(all=True, filters={"id": self.id}, size=True)
            size = found[0].get("SizeRw") or 0 if found else 0
        except Exception:  # noqa: BLE001 (gone: the end of the run decides)
            return False
        return int(size) > self._disk_mb * 1024 * 1024

    def _oom_killed(self) -> bool:
        """Whether the kernel's OOM killer fired in the container (its memory cgroup, found once)."""
        if self._memcg is None:
            try:
                self._memcg = _memory_cgroup(int(self._api.inspect_container(self.id)["State"]["Pid"]))
            except Exception:  # noqa: BLE001 (gone, or the engine does not say: OOMKilled at the end stands)
                return False
        return self._memcg is not None and self._memcg.oom_killed()

    def _fork_refused(self) -> bool:
        for path in glob.glob(str(CGROUP_ROOT / "pids" / self._parent / "*" / "pids.events")) + glob.glob(
            str(CGROUP_ROOT / self._parent / "*" / "pids.events")
        ):
            try:
                events = Path(path).read_text().split()
                if int(events[events.index("max") + 1]) > 0:
                    return True
            except (OSError, ValueError, IndexError):
                pass
        return False

    def _finish(self) -> SandboxResult:
        with self._lock:
            if self._result is None:
                usage = read_usage(self._out_dir / "usage.json")
                shutil.rmtree(self._out_dir, ignore_errors=True)
                self._result = SandboxResult(
                    returncode=self._returncode,
                    stdout="",
                    stderr=self._stderr.result(),
                    wall_seconds=(self._ended or time.monotonic()) - self._started,
                    cpu_seconds=self._cpu,
                    killed=self._killed,
                    usage=usage,
                    denials=list(self._stderr.denials),
                    gpu_seconds=self._gpu.gpu_seconds if self._gpu is not None else 0.0,
                    gpu_busy_seconds=self._gpu.busy_seconds if self._gpu is not None else 0.0,
                )
            return self._result
