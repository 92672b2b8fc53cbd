"""A started sandbox process, watched from outside: limits, reaping, cleanup and its result.

One monitor thread per process reaps it the moment it exits (through a pidfd, so a short
step pays no polling delay) and every POLL_S checks wall time, the CPU-seconds of the whole
process tree, its GPU-seconds (NVML, when the sandbox has GPUs: gpu.py) and the FLOPs the
engines report; on any excess it SIGKILLs the tree. The
backend only has to build the command line (see bwrap.py).

Known gap of /proc metering: a child that lives less than POLL_S and is auto-reaped (its
parent ignores SIGCHLD) takes its CPU time with it. The wall limit still bounds such a step;
cgroup CPU accounting would close the gap where the host lets us create cgroups.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import stat
import subprocess
import threading
import time
import weakref
from pathlib import Path

from vtb.ledger import checked
from vtb.sandbox import proctree
from vtb.sandbox.base import Limits, SandboxResult
from vtb.sandbox.cgroup import CpuCgroup, MemoryCgroup
from vtb.sandbox.cgroup import remove as remove_cgroup
from vtb.sandbox.gpu import GpuMeter
from vtb.sandbox.output import StderrCollector, read_bounded

POLL_S = 0.2
MAX_USAGE_BYTES = 1 << 20


def read_usage(path: Path) -> dict:
    """The usage file the engines write, or {} when it is missing, huge, not a plain file or not a JSON object.

    Sandboxed code writes it, so it is opened without following a link or blocking on a FIFO,
    read at most MAX_USAGE_BYTES, and its numbers are only trusted after `ledger.checked`.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return {}
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return {}
        raw = os.read(fd, MAX_USAGE_BYTES + 1)
        if len(raw) > MAX_USAGE_BYTES:
            return {}
        data = json.loads(raw)
    except (OSError, ValueError, RecursionError):
        return {}
    finally:
        os.close(fd)
    return data if isinstance(data, dict) else {}


def _flops(usage: dict) -> float:
    """The FLOPs reported so far, for the in-step limit; a bad figure counts 0 (the CPU cap still holds)."""
    return checked(usage.get("flops", 0.0), "flops")[0]


def _pidfd(pid: int) -> int | None:
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None  # old kernel: fall back to polling wait4 every 10 ms


