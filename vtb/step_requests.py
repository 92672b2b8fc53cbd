"""What each step is asked to do: one frozen request per step, carrying its typed configs and paths.

A request is the step's whole input: `pipeline.<step>(request)` reads nothing else, and the
Prefect task of steps/ is that very function. `key()` names the step's result in the cache (and
its output folder), from the fields that decide the result (vtb/keys.py); the fields it leaves
out are where the work happens (`cache`, `data_dir`, `store`, the sandbox shape, the budget's
limits), which can change without changing the result. tests/test_step_requests.py checks that
every field is read, by the step or by its key.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path

from vtb import keys
from vtb.agents import Feedback
from vtb.config import AgentConfig, EngineConfig, ModelConfig, SandboxConfig, TaskConfig
from vtb.hashing import hash_json
from vtb.ledger import StepLimits

UNLIMITED = StepLimits(None, None, None)  # what the budget leaves an unbudgeted step: no cap of its own


def _paths(request: object, *names: str) -> None:
    """The named fields as `Path`s, whatever a caller passed (a result's folder is a str)."""
    for name in names:
        value = getattr(request, name)
        if value is not None and not isinstance(value, Path):
            object.__setattr__(request, name, Path(value))


@dataclass(frozen=True)
class DataRequest:
    """Write the task's splits under cache/data/ (once per task config, salt and generator code)."""

    task: TaskConfig
    cache: Path

    def __post_init__(self) -> None:
        _paths(self, "cache")

    def key(self) -> str:
        return keys.data_key(self.task)


@dataclass(frozen=True)
class ModelRequest:
    """Make, convert or fetch the base model into cache/models/<name>-<key>."""

    model: ModelConfig
    task: TaskConfig
    data_dir: Path
    data_hashes: dict[str, str]  # the splits' sha256s: the tiny model is pre-trained on the pool
    cache: Path
    sandbox: SandboxConfig

    def __post_init__(self) -> None:
        _paths(self, "data_dir", "cache")

    def key(self) -> str:
        # the tiny model is pre-trained at model.pretrain_threads, not sandbox.threads (_build_tiny)
        return keys.model_key(
            self.model, self.data_hashes, self.sandbox.numerics(self.model.pretrain_threads)
        )

    def out(self) -> Path:
        """The model's folder: the key names it, so a key and its folder cannot disagree."""
        return self.cache / "models" / f"{self.model.name}-{self.key()[:16]}"


@dataclass(frozen=True)
class TrainRequest:
    """Run a system's trainer on its data, from the base model, into cache/checkpoints/<key>."""

    snapshot_dir: Path
    parts: dict[str, str]  # the snapshot's part hashes (vtb/workspace.part_hashes)
    base_dir: Path
    base_hash: str
    seed: int
    cache: Path
    sandbox: SandboxConfig
    limits: StepLimits = UNLIMITED

    def __post_init__(self) -> None:
        _paths(self, "snapshot_dir", "base_dir", "cache")

    def key(self) -> str:
        return keys.train_key(
            self.base_hash, self.parts, self.seed, self.sandbox.numerics(self.sandbox.threads)
        )

    def out(self) -> Path:
        return self.cache / "checkpoints" / self.key()[:24]


@dataclass(frozen=True)
class PlayRequest:
    """Play a split's episodes against a harness, the weights in `model_dir` answering.

    `mode` says which weights answer and why (model, null, base, regrade, audit); grading plays
    add `flops_per_episode` (validation's spend, capped) and `shard` (the val split's size)."""

    harness_dir: Path
    harness_hash: str
    model_dir: Path
    weights_key: str | None  # the train key of the weights (a fetched model: its folder's hash)
    split: str
    split_hash: str
    data_dir: Path
    task: TaskConfig
    sandbox: SandboxConfig
    engine: EngineConfig = field(default_factory=EngineConfig)
    limits: StepLimits = UNLIMITED
    mode: str = "model"
    flops_per_episode: float | None = None
    shard: int | None = None

    def __post_init__(self) -> None:
        _paths(self, "harness_dir", "model_dir", "data_dir")

    def key(self) -> str:
        key = keys.play_key(
            self.weights_key,
            self.harness_hash,
            self.split,
            self.split_hash,
            self.mode,
            self.task,
            self.engine,
            self.sandbox.numerics(self.sandbox.model_server_threads),
        )
        if self.flops_per_episode is not None:  # a different cap is a different play
            key = hash_json([key, "flops-per-episode", self.flops_per_episode])
        if self.shard:
            key = hash_json([key, "shard", self.shard])
        return key

    @property
    def audit(self) -> bool:
        """A provenance audit (vtb/provenance.py): the task texts swapped between neighbours."""
        return self.mode == "audit"


@dataclass(frozen=True)
class TurnRequest:
    """The research agent's turn in the research sandbox, from snapshot `before`."""

    agent: AgentConfig
    feedback: Feedback  # what the agent is told: its history and budget (so a resumed run replays it)
    before: str
    store: Path
    workspace: Path
    data_dir: Path
    base_dir: Path
    sandbox: SandboxConfig
    limits: StepLimits = UNLIMITED

    def __post_init__(self) -> None:
        _paths(self, "store", "workspace", "data_dir", "base_dir")

    def key(self) -> str:
        fb = self.feedback
        return keys.turn_key(self.agent, fb.task, fb.seed, self.before, asdict(fb))
