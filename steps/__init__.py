"""Prefect tasks: thin wrappers that give each pipeline function its content-hash cache key.

Keys come from vtb/keys.py, computed by the bench core from exactly what determines the result,
and passed in as `key`; Prefect's default policy (which includes the flow-run id)
is never used. Results are the small typed records of vtb/results.py, persisted under
<cache_dir>/prefect; big artifacts (checkpoints, snapshots) live in content-addressed folders
and are returned as paths. `prefect_steps` hands the core these tasks as plain callables.
"""

from steps.common import bind, prefect_steps
from steps.tasks import agent_turn_step, play_step, provision_data_step, provision_model_step, train_step

__all__ = [
    "bind",
    "prefect_steps",
    "play_step",
    "provision_data_step",
    "provision_model_step",
    "agent_turn_step",
    "train_step",
]
