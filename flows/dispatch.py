"""A sweep's benches as flow runs of the bench deployment, pulled by workers on any machine.

`run_deployments` starts one flow run of `vibetraining-bench/bench` per bench, as a child of the
sweep's flow run (the UI lists them under the sweep), and waits for all of them. It watches
each running bench's worker through the server: a worker that stopped sending heartbeats for
`LOST_AFTER` of its intervals (the rule Prefect's own foreman uses to mark a worker offline; at
least `MIN_SILENCE_S`) has lost its machine, so its bench is marked Crashed. A crashed bench is started once more
(`crash_retries`), on the pool's default queue, so a live worker takes it; it resumes from
that machine's cached steps or recomputes them, and charges the same figures either way.

A finished bench's result is its flow run's persisted result, read from Prefect result storage
(`fetch_result`), not from a shared folder, and checked (vtb/result_check.py) before it may
reach the leaderboard: a result that is missing, too large, a link, malformed or out of range
becomes a failed row that says why.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from uuid import UUID

from flows.rows import BenchRow
from vtb import safefs
from vtb.bench_result import Errored, is_errored
from vtb.result_check import MAX_RESULT_BYTES, BadResult, check_result, parse_record

DEPLOYMENT = "vibetraining-bench/bench"
LOST_AFTER = 3  # missed worker heartbeats before its machine counts as lost
MIN_SILENCE_S = 20.0  # and never less silence than this: a busy worker's heartbeat can be seconds late
WORKER_LABEL = "prefect.worker.name"  # the label a worker gives each flow run it starts
# A flow run whose process exits before the bench starts (its deployment's pull step, its
# container's image) sends Prefect only the exit status; the cause is in the worker's output.
CRASH_HINT = "the cause is in the output of worker {worker} on its machine"


@dataclass
class Job:
    """One bench of the sweep and its flow runs so far (a crashed one is started again)."""

    run: str  # the bench's run id, also its flow run's name
    overrides: list[str]  # Hydra overrides: the deployment's only parameter
    expected: dict[str, Any]  # what its result must say (run_id, task, agent, seed)
    tags: list[str]
    work_queue: str | None = None  # first try only; a retry goes to the pool's default queue
    flow_run_id: UUID | None = None
    tries: int = 0
    crashes: list[str] = field(default_factory=list)
    outcome: BenchRow | None = None
    running: bool = False  # its flow run was Pending or Running at the last look


def submit(job: Job, deployment: str) -> None:
    """Start a flow run of the bench deployment for `job`, linked under the current flow run."""
    from prefect.deployments import run_deployment

    run = run_deployment(
        deployment,
        parameters={"overrides": job.overrides},
        timeout=0,  # do not wait here: `run_deployments` watches all of them
        as_subflow=True,
        flow_run_name=job.run,
        tags=job.tags,
        work_queue_name=job.work_queue if job.tries == 0 else None,
    )
    job.flow_run_id, job.tries = run.id, job.tries + 1


def run_deployments(
    jobs: Sequence[Job],
    deployment: str = DEPLOYMENT,
    poll_s: float = 5.0,
    crash_retries: int = 1,
    start_timeout_s: float = 1800.0,
) -> list[BenchRow]:
    """Start every job's bench, wait for all, and return their outcomes in order (rows of the sweep).

    Each bench's start and end is printed as it happens. When none of the sweep's benches has run
    for `start_timeout_s` while some wait to start, no worker is taking them (none polls the pool,
    or every slot is held): those benches end as failed rows that say so, instead of a sweep that
    waits forever."""
    from prefect.client.orchestration import get_client

    for job in jobs:
        submit(job, deployment)
    with get_client(sync_client=True) as client:
        warn_if_sharing_the_pool(client, deployment)
        idle_since = time.monotonic()
        while any(j.outcome is None for j in jobs):
            time.sleep(poll_s)
            lost = lost_workers(client, {str(j.flow_run_id) for j in jobs if j.outcome is None})
            for job in (j for j in jobs if j.outcome is None):
                _step(client, job, lost, deployment, crash_retries)
            if any(j.running for j in jobs if j.outcome is None):
                idle_since = time.monotonic()
            elif time.monotonic() - idle_since > start_timeout_s:
                _give_up_waiting(client, [j for j in jobs if j.outcome is None], deployment, start_timeout_s)
    return [j.outcome for j in jobs]


def _give_up_waiting(client, waiting: list[Job], deployment: str, waited_s: float) -> None:
    """End the benches no worker started: their flow runs cancelled, failed rows with the reason."""
    from prefect.states import Cancelled

    why = (
        f"no worker started this bench in {waited_s:.0f} s while none of the sweep's benches ran: no "
        f"worker polls the pool of {deployment}, or every slot is held (a worker started with "
        "--limit 1 is held by the sweep itself when the sweep runs on the same pool: give workers "
        "--limit 2 or more, or run the sweep with dispatch=inline)"
    )
    for job in waiting:
        client.set_flow_run_state(job.flow_run_id, Cancelled(message=why[:200]), force=True)
        job.outcome = BenchRow(job.run, "failed", error=why, tries=job.tries)
        print(f"[sweep] {job.run}: {why}", flush=True)


def warn_if_sharing_the_pool(client, deployment: str) -> None:
    """Say so when this sweep runs as a flow run of the pool its benches go to: it holds a slot."""
    try:
        from prefect.context import FlowRunContext

        ctx = FlowRunContext.get()
        mine = ctx.flow_run.work_pool_name if ctx and ctx.flow_run else None
        theirs = client.read_deployment_by_name(deployment).work_pool_name
    except Exception:  # no flow run context, or no such deployment (submit would have failed)
        return
    if mine and mine == theirs:
        print(
            f"[sweep] this sweep runs on work pool {mine}, where its benches go: it holds one worker "
            "slot while they run, so a worker started with --limit 1 cannot start them",
            flush=True,
        )


def _step(client, job: Job, lost: dict[str, str], deployment: str, crash_retries: int) -> None:
    """One look at a job's flow run: finished (outcome), crashed (retry or outcome), or lost (crash it)."""
    from prefect.states import Crashed

    run = client.read_flow_run(job.flow_run_id)
    worker = (run.labels or {}).get(WORKER_LABEL)
    state = run.state
    running = state is not None and (state.is_running() or state.is_pending())
    if running and not job.running:
        print(f"[sweep] {job.run}: started on {worker or 'a worker'}", flush=True)
    job.running = running
    if state is not None and state.is_final():
        if state.is_crashed() and job.tries <= crash_retries:
            job.crashes.append(f"{worker or '?'}: {state.message or 'crashed'}"[:300])
            print(f"[sweep] {job.run} crashed on {worker} ({state.message}); starting it again", flush=True)
            submit(job, deployment)
            return
        job.outcome = outcome_of(run, job, worker)
        print(f"[sweep] {job.run}: {job.outcome.state}", flush=True)
    elif worker in lost:
        message = f"worker {worker} lost: {lost[worker]}"
        client.set_flow_run_state(job.flow_run_id, Crashed(message=message), force=True)


