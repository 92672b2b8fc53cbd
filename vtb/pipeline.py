"""The pipeline's steps as plain functions: provision, build a system, train, play, turn.

steps/ wraps each in a Prefect task with a content-hash cache key; tests call them directly.
Every function takes paths and plain values, and returns JSON-able dicts, so a cached result
is just a small file and a resumed run can rebuild its ledger from the charges inside.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

from vtb.config import BenchConfig, ModelConfig, SandboxConfig, TaskConfig
from vtb.domains import salt
from vtb.domains.registry import get_domain
from vtb.hashing import code_version, hash_dir, hash_file, hash_json
from vtb.sandbox import make_sandbox, runtime_mounts
from vtb.sandbox.base import Limits, Mount
from vtb.workspace import snapshot

# The source each kind of result depends on; part of its cache key.
TRAIN_CODE = ("engine", "models")
PLAY_CODE = ("engine", "models", "protocol.py", "runner.py", "domains")
MODEL_CODE = ("models", "engine", "domains")
DATA_CODE = ("domains",)


def data_key(task: TaskConfig) -> str:
    """The data step's cache key, which also names its folder, so the two cannot disagree: a
    generator change makes a new key and new splits, never the old splits under a new key."""
    return hash_json(["data", asdict(task), salt.salt_sha256(task), code_version(*DATA_CODE)])


def provision_data(task: TaskConfig, cache: Path) -> dict:
    """Write the task's splits once per task config and salt: research/ (pool, val) and hidden/ (test).

    The cache key and the result carry the salt's sha256 (`test_salt_sha256`, vtb/domains/salt.py),
    never the salt: a salt from a file or the environment changes the key as an inline one does.
    """
    domain = get_domain(task.name)
    salt_hash = salt.salt_sha256(task)
    data_dir = cache / "data" / f"{task.name}-{data_key(task)[:16]}"
    if not (data_dir / "DONE").exists():
        tmp = Path(tempfile.mkdtemp(dir=cache, prefix=".data-"))
        counts = domain.provision(task, tmp)
        (tmp / "counts.json").write_text(json.dumps(counts))
        (tmp / "DONE").write_text("")
        shutil.rmtree(data_dir, ignore_errors=True)
        data_dir.parent.mkdir(parents=True, exist_ok=True)
        tmp.rename(data_dir)
    return {
        "data_dir": str(data_dir),
        "counts": json.loads((data_dir / "counts.json").read_text()),
        "hashes": {
            "pool": hash_file(data_dir / "research" / "pool.jsonl"),
            "val": hash_file(data_dir / "research" / "val.jsonl"),
            "test": hash_file(data_dir / "hidden" / "test.jsonl"),
        },
        "test_salt_sha256": salt_hash,
    }


def provision_model(
    model: ModelConfig,
    task: TaskConfig,
    data_dir: Path,
    out: Path,
    sandbox_cfg: SandboxConfig,
    echo: Callable,
) -> dict:
    """Make (tiny, in a sandbox), convert (smollm2) or fetch (hub) the base model into out."""
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    charge: dict = {}
    if model.kind == "tiny":
        charge = _build_tiny(model, task, data_dir, tmp, sandbox_cfg, echo)
    elif model.kind == "smollm2":
        from vtb.models.smollm2 import convert_to_hf

        convert_to_hf(tmp)
    elif model.kind == "hub":
        from transformers import AutoModelForCausalLM, AutoTokenizer

        if not model.hub_id:
            raise ValueError(
                "model.kind=hub needs model.hub_id=<org/name> (and a model hub or a local HF dir)"
            )
        from vtb.models.meta import count_params, write_model_info

        AutoTokenizer.from_pretrained(model.hub_id).save_pretrained(tmp)
        hub_model = AutoModelForCausalLM.from_pretrained(model.hub_id)
        hub_model.save_pretrained(tmp)
        write_model_info(tmp, kind="hub", hub_id=model.hub_id, n_params=count_params(hub_model))
    else:
        raise ValueError(f"model.kind={model.kind!r} is not one of tiny, smollm2, hub")
    shutil.rmtree(out, ignore_errors=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp.rename(out)
    info = json.loads((out / "vtb_model.json").read_text()) if (out / "vtb_model.json").exists() else {}
    return {"base_dir": str(out), "n_params": info.get("n_params"), "hash": hash_dir(out), "charge": charge}


def _build_tiny(
    model: ModelConfig,
    task: TaskConfig,
    data_dir: Path,
    dest: Path,
    sandbox_cfg: SandboxConfig,
    echo: Callable,
) -> dict:
    from vtb.runner import charge_of, stream_lines

    domain = get_domain(task.name)
    tokens = domain.tokenizer_spec(task, data_dir)
    spec = {
        "words": tokens["words"], "number_max": tokens["number_max"], "tokenizer": tokens.get("mode", "words"),
        "texts": domain.pretraining_texts(task, data_dir, model.pretrain_texts, model.seed),
        "model": {"n_layer": model.n_layer, "n_embd": model.n_embd, "n_head": model.n_head,
                  # a domain whose conversations are long raises the window (tau: 512)
                  "n_positions": max(model.n_positions, tokens.get("min_positions", 0)),
                  "steps": model.pretrain_steps, "seed": model.seed},
    }  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="vtb-base-") as tmp:
        work = Path(tmp)
        (work / "spec.json").write_text(json.dumps(spec))
        (work / "out").mkdir()
        mounts = runtime_mounts() + [Mount(work, "/build", writable=True)]
        argv = [sys.executable, "-m", "vtb.models.build", "/build/spec.json", "/build/out/model"]
        limits = Limits(
            wall_seconds=sandbox_cfg.step_wall_s,
            cpu_seconds=sandbox_cfg.step_cpu_s,
            memory_mb=sandbox_cfg.memory_mb,
        )
        proc = sandbox_for(sandbox_cfg).start(argv, mounts=mounts, limits=limits, cwd="/build")
        proc.stdin.close()
        stream_lines(proc, echo)
        result = proc.wait()
        if result.returncode != 0 or not (work / "out" / "model" / "config.json").exists():
            raise RuntimeError(f"building the tiny base model failed (rc={result.returncode}, killed="
                               f"{result.killed}): {result.stderr[-2000:]}")  # fmt: skip
        shutil.move(str(work / "out" / "model"), dest)
    return asdict(charge_of(result))


def build_system(kind: str, cfg: BenchConfig, data_dir: Path, store: Path) -> str:
    """Write the domain's initial or reference system and snapshot it; returns the snapshot id."""
    domain = get_domain(cfg.task.name)
    with tempfile.TemporaryDirectory(prefix=f"vtb-{kind}-") as tmp:
        ws = Path(tmp)
        if kind == "initial":
            domain.write_initial_system(ws, cfg.task, cfg.trainer, data_dir)
        elif kind == "reference":
            domain.write_reference_system(ws, cfg.task, data_dir)
        else:
            raise ValueError(kind)
        return snapshot(ws, store)


def sandbox_for(cfg: SandboxConfig):
    if cfg.backend == "docker":
        return make_sandbox(
            "docker", threads=cfg.threads, image=cfg.image, gpus=cfg.gpus, runtime=cfg.runtime
        )
    return make_sandbox(cfg.backend, threads=cfg.threads, gpus=cfg.gpus)


def step_limits(
    cfg: SandboxConfig, max_flops: float | None, cpu_seconds: float | None, gpu_seconds: float | None = None
) -> Limits:
    """A step's limits: the sandbox config's per-step caps, tightened by what the budget has left."""
    cpu = cfg.step_cpu_s if cpu_seconds is None else min(cfg.step_cpu_s, cpu_seconds)
    return Limits(wall_seconds=cfg.step_wall_s, cpu_seconds=cpu, memory_mb=cfg.memory_mb, max_flops=max_flops,
                  gpu_seconds=gpu_seconds)  # fmt: skip
