"""Task defaults shared by all steps: the key-based cache and retries for transient faults only."""

from __future__ import annotations

from pathlib import Path

from prefect import Task, task

from vtb.bench import Steps
from vtb.sandbox.base import SandboxStartError


def _key(context, parameters: dict) -> str:
    return parameters["key"]


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


def prefect_steps(cache: Path) -> Steps:
    """The bench core's steps as these Prefect tasks, results persisted under cache/prefect.

    Each task run is named by the core's `run_name` (`train-it2`, `grade-submitted`): the UI then
    tells the iteration, the split and the system apart (the cache key ignores the name)."""
    from steps.tasks import agent_turn_step, play_step, provision_data_step, provision_model_step, train_step

    def call(t: Task):
        bound = bind(t, cache)

        def run(run_name: str, **params) -> tuple[object, bool]:
            named = bound.with_options(task_run_name=run_name) if run_name else bound
            state = named(**params, return_state=True)
            return state.result(), state.name == "Cached"  # result() raises the step's error

        return run

    return Steps(
        data=call(provision_data_step),
        model=call(provision_model_step),
        train=call(train_step),
        play=call(play_step),
        turn=call(agent_turn_step),
    )
