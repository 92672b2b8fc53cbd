"""The sweep flow: tasks x agents x seeds, each a bench subflow, then the leaderboard.

Launch:  python -m flows.sweep                                 (conf/sweep.yaml: math x noop,greedy x 3 seeds)
         python -m flows.sweep 'agents=[greedy]' 'seeds=[0,1]' 'overrides=[budget.limit=5e12]'
         python -m flows.sweep 'gpus=[0,1,2,3]' max_parallel=4      (one bench per GPU, 4 at once)
A bench that fails is recorded and the sweep goes on; the leaderboard (leaderboard.md, .csv,
.png under runs_dir) covers the benches that finished, and is published as a Prefect artifact.
`nightly_sweep` is the same sweep with plain JSON parameters: the entry point of the Prefect
deployment in prefect.yaml (scripts/deploy.sh).

Two ways to run the benches (`dispatch`):
- `deployment` (the default when PREFECT_API_URL names a server): each bench is a flow run of
  the deployment `vibetraining-bench/bench`, a child of this sweep's flow run, run by any worker
  of its work pool on any machine (flows/dispatch.py); results come back through Prefect result
  storage and are checked, and the sweep's runs_dir gets a copy of each result.json for the
  leaderboard. GPUs are the workers' (flows/gpu.py); `max_parallel` and `gpus` do not apply.
- `inline` (a laptop): benches are subflows in this process, `max_parallel` at once; with
  `gpus` each running bench holds the Prefect concurrency slot of one GPU (`run_benches`).
"""

from __future__ import annotations

import contextvars
import json
import os
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path

import hydra
from omegaconf import DictConfig
from prefect import flow, tags
from prefect.artifacts import create_markdown_artifact

from flows.bench import bench_flow, check_bench
from flows.dispatch import DEPLOYMENT, Job, run_deployments
from flows.gpu import ensure_limits, gpu_slot
from flows.rows import BenchRow
from flows.signals import refuse, run_main
from flows.watch import bench_tags
from vtb import leaderboard, result_files, safefs, salt
from vtb.bench_result import Errored
from vtb.build import run_id as run_id_of
from vtb.compose import check_command_line, compose_config, typed
from vtb.config import CONF_DIR, BenchConfig
from vtb.record import md_text


@dataclass
class SweepConfig:
    tasks: list[str] = field(default_factory=lambda: ["math"])
    agents: list[str] = field(default_factory=lambda: ["noop", "greedy"])
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    overrides: list[str] = field(default_factory=list)  # Hydra overrides for every bench
    runs_dir: str = "runs/sweep"
    cache_dir: str = ".cache/vtb"
    max_parallel: int = 1  # benches at once
    gpus: list[str] = field(default_factory=list)  # GPU slots, one per running bench (sandbox.gpus=<id>)
    exclude_flagged: bool = False  # leave runs flagged (contamination, null model) out of the leaderboard
    dispatch: str = "auto"  # deployment | inline | auto (deployment when PREFECT_API_URL is set)
    deployment: str = DEPLOYMENT  # the bench deployment that dispatch=deployment starts
    work_queue: str | None = None  # first tries go to this queue of its pool (default: the deployment's)
    crash_retries: int = 1  # a bench whose flow run crashed (its worker died) is started again this often
    poll_seconds: float = 5.0  # dispatch=deployment: between looks at the benches' flow runs
    # dispatch=deployment: benches no worker starts while none of the sweep's runs, this long, fail
    start_timeout_s: float = 1800.0
    # hidden: the benches' test split is drawn with this installation's salt (vtb/salt.py
    # installation_salt) unless the overrides or $VTB_TEST_SALT give one; public: the published
    # default salt (README figures; recorded and ranked as a public split)
    test_split: str = "hidden"


def dispatch_mode(cfg: SweepConfig) -> str:
    """`inline` or `deployment`; `auto` is deployment when PREFECT_API_URL names a server."""
    mode = cfg.dispatch
    if mode == "auto":
        mode = "deployment" if os.environ.get("PREFECT_API_URL") else "inline"
    if mode not in ("inline", "deployment"):
        raise ValueError(f"sweep.dispatch={cfg.dispatch!r}: use inline, deployment or auto")
    return mode