class MonitoredProcess:
    """Implements `SandboxProcess` for a sandbox launcher process (e.g. bwrap) we started.

    `stdin`/`stdout` are the caller's: `wait()` never reads stdout (a reader thread may own
    it), so its result has stdout="" unless it came through `run_to_end`. Killing targets
    the launcher and every descendant, so the whole sandbox dies with it.
    """

    def __init__(
        self,
        popen: subprocess.Popen,
        stderr_fd: int,
        limits: Limits,
        out_dir: Path,
        started: float,
        cgroup: CpuCgroup | None = None,
        pids_cgroup: Path | None = None,
        gpu: GpuMeter | None = None,
        memory: MemoryCgroup | None = None,
    ) -> None:
        self._popen = popen
        self.stdin = popen.stdin
        self.stdout = popen.stdout
        self._limits = limits
        self._usage_path = out_dir / "usage.json"
        self._out_dir = out_dir
        self._cleanup = weakref.finalize(self, shutil.rmtree, out_dir, True)
        self._started = started
        self._cgroup = cgroup
        self._pids_cgroup = pids_cgroup
        self._gpu = gpu
        self._memory = memory  # the sandbox's memory cgroup: an OOM kill there is killed="memory"
        self._stderr = StderrCollector(stderr_fd)
        self._lock = threading.RLock()
        self._done = threading.Event()
        self._returncode: int | None = None
        self._ended: float | None = None
        self._rusage_cpu = 0.0
        self._polled_cpu = 0.0
        self._last_tree: list[proctree.ProcStat] = []
        self._killed: str | None = None
        self._result: SandboxResult | None = None
        threading.Thread(target=self._watch, name="vtb-sandbox-monitor", daemon=True).start()

    # -- the SandboxProcess protocol ---------------------------------------------------------

    def poll(self) -> int | None:
        return self._returncode if self._done.is_set() else None

    def wait(self, timeout: float | None = None) -> SandboxResult:
        """Wait for the end; past `timeout` the tree is killed with killed="wall"."""
        wait_or_kill(self._done, self.kill, timeout)
        return self._finish()

    def kill(self, reason: str = "closed") -> None:
        """SIGKILL the whole tree; `reason` becomes `killed` unless a limit already fired."""
        with self._lock:
            if self._returncode is not None:
                return
            if self._killed is None:
                self._killed = reason
            proctree.kill(proctree.tree(self._popen.pid))
            try:  # bwrap itself, even if it was not visible in /proc for a moment
                os.kill(self._popen.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    # -- monitoring --------------------------------------------------------------------------

    def _watch(self) -> None:
        pidfd = _pidfd(self._popen.pid)
        wall_deadline = self._started + self._limits.wall_seconds
        next_poll = self._started + POLL_S
        try:
            while not self._reap():
                now = time.monotonic()
                if self._killed is None:
                    if now >= wall_deadline:
                        self.kill("wall")
                    elif now >= next_poll:
                        self._check_limits()
                        next_poll = now + POLL_S
                # Once killed, only the reaping is left: no more checks, no busy loop.
                wake = min(next_poll, wall_deadline) if self._killed is None else now + POLL_S
                pause = max(0.0, wake - time.monotonic())
                if pidfd is not None:
                    select.select([pidfd], [], [], pause)
                else:
                    time.sleep(min(pause, 0.01))
            # The pid namespace dies with bwrap; this only catches anything that outlived it.
            proctree.kill(self._last_tree)
            if self._gpu is not None:  # the last interval: charged if the tree held a GPU before it
                self._gpu.sample({p.pid for p in self._last_tree}, self._ended or time.monotonic())
            # Read before any cgroup is removed: on v2 the CPU and pids roles share this one.
            if self._memory is not None and self._killed is None and self._memory.oom_killed():
                self._killed = "memory"  # the tree went past its cap between two polls
            if self._cgroup is not None:
                self._polled_cpu = max(self._polled_cpu, self._cgroup.close())
            if self._pids_cgroup is not None:
                remove_cgroup(self._pids_cgroup)
            if self._memory is not None:
                self._memory.close()
        finally:
            if pidfd is not None:
                os.close(pidfd)
            self._done.set()

    def _check_limits(self) -> None:
        try:
            procs = proctree.tree(self._popen.pid)
        except OSError:
            return
        if procs:
            self._last_tree = procs
            self._polled_cpu = max(self._polled_cpu, proctree.cpu_seconds(procs))
        if self._cgroup is not None:
            self._polled_cpu = max(self._polled_cpu, self._cgroup.cpu_seconds())
        if self._gpu is not None:
            self._gpu.sample({p.pid for p in procs}, time.monotonic())
        if self._memory is not None and self._memory.oom_killed():
            self.kill("memory")  # v1 kills one process: the rest of the tree goes with it
        elif self._polled_cpu > self._limits.cpu_seconds:
            self.kill("cpu")
        elif self._limits.max_processes is not None and self._over_process_cap(procs):
            self.kill("procs")
        elif self._gpu is not None and self._gpu.over(self._limits.gpu_seconds):
            self.kill("gpu")
        elif self._limits.max_flops is not None:
            if _flops(read_usage(self._usage_path)) > self._limits.max_flops:
                self.kill("flops")

    def _over_process_cap(self, procs: list) -> bool:
        """A fork refused by the pids cgroup, or (without one) more live processes than allowed."""
        if self._pids_cgroup is not None:
            try:
                events = (self._pids_cgroup / "pids.events").read_text().split()
                return int(events[events.index("max") + 1]) > 0
            except (OSError, ValueError, IndexError):
                return False
        return len(procs) > self._limits.max_processes + 2  # + 2: launcher and bwrap, outside

    def _reap(self) -> bool:
        with self._lock:
            if self._returncode is not None:
                return True
            try:
                pid, status, rusage = os.wait4(self._popen.pid, os.WNOHANG)
            except ChildProcessError:  # reaped elsewhere: nothing more to learn
                pid, status, rusage = self._popen.pid, 255 << 8, None
            if pid == 0:
                return False
            self._ended = time.monotonic()
            self._returncode = os.waitstatus_to_exitcode(status)
            self._popen.returncode = self._returncode  # keeps Popen from waiting on a reused pid
            if rusage is not None:
                self._rusage_cpu = rusage.ru_utime + rusage.ru_stime
            return True

    def _finish(self) -> SandboxResult:
        with self._lock:
            if self._result is None:
                stderr = self._stderr.result()
                usage = read_usage(self._usage_path)
                self._cleanup()
                self._result = SandboxResult(
                    returncode=self._returncode,
                    stdout="",
                    stderr=stderr,
                    wall_seconds=(self._ended or time.monotonic()) - self._started,
                    cpu_seconds=max(self._polled_cpu, self._rusage_cpu),
                    killed=self._killed,
                    usage=usage,
                    denials=list(self._stderr.denials),
                    gpu_seconds=self._gpu.gpu_seconds if self._gpu is not None else 0.0,
                    gpu_busy_seconds=self._gpu.busy_seconds if self._gpu is not None else 0.0,
                )
            return self._result


def wait_or_kill(done: threading.Event, kill, timeout: float | None) -> None:
    """Wait until `done` is set (the monitor reaped the process); past `timeout`, kill("wall") first.

    Shared by every backend's `SandboxProcess.wait`: the kill goes through the backend, the
    result is read only after the monitor has finished with the process.
    """
    if not done.wait(timeout):
        kill("wall")
        done.wait()


def run_to_end(proc: MonitoredProcess, input: str | None, max_stdout_chars: int) -> SandboxResult:
    """Feed `input`, collect stdout and wait; a writer thread keeps big in- and outputs flowing."""
    writer = None
    if input:
        writer = threading.Thread(target=_feed, args=(proc.stdin, input), daemon=True)
        writer.start()
    else:
        _close(proc.stdin)
    try:
        stdout = read_bounded(proc.stdout, max_stdout_chars)
    finally:
        _close(proc.stdout)
    result = proc.wait()
    if writer is not None:
        writer.join(5.0)
    result.stdout = stdout
    return result


def _feed(stream, text: str) -> None:
    try:
        stream.write(text)
    except (OSError, ValueError):
        pass  # the process exited or closed its stdin early: its business
    _close(stream)


def _close(stream) -> None:
    try:
        stream.close()
    except (OSError, ValueError):
        pass
