"""GPU smoke test: DeepSpeed training, vLLM grading, engine throughput and GPU-seconds, on one GPU.

    scripts/gpu_smoke.sh            (runs the `gpu` pytest suite, then this; under 8 minutes)
    python scripts/gpu_smoke.py --gpu 0 --out /tmp/gpu-smoke

Offline, like every run: the math miniature and the tiny base model are made here.
  1. ZeRO-2 SFT (bf16, 1 rank) of the initial system's data, launched by the deepspeed launcher
     in the bwrap research sandbox with the GPU passed through; GPU-seconds metered by NVML.
  2. The val split graded with the initial harness on engine=vllm and on engine=transformers,
     each served by a model server in a sandbox with the GPU (same checkpoint, same harness):
     scores, GPU-seconds, wall.
  3. Throughput: the same prompts through both engines in this process, generated tokens/s.
Prints a table and writes it, with the raw figures, to --out/gpu_smoke.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gpu", default="0", help="the GPU index to use")
    parser.add_argument("--out", type=Path, default=Path("/tmp/vtb-gpu-smoke"))
    parser.add_argument("--prompts", type=int, default=256, help="prompts for the throughput figure")
    parser.add_argument(
        "--cpu",
        action="store_true",
        help="check this script's plumbing without a GPU: DeepSpeed on a CPU rank, vLLM falls back",
    )
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    figures: dict = {}
    t0 = time.monotonic()

    def say(msg: str) -> None:
        print(f"[gpu-smoke {time.monotonic() - t0:6.1f}s] {msg}", flush=True)

    import torch

    if not torch.cuda.is_available() and not args.cpu:
        print(
            "error: no CUDA GPU visible; this smoke test needs one (--cpu checks the plumbing only)",
            file=sys.stderr,
        )
        return 2
    import deepspeed

    try:
        import vllm
    except ImportError:
        if not args.cpu:
            raise
        vllm = None

    from vtb import pipeline, runner
    from vtb.compose import task_config
    from vtb.config import BenchConfig, DeepSpeedConfig, ModelConfig, SandboxConfig, TrainerConfig
    from vtb.domains.registry import get_domain
    from vtb.engine.select import engine_env
    from vtb.sandbox.base import Limits
    from vtb.service import ModelService

    gpu = None if args.cpu else args.gpu
    figures["versions"] = {
        "torch": torch.__version__,
        "deepspeed": deepspeed.__version__,
        "vllm": vllm.__version__ if vllm else None,
        "gpu": torch.cuda.get_device_name(int(gpu)) if gpu else "none (--cpu)",
    }
    say(f"versions {figures['versions']}")
    task = task_config("math", n_pool=2000, n_val=200, n_test=50, initial_data_size=400, initial_noise=0.0)
    sandbox_cfg = SandboxConfig(threads=8, step_wall_s=600, step_cpu_s=3600, gpus=gpu)
    ds = (
        DeepSpeedConfig(stage=2, gpus=1, precision="fp32", cpu=True)
        if args.cpu
        else DeepSpeedConfig(stage=2, gpus=1)
    )
    cfg = BenchConfig(
        task=task,
        model=ModelConfig(),
        sandbox=sandbox_cfg,
        trainer=TrainerConfig(epochs=3, lr=2e-3, deepspeed=ds),
    )
    cache = args.out / "cache"
    cache.mkdir(exist_ok=True)
    data = pipeline.provision_data(task, cache)
    data_dir = Path(data.data_dir)
    cpu_sandbox = replace(sandbox_cfg, gpus=None)
    model = pipeline.provision_model(cfg.model, task, data_dir, cache / "base", cpu_sandbox, lambda s: None)
    base = Path(model.base_dir)
    say(f"data {data.counts}, tiny base model {model.n_params} params")

    store = cache / "snapshots"
    store.mkdir(exist_ok=True)
    sid = pipeline.build_system("initial", cfg, data_dir, store)
    sandbox = pipeline.sandbox_for(sandbox_cfg)
    limits = Limits(wall_seconds=600, cpu_seconds=3600)
    trained = runner.train(
        sandbox,
        store / sid,
        base,
        cache / "train",
        seed=0,
        limits=limits,
        echo=lambda line: print(f"  [train] {line}", flush=True),
    )
    if not trained.ok:
        print(trained.log[-4000:], file=sys.stderr)
        say(f"DeepSpeed training failed (rc {trained.returncode}, killed {trained.killed})")
        return 1
    checkpoint = cache / "train" / "checkpoint"
    figures["train"] = {
        "steps": trained.summary["steps"],
        "tokens": trained.summary["tokens"],
        "final_loss": trained.summary["final_loss"],
        "wall_s": round(trained.charge.wall_seconds, 1),
        "gpu_seconds": round(trained.charge.gpu_seconds, 1),
        "cpu_seconds": round(trained.charge.cpu_seconds, 1),
    }
    say(f"trained with DeepSpeed ZeRO-2: {figures['train']}")

    domain = get_domain("math")
    figures["grade"] = {}
    for name in ("vllm", "transformers"):
        episodes = domain.episodes(data_dir, "val", task, sandbox=sandbox)
        # The model server (vtb/serve) holds the GPU and the checkpoint; the harness only its socket.
        with ModelService(
            sandbox, checkpoint, limits, env=engine_env(name, {}, fallback=args.cpu)
        ) as service:
            out = runner.play(
                sandbox,
                store / sid / "harness",
                service,
                episodes,
                limits=replace(limits, max_flops=None),
                round_timeout_s=300,
                per_episode_timeout_s=1.0,
            )
        out.charge, out.engine = out.charge + service.charge, service.engine
        score = sum(ep.reward() for ep in episodes) / len(episodes)
        figures["grade"][name] = {
            "engine_ran": out.engine,
            "val_score": round(score, 4),
            "answered": len(out.actions),
            "wall_s": round(out.charge.wall_seconds, 1),
            "gpu_seconds": round(out.charge.gpu_seconds, 1),
            "flops": out.charge.flops,
        }
        say(f"graded val on {name}: {figures['grade'][name]}")

    figures["throughput"] = throughput(checkpoint, data_dir, args.prompts, say, with_vllm=not args.cpu)
    (args.out / "gpu_smoke.json").write_text(json.dumps(figures, indent=2) + "\n")
    print(table(figures))
    say(f"done; figures in {args.out / 'gpu_smoke.json'}")
    return 0


def throughput(checkpoint: Path, data_dir: Path, n: int, say, with_vllm: bool = True) -> dict:
    """Generated tokens/s of both engines on the same prompts (greedy, 40 new tokens, one call)."""
    import os

    from vtb.engine.infer import Engine
    from vtb.engine.vllm_engine import VLLMEngine

    os.environ.pop("VTB_MAX_FLOPS", None)
    rows = [json.loads(line) for line in (data_dir / "research" / "pool.jsonl").read_text().splitlines()[:n]]
    prompts = [f"Question: {r['question']}\nAnswer:" for r in rows]
    out = {}
    engines = [("transformers", lambda: Engine(checkpoint)), ("vllm", lambda: VLLMEngine(checkpoint))]
    for name, make in engines if with_vllm else engines[:1]:
        engine = make()
        engine.generate(prompts[:8], max_new_tokens=8)  # warm-up (kernels, allocator)
        start = time.monotonic()
        texts = engine.generate(prompts, max_new_tokens=40, batch_size=256)
        seconds = time.monotonic() - start
        used = engine.last_usage
        out[name] = {
            "prompts": len(prompts),
            "generated_tokens": used["generated_tokens"],
            "seconds": round(seconds, 3),
            "generated_tokens_per_s": round(used["generated_tokens"] / seconds, 1),
            "all_tokens_per_s": round((used["generated_tokens"] + used["prompt_tokens"]) / seconds, 1),
            "texts": texts[:3],
        }
        say(f"throughput {name}: {out[name]['generated_tokens_per_s']} generated tokens/s")
        del engine
    if with_vllm:
        same = sum(a == b for a, b in zip(out["transformers"]["texts"], out["vllm"]["texts"], strict=True))
        out["first_texts_equal"] = f"{same}/3"
    else:
        out["vllm"] = {"prompts": len(prompts), "generated_tokens_per_s": "n/a (--cpu)"}
    return out


def table(f: dict) -> str:
    g, t = f["grade"], f["throughput"]
    lines = [
        "| what | transformers | vllm |",
        "| --- | --- | --- |",
        f"| val score (initial harness, DeepSpeed-trained) | {g['transformers']['val_score']} | {g['vllm']['val_score']} |",
        f"| grading wall s | {g['transformers']['wall_s']} | {g['vllm']['wall_s']} |",
        f"| grading GPU-seconds charged | {g['transformers']['gpu_seconds']} | {g['vllm']['gpu_seconds']} |",
        f"| grading FLOPs charged | {g['transformers']['flops']:.3g} | {g['vllm']['flops']:.3g} |",
        f"| generated tokens/s ({t['vllm']['prompts']} prompts) | {t['transformers']['generated_tokens_per_s']} | {t['vllm']['generated_tokens_per_s']} |",
        f"\nDeepSpeed ZeRO-2 training: {f['train']['steps']} steps, {f['train']['tokens']} tokens, "
        f"{f['train']['wall_s']} s wall, {f['train']['gpu_seconds']} GPU-seconds charged, loss {f['train']['final_loss']:.3f}",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