def salt_overrides(cfg: SweepConfig) -> list[str]:
    """What the sweep adds for its test split: this installation's salt, unless one is given.

    Scores are compared across a sweep's benches and sweeps, so their test split must not be the
    public one anyone can rebuild; every bench gets the same salt (one file), so they are
    comparable with each other and with later sweeps of this installation.
    """
    if cfg.test_split not in ("hidden", "public"):
        raise ValueError(f"sweep test_split={cfg.test_split!r}: use hidden or public")
    named = any(
        o.split("=", 1)[0].lstrip("+") in ("task.test_salt", "task.test_salt_file") for o in cfg.overrides
    )
    if cfg.test_split == "public" or named or os.environ.get(salt.ENV_VAR):
        return []
    return [f"task.test_salt_file={salt.installation_salt()}"]


def bench_overrides(cfg: SweepConfig) -> list[list[str]]:
    """The Hydra overrides of each bench, per (task, agent, seed): `python -m flows.bench <these>`."""
    runs, cache = str(Path(cfg.runs_dir).resolve()), str(Path(cfg.cache_dir).resolve())
    secret = salt_overrides(cfg)
    return [
        [
            f"task={task}",
            f"agent={agent}",
            f"seed={seed}",
            f"runs_dir={runs}",
            f"cache_dir={cache}",
            *secret,
            *cfg.overrides,
        ]
        for task in cfg.tasks
        for agent in cfg.agents
        for seed in cfg.seeds
    ]


def bench_configs(cfg: SweepConfig) -> list[BenchConfig]:
    """One typed bench config per (task, agent, seed), composed from conf/ like `python -m flows.bench`."""
    return [compose_config(o) for o in bench_overrides(cfg)]


def _one(cfg: BenchConfig) -> BenchRow:
    """Run one bench subflow, named by task/agent/seed (its run id) and tagged like a single
    bench plus `sweep:<the sweep run's name>`; a failure becomes a row, not an exception."""
    from prefect.runtime import flow_run

    name = run_id_of(cfg)
    try:
        check_bench(cfg)  # a misconfigured agent, GPU preset or data set fails here, before any work
    except ValueError as e:
        return BenchRow(name, "failed", error=f"config: {e}")
    with tags(*bench_tags(cfg), f"sweep:{flow_run.name}"):
        state = bench_flow.with_options(flow_run_name=name)(cfg, return_state=True)
    if state.is_completed():
        result = state.result()
        if isinstance(result, Errored):  # no score: a row with its reason
            return BenchRow.errored(name, result)
        return BenchRow.completed(name, result)
    try:
        state.result()
        error = state.message
    except Exception as e:  # noqa: BLE001 (the bench's own error, kept for the summary)
        error = f"{type(e).__name__}: {e}"
    return BenchRow(name, state.type.value.lower(), error=str(error)[:500])


def parallelism(max_parallel: int, gpus: Sequence[str] = ()) -> int:
    """Benches at once: max_parallel, and with GPU slots no more than there are slots."""
    n = max(1, max_parallel)
    return min(n, len(gpus)) if gpus else n


def with_gpu(cfg: BenchConfig, gpu: str) -> BenchConfig:
    """`cfg` with the Hydra override `sandbox.gpus=<gpu>` applied.

    The run id is pinned first (from the config without the slot), so a bench keeps its run
    record and cached steps whichever slot it gets.
    """
    run_id = run_id_of(cfg)
    return replace(cfg, run_id=run_id, sandbox=replace(cfg.sandbox, gpus=str(gpu)))


