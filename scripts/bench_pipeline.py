"""Performance of the default bench, old design vs this checkout, on this machine in one run.

An old commit (default: the last one before the model service, issue 17) is checked out into a
temporary git worktree with a hard-linked copy of this virtual environment pointing at it; the
default bench then runs there and here, one after the other, each on a fresh cache and a fresh
FLOPs-floor calibration (VTB_CALIBRATION_DIR), as on a new machine. Printed
side by side: the command's total wall time, the scores and FLOPs, the play steps' wall time,
and validation episodes per second with concurrent episodes (one round of all) vs one at a time
(raw wall time of the play, harness start included; the model server, shared by a step's plays,
is up already).

  python scripts/bench_pipeline.py                    # old = bc92aef, new = this checkout
  python scripts/bench_pipeline.py --old <commit>     # any other old commit
  python scripts/bench_pipeline.py --new-only         # only this checkout's figures
  python scripts/bench_pipeline.py -- task=tau        # Hydra overrides for both benches
  python scripts/bench_pipeline.py --old de55ab2 --no-rates --warm   # issue 38: fresh and warm machine
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OLD = "bc92aef"  # the commit before the model service
FINDER = "__editable___vibetraining_bench_0_1_0_finder.py"


def old_tree(commit: str, scratch: Path) -> tuple[Path, Path]:
    """(worktree, python) of `commit`: a git worktree and this venv hard-linked, its editable finder re-pointed."""
    tree, venv = scratch / "old", scratch / "old-venv"
    subprocess.run(
        ["git", "-C", str(ROOT), "worktree", "add", "-f", "--detach", str(tree), commit], check=True
    )
    subprocess.run(["cp", "-al", str(ROOT / ".venv"), str(venv)], check=True)
    for finder in venv.glob(f"lib/python*/site-packages/{FINDER}"):
        text = finder.read_text().replace(str(ROOT), str(tree))
        finder.unlink()  # a hard link: write a new file, never through the shared inode
        finder.write_text(text)
    return tree, venv / "bin" / "python"


def run_bench(
    tree: Path, python: Path, overrides: list[str], scratch: Path, name: str, machine: str | None = None
) -> dict:
    """The default bench as a user runs it (`python -m flows.bench`), timed; its record's figures.

    Each run gets a fresh cache_dir; its machine-wide folders (the FLOPs floor's calibration, the
    kept base models) are `machine`'s: fresh for a new name (a new machine), shared to measure a
    second run on the same machine."""
    cache, runs = scratch / f"{name}-cache", scratch / f"{name}-runs"
    argv = [str(python), "-m", "flows.bench", f"cache_dir={cache}", f"runs_dir={runs}", *overrides]
    machine = machine or name
    env = {
        **os.environ,
        "VTB_CALIBRATION_DIR": str(scratch / f"{machine}-calibration"),
        "VTB_MODEL_CACHE_DIR": str(scratch / f"{machine}-models"),
    }
    start = time.monotonic()
    with open(scratch / f"{name}.log", "w") as log:
        subprocess.run(argv, cwd=tree, stdout=log, stderr=subprocess.STDOUT, check=True, env=env)
    wall = time.monotonic() - start
    record = next(runs.iterdir())
    result = json.loads((record / "result.json").read_text())
    timings = json.loads((record / "timings.json").read_text())
    plays = [s for s in timings["steps"] if s["step"] == "play" and not s["cached"]]
    return {
        "record": record,
        "wall": wall,
        "initial": result["initial"]["test_score"],
        "submitted": result["submitted"]["test_score"],
        "reference": (result.get("reference") or {}).get("test_score"),
        "flops": result["budget"]["flops"],
        "plays": len(plays),
        "play_wall": sum(s["wall_seconds"] for s in plays) / max(1, len(plays)),
    }


def old_rates(tree: Path, python: Path, record: Path, n: int) -> dict | None:
    """The old commit's own benchmark of batched vs one-at-a-time play (raw wall seconds it printed);
    None where it has none for this task (bc92aef's measures the math harness only)."""
    done = subprocess.run(
        [str(python), "scripts/bench_pipeline.py", "--record", str(record), "--episodes", str(n)],
        cwd=tree,
        capture_output=True,
        text=True,
    )
    took = dict(re.findall(r"^(batched|one at a time)\s+\d+ episodes in ([\d.]+) s wall", done.stdout, re.M))
    if done.returncode != 0 or len(took) != 2:
        print(f"[bench] the old commit's episodes/s benchmark failed: {done.stderr[-300:]}", flush=True)
        return None
    return {"concurrent": float(took["batched"]), "one at a time": float(took["one at a time"])}


def new_rates(record: Path, n: int) -> dict:
    """Raw wall seconds of playing n val episodes as one round vs one per round, behind one model server."""
    sys.path.insert(0, str(ROOT))
    from vtb import runner
    from vtb.domains.registry import get_domain
    from vtb.sandbox import make_sandbox
    from vtb.sandbox.base import Limits
    from vtb.service import ModelService

    cfg = json.loads((record / "config.json").read_text())
    manifest = json.loads((record / "manifest.json").read_text())
    domain = get_domain(cfg["task"]["name"])
    items = domain.split(Path(manifest["data"]["data_dir"]), "val")[:n]
    messages = [domain.start_message(i) for i in items]
    sandbox = make_sandbox(cfg["sandbox"]["backend"], threads=cfg["sandbox"]["threads"])
    limits = Limits(wall_seconds=1800, cpu_seconds=3600)
    sub = record / "submission"
    out = {}
    with ModelService(sandbox, sub / "model", limits) as service:
        for label, chunk in (("concurrent", len(messages)), ("one at a time", 1)):
            start = time.monotonic()
            runner.play(
                sandbox,
                sub / "harness",
                service,
                messages,
                limits=limits,
                round_timeout_s=600,
                per_episode_timeout_s=5,
                chunk=chunk,
            )
            out[label] = time.monotonic() - start
    return out


def table(rows: dict[str, dict], rates: dict[str, dict], n: int) -> str:
    names = list(rows)
    width = max(16, *(len(name) + 2 for name in names))  # "old, warm <commit>" runs over 16
    lines = [f"{'':<34}" + "".join(f"{name:>{width}}" for name in names)]

    def row(label: str, values: list, fmt: str) -> None:
        lines.append(
            f"{label:<34}" + "".join(f"{format(v, fmt) if v is not None else '-':>{width}}" for v in values)
        )

    row("default run, total wall s", [rows[k]["wall"] for k in names], ".1f")
    row("test: initial", [rows[k]["initial"] for k in names], ".3f")
    row("test: submitted", [rows[k]["submitted"] for k in names], ".3f")
    row("test: reference", [rows[k]["reference"] for k in names], ".3f")
    row("budget used (FLOPs)", [rows[k]["flops"] for k in names], ".4g")
    row("play steps run", [rows[k]["plays"] for k in names], "d")
    row("play wall s per step (mean)", [rows[k]["play_wall"] for k in names], ".2f")
    for label in ("concurrent", "one at a time"):
        row(
            f"{n} val episodes, {label}: ep/s",
            [n / rates[k][label] if rates[k] else None for k in names],
            ".2f",
        )
    row(
        "concurrent / one at a time",
        [rates[k]["one at a time"] / rates[k]["concurrent"] if rates[k] else None for k in names],
        ".1f",
    )
    first = rows[names[0]]["wall"]
    for k in names[1:]:
        change = 100 * (rows[k]["wall"] / first - 1)
        way = "higher" if change > 0 else "lower"
        lines.append(f"{k}: total wall time {abs(change):.0f}% {way} than {names[0]}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--old", default=OLD, help="the commit of the old design")
    parser.add_argument("--new-only", action="store_true")
    parser.add_argument("--episodes", type=int, default=64, help="val episodes for the episodes/s figure")
    parser.add_argument("--keep", action="store_true", help="keep the scratch folder (records, logs)")
    parser.add_argument("--no-rates", action="store_true", help="skip the episodes/s figures")
    parser.add_argument(
        "--warm",
        action="store_true",
        help="each design again on its machine (a fresh cache_dir, machine caches kept)",
    )
    parser.add_argument("overrides", nargs="*", help="Hydra overrides for both benches")
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="vtb-bench-pipeline-"))
    rows, rates = {}, {}
    try:
        if not args.new_only:
            tree, python = old_tree(args.old, scratch)
            print(f"[bench] the old design ({args.old}) ...", flush=True)
            rows[f"old {args.old}"] = run_bench(tree, python, args.overrides, scratch, "old")
            rates[f"old {args.old}"] = (
                None
                if args.no_rates
                else old_rates(tree, python, rows[f"old {args.old}"]["record"], args.episodes)
            )
            if args.warm:
                print(f"[bench] the old design again, same machine ({args.old}) ...", flush=True)
                rows[f"old, warm {args.old}"] = run_bench(
                    tree, python, args.overrides, scratch, "old-warm", "old"
                )
                rates[f"old, warm {args.old}"] = None
        head = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
        ).stdout.strip()
        print(f"[bench] this checkout ({head}) ...", flush=True)
        rows[f"new {head}"] = run_bench(ROOT, Path(sys.executable), args.overrides, scratch, "new")
        rates[f"new {head}"] = (
            None if args.no_rates else new_rates(rows[f"new {head}"]["record"], args.episodes)
        )
        if args.warm:
            print(f"[bench] this checkout again, same machine ({head}) ...", flush=True)
            rows[f"new, warm {head}"] = run_bench(
                ROOT, Path(sys.executable), args.overrides, scratch, "warm", machine="new"
            )
            rates[f"new, warm {head}"] = None
        print(table(rows, rates, args.episodes))
    finally:
        if not args.new_only:
            subprocess.run(
                ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(scratch / "old")], check=False
            )
        if args.keep:
            print(f"records and logs: {scratch}")
        else:
            shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
