"""The benchmark flow: one bench (vtb/bench.py) as one Prefect flow run, launched by Hydra.

Launch:  python -m flows.bench                      (task=math agent=greedy model=tiny sandbox=bwrap)
         python -m flows.bench agent=noop seed=1 runs_dir=/some/dir
         python -m flows.bench -m agent=noop,greedy seed=0,1
`main` converts the config once into typed dataclasses and runs the bench; the loop itself is
plain Python in vtb/bench.py, its steps the Prefect tasks of steps/ (cached, retried). It
returns the submission's test score, so a Hydra sweeper can drive it.

`bench_deployment` is the same bench as the entry point of the deployment
`vibetraining-bench/bench` (prefect.yaml): a sweep with `dispatch=deployment` starts one flow run
of it per bench, and a worker on any machine runs it with that machine's runs dir, cache and
GPUs (`job_config`). Its result.json content is the flow run's persisted result (JSON, in
Prefect result storage), which is how the sweep gets it back without a shared file system.
"""

from __future__ import annotations

import os
import sys
from dataclasses import replace
from pathlib import Path

import hydra
from hydra.errors import HydraException
from omegaconf import DictConfig
from prefect import flow, tags
from prefect.artifacts import create_markdown_artifact
from prefect.context import TagsContext
from prefect.states import Failed

from flows.gpu import gpu_slot, machine, worker_gpus
from flows.signals import ERRORED, refuse, run_main
from flows.watch import artifact_key, bench_tags, send_progress_to_prefect, ui_watch
from steps import prefect_steps
from vtb import record
from vtb.bench import Bench
from vtb.bench_result import BenchResult, Errored
from vtb.build import preflight, preflight_data
from vtb.build import run_id as run_id_of
from vtb.compose import check_command_line, compose_config, to_config
from vtb.config import CONF_DIR, BenchConfig
from vtb.preflight import PreflightError
from vtb.repro import start_fingerprint


def run_bench(cfg: BenchConfig) -> BenchResult | Errored:
    """Run one bench as a Prefect flow run, tagged (flows/watch.py `bench_tags`): its result, or
    why it errored."""
    name = run_id_of(cfg)
    check_bench(cfg)
    with tags(*bench_tags(cfg)):
        return bench_flow.with_options(flow_run_name=name)(cfg)


def check_bench(cfg: BenchConfig) -> None:
    """Everything checkable before the flow starts: the config (agent, GPUs, budget unit), then
    the data and systems (vtb/preflight.py). A ValueError here has spent no budget."""
    preflight(cfg)
    preflight_data(cfg)


@flow(name="vibetraining-bench", validate_parameters=False)
def bench_flow(cfg: BenchConfig) -> BenchResult | Errored:
    return _bench(cfg)


def _bench(cfg: BenchConfig) -> BenchResult | Errored:
    """The body of a bench flow run (inline or deployed): the bench, then its UI artifacts."""
    send_progress_to_prefect()  # the bench's lines also in this run's Logs tab
    run_id = run_id_of(cfg)
    bench = Bench(cfg, prefect_steps(cfg.paths()[1]), watch=ui_watch(run_id, cfg))
    # The flow run carries the bench's tags (the UI's filter); its task runs do not. Prefect
    # checks each tag of a task run against tag concurrency limits through a queued service
    # before the task starts, which cost up to 2.3 s a step here (12 s on the research's
    # critical path of the default run); a deployed bench's task runs were untagged already.
    with TagsContext(current_tags=set()):
        result = bench.run()
    bench.watch.iteration(bench.history)  # the iterations table's last state, in place
    publish_artifacts(bench.run_id, Path(result.record))
    return result


