"""Performance figures of a bench run (a benchmark script, not a test).

Prints: wall time per step, the share of the run's wall time spent outside sandboxed compute
(target: under 10%), and validation episodes per second with batched vs one-at-a-time
generation through the real harness protocol (target: batched at least 4x faster, tiny model).

  python scripts/bench_pipeline.py                       # runs the default bench first (fresh cache)
  python scripts/bench_pipeline.py --record runs/<id>    # figures of an existing run record
  python scripts/bench_pipeline.py -- agent=noop seed=1  # Hydra overrides for the bench it runs
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def run_default(overrides: list[str]) -> Path:

    from flows.bench import run_bench
    from vtb.compose import compose_config

    cfg = compose_config(overrides)
    return Path(run_bench(cfg)["record"])


def step_table(record: Path) -> None:
    timings = json.loads((record / "timings.json").read_text())
    groups: dict[str, list[dict]] = defaultdict(list)
    for t in timings["steps"]:
        groups[t["step"] + (f":{t['split']}" if t["split"] else "")].append(t)
    print(f"{'step':<16}{'calls':>6}{'cached':>8}{'wall s':>10}{'in sandbox s':>14}")
    for name, rows in groups.items():
        wall = sum(r["wall_seconds"] for r in rows)
        inside = sum(r["sandbox_wall_seconds"] for r in rows)
        print(f"{name:<16}{len(rows):>6}{sum(r['cached'] for r in rows):>8}{wall:>10.1f}{inside:>14.1f}")
    print(
        f"\nrun wall time {timings['wall_seconds']:.1f} s, sandboxed compute {timings['sandbox_wall_seconds']:.1f} s"
    )
    print(
        f"share of wall time outside sandboxed compute: {100 * timings['outside_share']:.1f}% (target < 10%)"
    )


def episodes_per_second(record: Path, n: int) -> None:
    from vtb import runner
    from vtb.compose import task_config
    from vtb.domains.registry import get_domain
    from vtb.sandbox import make_sandbox
    from vtb.sandbox.base import Limits

    cfg = json.loads((record / "config.json").read_text())
    manifest = json.loads((record / "manifest.json").read_text())
    task = task_config(**cfg["task"])
    domain = get_domain(task.name)
    items = domain.split(Path(manifest["data"]["data_dir"]), "val")[:n]
    messages = [domain.start_message(i) for i in items]
    sandbox = make_sandbox(cfg["sandbox"]["backend"], threads=cfg["sandbox"]["threads"])
    limits = Limits(wall_seconds=1800, cpu_seconds=3600)
    sub = record / "submission"

    def play(msgs: list[dict], chunk: int) -> tuple[int, float]:
        start = time.monotonic()
        out = runner.play(
            sandbox,
            sub / "harness",
            sub / "model",
            msgs,
            limits=limits,
            round_timeout_s=600,
            per_episode_timeout_s=5,
            chunk=chunk,
        )
        return len(out.actions), time.monotonic() - start

    # One harness process serves all rounds; its start (python, torch, model load) is paid once.
    _, startup = play(messages[:1], 1)
    print(f"harness start + 1 episode: {startup:.1f} s (subtracted below to get generation rates)")
    rates = {}
    for label, chunk in (("batched", len(messages)), ("one at a time", 1)):
        done, took = play(messages, chunk)
        rates[label] = done / max(1e-9, took - startup)
        print(
            f"{label:<14} {done} episodes in {took:.1f} s wall; {rates[label]:.2f} episodes/s of generation"
        )
    print(f"batched speed-up: {rates['batched'] / rates['one at a time']:.1f}x (target >= 4x)")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--record", type=Path, help="an existing run record (runs/<run-id>)")
    parser.add_argument("--episodes", type=int, default=64, help="val episodes for the generation figure")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides for the bench run")
    args = parser.parse_args()
    if args.record is None:  # a fresh cache, so every step really runs and its time is measured
        args.overrides = [f"cache_dir={tempfile.mkdtemp(prefix='vtb-bench-cache-')}", *args.overrides]
    record = args.record or run_default(args.overrides)
    print(f"\n== {record}\n")
    step_table(record)
    print()
    episodes_per_second(record, args.episodes)


if __name__ == "__main__":
    main()
