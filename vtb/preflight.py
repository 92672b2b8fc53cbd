"""Preflight: what a task's data and systems must satisfy before a single FLOP is spent.

The bench runs it right after its data are provisioned, before the base model is provisioned and
before anything trains or plays: a run that cannot give a true number is refused in seconds, not
graded at the end. It checks, for every source and backend:

- every split is non-empty and as large as the config asks (`split_sizes`);
- what the task's domain checks itself (its optional `preflight` method, `DomainCheck`): the metric
  credits gold answers and not an empty one on a sample of every split, the initial and reference
  systems' training targets are creditable, every environment image exists or builds, the grader
  runs once on a gold item.

Every problem found is collected, so one refusal names them all: where (a split, an item, an
image), what is wrong, and the fix. Nothing here trains or plays a model.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from vtb.config import SandboxConfig, TaskConfig

SPLITS = ("pool", "val", "test")


@dataclass(frozen=True)
class Problem:
    """One reason the run cannot give a true number: where, what, and the fix."""

    where: str  # "split test", "item aime-2024-II-4", "image vtb-task-x:abc", "system initial"
    what: str
    fix: str

    def __str__(self) -> str:
        return f"{self.where}: {self.what}. Fix: {self.fix}"


class PreflightError(ValueError):
    """The run was refused before any budget was spent; the message lists every problem."""

    def __init__(self, task: str, problems: Sequence[Problem]):
        self.problems = list(problems)
        lines = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(
            f"preflight: task={task} cannot give a true score, so nothing was run or spent "
            f"({len(self.problems)} problem{'s' if len(self.problems) != 1 else ''}):\n{lines}"
        )


@dataclass(frozen=True)
class Systems:
    """The workspaces (data/, trainer/, harness/) of the systems every bench trains."""

    initial: Path
    reference: Path | None  # None when the run has no reference system (cfg.reference=false)


@runtime_checkable
class DomainCheck(Protocol):
    """What a domain may check itself (a method of its domain object; optional)."""

    def preflight(
        self, task: TaskConfig, data_dir: Path, systems: Systems, sandbox: SandboxConfig
    ) -> list[Problem]:
        """The problems of this task's data and systems; [] when the run can go ahead."""
        ...


def split_sizes(task: TaskConfig, counts: dict[str, int]) -> list[Problem]:
    """Each split non-empty, val and test as large as task.n_val / task.n_test ask.

    A real data set too small for the asked sizes is cut short by `salt.cut_records` (val takes
    its n_val first, the test split what is left): the fix proposes sizes that fit the records.
    """
    total = sum(int(counts.get(s, 0)) for s in SPLITS)
    asked = {"val": task.n_val, "test": task.n_test}
    short = [s for s in SPLITS if counts.get(s, 0) < max(1, asked.get(s, 1))]
    if not short:
        return []
    fix = (
        _size_fix(task, total)
        if task.source != "embedded"
        else "set "
        + " ".join(f"task.n_{s}>=1" for s in short)
        + " (the embedded generator makes as many items as asked)"
    )
    return [
        Problem(
            f"split {s}",
            f"has {counts.get(s, 0)} items, {max(1, asked.get(s, 1))} needed"
            + (f" (task.n_{s}={asked[s]})" if s in asked else "")
            + " "
            f"(source {task.source}: {total} items in all, cut into "
            + ", ".join(f"{k} {counts.get(k, 0)}" for k in SPLITS)
            + ")",
            fix,
        )
        for s in short
    ]


def _size_fix(task: TaskConfig, total: int) -> str:
    if total < 3:
        return (
            f"task.path has {total} usable items; a bench needs at least 3 (one per split): "
            "point task.path at a larger data set"
        )
    val, test = max(1, total // 4), max(1, total // 2)
    return f"set task.n_val={val} task.n_test={test} (leaving {total - val - test} for the pool)"


MAX_NAMED = 10  # problems (and names in one problem) said one by one; past that, counted


def some(names: Sequence[str], k: int = MAX_NAMED) -> str:
    """`a, b, c and 7 more`: a list of names said in one line, whatever its length."""
    shown = ", ".join(names[:k])
    return shown + (f" and {len(names) - k} more" if len(names) > k else "")


def capped(problems: list[Problem], k: int = MAX_NAMED) -> list[Problem]:
    """The first k problems, then one naming where the rest are: a wholly wrong data set still
    reads as one short message, and every place it is wrong is named."""
    if len(problems) <= k:
        return problems
    rest = problems[k:]
    fixes = {p.fix for p in rest}
    return [
        *problems[:k],
        Problem(
            f"{len(rest)} more",
            f"problems of the same kinds at: {some([p.where for p in rest], 3 * k)}",
            fixes.pop() if len(fixes) == 1 else "as above, for each",
        ),
    ]


def sample(items: Sequence[Any], k: int = 3) -> list[Any]:
    """Up to k items spread over `items` (first, last, evenly between): a deterministic sample."""
    n = len(items)
    if n <= k:
        return list(items)
    return [items[round(i * (n - 1) / (k - 1))] for i in range(k)] if k > 1 else [items[0]]


def check_sizes(task: TaskConfig, counts: dict[str, int]) -> None:
    """Refuse splits too small for the config, before any system is written from them."""
    problems = split_sizes(task, counts)
    if problems:
        raise PreflightError(task.name, problems)


def check_domain(
    domain: object, task: TaskConfig, data_dir: Path, systems: Systems, sandbox: SandboxConfig
) -> list[str]:
    """The domain's own checks (`DomainCheck`), if it has them; returns what was checked."""
    if not isinstance(domain, DomainCheck):
        return []
    problems = domain.preflight(task, data_dir, systems, sandbox)
    if problems:
        raise PreflightError(task.name, problems)
    return [f"domain {task.name}"]
