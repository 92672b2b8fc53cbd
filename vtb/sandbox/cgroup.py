"""Per-sandbox cgroups, where the host lets us create them: exact CPU metering, caps on tasks and memory.

/proc metering (proctree) cannot see a child that lives less than one poll and is never
waited for (its parent ignores SIGCHLD): its CPU time vanishes with it, so hostile code
could spend CPU past the limit. A cgroup counts every process that ever ran in it. It is
used in addition to /proc metering, never instead; without one (e.g. inside a Docker
container with a read-only /sys/fs/cgroup) the /proc figures stand alone.

A memory cgroup caps everything the sandbox holds at once: its processes' pages and the
tmpfs pages (/tmp, /dev/shm) they write, which are charged to the writer's cgroup. On cgroup
v2 a process sits in exactly one cgroup, so the CPU, pids and memory roles share the memory
cgroup there (`share=`) instead of each taking the process away from the other.
"""

from __future__ import annotations

import functools
import os
import time
import uuid
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class CpuCgroup:
    path: Path
    usage_file: str  # "cpu.stat" (v2, usage_usec) or "cpuacct.usage" (v1, nanoseconds)

    @property
    def procs(self) -> str:
        """Write "0" here to move the writing process (and its future children) in."""
        return str(self.path / "cgroup.procs")

    def cpu_seconds(self) -> float:
        try:
            text = (self.path / self.usage_file).read_text()
        except OSError:
            return 0.0
        if self.usage_file == "cpuacct.usage":
            return int(text) / 1e9
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key == "usage_usec":
                return int(value) / 1e6
        return 0.0

    def close(self, timeout: float = 2.0) -> float:
        """Final CPU-seconds, once the last process has left; then remove the cgroup.

        Killed processes may take a moment to exit; an empty cgroup left behind after the
        timeout is harmless.
        """
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if not Path(self.procs).read_text().strip():
                    break
            except OSError:
                break
            time.sleep(0.01)
        used = self.cpu_seconds()
        try:
            self.path.rmdir()
        except OSError:
            pass
        return used


def _own_dir(fstype: str, opts_has: str | None) -> Path | None:
    """Where this process's cgroup lives in the hierarchy of the given kind, if mounted."""
    own = {}
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        own[controllers] = path
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        fields, rfields = left.split(), right.split()
        if rfields[0] != fstype:
            continue
        if fstype == "cgroup2":
            path = own.get("")
        else:
            if opts_has not in rfields[2].split(","):
                continue
            path = next((p for c, p in own.items() if opts_has in c.split(",")), None)
        if path is None:
            continue
        root, mountpoint = fields[3], fields[4]
        if not (path == root or path.startswith(root.rstrip("/") + "/")):
            continue  # our cgroup is outside what this mount shows
        return Path(mountpoint) / path[len(root) :].lstrip("/")
    return None


def _writable_child(fstype: str, opt: str | None, needs: str) -> Path | None:
    """Our cgroup dir in that hierarchy, if we may create a child there that has `needs` and joinable procs."""
    try:
        base = _own_dir(fstype, opt)
        if base is None:
            return None
        probe = base / f"vtb-probe-{uuid.uuid4().hex[:8]}"
        probe.mkdir()
        ok = (probe / needs).exists() and os.access(probe / "cgroup.procs", os.W_OK)
        probe.rmdir()
        return base if ok else None
    except (OSError, ValueError, IndexError):
        return None


@functools.cache
def _parent() -> tuple[Path, str] | None:
    """The first hierarchy in which we may create (and remove) a child cgroup, found once."""
    for fstype, opt, usage in (("cgroup2", None, "cpu.stat"), ("cgroup", "cpuacct", "cpuacct.usage")):
        base = _writable_child(fstype, opt, usage)
        if base is not None:
            return base, usage
    return None


def create_allowed() -> bool:
    """Whether this host lets us create cgroups to meter sandboxes with (checked once)."""
    return _parent() is not None


def create(share: MemoryCgroup | None = None) -> CpuCgroup | None:
    """A fresh cgroup for one sandbox, or None where the host does not let us make one.

    share: the sandbox's memory cgroup; if it is in the same hierarchy (v2), it is metered.
    """
    parent = _parent()
    if parent is None:
        return None
    if share is not None and share.path.parent == parent[0]:
        return CpuCgroup(share.path, parent[1])
    path = parent[0] / f"vtb-sandbox-{uuid.uuid4().hex}"
    try:
        path.mkdir()
    except OSError:
        return None
    return CpuCgroup(path, parent[1])


# --- a cap on the number of tasks (fork bombs) -------------------------------------------------


