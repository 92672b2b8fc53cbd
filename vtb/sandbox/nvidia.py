"""What a bwrap sandbox given GPUs needs from the host besides its /dev/nvidia* nodes.

**sysfs, read-only.** A bwrap root is empty, so without these CUDA cannot start
(`cuInit` returns CUDA_ERROR_OPERATING_SYSTEM, torch sees no GPU) and NVML reports the GPU
"blocked by the operating system". What the NVIDIA user-space driver reads there, as traced in
public reports (bubblejail#123, systemd#38018, a cuda-checkpoint strace, and a bwrap probe of
`cuInit` that works once sysfs is bound and fails with 304 without it):

- `/sys/module/nvidia*/` (`initstate`, parameters, version): the driver is loaded. Missing, the
  library assumes it is not and tries to load it, which a sandbox cannot.
- `/sys/bus/pci/devices/<bdf>`: the GPUs' PCI functions, symlinks into `/sys/devices`.
- `/sys/devices`: those links' targets and `/sys/devices/system/{cpu,node}` (NUMA placement).
- `/sys/class` and `/sys/dev`: indexes of `/sys/devices` (symlinks into it, besides a few
  class-level control files, read-only here), bound so lookups by class or device number resolve.

Not bound: `/sys/fs` (cgroups, bpf), `/sys/kernel` (debugfs, tracing, security), `/sys/firmware`,
`/sys/power` and every other module's parameters. The device tree is host hardware description,
not benchmark data: nothing in it can reveal a hidden split. All of it is read-only (bwrap remounts
submounts read-only too), so a sandbox running as the host's root still cannot write a sysfs knob.

**/dev/nvidia-uvm.** The driver creates it (and nvidia-uvm-tools) only when the host first uses
CUDA; CUDA needs it, and a sandbox cannot create device nodes. `ensure_uvm` creates it with
`nvidia-modprobe -u -c=0` (setuid root, part of the driver) or fails naming that fix, before the
sandbox binds the nodes that exist.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess

SYS_SUBTREES = ("bus", "class", "dev", "devices")  # below /sys, besides the nvidia modules
UVM_NODES = ("nvidia-uvm", "nvidia-uvm-tools")
UVM_HINT = (
    "CUDA needs /dev/nvidia-uvm, which the NVIDIA driver creates only when the host first uses CUDA: "
    "run `sudo nvidia-modprobe -u -c=0` once after boot (or any CUDA program on the host, e.g. "
    "`.venv/bin/python -c \"import torch; torch.zeros(1, device='cuda')\"`)"
)


def sys_binds(sys_dir: str = "/sys") -> list[tuple[str, str]]:
    """(host path, sandbox path) pairs to bind read-only for CUDA and NVML; those that exist."""
    modules = sorted(glob.glob(os.path.join(sys_dir, "module", "nvidia*")))
    paths = [*modules, *(os.path.join(sys_dir, d) for d in SYS_SUBTREES)]
    return [(p, "/sys" + p[len(sys_dir) :]) for p in paths if os.path.isdir(p)]


def ensure_uvm(dev_dir: str = "/dev", modprobe: str = "nvidia-modprobe") -> list[str]:
    """Make sure /dev/nvidia-uvm exists where a driver does (nvidiactl there); the commands run.

    Raises RuntimeError naming the fix when it is missing and `nvidia-modprobe` is not there or
    does not create it. A host without nvidiactl has no NVIDIA driver nodes at all: nothing to do
    (the sandbox then starts without GPU nodes, as before).
    """
    if not os.path.exists(os.path.join(dev_dir, "nvidiactl")):
        return []
    if os.path.exists(os.path.join(dev_dir, UVM_NODES[0])):
        return []
    exe = shutil.which(modprobe)
    if exe is None:
        raise RuntimeError(f"{dev_dir}/nvidia-uvm is missing and {modprobe} is not on PATH; {UVM_HINT}")
    argv = [exe, "-u", "-c=0"]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise RuntimeError(f"{' '.join(argv)} failed ({e}); {UVM_HINT}") from e
    if not os.path.exists(os.path.join(dev_dir, UVM_NODES[0])):
        why = (done.stderr or done.stdout).strip()[-300:] or f"exit code {done.returncode}"
        raise RuntimeError(f"{' '.join(argv)} did not create {dev_dir}/nvidia-uvm ({why}); {UVM_HINT}")
    return [" ".join(argv)]
