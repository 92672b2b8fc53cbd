"""The budget ledger, kept by the orchestrator only.

Every sandboxed step is charged what it used: estimated FLOPs (reported by our engines from
inside the sandbox; deterministic, so runs reproduce across machines), CPU-seconds and, where
the sandbox has GPUs, GPU-seconds (both metered from outside, so code in the sandbox cannot
evade them; a GPU-second is a second a GPU was held, see vtb/sandbox/gpu.py). One unit is
enforced as the budget; CPU-seconds are always a hard cap as well. A cached step is charged what it
cost when it was computed, so a resumed run ends with the same figures.

The FLOPs figure comes from a usage file that code the agent can change (its trainer, its
harness, its shell commands) writes, so two rules make forging it useless:

- Every number of a charge is checked (`checked`): finite, non-negative and within `BOUNDS`.
  A bad one never raises; it is charged as 0, named in the charge's `errors` (and the ledger
  entry's note), and the floor below applies.
- The FLOPs charged are `max(reported, floor)` with `floor = budget.floor_fraction ×
  (metered CPU-seconds past start-up × the calibrated FLOPs per CPU-second of this step's kind +
  metered GPU-seconds × FLOPs per GPU-second)`. The rates are measured on the bench's own base
  model with our engines (vtb/calibrate.py): train steps at the built-in trainer's rate, play
  steps at the inference engine's, research turns at the higher of the two (their commands
  can run either engine, e.g. train weights into the workspace). Both figures are kept
  (`flops_reported`, `flops_floor`). The same work reported as less therefore still costs at
  least `floor_fraction` of what it honestly costs; with flops as the unit, `step_limits` turns
  the FLOPs left into a CPU- (and GPU-) seconds cap through the same rate, so a step that
  under-reports is also stopped near where an honest one would be. The fraction is the slack
  that keeps honest steps charged exactly what they report (so they reproduce across machines)
  when load or less tightly written code makes them slower than the calibration.
- A play step's seconds are the harness sandbox's and the model server's (vtb/service.py).
  The server is our code and counts every token it serves, so its seconds
  (`served_cpu_seconds`, `served_gpu_seconds`) are charged but not floored; the floor covers
  the harness, the code an agent writes. The seconds of a server that was killed are floored.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import NamedTuple

UNITS = ("flops", "cpu_seconds", "gpu_seconds")
# The most one step can plausibly use of each quantity; a larger figure is forged or broken.
BOUNDS = {
    "flops": 1e27,  # far above any frontier training run
    "cpu_seconds": 1e9,
    "gpu_seconds": 1e9,
    "wall_seconds": 1e9,
    "agent_tokens": 1e12,
    "agent_cost_usd": 1e7,
    "served_cpu_seconds": 1e9,
    "served_gpu_seconds": 1e9,
}
MAX_ERRORS = 20  # bad numbers named per charge (the rest only counted)


def checked(value: object, name: str) -> tuple[float, str | None]:
    """(value, None) for a finite number in [0, BOUNDS[name]]; (0.0, why) for anything else.

    The one validation every untrusted number of a charge goes through (usage files, CLI
    agents' usage events, LLM endpoints' usage, and `Ledger.charge` itself). Strings and
    booleans are not numbers here: JSON that means a number writes one.
    """
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0.0, f"{name}: not a number ({_show(value)})"
    try:
        number = float(value)
    except OverflowError:
        return 0.0, f"{name}: out of range ({_show(value)})"
    if not math.isfinite(number):
        return 0.0, f"{name}: not finite ({number})"
    if number < 0:
        return 0.0, f"{name}: negative ({number:g})"
    if number > BOUNDS[name]:
        return 0.0, f"{name}: {number:g} is over the bound {BOUNDS[name]:g}"
    return number, None


def _show(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


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
    # The part of cpu_/gpu_seconds spent by the model server (vtb/service.py): counted and capped
    # like the rest, but not floored, since the server is our code and meters its FLOPs per token.
    served_cpu_seconds: float = 0.0
    served_gpu_seconds: float = 0.0
    wall_seconds: float = 0.0
    agent_tokens: int = 0
    agent_cost_usd: float = 0.0
    flops_reported: float = 0.0  # the valid part of what the sandbox reported (set by `of`/the ledger)
    flops_floor: float = 0.0  # what the outside meter implies (set by Ledger.charge)
    errors: list[str] = field(default_factory=list)  # numbers that failed `checked`

    def __add__(self, other: Charge) -> Charge:
        out = {  # getattr: a charge pickled before a field existed has none
            k: getattr(self, k, 0.0) + getattr(other, k, 0.0)
            for k in NUMBERS + ("flops_reported", "flops_floor")
        }
        return Charge(**out, errors=(self.errors + other.errors)[:MAX_ERRORS])

    @classmethod
    def of(cls, **values: object) -> Charge:
        """A charge from untrusted numbers: each is `checked`; a bad one counts 0 and is named in `errors`.

        The FLOPs floor is the ledger's business (it knows this machine's calibration), so a
        forged or missing FLOPs figure here still ends up charged at least the floor.
        """
        errors: list[str] = []
        numbers = {}
        for name in NUMBERS:
            number, error = checked(values.get(name, 0.0), name)
            numbers[name] = int(number) if name == "agent_tokens" else number
            if error:
                errors.append(error)
        return cls(**numbers, flops_reported=numbers["flops"], errors=errors[:MAX_ERRORS])


NUMBERS = (
    "flops",
    "cpu_seconds",
    "gpu_seconds",
    "served_cpu_seconds",
    "served_gpu_seconds",
    "wall_seconds",
    "agent_tokens",
    "agent_cost_usd",
)


@dataclass(frozen=True)
class FlopsFloor:
    """The least FLOPs a step is charged for the seconds it was metered (see the module docstring)."""

    cpu_rate: float  # FLOPs per metered CPU-second past start-up for steps of no one kind (agent turns)
    fraction: float  # budget.floor_fraction
    gpu_rate: float = 0.0  # FLOPs per metered GPU-second (budget.flops_per_gpu_second); 0: no GPU floor
    startup_cpu_seconds: float = 0.0  # calibrated CPU-seconds a process spends before any engine work
    slack_cpu_seconds: float = 0.0  # budget.floor_slack_cpu_seconds: start-up noise never floored
    machine: str = ""  # the calibration's machine key
    train_rate: float | None = None  # train steps' rate (vtb/calibrate.py); None: cpu_rate
    infer_rate: float | None = None  # play steps' rate; None: cpu_rate

    def rate(self, kind: str) -> float:
        """The CPU rate for a step of `kind` (train | infer | anything else: cpu_rate)."""
        found = {"train": self.train_rate, "infer": self.infer_rate}.get(kind)
        return self.cpu_rate if found is None else found

    def of(self, cpu_seconds: float, gpu_seconds: float, kind: str = "") -> float:
        busy = max(0.0, cpu_seconds - self.startup_cpu_seconds - self.slack_cpu_seconds)
        return self.fraction * (busy * self.rate(kind) + gpu_seconds * self.gpu_rate)

    def seconds_for(self, flops: float, rate: float, startup: float = 0.0) -> float | None:
        """Metered seconds whose floor is `flops` (None: no floor at that rate, so no cap from it)."""
        return startup + flops / (self.fraction * rate) if self.fraction > 0 and rate > 0 else None


def kind_of(step: str) -> str:
    """A ledger step's kind for the floor: train, infer (play-<split>) or agent (a research turn)."""
    return "infer" if step.startswith("play") else step


