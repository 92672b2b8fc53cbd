"""GPU-seconds, metered from outside the sandbox through NVML.

A GPU-second here is one second during which a GPU was *held* by a step's process tree: some
process of the tree had a context on it (NVML lists it among that GPU's compute or graphics
processes). That is allocation time, the unit PostTrainBench budgets in (H100-hours), not
kernel time: a step that holds a GPU and idles on it is charged, because nobody else can use
that GPU meanwhile, and a utilization figure is a device-wide sample that code could game by
spinning. Busy-seconds (interval x NVML utilization) are kept next to it, for information only.

NVML is asked by the orchestrator on the host, about host pids, so nothing inside the sandbox
can change what it reports (as with /proc for CPU-seconds). The meter samples at the sandbox's
poll interval; like /proc metering it misses a process that takes a GPU and lets it go again
between two samples (CUDA start-up alone takes longer than a poll, so real steps are seen).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

log = logging.getLogger(__name__)

NVML_HINT = (
    "install the `gpu` extra (`.venv/bin/pip install -e '.[gpu]'`, i.e. nvidia-ml-py) on a host "
    "with an NVIDIA driver, or drop sandbox.gpus (and use budget.unit=flops or cpu_seconds)"
)


class NvmlReader(Protocol):
    """What the meter needs from NVML; tests substitute a fake one."""

    def device_count(self) -> int: ...

    def compute_pids(self, index: int) -> set[int]:
        """Host pids holding a context on GPU `index` (NVML compute + graphics processes)."""
        ...

    def utilization(self, index: int) -> float:
        """GPU `index`'s utilization in percent (0-100), as NVML last sampled it."""
        ...


class PynvmlReader:
    """The real `NvmlReader`, through `pynvml` (PyPI: nvidia-ml-py), imported only when used."""

    def __init__(self) -> None:
        try:
            import pynvml
        except ImportError as e:
            raise RuntimeError(f"sandbox.gpus is set but pynvml is not installed: {NVML_HINT}") from e
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as e:
            raise RuntimeError(
                f"sandbox.gpus is set but NVML does not start ({e}): no NVIDIA driver? {NVML_HINT}"
            ) from e
        self._nvml = pynvml
        self._handles: dict[int, object] = {}

    def _handle(self, index: int):
        if index not in self._handles:
            self._handles[index] = self._nvml.nvmlDeviceGetHandleByIndex(index)
        return self._handles[index]

    def device_count(self) -> int:
        return int(self._nvml.nvmlDeviceGetCount())

    def compute_pids(self, index: int) -> set[int]:
        nvml, handle = self._nvml, self._handle(index)
        pids = {p.pid for p in nvml.nvmlDeviceGetComputeRunningProcesses(handle)}
        try:
            pids |= {p.pid for p in nvml.nvmlDeviceGetGraphicsRunningProcesses(handle)}
        except nvml.NVMLError_NotSupported:
            pass  # compute-only boards (most data-centre GPUs) have no graphics processes
        return pids

    def utilization(self, index: int) -> float:
        return float(self._nvml.nvmlDeviceGetUtilizationRates(self._handle(index)).gpu)


@functools.cache
def default_reader() -> PynvmlReader:
    """One NVML session per orchestrator process, shared by every sandbox (NVML is thread-safe)."""
    return PynvmlReader()


