"""Per-call overhead of the sandbox: many steps per run each pay it, so it must stay small.

Prints medians of 20 calls: bare bwrap with the exact command line a sandbox uses (the
floor), `run(["true"])` through the sandbox, and a Python startup inside vs outside it.
`compare` times the same steps on both backends and prints docker's overhead per step
(needs a Docker Engine and the runtime image: scripts/start_docker.sh).
Usage: python scripts/bench_sandbox.py [bwrap|docker|compare]
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from vtb.sandbox import Limits, make_sandbox, runtime_mounts

N = 20


def median_ms(fn: Callable[[], object]) -> float:
    fn()  # warm caches (page cache, runtime_mounts, preflight)
    times = []
    for _ in range(N):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return 1000 * statistics.median(times)


def compare() -> None:
    """Wall time per sandboxed step on bwrap and docker: the figure in docs/sandboxes.md."""
    mounts, limits = runtime_mounts(), Limits(wall_seconds=120, cpu_seconds=120)
    steps = {
        "true": ["true"],
        "python -c pass": [sys.executable, "-c", "pass"],
        "python -c 'import torch'": [sys.executable, "-c", "import torch"],
    }
    sandboxes = {name: make_sandbox(name) for name in ("bwrap", "docker")}
    print(f"{'step (median of ' + str(N) + ')':34s} {'bwrap':>9s} {'docker':>9s} {'overhead':>9s}")
    for label, argv in steps.items():
        ms = {
            name: median_ms(lambda sb=sb, argv=argv: sb.run(argv, mounts=mounts, limits=limits))
            for name, sb in sandboxes.items()
        }
        print(f"{label:34s} {ms['bwrap']:7.0f}ms {ms['docker']:7.0f}ms {ms['docker'] - ms['bwrap']:+7.0f}ms")


def main() -> None:
    backend = sys.argv[1] if len(sys.argv) > 1 else "bwrap"
    if backend == "compare":
        compare()
        return
    sandbox = make_sandbox(backend)
    if backend == "bwrap":
        print(f"bwrap: hardened={sandbox.hardened} exact_cpu (cgroup metering)={sandbox.exact_cpu}")
    mounts, limits = runtime_mounts(), Limits(wall_seconds=60, cpu_seconds=60)
    py = [sys.executable, "-c", "pass"]

    def inside(argv: list[str]) -> Callable[[], object]:
        def call() -> None:
            result = sandbox.run(argv, mounts=mounts, limits=limits)
            assert result.returncode == 0, result

        return call

    rows = []
    if backend == "bwrap":
        with tempfile.TemporaryDirectory() as out:
            bare = sandbox.command(["true"], mounts, "/", Path(out))
            env = sandbox.env(limits, None)
            floor = median_ms(lambda: subprocess.run(bare, env=env, check=True))
        rows.append(("bare bwrap true (floor)", floor))
    true_ms = median_ms(inside(["true"]))
    rows.append(("sandbox.run(['true'])", true_ms))
    if backend == "bwrap":
        rows.append(("  our overhead beyond bwrap", true_ms - floor))
        if sandbox.exact_cpu:
            plain = make_sandbox("bwrap", exact_cpu=False)
            plain_ms = median_ms(lambda: plain.run(["true"], mounts=mounts, limits=limits))
            rows.append(("  same, without cgroup metering", plain_ms - floor))
    rows.append(("python -c pass, outside", median_ms(lambda: subprocess.run(py, check=True))))
    rows.append(("python -c pass, in sandbox", median_ms(inside(py))))
    for label, ms in rows:
        print(f"{label:32s} {ms:8.1f} ms")


if __name__ == "__main__":
    main()
