"""How many engine FLOPs one metered CPU-second buys on this machine: the FLOPs floor's rate.

The ledger charges a step at least `budget.floor_fraction × metered CPU-seconds × this rate`
(vtb/ledger.py), so a trainer or harness that under-reports its FLOPs gains nothing. The rate
is measured, not assumed: the project's own engines run in a sandbox of the bench's backend,
exactly as a step does (interpreter start, imports and all), a few SFT steps and a few batches
of generation on a tiny toy model; the FLOPs they report divided by the CPU-seconds metered
from outside is the rate (the lower of train and infer, so the floor fits both kinds of step).

It is measured once per machine (CPU model, cores, torch, engine code, backend) and cached in
`cache_dir/calibration/<key>.json`, and in a machine-wide copy ($VTB_CALIBRATION_DIR, default
~/.cache/vtb/calibration) so that fresh cache dirs (tests, sweeps) do not pay it again.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import random
import tempfile
from pathlib import Path

from vtb.hashing import code_version
from vtb.sandbox import runtime_mounts
from vtb.sandbox.base import Limits, Mount, Sandbox

CODE = ("engine", "models", "calibrate.py")  # the code the rate depends on
TRAIN_ROWS = 64
TRAIN_STEPS = (4, 64)  # a small and a large run of each engine
INFER_BATCHES = (1, 8)
PROBE = """
import sys
from vtb.engine.infer import Engine
from vtb.models.toy import toy_texts
engine = Engine("/model")
prompts = [t.split("A:")[0] + "A:" for t in toy_texts(32, seed=1)]
for b in range({batches}):
    engine.generate(prompts, max_new_tokens=32, seed=b)
"""


def machine_key(backend: str) -> dict:
    """What the rate depends on; its hash names the cache file."""
    import torch

    facts = {
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "torch": torch.__version__,
        "code": code_version(*CODE),
        "backend": backend,
        "machine": platform.machine(),
    }
    facts["key"] = hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()[:16]
    return facts


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def shared_dir() -> Path:
    return Path(os.environ.get("VTB_CALIBRATION_DIR") or Path.home() / ".cache" / "vtb" / "calibration")


def load_or_calibrate(sandbox: Sandbox, cache_dir: Path, backend: str) -> dict:
    """The calibration of this machine: from the cache when there is one, else measured now."""
    facts = machine_key(backend)
    name = f"{facts['key']}.json"
    local = cache_dir / "calibration" / name
    for path in (local, shared_dir() / name):
        try:
            found = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(found, dict) and found.get("cpu_rate", 0) > 0 and found.get("machine") == facts:
            if path != local:
                _write(local, found)
            return found
    found = {"machine": facts, **measure(sandbox)}
    _write(local, found)
    try:
        _write(shared_dir() / name, found)
    except OSError:
        pass  # no writable home: the run's cache still has it
    return found


def _write(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(data, indent=1))
    os.replace(tmp, path)


def measure(sandbox: Sandbox) -> dict:
    """Run the engines in `sandbox` at two sizes each; the line through them gives the rate.

    {"cpu_rate": FLOPs per CPU-second past start-up, "startup_cpu_seconds": what a process
    spends before its engine reports anything, "train": [...], "infer": [...]}: the slope and
    intercept of reported FLOPs over metered CPU-seconds, the lower rate and start-up of the two.
    """
    from vtb import runner
    from vtb.models.toy import build_toy_model, toy_example

    limits = Limits(wall_seconds=300, cpu_seconds=300)
    points: dict[str, list[dict]] = {"train": [], "infer": []}
    with tempfile.TemporaryDirectory(prefix="vtb-calibrate-") as tmp:
        root = Path(tmp)
        base = build_toy_model(root / "base", steps=2, n_texts=64, batch_size=16, progress=lambda s: None,
                               n_layer=2, n_embd=64, n_head=2, n_positions=128)  # fmt: skip
        cand = root / "cand"
        (cand / "data").mkdir(parents=True)
        (cand / "trainer").mkdir()
        rng = random.Random(0)
        rows = [toy_example(rng) for _ in range(TRAIN_ROWS)]
        (cand / "data" / "train.jsonl").write_text(
            "".join(json.dumps({"prompt": f"Q: {q}\nA:", "completion": " " + a}) + "\n" for q, a in rows)
        )
        for steps in TRAIN_STEPS:
            (cand / "trainer" / "config.json").write_text(
                json.dumps({"batch_size": 16, "max_steps": steps, "epochs": 100})
            )
            out = runner.train(sandbox, cand, base, root / f"out{steps}", seed=0, limits=limits)
            if not out.ok:
                raise RuntimeError(f"calibration: the SFT engine failed in the sandbox: {out.log[-2000:]}")
            points["train"].append(_point(out.charge))
        for batches in INFER_BATCHES:
            argv = [runner.PYTHON, "-c", PROBE.format(batches=batches)]
            result = sandbox.run(argv, mounts=runtime_mounts() + [Mount(base, "/model")], limits=limits)
            if result.returncode != 0:
                raise RuntimeError(f"calibration: the inference engine failed: {result.stderr[-2000:]}")
            points["infer"].append(_point(runner.charge_of(result)))
    lines = {kind: _line(pts) for kind, pts in points.items()}
    return {
        "cpu_rate": min(rate for rate, _ in lines.values()),
        "startup_cpu_seconds": min(startup for _, startup in lines.values()),
        **{
            kind: {"points": points[kind], "rate": r, "startup_cpu_seconds": s}
            for kind, (r, s) in lines.items()
        },
    }


def _point(charge) -> dict:
    return {"flops": charge.flops, "cpu_seconds": round(charge.cpu_seconds, 3)}


def _line(points: list[dict]) -> tuple[float, float]:
    """(slope, intercept on the CPU axis) through a small and a large run; the plain ratio if noisy."""
    small, large = points
    d_cpu = large["cpu_seconds"] - small["cpu_seconds"]
    d_flops = large["flops"] - small["flops"]
    if large["flops"] <= 0:
        raise RuntimeError(f"calibration: the engines reported no FLOPs: {points}")
    if d_cpu < 0.3 or d_flops <= 0:  # too close to tell apart under load: no start-up allowance
        return large["flops"] / max(large["cpu_seconds"], 1e-3), 0.0
    rate = d_flops / d_cpu
    return rate, max(0.0, small["cpu_seconds"] - small["flops"] / rate)
