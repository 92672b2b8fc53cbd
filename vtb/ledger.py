"""The budget ledger, kept by the orchestrator only.

Every sandboxed step is charged what it used: estimated FLOPs (reported by our engines from
inside the sandbox; deterministic, so runs reproduce across machines), CPU-seconds and, where
the sandbox has GPUs, GPU-seconds (both metered from outside, so code in the sandbox cannot
evade them; a GPU-second is a second a GPU was held, see vtb/sandbox/gpu.py). One unit is
enforced as the budget; CPU-seconds are always a hard cap as well. A cached step is charged what it
cost when it was computed, so a resumed run ends with the same figures.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import NamedTuple

UNITS = ("flops", "cpu_seconds", "gpu_seconds")
GPU_HINT = "set sandbox.gpus=all (or device ids: 'sandbox.gpus=\"0,1\"') or budget.unit=flops"


def check_budget(unit: str, gpus: str | None) -> None:
    """Fail at run start on a budget that cannot be metered: GPU-seconds need sandbox GPUs."""
    if unit == "gpu_seconds" and gpus in (None, ""):
        raise ValueError(f"budget.unit=gpu_seconds but the sandbox has no GPUs to meter: {GPU_HINT}")


class StepLimits(NamedTuple):
    """What the next sandboxed step may spend; None = not limited by the budget."""

    max_flops: float | None
    cpu_seconds: float | None
    gpu_seconds: float | None = None


@dataclass
class Charge:
    flops: float = 0.0
    cpu_seconds: float = 0.0
    gpu_seconds: float = 0.0  # summed over GPUs; 0 without sandbox GPUs
    wall_seconds: float = 0.0
    agent_tokens: int = 0
    agent_cost_usd: float = 0.0

    def __add__(self, other: Charge) -> Charge:
        return Charge(**{k: getattr(self, k) + getattr(other, k) for k in asdict(self)})


@dataclass
class LedgerEntry:
    step: str
    iteration: int
    charge: Charge
    cached: bool = False
    note: str = ""


@dataclass
class Ledger:
    unit: str
    limit: float
    cpu_cap: float
    entries: list[LedgerEntry] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.unit not in UNITS:
            raise ValueError(f"budget.unit={self.unit!r} is not one of {UNITS}; set budget.unit=flops")
        if self.limit <= 0:
            raise ValueError(f"budget.limit must be > 0, got {self.limit}")

    def charge(
        self, step: str, iteration: int, charge: Charge, *, cached: bool = False, note: str = ""
    ) -> None:
        self.entries.append(LedgerEntry(step, iteration, charge, cached, note))

    def total(self) -> Charge:
        out = Charge()
        for e in self.entries:
            out = out + e.charge
        return out

    def used(self) -> float:
        return getattr(self.total(), self.unit)

    def left(self) -> float:
        return max(0.0, self.limit - self.used())

    def cpu_left(self) -> float:
        return max(0.0, self.cpu_cap - self.total().cpu_seconds)

    def exhausted(self) -> bool:
        return self.left() <= 0 or self.cpu_left() <= 0

    def gpu_left(self) -> float | None:
        """GPU-seconds left when they are the budget unit, else None (not limited)."""
        return self.left() if self.unit == "gpu_seconds" else None

    def step_limits(self, step_cpu_cap: float) -> StepLimits:
        """(max FLOPs, max CPU-seconds, max GPU-seconds) the next sandboxed step may spend."""
        cpu = min(step_cpu_cap, self.cpu_left())
        if self.unit == "cpu_seconds":
            return StepLimits(None, min(cpu, self.left()))
        if self.unit == "gpu_seconds":
            return StepLimits(None, cpu, self.gpu_left())
        return StepLimits(self.left(), cpu)

    def summary(self) -> dict:
        total = self.total()
        return {
            "unit": self.unit,
            "limit": self.limit,
            "used": self.used(),
            "left": self.left(),
            "flops": total.flops,
            "cpu_seconds": round(total.cpu_seconds, 3),
            "cpu_seconds_cap": self.cpu_cap,
            "gpu_seconds": round(total.gpu_seconds, 3),
            "agent_tokens": total.agent_tokens,
            "agent_cost_usd": total.agent_cost_usd,
        }

    def write(self, path: Path) -> None:
        with open(path, "w") as f:
            for e in self.entries:
                f.write(json.dumps({**asdict(e), "charge": asdict(e.charge)}) + "\n")
