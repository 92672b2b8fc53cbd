"""The five steps as Prefect tasks: each is the pipeline function itself, keyed by its request.

Retries are for a sandbox that failed to start (steps/common.py); a failing trainer or harness
fails its step's result, not the task.
"""

from __future__ import annotations

from pathlib import Path

from steps.common import bind, step
from vtb import pipeline
from vtb.bench import Ran, Steps

provision_data_step = step("provision-data")(pipeline.provision_data)
provision_model_step = step("provision-model")(pipeline.provision_model)
train_step = step("train", retries=2)(pipeline.train)
play_step = step("play", retries=2)(pipeline.play)
agent_turn_step = step("agent-turn")(pipeline.agent_turn)


def prefect_steps(cache: Path) -> Steps:
    """The bench core's steps as these Prefect tasks, results persisted under cache/prefect.

    Each task run is named by the core's `run_name` (`train-it2`, `grade-submitted`): the UI then
    tells the iteration, the split and the system apart (the cache key ignores the name)."""

    def call(t) -> object:
        bound = bind(t, cache)

        def run(run_name: str, request) -> Ran:
            named = bound.with_options(task_run_name=run_name) if run_name else bound
            state = named(request, return_state=True)
            return state.result(), state.name == "Cached"  # result() raises the step's error

        return run

    return Steps(
        data=call(provision_data_step),
        model=call(provision_model_step),
        train=call(train_step),
        play=call(play_step),
        turn=call(agent_turn_step),
    )
