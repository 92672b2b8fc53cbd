"""Find, meter and kill a sandbox's process tree from outside, through the host's /proc.

Nothing inside the sandbox can change what the host kernel reports here, which is why
CPU-seconds are metered this way rather than by anything running in the sandbox.
"""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass

CLK_TCK = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class ProcStat:
    pid: int
    ppid: int
    start: int  # start time in clock ticks since boot: tells a live pid from a reused one
    ticks: int  # utime + stime + cutime + cstime


def read_stat(pid: int) -> ProcStat | None:
    """One process's /proc/<pid>/stat, or None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: split after its last ')'.
    rest = raw[raw.rfind(b")") + 2 :].split()
    try:
        ticks = int(rest[11]) + int(rest[12]) + int(rest[13]) + int(rest[14])
        return ProcStat(pid, int(rest[1]), int(rest[19]), ticks)
    except (IndexError, ValueError):
        return None


def tree(root: int) -> list[ProcStat]:
    """`root` and all its live descendants, found by their parent pids."""
    children: dict[int, list[ProcStat]] = {}
    top = None
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        st = read_stat(int(name))
        if st is None:
            continue
        if st.pid == root:
            top = st
        children.setdefault(st.ppid, []).append(st)
    if top is None:
        return []
    found, todo = [top], [root]
    while todo:
        for child in children.get(todo.pop(), ()):
            found.append(child)
            todo.append(child.pid)
    return found


def cpu_seconds(procs: list[ProcStat]) -> float:
    """CPU used by a tree: each live process's own time plus that of the children it reaped.

    A dead child that was reaped lives on in its reaper's cutime/cstime, and a live one is
    only counted by itself, so nothing is counted twice.
    """
    return sum(p.ticks for p in procs) / CLK_TCK


def kill(procs: list[ProcStat]) -> None:
    """SIGKILL each process that is still the one we saw (same start time, so no reused pid)."""
    for p in procs:
        now = read_stat(p.pid)
        if now is None or now.start != p.start:
            continue
        try:
            os.kill(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
