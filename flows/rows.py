"""A sweep's bench as one row: how it ended and, when it completed, its checked result.

Inline benches (flows/sweep.py `_one`) and deployed ones (flows/dispatch.py `outcome_of`) end as
the same row, so the sweep's summary, its failed-benches list and its copies of results read
attributes, whichever way a bench ran. `to_json()` is the row as the sweep flow returns it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from vtb.bench_result import BenchResult, Errored


@dataclass
class BenchRow:
    run: str  # the bench's run id
    state: str  # completed, errored (no score, its reason), failed, crashed, cancelled
    error: str | None = None  # why, for every state but completed
    result: BenchResult | None = None  # completed only: the result, every figure checked
    worker: str | None = None  # a deployed bench: the worker that ran it
    tries: int | None = None  # a deployed bench: flow runs started (a crashed one is started again)
    crashes: list[str] = field(default_factory=list)  # the earlier tries' crashes
    location: tuple[str, str] | None = None  # a deployed bench: (host, path) of its run record
    gpu: str | None = None  # an inline bench on a GPU slot: the slot

    @classmethod
    def completed(cls, run: str, result: BenchResult, **where) -> BenchRow:
        return cls(run, "completed", result=result, **where)

    @classmethod
    def errored(cls, run: str, errored: Errored, **where) -> BenchRow:
        return cls(run, "errored", error=errored.error[:500], **where)

    @property
    def submitted(self) -> float | None:
        """The submission's test score; None for a bench without a result."""
        return self.result.submitted.score.test_score if self.result else None

    @property
    def where(self) -> str | None:
        """host:path of a deployed bench's run record."""
        return f"{self.location[0]}:{self.location[1]}" if self.location else None

    def line(self) -> str:
        """The row in the sweep's log: run, slot or location, state and why."""
        gpu = f" [gpu {self.gpu}]" if self.gpu is not None else ""
        where = f" [{self.where}]" if self.location else ""
        error = f" ({self.error})" if self.error else ""
        return f"{self.run}{gpu}{where}: {self.state}{error}"

    def to_json(self) -> dict:
        """The row as plain JSON (the sweep flow's return): its figures, not the whole result."""
        row: dict = {"run": self.run, "state": self.state}
        if self.tries is not None:  # a deployed bench's row names its worker, None if none took it
            row.update(worker=self.worker, tries=self.tries)
        for key, value in (("gpu", self.gpu), ("location", self.where), ("error", self.error)):
            if value is not None:
                row[key] = value
        if self.crashes:
            row["crashes"] = self.crashes
        if self.result:
            row["submitted"] = self.submitted
        return row