@functools.cache
def _pids_parent() -> Path | None:
    """Where we may create pids cgroups (v2 with the pids controller, or v1's pids hierarchy)."""
    for fstype, opt in (("cgroup2", None), ("cgroup", "pids")):
        base = _writable_child(fstype, opt, "pids.max")
        if base is not None:
            return base
    return None


def create_pids(max_tasks: int, share: MemoryCgroup | None = None) -> Path | None:
    """A fresh pids cgroup capped at max_tasks (fork() fails past it), or None where not allowed.

    share: the sandbox's memory cgroup; if it is in the same hierarchy (v2), it gets the cap.
    """
    parent = _pids_parent()
    if parent is None:
        return None
    if share is not None and share.path.parent == parent:
        try:
            (share.path / "pids.max").write_text(str(int(max_tasks)))
            return share.path
        except OSError:
            return None
    path = parent / f"vtb-pids-{uuid.uuid4().hex}"
    try:
        path.mkdir()
        (path / "pids.max").write_text(str(int(max_tasks)))
    except OSError:
        remove(path)
        return None
    return path


def remove(path: Path, timeout: float = 2.0) -> None:
    """Remove a cgroup once its processes are gone (an empty one left behind is harmless)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            path.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.01)


# --- one memory cap for everything a sandbox holds ---------------------------------------------

MAX_CONTROL_BYTES = 4096  # the control files we read are a few lines


@dataclass(frozen=True)
class MemoryCgroup:
    """A memory cgroup capping a whole sandbox: its processes and the tmpfs pages they write."""

    path: Path
    v2: bool  # cgroup v2 (memory.max) or v1 (memory.limit_in_bytes)

    @property
    def procs(self) -> str:
        return str(self.path / "cgroup.procs")

    def _counters(self, name: str) -> dict[str, int]:
        try:
            with open(self.path / name, "rb") as f:
                text = f.read(MAX_CONTROL_BYTES).decode("ascii", "replace")
        except OSError:
            return {}
        out = {}
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if value.strip().isdigit():
                out[key] = int(value)
        return out

    def oom_killed(self) -> bool:
        """Whether the kernel's OOM killer fired in here: the sandbox went past its cap."""
        if self.v2:
            events = self._counters("memory.events")
            return events.get("oom_kill", 0) > 0 or events.get("oom_group_kill", 0) > 0
        return self._counters("memory.oom_control").get("oom_kill", 0) > 0

    def peak_mb(self) -> float:
        """The most this cgroup held at once, in MiB (0 where the kernel does not say)."""
        name = "memory.peak" if self.v2 else "memory.max_usage_in_bytes"
        try:
            return int((self.path / name).read_text()) / (1 << 20)
        except (OSError, ValueError):
            return 0.0

    def close(self, timeout: float = 2.0) -> None:
        remove(self.path, timeout)


@functools.cache
def _memory_parent() -> tuple[Path, bool] | None:
    """Where we may create memory cgroups: v2 with the memory controller, or v1's memory hierarchy."""
    for fstype, opt, needs in (
        ("cgroup2", None, "memory.max"),
        ("cgroup", "memory", "memory.limit_in_bytes"),
    ):
        base = _writable_child(fstype, opt, needs)
        if base is not None:
            return base, fstype == "cgroup2"
    return None


def memory_allowed() -> bool:
    """Whether this host lets us cap a sandbox's memory with a cgroup (checked once)."""
    return _memory_parent() is not None


def create_memory(memory_mb: int) -> MemoryCgroup | None:
    """A fresh memory cgroup capped at memory_mb with no swap, or None where not allowed.

    v2: memory.oom.group=1, so an OOM kill takes the whole tree at once. v1 has no such switch:
    the kernel kills one process and the monitor kills the rest at its next poll.
    """
    parent = _memory_parent()
    if parent is None:
        return None
    base, v2 = parent
    path = base / f"vtb-mem-{uuid.uuid4().hex}"
    limit = str(int(memory_mb) << 20)
    try:
        path.mkdir()
        if v2:
            (path / "memory.max").write_text(limit)
            _write_if_there(path / "memory.swap.max", "0")  # absent without swap accounting
            _write_if_there(path / "memory.oom.group", "1")  # absent before Linux 4.19
        else:
            (path / "memory.limit_in_bytes").write_text(limit)
            _write_if_there(path / "memory.memsw.limit_in_bytes", limit)  # memory + swap: no swap
    except OSError:
        remove(path)
        return None
    return MemoryCgroup(path, v2)


def _write_if_there(path: Path, value: str) -> None:
    if path.exists():
        path.write_text(value)
