"""Building a bench before its loop runs: the checks that refuse a run before any budget is
spent (the config, the agent, GPUs, the data and the systems written from it), the FLOPs floor's
calibration, the reference model's config and a run's id. vtb/bench.py keeps the loop.
"""

from __future__ import annotations

import hashlib
import tempfile
import time
from dataclasses import asdict, replace
from pathlib import Path

from vtb import pipeline, runner
from vtb import preflight as preflight_checks
from vtb.agents import make_agent
from vtb.config import BenchConfig, ModelConfig
from vtb.domains.registry import get_domain
from vtb.engine.select import engine_env
from vtb.hashing import hash_json
from vtb.ledger import FlopsFloor, check_budget
from vtb.results import DataResult
from vtb.sandbox import runtime_mounts
from vtb.step_requests import DataRequest


def default_run_id(cfg: BenchConfig) -> str:
    """Same config → same run id, so a killed run started again resumes into the same record."""
    tag = hash_json({k: v for k, v in asdict(cfg).items() if k not in ("runs_dir", "cache_dir", "run_id")})
    return f"{cfg.task.name}-{cfg.agent.name}-s{cfg.seed}-{tag[:8]}"


def run_id(cfg: BenchConfig) -> str:
    """The run's id: `run_id` where the config sets one, else `default_run_id`."""
    return cfg.run_id or default_run_id(cfg)


def flops_floor_calibration(cfg: BenchConfig, cache: Path, base_dir: Path, system_dir: Path) -> dict:
    """The floor's rates: budget.flops_per_cpu_second for every kind, or calibrated on this base model.

    Keyed by the model's architecture (its config.json) and the trainer config, not the weights:
    rates depend on shapes, so benches on one model shape share a calibration. The rates are
    FLOPs per CPU-second of CPU work, so they are measured in a sandbox without GPUs; a model
    other than the tiny kind is too big for that and is stood in for by the tiny shape
    (`calibrate.proxy_parts`: a looser floor, recorded as `proxy` in calibration.json).
    """
    if cfg.budget.flops_per_cpu_second is not None:
        return {
            "cpu_rate": float(cfg.budget.flops_per_cpu_second),
            "startup_cpu_seconds": 0.0,
            "machine": {"key": "config"},
        }
    from vtb import calibrate

    backend = f"{cfg.sandbox.backend} threads={cfg.sandbox.threads}"
    sandbox = runner.sandbox_for(replace(cfg.sandbox, gpus=None))
    if cfg.model.kind != "tiny":
        with tempfile.TemporaryDirectory(prefix="vtb-calibrate-proxy-") as tmp:
            base, system = calibrate.proxy_parts(Path(tmp))
            found = calibrate.load_or_calibrate(sandbox, cache, backend, base, system, "proxy-tiny", "proxy")
        return {**found, "proxy": f"the tiny model shape stands in for model.kind={cfg.model.kind}"}
    model = hashlib.sha256((base_dir / "config.json").read_bytes()).hexdigest()[:16]
    trainer = hashlib.sha256((system_dir / "trainer" / "config.json").read_bytes()).hexdigest()[:16]
    return calibrate.load_or_calibrate(sandbox, cache, backend, base_dir, system_dir, model, trainer)


def floor_of(cfg: BenchConfig, calibration: dict) -> FlopsFloor:
    return FlopsFloor(
        cpu_rate=calibration["cpu_rate"],
        fraction=cfg.budget.floor_fraction,
        gpu_rate=cfg.budget.flops_per_gpu_second,
        startup_cpu_seconds=calibration.get("startup_cpu_seconds", 0.0),
        slack_cpu_seconds=cfg.budget.floor_slack_cpu_seconds,
        machine=calibration["machine"]["key"],
        train_rate=calibration.get("train_rate"),
        infer_rate=calibration.get("infer_rate"),
    )


def reference_model_config(model: ModelConfig) -> ModelConfig:
    """The model config that provisions a preset's reference instruct model (from the hub, or a local dir)."""
    return replace(
        model,
        name=f"{model.name}-reference",
        kind="hub",
        hub_id=model.reference_hub_id,
        reference_hub_id=None,
    )


