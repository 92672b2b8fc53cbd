"""The budget ledger, kept by the orchestrator only.

Every sandboxed step is charged what it used: estimated FLOPs (reported by our engines from
inside the sandbox; deterministic, so runs reproduce across machines) and CPU-seconds
(metered from outside, so code in the sandbox cannot evade them). One unit is enforced as
the budget; CPU-seconds are always a hard cap as well. A cached step is charged what it
cost when it was computed, so a resumed run ends with the same figures.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

UNITS = ("flops", "cpu_seconds")


@dataclass
class Charge:
    flops: float = 0.0
    cpu_seconds: float = 0.0
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

    def step_limits(self, step_cpu_cap: float) -> tuple[float | None, float]:
        """(max FLOPs, max CPU-seconds) the next sandboxed step may spend."""
        cpu = min(step_cpu_cap, self.cpu_left())
        if self.unit == "cpu_seconds":
            cpu = min(cpu, self.left())
            return None, cpu
        return self.left(), cpu

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
            "agent_tokens": total.agent_tokens,
            "agent_cost_usd": total.agent_cost_usd,
        }

    def write(self, path: Path) -> None:
        with open(path, "w") as f:
            for e in self.entries:
                f.write(json.dumps({**asdict(e), "charge": asdict(e.charge)}) + "\n")
