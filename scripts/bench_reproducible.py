"""The reproducible CPU mode's speed cost: the same sandboxed training, pins off and on, side by side.

    .venv/bin/python scripts/bench_reproducible.py [--backend bwrap] [--repeats 3] [--steps 60]

Trains the tiny base model exactly as provisioning does (vtb.models.build in a sandbox of the
backend), alternating native and pinned runs so that load drifts hit both alike, and prints
each mode's fastest wall and CPU seconds and the weights' hash (the same hash in both modes
means this machine's own code paths are the pinned ones).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
from pathlib import Path

from vtb.sandbox import make_sandbox, runtime_mounts
from vtb.sandbox.base import Limits, Mount

WORDS = "the cat sat on a mat dog ran to big red box and one two three four".split()


def spec(steps: int) -> dict:
    texts = [" ".join(WORDS[(i * 7 + j) % len(WORDS)] for j in range(40)) for i in range(512)]
    return {
        "words": WORDS,
        "number_max": 50,
        "tokenizer": "words",
        "texts": texts,
        "model": {"n_layer": 2, "n_embd": 64, "n_head": 2, "n_positions": 64, "steps": steps, "seed": 0},
    }


def once(backend: str, reproducible: bool, steps: int) -> tuple[float, float, str]:
    with tempfile.TemporaryDirectory(prefix="vtb-repro-bench-") as tmp:
        work = Path(tmp)
        (work / "out").mkdir()
        (work / "spec.json").write_text(json.dumps(spec(steps)))
        result = make_sandbox(backend, threads=2, reproducible=reproducible).run(
            [sys.executable, "-m", "vtb.models.build", "/build/spec.json", "/build/out/model"],
            mounts=runtime_mounts() + [Mount(work, "/build", writable=True)],
            limits=Limits(wall_seconds=900, cpu_seconds=1800, memory_mb=4096),
            cwd="/build",
        )
        if result.returncode != 0:
            raise SystemExit(result.stderr[-2000:])
        weights = hashlib.sha256((work / "out" / "model" / "model.safetensors").read_bytes()).hexdigest()
        return result.wall_seconds, result.cpu_seconds, weights[:12]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--backend", default="bwrap")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=60)
    args = parser.parse_args()
    runs: dict[bool, list] = {False: [], True: []}
    for i in range(args.repeats):
        for mode in (False, True):
            runs[mode].append(once(args.backend, mode, args.steps))
            print(
                f"  repeat {i + 1}/{args.repeats} {'pinned' if mode else 'native'}: {runs[mode][-1]}",
                flush=True,
            )
    print(f"\n{'mode':<8} {'wall s':>8} {'CPU s':>8}  weights")
    for mode, label in ((False, "native"), (True, "pinned")):
        wall = min(r[0] for r in runs[mode])
        cpu = min(r[1] for r in runs[mode])
        print(f"{label:<8} {wall:8.2f} {cpu:8.2f}  {sorted({r[2] for r in runs[mode]})}")
    ratio = min(r[0] for r in runs[True]) / min(r[0] for r in runs[False])
    print(f"pinned / native wall time: {ratio:.3f}")


if __name__ == "__main__":
    main()
