"""The bubblewrap backend: one machine, no daemon, a few milliseconds per sandbox.

Each process gets an EMPTY root holding only the given mounts (read-only unless marked
writable), a fresh /proc in its own pid namespace (host pids, and so /proc/<pid>/root of the
orchestrator, are invisible), a minimal /dev, a private /tmp, a loopback-only network and no
capabilities. The process tree is metered and killed from outside (monitor.py). Given GPUs
(`gpus=`), the sandbox also gets the NVIDIA device nodes of those GPUs, the parts of /sys that CUDA
and NVML read (read-only, see nvidia.py) and CUDA_VISIBLE_DEVICES, and its GPU-seconds are
metered through NVML (gpu.py). A sandbox without GPUs has no /sys at all.

Memory (Limits.memory_mb) is ONE cap for everything the sandbox holds: where the host lets us
create cgroups, a per-sandbox memory cgroup (cgroup.py) counts its processes and the tmpfs pages
of its /tmp and /dev/shm, with no swap; past it the kernel's OOM killer fires and the tree is
killed as "memory". Elsewhere each process gets an RLIMIT_AS of memory_mb and /tmp and /dev/shm
are each sized memory_mb / 2: the tmpfs holds at most 1 x the cap, each process at most 1 x, so
a sandbox with P processes alive holds at most (1 + P) x memory_mb (P <= Limits.max_processes
where set). A sandbox given GPUs gets no RLIMIT_AS (CUDA reserves far more address space than
it uses, see `launcher`), so there only the tmpfs sizes hold without a cgroup. Without a
memory_mb, /tmp and /dev/shm are each `tmp_mb`.

`--die-with-parent` ties the sandbox to the *thread* that called `start()` (the kernel's
parent-death signal follows the forking thread): keep that thread alive until `wait()` returns.
The command runs as pid 1 of its namespace (see BASE_FLAGS): when it exits, the kernel kills
whatever it left behind, and signals it has no handler for are ignored if sent from inside.
"""

from __future__ import annotations

import functools
import logging
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from vtb.sandbox import SANDBOXES
from vtb.sandbox import cgroup as cgroups
from vtb.sandbox.base import USAGE_FILE, Limits, Mount, SandboxResult, SandboxStartError
from vtb.sandbox.cgroup import CpuCgroup, MemoryCgroup
from vtb.sandbox.gpu import NvmlReader, sandbox_gpus
from vtb.sandbox.monitor import MonitoredProcess, run_to_end
from vtb.sandbox.nvidia import ensure_uvm, sys_binds
from vtb.sandbox.runtime import is_inside, masked_paths, sandbox_env, system_symlinks

log = logging.getLogger(__name__)

OUT_DIR = os.path.dirname(USAGE_FILE)  # per-process private host dir, rw inside
RESERVED = ("/proc", "/dev", OUT_DIR)
# Sandboxed code is uid 0 of a user namespace mapped onto the host uid. When that is root (as
# in CI containers), sysctl files only check the uid, so vm.*, kernel.* ... would be writable
# for the HOST. bwrap covers /proc/irq and /proc/bus itself; these we bind read-only (sysctls
# are still looked up in the sandbox's own namespaces, so its view stays its own).
PROC_READ_ONLY = ("/proc/sys", "/proc/sysrq-trigger")
# --as-pid-1: the command itself is pid 1 of the sandbox and bwrap waits for it directly. With
# bwrap's own reaper as pid 1 instead, bwrap exits without reaping that reaper, so the CPU time
# of every finished process would be lost to the wait4() rusage that meters short steps.
BASE_FLAGS = ("--unshare-all", "--as-pid-1", "--die-with-parent", "--new-session", "--cap-drop", "ALL")
# bwrap >= 0.8: no nested user namespaces, which would hand sandboxed code a fresh set of
# capabilities to attack the kernel with, and size caps on the RAM-backed tmpfs dirs (/tmp,
# /dev/shm). Both are dropped, the rest kept, on an older bwrap.
HARDEN_FLAGS = ("--unshare-user", "--disable-userns")
# NVIDIA device nodes: the control nodes every CUDA process needs, plus nvidia<N> per GPU.
DEV_DIR = "/dev"  # where they are looked up on the host (tests point it elsewhere)
SYS_DIR = "/sys"  # where the sysfs parts a GPU sandbox gets are looked up (nvidia.py; tests too)
NVIDIA_MODPROBE = "nvidia-modprobe"  # creates /dev/nvidia-uvm when the host has not used CUDA yet
NVIDIA_SHARED_NODES = ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset", "nvidia-caps")
INSTALL_HINT = "install bubblewrap (`apt-get install bubblewrap`) or use the docker backend"
USERNS_HINT = (
    "user namespaces must be allowed: e.g. `sysctl -w kernel.unprivileged_userns_clone=1` (Debian), "
    "`sysctl -w kernel.apparmor_restrict_unprivileged_userns=0` (Ubuntu >= 23.10), "
    "`sysctl -w user.max_user_namespaces=10000`; inside Docker start the container with "
    "`--security-opt seccomp=unconfined --security-opt apparmor=unconfined` (or --privileged)"
)