def job_config(overrides: list[str] | None = None, config: dict | None = None) -> BenchConfig:
    """A deployed bench's config: Hydra overrides (or a typed config as JSON) read on this worker.

    The machine decides where its records and cache live: VTB_RUNS_DIR and VTB_CACHE_DIR, where
    set, replace the config's runs_dir and cache_dir. The run id is pinned from the config before
    that, so it is the one the sweep computed, whichever machine runs the bench.
    """
    if (overrides is None) == (config is None):
        raise ValueError("give a bench deployment either `overrides` or `config`, not both or neither")
    cfg = compose_config(list(overrides)) if config is None else to_config(config)
    cfg = replace(cfg, run_id=run_id_of(cfg))
    return replace(
        cfg,
        runs_dir=os.environ.get("VTB_RUNS_DIR") or cfg.runs_dir,
        cache_dir=os.environ.get("VTB_CACHE_DIR") or cfg.cache_dir,
    )


@flow(
    name="vibetraining-bench",
    validate_parameters=False,
    persist_result=True,
    result_serializer="json",  # read back as plain JSON by the sweep (vtb/result_check.py), never unpickled
)
def bench_deployment(overrides: list[str] | None = None, config: dict | None = None) -> dict:
    """One bench as a deployment's flow run; returns result.json's content and where its record is.

    On a worker with GPUs (VTB_GPUS or CUDA_VISIBLE_DEVICES) the bench holds the Prefect slot of
    one of them while it runs and gets it as `sandbox.gpus` (flows/gpu.py): one bench per GPU
    however many workers share the machine. `location` (host and record path) says where the
    run record lives: the result travels, the record stays on the machine that made it.
    """
    try:  # refused before any work: the run ends Failed with the reason (which names the fix)
        # as its message, once, instead of a traceback in the worker's log; the sweep's row shows it
        cfg = job_config(overrides, config)
        preflight(cfg)
    except (ValueError, HydraException) as e:  # a bad config or override (a typo in a name)
        return Failed(message=f"refused: {e}")
    gpus = worker_gpus()
    try:
        if not gpus:
            return _located(cfg)
        with gpu_slot(gpus) as gpu:
            return _located(replace(cfg, sandbox=replace(cfg.sandbox, gpus=gpu)))
    except PreflightError as e:  # the data preflight, inside the flow: nothing was spent yet
        return Failed(message=f"refused: {e}")


def _located(cfg: BenchConfig) -> dict:
    """The bench's outcome as the JSON a sweep reads back (vtb/result_check.py), with where its record is."""
    where = {"host": machine(), "path": str(cfg.paths()[0] / cfg.run_id)}
    return {**_bench(cfg).to_json(), "location": where}


def publish_artifacts(run_id: str, run_dir: Path) -> None:
    """The run's report as a Prefect markdown artifact, for the UI (the iterations table is the
    live one, flows/watch.py).

    Agent-written text (notes, file names) is escaped when report.md is written (record.md_text),
    so it renders no markup or links. The UI cannot load report.md's relative plot: the artifact
    names the file instead (the plotted figures are tables in the report).
    """
    create_markdown_artifact(
        markdown=record.report_for_ui(run_dir),
        key=f"report-{artifact_key(run_id)}",
        description=f"VibeTraining-Bench report of {run_id}",
    )


@hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name="bench")
def main(cfg: DictConfig) -> float:
    bench_cfg = to_config(cfg)
    try:
        check_bench(bench_cfg)
    except ValueError as e:  # a refusal before any work: the reason and the fix, no traceback
        refuse(e)
    # The probe's sandbox runs while Prefect starts its temporary server (6-14 s); the bench
    # waits for its figures after its model step.
    start_fingerprint(bench_cfg.sandbox)
    result = run_bench(bench_cfg)
    if isinstance(result, Errored):  # no score: the reason once, and where the record is
        reason = "".join(c if c.isprintable() else " " for c in result.error)  # agent text: no escapes
        print(f"errored: {reason}\nrun record: {result.record}", file=sys.stderr)
        sys.stderr.flush()
        raise SystemExit(ERRORED)
    return result.submitted.score.test_score


if __name__ == "__main__":
    try:  # a mistyped key or option: one line with the closest valid ones, before Hydra's hint
        check_command_line(sys.argv[1:], "bench")
    except ValueError as e:
        refuse(e)
    run_main(main)
