"""How many FLOPs one metered CPU-second buys on this machine, per step kind: the FLOPs floor's rates.

The ledger charges a step at least `budget.floor_fraction × (metered CPU-seconds past start-up)
× the rate of its kind` (vtb/ledger.py), so a trainer or harness that under-reports its FLOPs
gains at most 1/floor_fraction. The rates are measured, not assumed, with the bench's own parts: its base model,
its initial system's data and trainer config, and the project's engines, run in a sandbox of
the bench's backend exactly as a step is (interpreter start, imports and all):

- infer: the inference engine generating batches of its prompts for INFER_CPU_SECONDS of CPU;
- start-up: that process's metered CPU-seconds less its own CPU past importing the engines
  and loading the base model (so no run of its own);
- train: the built-in trainer for TRAIN_STEPS steps on the initial system's data (more steps
  when those were over too soon to time).

The infer and train probes of a round run side by side where the machine has cores for both
(each is metered on its own CPU-seconds; measured on 2 cores: 18 s one after the other, 9.4 s
side by side, rates within the rounds' own spread), else one after the other.

A kind's rate is its reported FLOPs over its CPU-seconds past start-up, the fastest of the
rounds (load only slows a run). Rounds repeat, up to REPEATS, until one ran on an otherwise
quiet machine: the whole machine's busy CPU-seconds (/proc/stat, time stolen by the hypervisor
included) past the round's own were under QUIET_SHARE of them. Another round then measures
the same thing again; where the machine's load cannot be read (no /proc/stat) or is someone
else's (a container shown its host's counters), every round runs. An honest step of the same kind
on the same model then reports about rate × its seconds (on the default math bench 0.7× to
5×; longer runs amortise more), the fraction is the slack below that, and a step that
reports far less is charged the floor.

Measured once per (machine, backend, engine code, model shape, trainer config) and cached in
`cache_dir/calibration/<key>.json` and a machine-wide copy ($VTB_CALIBRATION_DIR, default
~/.cache/vtb/calibration), so that fresh cache dirs (tests, sweeps) do not pay it again.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import platform
import random
import shutil
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from importlib import metadata
from pathlib import Path

from vtb.hashing import code_version
from vtb.progress import say
from vtb.sandbox import runtime_mounts
from vtb.sandbox.base import Limits, Mount, Sandbox

CODE = ("engine", "models", "calibrate.py", "sandbox/runtime.py")  # the code the rates depend on
TRAIN_STEPS = 12  # first try; more when these take under MIN_BUSY_CPU_SECONDS past start-up
MAX_TRAIN_STEPS = 2000
MIN_BUSY_CPU_SECONDS = 3.0
REPEATS = 2  # rounds at most (each: start-up, infer, train); the fastest counts
QUIET_SHARE = 0.1  # a round with less other CPU work on the machine than this share of its own was unloaded
INFER_PROMPTS = 32
INFER_TOKENS = 32  # new tokens per prompt and batch
INFER_CPU_SECONDS = 4.0  # batches are generated until the process has used this much CPU past loading
# Also the start-up probe: what the process had used when the engines were imported and the
# model loaded (an import of the trainer too, as a train step has) is printed last, so start-up
# costs one run less. A probe is trusted code on the orchestrator's own inputs.
INFER_PROBE = """
import json, time
from vtb.engine.infer import Engine
import vtb.engine.sft
rows = [json.loads(line) for line in open("/ws/data/train.jsonl")][:{n}]
prompts = [r.get("prompt") or r.get("text", "")[:200] for r in rows] or ["Q:"]
engine = Engine("/model")
start, batch = time.process_time(), 0
while batch == 0 or time.process_time() - start < {cpu}:
    engine.generate(prompts, max_new_tokens={tokens}, seed=batch)
    batch += 1
