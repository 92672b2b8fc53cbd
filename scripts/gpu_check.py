"""GPU first light (issue 41): each GPU path of the project once, timed, on one bare GPU machine.

    scripts/gpu_check.sh OUT          (installs the bundle offline, then runs this; under 8 minutes)
    python scripts/gpu_check.py --out OUT [--cpu]

Steps, each timed, its pass/fail recorded, the next run whatever happened before it:
  1. sandbox_cuda: CUDA visible inside a bwrap sandbox given the GPU (its /dev/nvidia* nodes, /sys);
  2. sft: a tiny-model SFT run on the GPU through the project's trainer, GPU-seconds metered (NVML);
  3. play: a validation play with the transformers engine on the GPU through the model service;
  4. zero2, zero3: one DeepSpeed run each on one GPU through the project's launcher;
  5. bench: a whole shrunken math bench with sandbox.gpus set, its result and ledger (GPU-seconds);
  6. vllm: not carried (its wheel and CUDA torch are far over the 64 MiB a command can bring).
OUT/report.json is rewritten after every step (a run cut short keeps what it did); each step's
own output goes to OUT/<step>.log. --cpu runs the same steps with no GPU (sandbox.gpus unset,
DeepSpeed's CPU ranks), which is how CI checks this script (tests/test_gpu_check.py).
Exit code: 0 when every step that ran passed, 1 otherwise.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import platform
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SHAPE = {"n_layer": 2, "n_embd": 64, "n_head": 2, "n_positions": 128}
VLLM_NOTE = (
    "not carried: vLLM and the CUDA torch it pins are gigabytes, over the 64 MiB a command can bring "
    "to the GPU machine; the vLLM engine stays unverified on a GPU (docs/gpus.md)"
)


class Check:
    """Runs the steps, keeps the report, writes it after each step."""

    def __init__(self, out: Path, cpu: bool, gpu: str):
        self.out, self.cpu, self.gpu = out, cpu, gpu
        self.report: dict = {"mode": "cpu" if cpu else "gpu", "gpu": None if cpu else gpu, "steps": []}
        self.state: dict = {}

    def write(self) -> None:
        (self.out / "report.json").write_text(json.dumps(self.report, indent=2) + "\n")

    def run(self, name: str, fn) -> bool:
        print(f"[gpu-check] {name} ...", flush=True)
        start = time.monotonic()
        log = io.StringIO()
        entry: dict = {"step": name}
        try:
            with contextlib.redirect_stdout(log):
                figures = fn(self)
            entry.update(ok=True, figures=figures)
        except Skip as s:
            entry.update(ok=None, skipped=str(s))
        except Exception as e:  # the next step runs anyway: record why this one failed
            entry.update(ok=False, error=f"{type(e).__name__}: {e}"[:2000])
            log.write(traceback.format_exc())
        entry["seconds"] = round(time.monotonic() - start, 1)
        (self.out / f"{name}.log").write_text(log.getvalue())
        self.report["steps"].append(entry)
        self.write()
        verdict = {True: "PASS", False: "FAIL", None: "SKIP"}[entry["ok"]]
        print(f"[gpu-check] {name}: {verdict} ({entry['seconds']} s) {entry.get('error') or ''}", flush=True)
        return entry["ok"] is not False

    # -- shared setup --------------------------------------------------------------------------
    def sandbox_cfg(self, threads: int = 4):
        from vtb.config import SandboxConfig

        return SandboxConfig(backend="bwrap", threads=threads, gpus=None if self.cpu else self.gpu)

    def sandbox(self, threads: int = 4):
        from vtb.runner import sandbox_for

        return sandbox_for(self.sandbox_cfg(threads))

    def model_dir(self) -> Path:
        """The toy GPT-2 the steps train and serve (built once, on the CPU)."""
        if "model" not in self.state:
            from vtb.models.toy import build_toy_model

            self.state["model"] = build_toy_model(
                self.out / "work" / "toy",
                steps=30,
                n_texts=300,
                batch_size=16,
                lr=5e-3,
                progress=print,
                **SHAPE,
            )
        return self.state["model"]


class Skip(Exception):
    """A step that cannot run here, with why (recorded as skipped, not failed)."""


def _versions() -> dict:
    import torch
    import transformers

    out = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
    }
    for name in ("peft", "deepspeed", "pynvml", "hydra"):
        try:
            out[name] = getattr(__import__(name), "__version__", "installed")
        except ImportError:
            out[name] = None
    out["cuda"] = torch.version.cuda
    out["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    return out


def step_sandbox_cuda(c: Check) -> dict:
    from vtb.sandbox import runtime_mounts
    from vtb.sandbox.base import Limits

    code = (
        "import glob, json, torch; ok = torch.cuda.is_available(); "
        "print(json.dumps({'cuda': ok, 'devices': torch.cuda.device_count(), "
        "'name': torch.cuda.get_device_name(0) if ok else None, "
        "'nodes': sorted(glob.glob('/dev/nvidia*')), "
        "'sum': float(torch.ones(1024, device='cuda' if ok else 'cpu').sum())}))"
    )
    res = c.sandbox(threads=2).run(
        [sys.executable, "-c", code],
        mounts=runtime_mounts(),
        limits=Limits(wall_seconds=120, cpu_seconds=120),
    )
    print(res.stderr[-4000:])
    assert res.returncode == 0, f"the sandbox's python failed (rc {res.returncode}): {res.stderr[-600:]}"
    seen = json.loads(res.stdout.strip().splitlines()[-1])
    if not c.cpu:
        assert seen["cuda"] and seen["devices"] == 1, f"CUDA not visible in the sandbox: {seen}"
        assert seen["sum"] == 1024.0
    return {**seen, "gpu_seconds": round(res.gpu_seconds, 2), "wall_s": round(res.wall_seconds, 1)}


def _train(c: Check, trainer: dict, name: str, rows: int = 256) -> dict:
    from vtb import runner
    from vtb.models.toy import write_toy_system
    from vtb.sandbox.base import Limits

    cand = write_toy_system(c.out / "work" / name / "cand", trainer, n_rows=rows)
    out = runner.train(
        c.sandbox(),
        cand,
        c.model_dir(),
        c.out / "work" / name / "out",
        seed=0,
        limits=Limits(wall_seconds=300, cpu_seconds=1200),
        echo=print,
    )
    print(out.log[-6000:])
    assert out.ok, f"training failed (rc {out.returncode}, killed {out.killed}); see {name}.log"
    figures = {
        "steps": out.summary.get("steps"),
        "device": out.summary.get("device") or (out.summary.get("deepspeed") or {}).get("device"),
        "final_loss": out.summary.get("final_loss"),
        "flops": out.charge.flops,
        "gpu_seconds": round(out.charge.gpu_seconds, 2),
        "wall_s": round(out.charge.wall_seconds, 1),
    }
    if not c.cpu:
        assert out.charge.gpu_seconds > 0, f"no GPU-seconds metered: {figures}"
        if "deepspeed" not in trainer:
            assert figures["device"] == "cuda", f"the trainer did not train on the GPU: {figures}"
    c.state[f"{name}_checkpoint"] = c.out / "work" / name / "out" / "checkpoint"
    return figures


def step_sft(c: Check) -> dict:
    return _train(c, {"lr": 3e-3, "epochs": 1, "batch_size": 32}, "sft")


def step_play(c: Check) -> dict:
    """The math miniature's val split, its initial harness, the sft checkpoint served on the GPU."""
    from vtb import pipeline
    from vtb.compose import task_config
    from vtb.config import BenchConfig
    from vtb.ledger import StepLimits
    from vtb.step_requests import DataRequest, PlayRequest

    checkpoint = c.state.get("sft_checkpoint")
    if checkpoint is None or not Path(checkpoint).is_dir():
        checkpoint = c.model_dir()  # the sft step failed: serve the base model
    task = task_config("math", n_pool=100, n_val=40, n_test=10)
    cache = c.out / "work" / "play"
    cache.mkdir(parents=True, exist_ok=True)
    data_dir = Path(pipeline.provision_data(DataRequest(task, cache)).data_dir)
    store = cache / "snapshots"
    store.mkdir(exist_ok=True)
    sid = pipeline.build_system("initial", BenchConfig(task=task), data_dir, store)
    harness = store / sid / "harness"
    request = PlayRequest(
        harness_dir=harness,
        harness_hash="",  # played outside a bench: nothing is cached by its key
        model_dir=checkpoint,
        weights_key=None,
        split="val",
        split_hash="",
        data_dir=data_dir,
        task=task,
        sandbox=c.sandbox_cfg(),
        limits=StepLimits(None, 1200.0, 600.0),
    )
    played = pipeline.play(request)
    figures = {
        "engine": played.engine,
        "episodes": played.n,
        "answered": played.answered,
        "gpu_seconds": round(played.charge.gpu_seconds, 2),
        "flops": played.charge.flops,
        "wall_s": round(played.charge.wall_seconds, 1),
    }
    assert played.answered == played.n, f"unanswered episodes: {played.failed}; {played.stderr_tail[-600:]}"
    assert played.engine.startswith("transformers"), figures
    if not c.cpu:
        assert played.charge.gpu_seconds > 0, f"the model server held no GPU-seconds: {figures}"
    return figures