def parse_gpus(spec: str | int | None, reader: NvmlReader | None = None) -> list[int] | None:
    """sandbox.gpus as device indices: None -> None (no GPU), "all" -> every device, "0,1" -> [0, 1].

    With a reader, indices are checked against the devices it sees ("all" needs one).
    """
    if spec is None or str(spec).strip() == "":
        return None
    text = str(spec).strip()
    if text.lower() == "all":
        if reader is None:
            raise ValueError("sandbox.gpus=all needs an NVML reader to count the devices")
        ids = list(range(reader.device_count()))
        if not ids:
            raise ValueError(f"sandbox.gpus=all but NVML sees no GPU on this host; {NVML_HINT}")
        return ids
    ids = []
    for part in text.split(","):
        part = part.strip()
        if not part.isdigit():
            raise ValueError(
                f"sandbox.gpus={spec!r}: expected 'all' or device indices like '0,1', got {part!r}"
            )
        if int(part) in ids:
            raise ValueError(f"sandbox.gpus={spec!r}: device {part} is listed twice")
        ids.append(int(part))
    if reader is not None:
        count = reader.device_count()
        missing = [i for i in ids if i >= count]
        if missing:
            raise ValueError(f"sandbox.gpus={spec!r}: no device {missing} (NVML sees {count} GPUs)")
    return ids


class GpuMeter:
    """GPU-seconds of one sandboxed process tree, from NVML samples taken by the sandbox's monitor.

    Each `sample` charges, for every metered device, the interval since the previous sample
    when a pid of the step held a context on it at EITHER end of that interval: a GPU taken
    between two samples is charged from the earlier one, and one let go is charged until the
    later one. So a step that holds a GPU throughout is charged its full wall time, to within
    one poll, and never less. Backends meter every device on the host (not only the selected
    ones), so a step that reaches another GPU is charged for it too.
    """

    def __init__(self, reader: NvmlReader, devices: Iterable[int], started: float | None = None) -> None:
        self.reader = reader
        self.devices = list(devices)
        self.gpu_seconds = 0.0  # summed over devices: two GPUs held for 1 s are 2 GPU-seconds
        self.busy_seconds = 0.0  # interval x utilization/100: informational, not enforced
        self.devices_used: set[int] = set()
        self._last = started
        self._held = dict.fromkeys(self.devices, False)
        self._warned = False

    def sample(self, pids: set[int], now: float) -> float:
        """Charge the interval since the last sample (or the start); returns gpu_seconds so far."""
        held = {}
        for d in self.devices:
            try:
                held[d] = bool(self.reader.compute_pids(d) & pids)
            except Exception as e:  # noqa: BLE001 (a failed query must not kill the monitor thread)
                held[d] = self._held[d]  # unknown: assume nothing changed since the last sample
                if not self._warned:
                    self._warned = True
                    log.warning("NVML query for GPU %s failed (%s): keeping its last state", d, e)
        if self._last is not None:
            dt = max(0.0, now - self._last)
            for d in self.devices:
                if self._held[d] or held[d]:
                    self.gpu_seconds += dt
                    self.busy_seconds += dt * self._utilization(d) / 100.0
        self.devices_used.update(d for d, h in held.items() if h)
        self._held, self._last = held, now
        return self.gpu_seconds

    def over(self, limit: float | None) -> bool:
        """Whether the step has spent more GPU-seconds than `limit` (None: no limit)."""
        return limit is not None and self.gpu_seconds > limit

    def _utilization(self, device: int) -> float:
        try:
            return min(100.0, max(0.0, float(self.reader.utilization(device))))
        except Exception:  # noqa: BLE001 (informational only)
            return 0.0


@dataclass(frozen=True)
class SandboxGpus:
    """A sandbox's GPUs, resolved once when the sandbox is made (bwrap and docker alike)."""

    reader: NvmlReader
    ids: list[int]  # the GPUs its steps are given
    metered: list[int]  # every GPU on the host: a step that reaches another GPU is charged for it too

    def meter(self, started: float) -> GpuMeter:
        """A fresh meter for one started step."""
        return GpuMeter(self.reader, self.metered, started)


def sandbox_gpus(spec: str | None, reader: NvmlReader | None = None) -> SandboxGpus | None:
    """None without sandbox.gpus (nothing touches NVML, pynvml is not imported). With GPUs the
    spec is checked now, so a bad spec or a host without NVML fails when the sandbox is made,
    not in every step."""
    if spec in (None, ""):
        return None
    reader = reader or default_reader()
    return SandboxGpus(reader, parse_gpus(spec, reader), list(range(reader.device_count())))