print(json.dumps({{"work_cpu_seconds": time.process_time() - start}}))
"""


def machine_key(backend: str, model: str = "", trainer: str = "") -> dict:
    """What the rates depend on; its hash names the cache file (model, trainer: their hashes).

    torch's version from its package metadata (the same string as `torch.__version__`): importing
    torch here cost the orchestrator 1.5 s before its first training could start."""
    facts = {
        "model": model,
        "trainer": trainer,
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "torch": metadata.version("torch"),
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


def load_or_calibrate(
    sandbox: Sandbox,
    cache_dir: Path,
    backend: str,
    base_dir: Path,
    system_dir: Path,
    model: str,
    trainer: str,
) -> dict:
    """This machine's rates for this base model and trainer: from the cache when there, else measured now."""
    facts = machine_key(backend, model, trainer)
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
    say(
        f"[calibrate] no rates for this machine and model shape yet: measuring (up to {REPEATS} rounds, 1-3 min)"
    )
    started = time.monotonic()
    found = {"machine": facts, **measure(sandbox, base_dir, system_dir)}
    say(
        f"[calibrate] measured in {time.monotonic() - started:.0f} s; cached for the next runs on this machine"
    )
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


def proxy_parts(root: Path) -> tuple[Path, Path]:
    """(base model, system) to calibrate on when the bench's own model is too big for a CPU run.

    The project's tiny model shape on toy question/answer rows with the default SFT config: our
    engines reach fewer FLOPs per CPU-second on it than on a bigger model, so the floor it gives
    is looser than a calibration on the real model, never tighter.
    """
    from vtb.models.toy import build_toy_model

    base = build_toy_model(root / "base", steps=2, n_texts=64, batch_size=16, progress=lambda s: None)
    return base, toy_system(root / "system", {"batch_size": 32})


def toy_system(system: Path, trainer_config: dict) -> Path:
    """A system folder of 256 toy question/answer rows and `trainer_config` (no harness)."""
    from vtb.models.toy import toy_example

    (system / "data").mkdir(parents=True)
    (system / "trainer").mkdir()
    rng = random.Random(0)
    rows = [toy_example(rng) for _ in range(256)]
    (system / "data" / "train.jsonl").write_text(
        "".join(json.dumps({"prompt": f"Q: {q}\nA:", "completion": " " + a}) + "\n" for q, a in rows)
    )
    (system / "trainer" / "config.json").write_text(json.dumps(trainer_config))
    return system


def measure(sandbox: Sandbox, base_dir: Path, system_dir: Path) -> dict:
    """Measure start-up, train and infer in `sandbox` on `base_dir` with `system_dir`'s data and trainer.

    {"train_rate", "infer_rate": FLOPs per CPU-second past start-up, "cpu_rate": the higher,
    "startup_cpu_seconds", and the raw points}. Trusted code on the orchestrator's own inputs.
    """
    from vtb import runner

    limits = Limits(wall_seconds=900, cpu_seconds=1800)
    points: dict[str, list[dict]] = {"startup": [], "train": [], "infer": []}
    with tempfile.TemporaryDirectory(prefix="vtb-calibrate-") as tmp:
        cand = Path(tmp) / "cand"
        shutil.copytree(system_dir, cand, symlinks=True)
        mounts = runtime_mounts() + [Mount(base_dir, "/model"), Mount(cand, "/ws")]
        config = json.loads((cand / "trainer" / "config.json").read_text())
        config.pop("deepspeed", None)  # CPU-seconds of our single-process trainer are the unit
        steps = TRAIN_STEPS
        side_by_side = _cores() >= 2 * getattr(sandbox, "threads", 1)
        for repeat in range(REPEATS):
            how = "side by side" if side_by_side else "one after the other"
            say(f"[calibrate] {repeat + 1}/{REPEATS}: the inference engine and the trainer, {how}")
            busy_before, own = machine_busy_seconds(), 0.0
            code = INFER_PROBE.format(n=INFER_PROMPTS, tokens=INFER_TOKENS, cpu=INFER_CPU_SECONDS)
            with ThreadPoolExecutor(1) as pool:
                infer = pool.submit(_run, sandbox, code, mounts, limits, "the inference engine")
                if not side_by_side:
                    infer.result()
                out = _train(sandbox, cand, config, steps, base_dir, Path(tmp) / "out", limits)
                result = infer.result()
            charge = runner.charge_of(result)
            own += charge.cpu_seconds + out.charge.cpu_seconds
            points["infer"].append(_point(charge.flops, charge.cpu_seconds))
            # Start-up: the run's CPU-seconds metered outside, less the probe's own work past loading.
            startup = max(0.0, charge.cpu_seconds - _work_seconds(result.stdout))
            points["startup"].append({"flops": 0.0, "cpu_seconds": round(startup, 3)})
            busy = out.charge.cpu_seconds - startup
            if busy < MIN_BUSY_CPU_SECONDS and steps < MAX_TRAIN_STEPS:  # too short to time: once longer
                steps = min(MAX_TRAIN_STEPS, math.ceil(steps * 2 * MIN_BUSY_CPU_SECONDS / max(busy, 0.2)))
                out = _train(sandbox, cand, config, steps, base_dir, Path(tmp) / "out", limits)
                own += out.charge.cpu_seconds
            points["train"].append(_point(out.charge.flops, out.charge.cpu_seconds))
            other = _other_load(busy_before, own)
            points.setdefault("other_cpu_seconds", []).append(other)
            if other is not None and other < QUIET_SHARE * own:
                break  # measured unloaded: another round could only find the same or slower
    # Load only ever slows a run down, so the fastest of the repeats is the machine's rate.
    startup = min(p["cpu_seconds"] for p in points["startup"])
    rates = {kind: max(_rate(p, startup) for p in points[kind]) for kind in ("train", "infer")}
    return {
        "train_rate": rates["train"],
        "infer_rate": rates["infer"],
        "cpu_rate": max(rates.values()),  # research turns: their commands may run either engine
        "startup_cpu_seconds": round(startup, 3),
        "points": points,
    }