def preflight(cfg: BenchConfig) -> None:
    """Everything that can be checked before any work; a ValueError names the setting and the fix."""
    check_runtime(cfg)  # an environment the sandboxes cannot mount (sandbox code missing from the package)
    check_budget(cfg.budget.unit, cfg.sandbox.gpus)  # a budget that cannot be metered
    check_gpu_settings(cfg)  # GPU presets without a GPU
    pipeline.model_kind(cfg.model.kind)  # a model kind nobody registered
    agent = make_agent(cfg.agent)  # a misconfigured agent (no endpoint, CLI not installed)
    check = getattr(agent, "preflight", None)  # an agent's own checks (agent=llm: its endpoint answers)
    if callable(check):
        check()


_PASSED: dict[str, dict] = {}  # preflight summaries by what they checked: once per process


def check_data(cfg: BenchConfig, data: DataResult, store: Path) -> tuple[str, dict]:
    """The data preflight (vtb/preflight.py): split sizes before any system is written from them,
    then the initial and reference systems are written (snapshots in `store`) and the domain checks
    them with its data. Returns the initial system's snapshot id and what was checked.

    The CLI runs it before the flow starts (`preflight_data`), so a refusal is one message, and
    the bench again inside the flow (sweeps and deployments start there); what passed once in a
    process is not checked twice.
    """
    preflight_checks.check_sizes(cfg.task, data.counts)
    data_dir = Path(data.data_dir)
    initial = pipeline.build_system("initial", cfg, data_dir, store)
    reference = pipeline.build_system("reference", cfg, data_dir, store) if cfg.reference else None
    memo = hash_json([data.hashes, initial, reference, asdict(cfg.task), asdict(cfg.sandbox)])
    if memo not in _PASSED:
        t0 = time.monotonic()
        systems = preflight_checks.Systems(store / initial, store / reference if reference else None)
        checked = preflight_checks.check_domain(
            get_domain(cfg.task.name), cfg.task, data_dir, systems, cfg.sandbox
        )
        _PASSED[memo] = {
            "splits": data.counts,
            "checked": ["splits", *checked],
            "seconds": round(time.monotonic() - t0, 3),
        }
    return initial, _PASSED[memo]


def preflight_data(cfg: BenchConfig) -> None:
    """The data preflight before a flow starts: the data step's own function (its folder is the
    step's cache, so the flow's data step then finds it done) and `check_data`."""
    _, cache = cfg.paths()
    (cache / "snapshots").mkdir(parents=True, exist_ok=True)
    check_data(cfg, pipeline.provision_data(DataRequest(cfg.task, cache)), cache / "snapshots")


def check_runtime(cfg: BenchConfig) -> None:
    """The Python runtime and the project's sandbox code can be mounted into sandboxes as they are
    laid out here (vtb/sandbox/runtime.py): editable or not, in any virtualenv. A docker image with
    its own runtime mounts none of it."""
    if cfg.sandbox.backend == "docker" and cfg.sandbox.runtime == "image":
        return
    try:
        runtime_mounts()
    except (RuntimeError, FileNotFoundError, ValueError) as e:
        raise ValueError(str(e)) from None


def check_gpu_settings(cfg: BenchConfig) -> None:
    """GPU presets without a GPU given to the sandboxes fail here, before any work, naming the fix."""
    engine_env(cfg.engine.name, cfg.engine.options, cfg.engine.fallback)  # checks the engine name
    if cfg.sandbox.gpus:
        return
    if cfg.model.needs_gpu:
        raise ValueError(
            f"model={cfg.model.name} needs a GPU (and a model hub): set sandbox.gpus=0 (or all), "
            "or use model=tiny / model=smollm2 on a CPU"
        )
    ds = cfg.trainer.deepspeed
    if ds is not None and not ds.cpu:
        raise ValueError(
            f"trainer={cfg.trainer.name} launches DeepSpeed on GPUs: set sandbox.gpus=0 (or all), "
            "or trainer.deepspeed.cpu=true for slow CPU ranks, or trainer=sft"
        )