def run_benches(
    configs: Sequence[BenchConfig],
    run_one: Callable[[BenchConfig], BenchRow] = _one,
    max_parallel: int = 1,
    gpus: Sequence[str] = (),
) -> list[BenchRow]:
    """`run_one` over `configs`, `parallelism(max_parallel, gpus)` at a time, outcomes in order.

    With `gpus` (GPU ids such as "0", or "0,1" for a bench with two GPUs) a bench holds the
    Prefect concurrency slot of one of them while it runs (flows/gpu.py, the mechanism deployed
    benches use too) and runs with `sandbox.gpus=<it>`: the server, not this process, keeps two
    benches off one GPU, also against another sweep on this machine.
    """
    workers = parallelism(max_parallel, gpus)
    if gpus:
        ensure_limits([str(g) for g in gpus])  # once, before the threads race to create them

    def on_slot(cfg: BenchConfig) -> BenchRow:
        if not gpus:
            return run_one(cfg)
        with gpu_slot([str(g) for g in gpus]) as gpu:
            return replace(run_one(with_gpu(cfg, gpu)), gpu=gpu)

    pool, stopped = ThreadPoolExecutor(max_workers=workers), False
    try:
        # each job in a copy of this thread's context: Prefect's flow run context comes along, so
        # the benches are subflow runs of the sweep's flow run (a bare thread starts top-level runs)
        futures = [pool.submit(contextvars.copy_context().run, on_slot, cfg) for cfg in configs]
        return [f.result() for f in futures]
    except BaseException as e:
        stopped = not isinstance(e, Exception)  # Ctrl-C, or Prefect's TerminationSignal for SIGTERM
        raise
    finally:
        # Stopped (Ctrl-C, SIGTERM): the queued benches never start and the running ones end
        # with the process (flows/signals.py); a `with` block would run them all first.
        pool.shutdown(wait=not stopped, cancel_futures=stopped)


def deployed_benches(cfg: SweepConfig) -> list[BenchRow]:
    """Every bench as a flow run of the bench deployment (flows/dispatch.py); completed benches'
    checked results are copied to runs_dir/<run id>/ (result.json, item_rewards.json) for the
    leaderboard."""
    from prefect.runtime import flow_run

    jobs = []
    for overrides, bench in zip(bench_overrides(cfg), bench_configs(cfg), strict=True):
        # no preflight here: GPUs, CLIs and endpoints are the worker's, which checks them first
        run = run_id_of(bench)
        sha = salt.salt_sha256(bench.task)  # every worker must draw the sweep's split (result_check)
        split = {"kind": salt.split_kind(sha), "salt_sha256": sha}
        expected = {
            "run_id": run,
            "task": bench.task.name,
            "agent": bench.agent.name,
            "seed": bench.seed,
            "test_split": split,
        }
        tags = [*bench_tags(bench), f"sweep:{flow_run.name}"]
        jobs.append(Job(run, overrides, expected, tags, work_queue=cfg.work_queue))
    run_deployments(jobs, cfg.deployment, cfg.poll_seconds, cfg.crash_retries, cfg.start_timeout_s)
    runs_dir = Path(cfg.runs_dir).resolve()
    runs_dir.mkdir(parents=True, exist_ok=True)
    for job in jobs:
        row = job.outcome
        if row.result is not None:  # its run id is a checked plain name: one folder below runs_dir
            # the checked result as read (its typed fields), never the stored bytes as they came,
            # and where its record stays (which only this copy says)
            host, path = row.location
            copy = {**row.result.to_json(), "location": {"host": host, "path": path}}
            for name, content in result_files.files_of(copy).items():  # result.json, item_rewards.json
                safefs.write_in(runs_dir, f"{job.run}/{name}", json.dumps(content, indent=2).encode())
    return [j.outcome for j in jobs]


