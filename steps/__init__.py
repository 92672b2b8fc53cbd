"""Prefect tasks: thin wrappers that give each pipeline function a content-hash cache key.

Cache keys are computed by the flow from exactly what determines the result (DESIGN.md) and
passed in as `key`; Prefect's default policy (which includes the flow-run id) is never used.
Results are small JSON-able dicts persisted under <cache_dir>/prefect; big artifacts
(checkpoints, snapshots) live in content-addressed folders and are returned as paths.
"""

from steps.common import bind
from steps.evaluate import play_step
from steps.provision import provision_data_step, provision_model_step
from steps.research import agent_turn_step
from steps.train import train_step

__all__ = [
    "bind",
    "play_step",
    "provision_data_step",
    "provision_model_step",
    "agent_turn_step",
    "train_step",
]
