"""What the Prefect UI shows of a bench while it runs: its tags, its progress lines in the run's
log, a budget progress artifact and a table of iterations that grow as the bench goes.

The bench core (vtb/bench.py) knows nothing of Prefect: it says its lines through
`vtb.progress` and reports budget and iterations through `vtb.bench.Watch`; this module turns
those into Prefect logs and artifacts. Agent-written text in the iterations table goes through
`markdown.cell_text`, one line that is inert and reads as written in both Prefect UIs (the
default v2 UI shows a cell as text, the v1 UI renders it as markdown with HTML; scripts/ui_check.sh
checks both in a browser).
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from typing import Any
from uuid import UUID

from prefect.artifacts import create_progress_artifact, create_table_artifact, update_progress_artifact
from prefect.client.orchestration import get_client
from prefect.client.schemas.actions import ArtifactUpdate
from prefect.context import get_run_context
from prefect.exceptions import MissingContextError
from prefect.logging.handlers import APILogHandler

from vtb import progress, record
from vtb.bench import Watch
from vtb.config import BenchConfig
from vtb.ledger import LedgerSummary
from vtb.markdown import cell_text
from vtb.results import Candidate


def bench_tags(cfg: BenchConfig) -> list[str]:
    """The tags of a bench's flow run: the UI's tag filter then picks a task, agent, seed, model or sandbox."""
    return [
        f"task:{cfg.task.name}",
        f"agent:{cfg.agent.name}",
        f"seed:{cfg.seed}",
        f"model:{cfg.model.name}",
        f"sandbox:{cfg.sandbox.backend}",
    ]


def artifact_key(run_id: str) -> str:
    """A run id as Prefect allows in an artifact key (a-z, 0-9, -)."""
    return "".join(c if c.isalnum() else "-" for c in run_id.lower())


class _RunLog(APILogHandler):
    """Progress lines to the Prefect run (flow or task) they were said in; outside a run, to no one.

    One handler serves every bench of the process: each line goes to the run of its own context,
    so benches running side by side in a sweep keep their logs apart."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            get_run_context()
        except MissingContextError:
            return
        super().emit(record)


def send_progress_to_prefect() -> None:
    """Add the run-log handler to the progress logger, once per process."""
    if not any(isinstance(h, _RunLog) for h in progress.LOGGER.handlers):
        progress.LOGGER.addHandler(_RunLog())


def iteration_rows(history: list[Candidate]) -> list[dict]:
    """The iterations table: numbers formatted, agent text as one inert line (`cell_text`), an
    empty cell as `none`."""
    rows = []
    for h in history:
        edits = record.edits_text(h.edits)
        rows.append(
            {
                "iteration": h.iteration,
                "val_score": "failed" if h.val_score is None else f"{h.val_score:.3f}",
                "edits": cell_text(edits if edits != "-" else "none"),
                "budget_used": record.amount(h.budget_after.used, h.budget_after.unit),
                "agent_tokens": h.agent.tokens,
                "notes": cell_text(h.notes, 500),
            }
        )
    return rows


def _budget_text(summary: LedgerSummary) -> str:
    return f"Budget used: {summary.used:.3g} of {record.amount(summary.limit, summary.unit)}"


def ui_watch(run_id: str, cfg: BenchConfig) -> Watch:
    """A `Watch` that keeps a budget progress artifact (`budget-<run>`) and the iterations table
    (`iterations-<run>`) up to date in the current flow run, each one artifact updated in place
    (a new version per iteration would be a card of its own in the run's Artifacts tab)."""
    key = artifact_key(run_id)
    start = LedgerSummary(unit=cfg.budget.unit, limit=cfg.budget.limit, used=0.0, left=cfg.budget.limit)
    progress_id = create_progress_artifact(0.0, key=f"budget-{key}", description=_budget_text(start))

    def budget(summary: LedgerSummary) -> None:
        update_progress_artifact(progress_id, summary.percent_used(), description=_budget_text(summary))

    table: list[UUID] = []  # the iterations artifact, once made
    lock = threading.Lock()

    def iteration(history: list[Candidate]) -> None:
        rows = iteration_rows(history)
        with lock:
            if not table:
                table.append(
                    create_table_artifact(
                        table=rows, key=f"iterations-{key}", description=f"Iterations of {run_id}"
                    )
                )
                return
            with get_client(sync_client=True) as client:
                client.update_artifact(table[0], ArtifactUpdate(data=json.dumps(rows)))

    return Watch(budget=_quietly(budget), iteration=_quietly(iteration))


def _quietly(show: Callable[[Any], None]) -> Callable[[Any], None]:
    """`show`, but an API error only costs the live view (a warning line), never the bench."""

    def call(arg: Any) -> None:
        try:
            show(arg)
        except Exception as e:  # noqa: BLE001 (the view is a convenience; the record is the truth)
            progress.say(f"[ui] live artifact not updated: {type(e).__name__}: {str(e)[:200]}")

    return call