def _sweep(cfg: SweepConfig) -> dict:
    """The sweep's body, shared by `sweep_flow` and `nightly_sweep`."""
    if dispatch_mode(cfg) == "deployment":
        n = len(cfg.tasks) * len(cfg.agents) * len(cfg.seeds)
        print(f"[sweep] {n} benches as flow runs of {cfg.deployment}, on its pool's workers", flush=True)
        outcomes = deployed_benches(cfg)
    else:
        configs = bench_configs(cfg)
        n = parallelism(cfg.max_parallel, cfg.gpus)
        slots = f" on GPU slots {cfg.gpus}" if cfg.gpus else ""
        print(f"[sweep] {len(configs)} benches in this process, {n} at a time{slots}", flush=True)
        outcomes = run_benches(configs, _one, cfg.max_parallel, cfg.gpus)
    for o in outcomes:
        print(f"[sweep] {o.line()}", flush=True)
    runs_dir = Path(cfg.runs_dir).resolve()
    table, agg = leaderboard.write(runs_dir, exclude_flagged=cfg.exclude_flagged)
    markdown = (runs_dir / "leaderboard.md").read_text()
    failed = [o for o in outcomes if o.result is None]
    if failed:
        markdown += (
            "\n## Failed and errored benches (no score)\n\n"
            + "\n".join(f"- {md_text(o.run)}: {md_text(o.error or o.state, 500)}" for o in failed)
            + "\n"
        )
    create_markdown_artifact(
        markdown=leaderboard.for_ui(markdown, runs_dir),
        key="leaderboard",
        description="VibeTraining-Bench leaderboard",
    )
    print(markdown, flush=True)
    return {
        "benches": [o.to_json() for o in outcomes],
        "leaderboard": str(runs_dir / "leaderboard.md"),
        "aggregate": agg,
    }


@flow(name="vibetraining-sweep", validate_parameters=False)
def sweep_flow(cfg: SweepConfig) -> dict:
    return _sweep(cfg)


def nightly_runs_dir(runs_dir: str, date_subdir: bool) -> str:
    """`runs_dir/<YYYY-MM-DD>` (the flow run's scheduled start, UTC) so nights do not share a folder."""
    if not date_subdir:
        return runs_dir
    from datetime import UTC

    from prefect.runtime import flow_run

    return str(Path(runs_dir) / flow_run.scheduled_start_time.astimezone(UTC).strftime("%Y-%m-%d"))


@flow(name="vibetraining-nightly-sweep")
def nightly_sweep(
    tasks: Sequence[str] = ("math",),
    agents: Sequence[str] = ("noop", "greedy"),
    seeds: Sequence[int] = (0, 1, 2),
    overrides: Sequence[str] = (),
    runs_dir: str = "runs/nightly",
    cache_dir: str = ".cache/vtb",
    max_parallel: int = 1,
    gpus: Sequence[str] = (),
    date_subdir: bool = True,
    exclude_flagged: bool = False,
    dispatch: str = "auto",
    deployment: str = DEPLOYMENT,
    crash_retries: int = 1,
    test_split: str = "hidden",
) -> dict:
    """The sweep with JSON parameters, for the Prefect deployment (prefect.yaml).

    Relative paths are taken from the working directory (the repo, set by the deployment's pull
    step). `dispatch` (default: deployment, as a worker gives its flow runs PREFECT_API_URL)
    starts each bench as a flow run of the bench deployment; inline runs them in this flow run's
    process. With `date_subdir` the benches and the leaderboard go to `runs_dir/<YYYY-MM-DD>`
    (the scheduled date, UTC): each night gets its own leaderboard, a rerun on the same date
    resumes into the same records. `cache_dir` is shared, so unchanged steps come from cache.
    """
    cfg = SweepConfig(
        tasks=list(tasks),
        agents=list(agents),
        seeds=[int(s) for s in seeds],
        overrides=list(overrides),
        runs_dir=nightly_runs_dir(runs_dir, date_subdir),
        cache_dir=cache_dir,
        max_parallel=max_parallel,
        gpus=[str(g) for g in gpus],
        exclude_flagged=exclude_flagged,
        dispatch=dispatch,
        deployment=deployment,
        crash_retries=crash_retries,
        test_split=test_split,
    )
    return _sweep(cfg)


def run_sweep(cfg: SweepConfig) -> dict:
    return sweep_flow(cfg)


def to_sweep_config(cfg: DictConfig) -> SweepConfig:
    return typed(SweepConfig, cfg)


@hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name="sweep")
def main(cfg: DictConfig) -> None:
    run_sweep(to_sweep_config(cfg))


if __name__ == "__main__":
    try:  # a mistyped key or option: one line with the closest valid ones, before Hydra's hint
        check_command_line(sys.argv[1:], "sweep")
    except ValueError as e:
        refuse(e)
    run_main(main)
