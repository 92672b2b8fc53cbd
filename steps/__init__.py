"""Prefect tasks: the pipeline functions themselves, each cached by its request's key.

Keys come from the requests (vtb/step_requests.py, built on vtb/keys.py) from exactly what
determines the result; Prefect's default policy (which includes the flow-run id) is never used.
Results are the small typed records of vtb/results.py, persisted under <cache_dir>/prefect; big
artifacts (checkpoints, snapshots) live in content-addressed folders and are returned as paths.
`prefect_steps` hands the core these tasks as plain callables.
"""

from steps.common import bind
from steps.tasks import (
    agent_turn_step,
    play_step,
    prefect_steps,
    provision_data_step,
    provision_model_step,
    train_step,
)

__all__ = [
    "bind",
    "prefect_steps",
    "play_step",
    "provision_data_step",
    "provision_model_step",
    "agent_turn_step",
    "train_step",
]