def _train(sandbox: Sandbox, cand: Path, config: dict, steps: int, base_dir: Path, out: Path, limits: Limits):
    """The built-in trainer for `steps` steps on the candidate's data, as a train step runs it."""
    from vtb import runner

    config.update(max_steps=steps, epochs=10_000)
    (cand / "trainer" / "config.json").write_text(json.dumps(config))
    done = runner.train(sandbox, cand, base_dir, out, seed=0, limits=limits)
    if not done.ok:
        raise RuntimeError(f"calibration: the built-in trainer failed: {done.log[-2000:]}")
    return done


def _cores() -> int:
    """The CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def machine_busy_seconds() -> float | None:
    """CPU-seconds this machine's CPUs have been busy since boot (/proc/stat: every state but
    idle and I/O wait; time stolen by a hypervisor counts as busy), or None where unreadable."""
    try:
        with open("/proc/stat", "rb") as f:
            first = f.readline(512).split()
        if first[:1] != [b"cpu"]:
            return None
        user, nice, system, _idle, _iowait, irq, softirq, steal = (int(v) for v in first[1:9])
    except (OSError, ValueError):
        return None
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def _other_load(busy_before: float | None, own: float) -> float | None:
    """CPU-seconds the machine spent on anything but this round's sandboxes (`own`) since
    `busy_before`; None where it cannot be read."""
    busy_after = machine_busy_seconds()
    if busy_before is None or busy_after is None:
        return None
    return round(max(0.0, busy_after - busy_before - own), 3)


def _run(sandbox: Sandbox, code: str, mounts: list[Mount], limits: Limits, what: str):
    from vtb import runner

    result = sandbox.run([runner.PYTHON, "-c", code], mounts=mounts, limits=limits)
    if result.returncode != 0:
        raise RuntimeError(f"calibration: {what} failed in the sandbox: {result.stderr[-2000:]}")
    return result


def _work_seconds(stdout: str) -> float:
    """The infer probe's own CPU-seconds past loading, from its last line."""
    try:
        found = json.loads(stdout.strip().splitlines()[-1])["work_cpu_seconds"]
    except (IndexError, KeyError, TypeError, ValueError) as e:
        raise RuntimeError(
            f"calibration: the inference probe printed no work figure: {stdout[-500:]!r}"
        ) from e
    if not isinstance(found, float) or not 0 < found < 1e6:
        raise RuntimeError(
            f"calibration: the inference probe's work figure is not a number of seconds: {found!r}"
        )
    return found


def _point(flops: float, cpu_seconds: float) -> dict:
    if not flops > 0:
        raise RuntimeError(f"calibration: the engines reported no FLOPs ({flops})")
    return {"flops": flops, "cpu_seconds": round(cpu_seconds, 3)}


def _rate(point: dict, startup: float) -> float:
    """FLOPs per CPU-second past start-up; at least a tenth of the run counts as work (noisy start-ups)."""
    busy = max(point["cpu_seconds"] - startup, 0.1 * point["cpu_seconds"], 1e-3)
    return point["flops"] / busy
