"""The sweep flow: tasks x agents x seeds, each a bench subflow, then the leaderboard.

Launch:  python -m flows.sweep                                 (conf/sweep.yaml: math x noop,greedy x 3 seeds)
         python -m flows.sweep 'agents=[greedy]' 'seeds=[0,1]' 'overrides=[budget.limit=5e12]'
A bench that fails is recorded and the sweep goes on; the leaderboard (leaderboard.md, .csv,
.png under runs_dir) covers the benches that finished, and is published as a Prefect artifact.
`max_parallel` benches run at once (one per GPU on a GPU machine).
"""

from __future__ import annotations

import os

os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "90")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("DO_NOT_TRACK", "1")

from concurrent.futures import ThreadPoolExecutor  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402
from pathlib import Path  # noqa: E402

import hydra  # noqa: E402
from omegaconf import DictConfig, OmegaConf  # noqa: E402
from prefect import flow  # noqa: E402
from prefect.artifacts import create_markdown_artifact  # noqa: E402

from flows.bench import CONF_DIR, bench_flow, default_run_id, to_config  # noqa: E402
from vtb import leaderboard  # noqa: E402
from vtb.agents import make_agent  # noqa: E402
from vtb.config import BenchConfig  # noqa: E402


@dataclass
class SweepConfig:
    tasks: list[str] = field(default_factory=lambda: ["math"])
    agents: list[str] = field(default_factory=lambda: ["noop", "greedy"])
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    overrides: list[str] = field(default_factory=list)  # Hydra overrides for every bench
    runs_dir: str = "runs/sweep"
    cache_dir: str = ".cache/vtb"
    max_parallel: int = 1  # benches at once


def bench_configs(cfg: SweepConfig) -> list[BenchConfig]:
    """One typed bench config per (task, agent, seed), composed from conf/ like `python -m flows.bench`."""
    from hydra import compose, initialize_config_dir

    runs, cache = str(Path(cfg.runs_dir).resolve()), str(Path(cfg.cache_dir).resolve())
    out = []
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        for task in cfg.tasks:
            for agent in cfg.agents:
                for seed in cfg.seeds:
                    overrides = [f"task={task}", f"agent={agent}", f"seed={seed}", f"runs_dir={runs}",
                                 f"cache_dir={cache}", *cfg.overrides]  # fmt: skip
                    out.append(to_config(compose(config_name="bench", overrides=overrides)))
    return out


def _one(cfg: BenchConfig) -> dict:
    """Run one bench subflow; a failure becomes a row, not an exception."""
    name = default_run_id(cfg)
    try:
        make_agent(cfg.agent)  # a misconfigured agent fails here, before any work
    except ValueError as e:
        return {"run": name, "state": "failed", "error": f"config: {e}"}
    state = bench_flow.with_options(flow_run_name=name)(cfg, return_state=True)
    if state.is_completed():
        return {"run": name, "state": "completed", "submitted": state.result()["submitted"]["test_score"]}
    try:
        state.result()
        error = state.message
    except Exception as e:  # noqa: BLE001 (the bench's own error, kept for the summary)
        error = f"{type(e).__name__}: {e}"
    return {"run": name, "state": state.type.value.lower(), "error": str(error)[:500]}


@flow(name="vibetraining-sweep", validate_parameters=False)
def sweep_flow(cfg: SweepConfig) -> dict:
    configs = bench_configs(cfg)
    print(f"[sweep] {len(configs)} benches, {cfg.max_parallel} at a time", flush=True)
    with ThreadPoolExecutor(max_workers=max(1, cfg.max_parallel)) as pool:
        outcomes = list(pool.map(_one, configs))
    for o in outcomes:
        print(f"[sweep] {o['run']}: {o['state']}" + (f" ({o['error']})" if "error" in o else ""), flush=True)
    runs_dir = Path(cfg.runs_dir).resolve()
    table, agg = leaderboard.write(runs_dir)
    markdown = (runs_dir / "leaderboard.md").read_text()
    failed = [o for o in outcomes if o["state"] != "completed"]
    if failed:
        markdown += (
            "\n## Failed benches\n\n" + "\n".join(f"- {o['run']}: {o['error']}" for o in failed) + "\n"
        )
    create_markdown_artifact(
        markdown=markdown, key="leaderboard", description="VibeTraining-Bench leaderboard"
    )
    print(markdown, flush=True)
    return {"benches": outcomes, "leaderboard": str(runs_dir / "leaderboard.md"), "aggregate": agg}


def run_sweep(cfg: SweepConfig) -> dict:
    return sweep_flow(cfg)


def to_sweep_config(cfg: DictConfig) -> SweepConfig:
    return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(SweepConfig), cfg))


@hydra.main(version_base="1.3", config_path=CONF_DIR, config_name="sweep")
def main(cfg: DictConfig) -> None:
    run_sweep(to_sweep_config(cfg))


if __name__ == "__main__":
    main()