@functools.cache
def preflight(bwrap: str) -> bool:
    """Check once per binary that bwrap runs and can build namespaces; True if it can harden.

    Raises RuntimeError naming the problem and its fix, so a misconfigured host fails at
    startup rather than as a mysterious failure of every step.
    """
    exe = shutil.which(bwrap)
    if exe is None:
        raise RuntimeError(f"bubblewrap not found ({bwrap!r} is not on PATH): {INSTALL_HINT}")
    plain = [*BASE_FLAGS, "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev"]
    hardened = [*HARDEN_FLAGS, *plain, "--size", "1048576", "--tmpfs", "/tmp"]
    errors = []
    for flags in (hardened, plain):
        try:
            done = subprocess.run([exe, *flags, "--", "true"], capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise RuntimeError(f"bubblewrap ({exe}) could not be run: {e}; {INSTALL_HINT}") from e
        if done.returncode == 0:
            if flags is plain:
                log.warning(
                    "bubblewrap %s lacks --disable-userns/--size (needs >= 0.8): sandboxing without them", exe
                )
            return flags is hardened
        errors.append(done.stderr.strip() or f"exit code {done.returncode}")
    raise RuntimeError(f"bubblewrap ({exe}) cannot create namespaces ({errors[-1]}); {USERNS_HINT}")


# The mount namespace bwrap is started in: a private copy of the host's. bwrap makes its own
# mounts slaves of the namespace it starts in, so a host mount in a shared peer group (docker's
# root, a systemd host, someone's `mount --make-shared`) would show in /proc/self/mountinfo as
# "master:<host peer group id>", host state that changes between plays. Private: no such field,
# and no host mount made later propagates in. Needs CAP_SYS_ADMIN (root); without it, skipped.
PRIVATE_MOUNTS = ("--mount", "--propagation", "private")


@functools.cache
def private_mounts(unshare: str = "unshare") -> list[str]:
    """The prefix that starts bwrap in a private mount namespace (unshare execs it: same pid), or []."""
    exe = shutil.which(unshare)
    if exe is None:
        return []
    try:
        done = subprocess.run([exe, *PRIVATE_MOUNTS, "true"], capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return []
    if done.returncode != 0:
        log.info("sandbox mounts keep the host's propagation (unshare --mount needs root): %s", done.stderr)
        return []
    return [exe, *PRIVATE_MOUNTS]


def check_mount(m: Mount) -> None:
    """Reject mounts that would replace the root, hide the sandbox's own dirs or point nowhere."""
    t = m.target
    if not t.startswith("/") or t == "/" or os.path.normpath(t) != t:
        raise ValueError(f"mount target must be a normalised absolute path other than '/': {t!r}")
    if any(is_inside(t, r) for r in RESERVED):
        raise ValueError(f"mount target {t!r} is reserved by the sandbox ({', '.join(RESERVED)})")
    if not os.path.exists(m.source):
        raise ValueError(f"mount source {m.source} does not exist")


def nvidia_nodes(devices: list[int]) -> list[str]:
    """Names of the NVIDIA device nodes to bind for `devices`: those that exist under DEV_DIR.

    nvidia<N> is taken to be GPU N of NVML (minor number = index, as the driver numbers them
    in PCI order). A sandbox whose GPUs have no node still starts (its code then finds no GPU);
    the meter watches every GPU anyway, so a mismatch could hide a GPU but never its charge.
    """
    names = [*NVIDIA_SHARED_NODES, *(f"nvidia{i}" for i in devices)]
    return [n for n in names if os.path.exists(f"{DEV_DIR}/{n}")]


def _depth(m: Mount) -> int:
    return m.target.count("/")


def launcher(
    cgroup: CpuCgroup | None,
    memory_mb: int | None,
    pids: Path | None = None,
    memory: MemoryCgroup | None = None,
) -> list[str]:
    """A host shell that joins the cgroups (or sets RLIMIT_AS), then execs bwrap (same pid).

    Doing this in a shell rather than a Popen preexec_fn keeps Python's fast vfork path; the
    shell costs about a millisecond and only runs when there is something to set up. A cgroup
    shared by several roles (v2: see cgroup.py) is joined once.
    """
    steps, args = [], []
    if memory is not None:
        steps.append('echo 0 > "$1" || exit 125; shift')  # a memory cap must hold, or nothing runs
        args.append(memory.procs)
    if cgroup is not None and (memory is None or cgroup.path != memory.path):
        steps.append('{ echo 0 > "$1"; } 2>/dev/null; shift')  # best effort: /proc metering stays
        args.append(cgroup.procs)
    if pids is not None and (memory is None or pids != memory.path):
        steps.append('echo 0 > "$1" || exit 125; shift')  # a process cap must hold, or nothing runs
        args.append(str(pids / "cgroup.procs"))
    # RLIMIT_AS only where no memory cgroup holds the cap: it limits address space, not memory,
    # and CUDA and torch reserve far more virtual memory than they touch, so with it a GPU step
    # could not even start. The cgroup counts only what is really held.
    if memory_mb and memory is None:
        steps.append(f"ulimit -v {int(memory_mb) * 1024} || exit 125")  # KiB; soft and hard
    if not steps:
        return []
    return ["/bin/sh", "-c", "; ".join([*steps, 'exec "$@"']), "vtb-launch", *args]


@SANDBOXES.register("bwrap")
class BwrapSandbox:
    """`Sandbox` backed by bubblewrap.

    threads: OMP/MKL/BLAS/tokenizer threads (and VTB_THREADS, for torch) inside.
    max_stdout_chars: what `run()` keeps of stdout (head and tail); the rest is dropped.
    tmp_mb: size cap of each RAM-backed dir inside (/tmp, /dev/shm), where bwrap supports it;
    a Limits.memory_mb lowers it (see the module docstring for how memory is capped).
    memory_cgroup: cap Limits.memory_mb with a per-sandbox memory cgroup; None = wherever the
    host allows it, False = RLIMIT_AS per process and tmpfs sizes only.
    exact_cpu: also meter CPU with a per-sandbox cgroup (cgroup.py); None = wherever the host
    allows it. /proc metering alone misses short-lived children that are never waited for.
    gpus: None (no GPU, no NVIDIA device nodes), "all" or indices "0,1" (sandbox.gpus): those
    GPUs' device nodes are bound, CUDA_VISIBLE_DEVICES names them, and every process gets a
    GPU-seconds meter reading `gpu_reader` (default: NVML through pynvml, see gpu.py).
    """

    name = "bwrap"

    def __init__(
        self,
        threads: int = 1,
        bwrap: str = "bwrap",
        max_stdout_chars: int = 8 << 20,
        tmp_mb: int = 4096,
        exact_cpu: bool | None = None,
        gpus: str | None = None,
        gpu_reader: NvmlReader | None = None,
        memory_cgroup: bool | None = None,
        reproducible: bool = True,
    ) -> None:
        self.threads, self.reproducible = threads, reproducible
        self.max_stdout_chars = max_stdout_chars
        self.tmp_mb = tmp_mb
        self.hardened = preflight(bwrap)  # False on bwrap < 0.8: see HARDEN_FLAGS
        # Per-sandbox cgroups count the CPU of every process, even short-lived unwaited ones;
        # moving into one costs ~10 ms per start (a kernel lock), so it can be turned off.
        self.exact_cpu = (
            cgroups.create_allowed() if exact_cpu is None else exact_cpu and cgroups.create_allowed()
        )
        self.memory_cgroup = cgroups.memory_allowed() if memory_cgroup is None else bool(memory_cgroup)
        if not self.hardened and not self.memory_cgroup:
            log.warning(
                "bubblewrap %s cannot size /tmp: without memory cgroups it is not within memory_mb", bwrap
            )
        self._exe = shutil.which(bwrap) or bwrap
        self._gpu_set = sandbox_gpus(gpus, gpu_reader)
        self.gpus = self._gpu_set.ids if self._gpu_set is not None else None
        if self.gpus is not None:
            for ran in ensure_uvm(DEV_DIR, NVIDIA_MODPROBE):  # a missing one fails here, naming the fix
                log.info("created /dev/nvidia-uvm: %s", ran)
        if self.gpus is not None and not nvidia_nodes(self.gpus):
            log.warning(
                "sandbox.gpus=%s: no NVIDIA device nodes under %s; code inside will see no GPU", gpus, DEV_DIR
            )

    def env(self, limits: Limits, env: dict[str, str] | None) -> dict[str, str]:
        if self.gpus is None:
            return sandbox_env(self.threads, limits, env, self.reproducible)
        # PCI order makes CUDA's device numbers NVML's (and the device nodes'); a caller's own
        # CUDA_VISIBLE_DEVICES (e.g. "" for a CPU-only step) wins.
        visible = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": ",".join(map(str, self.gpus))}
        return sandbox_env(self.threads, limits, {**visible, **(env or {})}, self.reproducible)

    def tmpfs_mb(self, memory_mb: int | None, capped: bool) -> int:
        """Size of /tmp and of /dev/shm each: within the memory cap (half of it without a cgroup)."""
        if not memory_mb:
            return self.tmp_mb
        return max(1, min(self.tmp_mb, int(memory_mb) if capped else int(memory_mb) // 2))

    def command(
        self, argv: list[str], mounts: list[Mount], cwd: str, out_dir: Path, tmp_mb: int | None = None
    ) -> list[str]:
        """The bwrap command line; parents are mounted before what is mounted inside them."""
        cmd = [self._exe, *(HARDEN_FLAGS if self.hardened else ()), *BASE_FLAGS, "--hostname", "vtb"]
        cmd += ["--proc", "/proc", "--dev", "/dev"]
        if self.gpus is not None:
            for node in nvidia_nodes(self.gpus):
                cmd += ["--dev-bind", f"{DEV_DIR}/{node}", f"/dev/{node}"]
            for source, target in sys_binds(SYS_DIR):  # cuInit and NVML read these (nvidia.py)
                cmd += ["--ro-bind", source, target]
        if self.hardened:
            size = str((tmp_mb or self.tmp_mb) << 20)
            cmd += ["--size", size, "--tmpfs", "/tmp", "--size", size, "--tmpfs", "/dev/shm"]
        else:
            cmd += ["--tmpfs", "/tmp"]
        for p in PROC_READ_ONLY:
            if os.path.exists(p):
                cmd += ["--ro-bind", p, p]
        for link, path in system_symlinks():
            cmd += ["--symlink", link, path]
        for m in sorted(mounts, key=_depth):
            cmd += ["--bind" if m.writable else "--ro-bind", str(m.source), m.target]
        files, dirs = masked_paths(mounts)
        for f in files:
            cmd += ["--ro-bind", "/dev/null", f]
        for d in dirs:
            cmd += ["--tmpfs", d, "--remount-ro", d]
        cmd += ["--bind", str(out_dir), OUT_DIR, "--remount-ro", "/", "--chdir", cwd, "--", *argv]
        return cmd

    def start(
        self,
        argv: list[str],
        *,
        mounts: list[Mount],
        limits: Limits,
        cwd: str = "/",
        env: dict[str, str] | None = None,
    ) -> MonitoredProcess:
        if not argv:
            raise ValueError("empty argv")
        for m in mounts:
            check_mount(m)
        if not os.access(self._exe, os.X_OK):  # the launcher shell would only exit 127
            raise SandboxStartError(f"bubblewrap is gone: {self._exe} is not executable")
        try:
            out_dir = Path(tempfile.mkdtemp(prefix="vtb-out-"))
        except OSError as e:
            raise SandboxStartError(f"no private output dir for the sandbox: {e}") from e
        memory = cgroups.create_memory(limits.memory_mb) if limits.memory_mb and self.memory_cgroup else None
        if memory is None and limits.memory_mb and self.memory_cgroup:
            log.warning("no memory cgroup for this sandbox: RLIMIT_AS and tmpfs sizes cap it instead")
        cgroup = cgroups.create(share=memory) if self.exact_cpu else None
        # Where the host allows it a pids cgroup caps the tree (fork fails past it); elsewhere
        # the monitor kills a tree that grows past the cap at its next poll.
        pids = cgroups.create_pids(limits.max_processes, share=memory) if limits.max_processes else None
        try:
            tmp_mb = self.tmpfs_mb(limits.memory_mb, memory is not None)
            rlimit_mb = limits.memory_mb if self.gpus is None else None
            cmd = [
                *launcher(cgroup, rlimit_mb, pids, memory),
                *private_mounts(),
                *self.command(argv, mounts, cwd, out_dir, tmp_mb),
            ]
            rfd, wfd = os.pipe()
            try:
                started = time.monotonic()
                popen = subprocess.Popen(
                    cmd,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=wfd,
                    env=self.env(limits, env),
                    text=True,
                    encoding="utf-8",
                    errors="replace",
                    bufsize=1,
                )
            except OSError as e:  # fork failed, bwrap vanished, ...: the host's fault, worth a retry
                os.close(rfd)
                raise SandboxStartError(f"could not start bubblewrap: {e}") from e
            except BaseException:
                os.close(rfd)
                raise
            finally:
                os.close(wfd)  # else the stderr reader would never see EOF
        except BaseException:
            shutil.rmtree(out_dir, ignore_errors=True)
            if cgroup is not None:
                cgroup.close()
            if pids is not None:
                cgroups.remove(pids)
            if memory is not None:
                memory.close()
            raise
        gpu = self._gpu_set.meter(started) if self._gpu_set is not None else None
        return MonitoredProcess(popen, rfd, limits, out_dir, started, cgroup, pids, gpu, memory)

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
