"""One cache key per step, from exactly what determines its result.

A step's key is also the name of its output folder (data/<task>-<key>, models/<name>-<key>,
checkpoints/<key>), so a key and the folder it names cannot disagree. Prefect's default key
(which includes the flow-run id) is never used: the bench passes these in as `key`.
"""

from __future__ import annotations

from dataclasses import asdict

from vtb import salt
from vtb.agents.prompt import template_digest
from vtb.config import AgentConfig, EngineConfig, ModelConfig, TaskConfig
from vtb.hashing import code_version, hash_json

# The source each kind of result depends on; part of its key.
TRAIN_CODE = ("engine", "models")
PLAY_CODE = (
    "engine",
    "models",
    "protocol.py",
    "runner.py",
    "service.py",
    "serve",
    "sandbox/egress.py",
    "domains",
)
MODEL_CODE = ("models", "engine", "domains")
DATA_CODE = ("domains",)
TURN_CODE = ("agents",)
RESULTS = "typed-2"  # the results' shape (vtb/results.py): a new shape never reads an old cache


def data_key(task: TaskConfig) -> str:
    """A generator change makes a new key and new splits, never the old splits under a new key."""
    return hash_json(["data", RESULTS, asdict(task), salt.salt_sha256(task), code_version(*DATA_CODE)])


def model_key(model: ModelConfig, data_hashes: dict[str, str], numerics: list) -> str:
    """Only the tiny model depends on the data (it is pre-trained on the pool's questions) and on
    the sandbox's numerics (`SandboxConfig.numerics`): a converted or fetched checkpoint is the
    same for every split and sandbox, so a new shape reuses it."""
    tiny = model.kind == "tiny"
    made = [data_hashes, numerics] if tiny else None
    return hash_json(["model", RESULTS, asdict(model), made, code_version(*MODEL_CODE)])


def train_key(base_hash: str, parts: dict[str, str], seed: int, numerics: list) -> str:
    """The harness is not in it: a harness-only edit reuses the checkpoint (and is charged once).
    `numerics`: the trainer sandbox's (`SandboxConfig.numerics`)."""
    return hash_json(
        [
            "train",
            RESULTS,
            base_hash,
            parts["data"],
            parts["trainer"],
            seed,
            numerics,
            code_version(*TRAIN_CODE),
        ]
    )


def play_key(
    weights_key: str | None,
    harness_hash: str,
    split: str,
    split_hash: str,
    mode: str,  # model | null | base: which weights answer (grading's checks swap them)
    task: TaskConfig,
    engine: EngineConfig,
    numerics: list,
) -> str:
    """`numerics`: the model server's (`SandboxConfig.numerics(server_threads)`). The same tokens
    in every measurement so far, but a library may sum in another order on more threads, so a
    play is only reused for its own thread count and code paths."""
    return hash_json(
        [
            "play",
            RESULTS,
            weights_key,
            harness_hash,
            split,
            split_hash,
            mode,
            asdict(task),
            asdict(engine),
            code_version(*PLAY_CODE),
            numerics,
        ]
    )


def turn_key(agent: AgentConfig, task: str, seed: int, before: str, feedback: dict) -> str:
    """The feedback holds the history and the budget: a resumed run replays the agent's past edits.
    The domain's proposals (the greedy agent's plan) count like the agent's code."""
    return hash_json(
        [
            "turn",
            RESULTS,
            asdict(agent),
            template_digest(agent, task),
            seed,
            before,
            feedback,
            code_version(*TURN_CODE, f"domains/{task}/kit/proposals.json"),
        ]
    )
