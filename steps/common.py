"""Task defaults shared by all steps: the request's key as the cache key, retries for transient faults only."""

from __future__ import annotations

from pathlib import Path

from prefect import Task, task

from vtb.sandbox.base import SandboxStartError


def _key(context, parameters: dict) -> str:
    return parameters["request"].key()


def _transient(task_, task_run, state) -> bool:
    """Retry only when the sandbox itself failed to start; a failing trainer will fail again."""
    try:
        state.result()
    except SandboxStartError:
        return True
    except Exception:
        return False
    return False


def step(name: str, retries: int = 0):
    return task(
        name=name,
        cache_key_fn=_key,
        persist_result=True,
        # pinned, not inherited from the flow: the deployed bench's flow result is JSON (read back
        # by the sweep), but these records stay in the machine's own cache, and typed results such
        # as PlayResult do not survive Prefect's JSON serializer (a cache that never hits)
        result_serializer="pickle",
        retries=retries,
        retry_delay_seconds=2,
        retry_condition_fn=_transient if retries else None,
    )


def bind(t: Task, cache: Path) -> Task:
    """The task with its results persisted under the run's cache directory."""
    return t.with_options(result_storage=cache / "prefect")