@dataclass(frozen=True)
class LedgerSummary:
    """Where the budget stands after the charges so far: what the research agent is told
    (`Feedback.budget`), what each candidate records (`Candidate.budget_after`) and what the UI's
    progress bar shows. Its JSON (`to_json`, also what `asdict` of a holder gives) is the shape
    agents and result.json have always read: these keys, in this order."""

    unit: str
    limit: float
    used: float
    left: float
    flops: float = 0.0
    cpu_seconds: float = 0.0
    cpu_seconds_cap: float = 0.0
    gpu_seconds: float = 0.0
    agent_tokens: int = 0
    agent_cost_usd: float = 0.0
    flops_reported: float = 0.0
    flops_floor: float = 0.0
    floor: FlopsFloor | None = None
    charge_errors: int = 0  # bad figures named in the charges so far (each charged as 0)

    def percent_used(self) -> float:
        """Used of the limit in percent, within 0 to 100, one decimal."""
        share = 100.0 * self.used / self.limit if self.limit else 0.0
        return round(min(100.0, max(0.0, share)), 1)

    def to_json(self) -> dict:
        return asdict(self)


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
    floor: FlopsFloor | None = None  # None: FLOPs charged as reported (validated) only

    def __post_init__(self) -> None:
        if self.unit not in UNITS:
            raise ValueError(f"budget.unit={self.unit!r} is not one of {UNITS}; set budget.unit=flops")
        if self.limit <= 0:
            raise ValueError(f"budget.limit must be > 0, got {self.limit}")

    def charge(
        self, step: str, iteration: int, charge: Charge, *, cached: bool = False, note: str = ""
    ) -> Charge:
        """Record one step's charge, validated again and raised to the FLOPs floor; returns what was charged."""
        charge = self.settle(charge, kind_of(step))
        if charge.errors:
            note = "; ".join(filter(None, [note, "bad charge figures: " + "; ".join(charge.errors)]))
        self.entries.append(LedgerEntry(step, iteration, charge, cached, note))
        return charge

    def settle(self, charge: Charge, kind: str = "") -> Charge:
        """The charge as the ledger books it: every number `checked`, FLOPs = max(reported, floor)."""
        valid = Charge.of(**{k: getattr(charge, k, 0.0) for k in NUMBERS})
        errors = list(getattr(charge, "errors", None) or [])
        errors = ([str(e)[:200] for e in errors if isinstance(e, str)] + valid.errors)[:MAX_ERRORS]
        cpu = max(0.0, valid.cpu_seconds - valid.served_cpu_seconds)  # the model server's are not floored
        gpu = max(0.0, valid.gpu_seconds - valid.served_gpu_seconds)
        floor = self.floor.of(cpu, gpu, kind) if self.floor else 0.0
        valid.flops_reported, valid.flops_floor = valid.flops, floor
        valid.flops = max(valid.flops, floor)
        valid.errors = errors
        return valid

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

    def step_limits(self, step_cpu_cap: float, kind: str = "") -> StepLimits:
        """(max FLOPs, max CPU-seconds, max GPU-seconds) the next sandboxed step of `kind` may spend."""
        cpu = min(step_cpu_cap, self.cpu_left())
        if self.unit == "cpu_seconds":
            return StepLimits(None, min(cpu, self.left()))
        if self.unit == "gpu_seconds":
            return StepLimits(None, cpu, self.gpu_left())
        gpu = None
        if self.floor is not None:  # the seconds whose floor would pass the FLOPs left: a hard cap too
            cpu_floor = self.floor.seconds_for(
                self.left(),
                self.floor.rate(kind),
                self.floor.startup_cpu_seconds + self.floor.slack_cpu_seconds,
            )
            cpu = cpu if cpu_floor is None else min(cpu, cpu_floor)
            gpu = self.floor.seconds_for(self.left(), self.floor.gpu_rate)
        return StepLimits(self.left(), cpu, gpu)

    def summary(self) -> LedgerSummary:
        total = self.total()
        return LedgerSummary(
            unit=self.unit,
            limit=self.limit,
            used=self.used(),
            left=self.left(),
            flops=total.flops,
            cpu_seconds=round(total.cpu_seconds, 3),
            cpu_seconds_cap=self.cpu_cap,
            gpu_seconds=round(total.gpu_seconds, 3),
            agent_tokens=total.agent_tokens,
            agent_cost_usd=total.agent_cost_usd,
            flops_reported=total.flops_reported,
            flops_floor=total.flops_floor,
            floor=self.floor,
            charge_errors=sum(len(e.charge.errors) for e in self.entries),
        )

    def write(self, path: Path) -> None:
        with open(path, "w") as f:
            for e in self.entries:
                f.write(json.dumps({**asdict(e), "charge": asdict(e.charge)}) + "\n")