def _zero(stage: int):
    def step(c: Check) -> dict:
        try:
            import deepspeed  # noqa: F401
        except ImportError as e:
            raise AssertionError(f"deepspeed is not installed ({e}): the bundle carries its wheel") from None
        ds = {"stage": stage, "gpus": 1, "precision": "fp32" if c.cpu else "bf16", "cpu": c.cpu}
        return _train(
            c, {"lr": 3e-3, "epochs": 1, "batch_size": 32, "deepspeed": ds}, f"zero{stage}", rows=128
        )

    return step


def step_bench(c: Check) -> dict:
    from vtb.bench import Bench, plain_steps
    from vtb.bench_result import Errored
    from vtb.compose import compose_config

    overrides = [
        "task=math",
        "agent=noop",
        "task.n_pool=200",
        "task.n_val=10",
        "task.n_test=10",
        "task.initial_data_size=40",
        "model.n_layer=1",
        "model.n_embd=32",
        "model.pretrain_steps=5",
        "model.pretrain_texts=200",
        "trainer.epochs=1",
        "reference=false",
        "analysis.grid=false",
        "analysis.path=false",
        "base_model_check=false",
        "+budget.flops_per_cpu_second=1e9",
        f"runs_dir={c.out / 'work' / 'runs'}",
        f"cache_dir={c.out / 'work' / 'cache'}",
    ]
    if not c.cpu:
        overrides.append(f'sandbox.gpus="{c.gpu}"')
    result = Bench(compose_config(overrides), plain_steps()).run()
    if isinstance(result, Errored):
        raise AssertionError(f"the bench errored: {result.error} (record: {result.record})")
    record = Path(result.record)
    ledger = [json.loads(line) for line in (record / "ledger.jsonl").read_text().splitlines()]
    gpu_s = sum(float(e["charge"].get("gpu_seconds", 0.0)) for e in ledger)
    figures = {
        "initial_test": result.initial.test_score,
        "submitted_test": result.submitted.score.test_score,
        "ledger_entries": len(ledger),
        "ledger_gpu_seconds": round(gpu_s, 2),
        "budget": result.budget.to_json(),
        "record": str(record),
    }
    if not c.cpu:
        assert gpu_s > 0, f"the ledger charged no GPU-seconds: {figures}"
    return figures