def lost_workers(client, flow_run_ids: set[str]) -> dict[str, str]:
    """{worker name: why} for the workers, in the pools of these flow runs, whose heartbeats stopped."""
    pools = set()
    for fid in flow_run_ids:
        run = client.read_flow_run(UUID(fid))
        if run.work_pool_name:
            pools.add(run.work_pool_name)
    now = datetime.now(UTC)
    out = {}
    for pool in pools:
        for w in client.read_workers_for_work_pool(pool):
            interval = w.heartbeat_interval_seconds or 30
            if w.last_heartbeat_time is None:
                continue
            silent = (now - w.last_heartbeat_time).total_seconds()
            if silent > max(LOST_AFTER * interval, MIN_SILENCE_S):
                out[w.name] = f"no heartbeat for {silent:.0f} s (interval {interval} s)"
    return out


def outcome_of(run, job: Job, worker: str | None) -> BenchRow:
    """A finished flow run as a row of the sweep; a completed one only with a sound result."""
    where = {"worker": worker, "tries": job.tries, "crashes": job.crashes}
    state = run.state
    if not state.is_completed():
        error = str(state.message or state.name)[:400]
        if state.is_crashed() and "exited with status code" in error:
            error += f" ({CRASH_HINT.format(worker=worker or 'its worker')})"
        return BenchRow(job.run, state.type.value.lower(), error=error, **where)
    try:
        stored = fetch_result(state.data)
        if is_errored(stored):  # no score: a row with its reason
            return BenchRow.errored(job.run, Errored.from_json(stored), **where)
        result = check_result(stored, job.expected)
    except (BadResult, safefs.Rejected, OSError) as e:
        return BenchRow(job.run, "failed", error=f"result rejected: {e}"[:500], **where)
    location = stored["location"]  # checked: a host and a path, plain strings
    return BenchRow.completed(job.run, result, location=(location["host"], location["path"]), **where)


def _metadata(data: Any) -> dict:
    """The result record metadata of a final state (a pydantic model or its JSON form)."""
    if hasattr(data, "model_dump"):
        data = data.model_dump(mode="json")
    if not isinstance(data, dict) or not isinstance(data.get("storage_key"), str):
        raise BadResult("the flow run has no persisted result (no storage key)")
    return data


def fetch_result(data: Any) -> dict:
    """A bench's result from Prefect result storage, read as bounded plain JSON.

    A local storage key must lie under this process's `PREFECT_RESULTS_LOCAL_STORAGE_PATH` (the
    storage every worker writes to) and is read without following any link on the way; a key of a
    storage block (S3, GCS, any fsspec `RemoteFileSystem`) is read through that block.
    """
    meta = _metadata(data)
    key = meta["storage_key"]
    serializer = (
        (meta.get("serializer") or {}).get("type") if isinstance(meta.get("serializer"), dict) else None
    )
    if meta.get("storage_block_id"):
        from prefect.results import resolve_result_storage
        from prefect.utilities.asyncutils import run_coro_as_sync

        storage = resolve_result_storage(UUID(str(meta["storage_block_id"])), _sync=True)
        raw = storage.read_path(key)
        raw = run_coro_as_sync(raw) if hasattr(raw, "__await__") else raw
        if not isinstance(raw, bytes) or len(raw) > MAX_RESULT_BYTES:
            raise BadResult(f"result at {key[:200]!r} is not bytes of at most {MAX_RESULT_BYTES}")
    else:
        raw = safefs.read_in(local_root(), _under(local_root(), key), MAX_RESULT_BYTES)
    return parse_record(raw, str(serializer))


def local_root() -> Path:
    from prefect.settings import get_current_settings

    return Path(get_current_settings().results.local_storage_path).expanduser().absolute()


def _under(root: Path, key: str) -> str:
    """`key` relative to `root`, if it lies there (compared as written: no link is resolved)."""
    path = Path(key)
    if not path.is_absolute() or ".." in path.parts or not path.is_relative_to(root):
        raise BadResult(f"result key {key[:200]!r} is outside the result storage {root}")
    return str(path.relative_to(root))
