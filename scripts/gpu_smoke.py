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

It FAILS (exit 1, each reason on stderr) when the vLLM row ran on the transformers engine (a
fallback), when any episode went unanswered, when a harness needed more than one restart, or
when it ran past its time budget (`smoke_failures`, unit-tested on the CPU in
tests/test_gpu_smoke.py). A host that cannot build Triton's launcher stops it before any work.

Sizing (one GPU, under 8 minutes with scripts/gpu_smoke.sh's pytest part, which takes about 2):
the tiny model (a few hundred thousand parameters), 400 training rows x 3 epochs on one ZeRO-2
rank, 200 val episodes per engine and 256 throughput prompts x 40 tokens. Their GPU work is
seconds; what takes the time is fixed cost: provisioning the tiny base model on the CPU (~30 s),
DeepSpeed's start (~30 s), and three vLLM starts (two servers' worth of engine load plus the
throughput engine, ~40-60 s each with enforce_eager and a cold Triton cache). gpu_smoke.sh gives
this script what is left of 480 s after the pytest part as --budget-s.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


MAX_RESTARTS = 1  # harness restarts a grading run may need; more fails the smoke


def smoke_failures(
    grades: dict[str, dict],
    n_episodes: int,
    expect_vllm: bool = True,
    elapsed_s: float | None = None,
    budget_s: float | None = None,
) -> list[str]:
    """Why the smoke failed (one line each), [] when it passed. Pure: tests feed it fake grades.

    grades: per engine name ("vllm", "transformers"), the figures `main` records: engine_ran
    (the server's engine, "transformers (fallback from vllm: ...)" on a fallback), answered,
    restarts (harness processes that died or were killed) and failed (episode id -> why).
    expect_vllm=False (--cpu) requires the vLLM row to have fallen back instead.
    """
    failures = []
    for name in ("vllm", "transformers"):
        g = grades.get(name)
        if g is None:
            failures.append(f"{name}: not graded")
            continue
        ran = str(g.get("engine_ran", ""))
        fell_back = "fallback" in ran or not ran.startswith(name)
        if name == "vllm" and expect_vllm and fell_back:
            failures.append(f"vllm: the grading ran on {ran or 'no engine'!r}, not vLLM")
        elif name == "vllm" and not expect_vllm and not ran.startswith("transformers (fallback"):
            failures.append(f"vllm (--cpu): expected a fallback to transformers, ran {ran!r}")
        elif name == "transformers" and fell_back:
            failures.append(f"transformers: the grading ran on {ran!r}")
        unanswered = n_episodes - int(g.get("answered", 0))
        failed = g.get("failed") or {}
        if unanswered > 0 or failed:
            why = "; ".join(f"{k}: {v}" for k, v in list(failed.items())[:3])
            failures.append(
                f"{name}: {max(unanswered, len(failed))} of {n_episodes} episodes unanswered ({why})"
            )
        if int(g.get("restarts", 0)) > MAX_RESTARTS:
            failures.append(f"{name}: {g['restarts']} harness restarts (at most {MAX_RESTARTS})")
    if budget_s is not None and elapsed_s is not None and elapsed_s > budget_s:
        failures.append(f"took {elapsed_s:.0f} s, over its {budget_s:.0f} s budget")
    return failures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gpu", default="0", help="the GPU index to use")
    parser.add_argument("--out", type=Path, default=Path("/tmp/vtb-gpu-smoke"))
    parser.add_argument("--prompts", type=int, default=256, help="prompts for the throughput figure")
    parser.add_argument("--budget-s", type=float, default=360.0, help="fail when this script takes longer")
    parser.add_argument(
        "--cpu",
        action="store_true",
        help="check this script's plumbing without a GPU: DeepSpeed on a CPU rank, vLLM falls back",
    )
    args = parser.parse_args()
    from vtb.engine.toolchain import triton_problems

    problems = [] if args.cpu else triton_problems()  # bwrap sandboxes see this host's /usr
    if problems:
        print("error: vLLM could not start:\n  " + "\n  ".join(problems), file=sys.stderr)
        return 2
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
    from vtb.engine.select import VLLM_ENV, engine_env
    from vtb.sandbox.base import Limits
    from vtb.service import ModelService, engine_cache_for
    from vtb.step_requests import DataRequest, ModelRequest

    os.environ.update(VLLM_ENV)  # the throughput engine runs vLLM in this process: logs to stderr

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
    data = pipeline.provision_data(DataRequest(task, cache))
    data_dir = Path(data.data_dir)
    cpu_sandbox = replace(sandbox_cfg, gpus=None)
    model = pipeline.provision_model(ModelRequest(cfg.model, task, data_dir, data.hashes, cache, cpu_sandbox))
    base = Path(model.base_dir)
    say(f"data {data.counts}, tiny base model {model.n_params} params")

    store = cache / "snapshots"
    store.mkdir(exist_ok=True)
    sid = pipeline.build_system("initial", cfg, data_dir, store)
    sandbox = runner.sandbox_for(sandbox_cfg)
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
        env = engine_env(name, {}, fallback=args.cpu)
        with ModelService(sandbox, checkpoint, limits, env=env, cache_dir=engine_cache_for(name)) as service:
            out = runner.play(
                sandbox,
                store / sid / "harness",
                service,
                episodes,
                limits=replace(limits, max_flops=None),
                round_timeout_s=300,
                per_episode_timeout_s=1.0,
                max_restarts=MAX_RESTARTS,
            )
        out.charge, out.engine = out.charge + service.charge, service.engine
        score = sum(ep.reward() for ep in episodes) / len(episodes)
        figures["grade"][name] = {
            "engine_ran": out.engine,
            "val_score": round(score, 4),
            "episodes": len(episodes),
            "answered": len(out.actions),
            "restarts": out.crashes,
            "failed": dict(list(out.failed.items())[:10]),
            "wall_s": round(out.charge.wall_seconds, 1),
            "gpu_seconds": round(out.charge.gpu_seconds, 1),
            "flops": out.charge.flops,
        }
        say(f"graded val on {name}: {figures['grade'][name]}")

    figures["throughput"] = throughput(checkpoint, data_dir, args.prompts, say, with_vllm=not args.cpu)
    elapsed = time.monotonic() - t0
    failures = smoke_failures(figures["grade"], len(episodes), not args.cpu, elapsed, args.budget_s)
    figures["elapsed_s"], figures["failures"] = round(elapsed, 1), failures
    (args.out / "gpu_smoke.json").write_text(json.dumps(figures, indent=2) + "\n")
    print(table(figures))
    say(f"done; figures in {args.out / 'gpu_smoke.json'}")
    if failures:
        print("SMOKE FAILED:\n  " + "\n  ".join(failures), file=sys.stderr)
        return 1
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
        f"| engine that ran | {g['transformers']['engine_ran']} | {g['vllm']['engine_ran']} |",
        f"| answered / restarts | {g['transformers']['answered']}/{g['transformers']['episodes']}, {g['transformers']['restarts']} | {g['vllm']['answered']}/{g['vllm']['episodes']}, {g['vllm']['restarts']} |",
        f"| grading FLOPs charged | {g['transformers']['flops']:.3g} | {g['vllm']['flops']:.3g} |",
        f"| generated tokens/s ({t['vllm']['prompts']} prompts) | {t['transformers']['generated_tokens_per_s']} | {t['vllm']['generated_tokens_per_s']} |",
        f"\nDeepSpeed ZeRO-2 training: {f['train']['steps']} steps, {f['train']['tokens']} tokens, "
        f"{f['train']['wall_s']} s wall, {f['train']['gpu_seconds']} GPU-seconds charged, loss {f['train']['final_loss']:.3f}",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
