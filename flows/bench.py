"""The benchmark flow: one bench (vtb/bench.py) as one Prefect flow run, launched by Hydra.

Launch:  python -m flows.bench                      (task=math agent=greedy model=tiny sandbox=bwrap)
         python -m flows.bench agent=noop seed=1 runs_dir=/some/dir
         python -m flows.bench -m agent=noop,greedy seed=0,1
`main` converts the config once into typed dataclasses and runs the bench; the loop itself is
plain Python in vtb/bench.py, its steps the Prefect tasks of steps/ (cached, retried). It
returns the submission's test score, so a Hydra sweeper can drive it.
"""

from __future__ import annotations

from pathlib import Path

import hydra
from omegaconf import DictConfig
from prefect import flow, tags
from prefect.artifacts import create_markdown_artifact, create_table_artifact

from flows.watch import artifact_key, bench_tags, iteration_rows, send_progress_to_prefect, ui_watch
from steps import prefect_steps
from vtb import record
from vtb.bench import Bench, default_run_id, preflight
from vtb.compose import to_config
from vtb.config import CONF_DIR, BenchConfig


def run_bench(cfg: BenchConfig) -> dict:
    """Run one bench as a Prefect flow run, tagged (flows/watch.py `bench_tags`); returns result.json's content."""
    name = default_run_id(cfg) if cfg.run_id is None else cfg.run_id
    preflight(cfg)
    with tags(*bench_tags(cfg)):
        return bench_flow.with_options(flow_run_name=name)(cfg)


@flow(name="vibetraining-bench", validate_parameters=False)
def bench_flow(cfg: BenchConfig) -> dict:
    send_progress_to_prefect()  # the bench's lines also in this run's Logs tab
    run_id = cfg.run_id or default_run_id(cfg)
    bench = Bench(cfg, prefect_steps(cfg.paths()[1]), watch=ui_watch(run_id, cfg))
    result = bench.run()
    publish_artifacts(bench.run_id, Path(result["record"]), [c.to_json() for c in bench.history])
    return result


def publish_artifacts(run_id: str, run_dir: Path, history: list[dict]) -> None:
    """The run's report and its iterations as Prefect artifacts, for the UI.

    Agent-written text (notes, file names) goes through record.md_text in both: report.md is
    escaped when written, the table's cells in flows/watch.py, so neither renders markup or links.
    The UI cannot load report.md's relative plot: the artifact names the file instead (the
    plotted figures are tables in the report).
    """
    key = artifact_key(run_id)
    create_markdown_artifact(
        markdown=record.report_for_ui(run_dir),
        key=f"report-{key}",
        description=f"VibeTraining-Bench report of {run_id}",
    )
    create_table_artifact(
        table=iteration_rows(history), key=f"iterations-{key}", description=f"Iterations of {run_id}"
    )


@hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name="bench")
def main(cfg: DictConfig) -> float:
    return run_bench(to_config(cfg))["submitted"]["test_score"]


if __name__ == "__main__":
    main()