def step_vllm(c: Check) -> dict:
    try:
        import vllm  # noqa: F401
    except ImportError:
        raise Skip(VLLM_NOTE) from None
    raise Skip("vLLM is installed here, but this check does not run it; scripts/gpu_smoke.sh does")


STEPS = {
    "sandbox_cuda": step_sandbox_cuda,
    "sft": step_sft,
    "play": step_play,
    "zero2": _zero(2),
    "zero3": _zero(3),
    "bench": step_bench,
    "vllm": step_vllm,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--cpu", action="store_true", help="no GPU: the same steps on the CPU (CI)")
    parser.add_argument("--gpu", default="0", help="the GPU index the sandboxes get")
    parser.add_argument("--only", default="", help="comma-separated steps (default: all)")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    check = Check(args.out, args.cpu, args.gpu)
    start = time.monotonic()
    try:
        check.report["versions"] = _versions()
    except Exception as e:  # noqa: BLE001 (a report even when torch is broken)
        check.report["versions"] = {"error": f"{type(e).__name__}: {e}"}
    print(f"[gpu-check] {check.report['versions']}", flush=True)
    names = [n for n in args.only.split(",") if n] or list(STEPS)
    ok = True
    for name in names:
        ok &= check.run(name, STEPS[name])
    check.report["seconds"] = round(time.monotonic() - start, 1)
    check.report["passed"] = ok
    check.write()
    print(
        f"[gpu-check] {'passed' if ok else 'FAILED'} in {check.report['seconds']} s; {args.out / 'report.json'}"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
