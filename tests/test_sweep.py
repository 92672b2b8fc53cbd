"""The sweep flow on a shrunken math config: bench subflows, a failing bench, the leaderboard, artifacts."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from tests.conftest import TINY_OVERRIDES, needs_bwrap

pytestmark = [pytest.mark.slow, needs_bwrap()]


def test_sweep_runs_benches_survives_a_failure_and_writes_the_leaderboard(tmp_path, prefect_server) -> None:
    from flows.sweep import SweepConfig, run_sweep

    cfg = SweepConfig(
        tasks=["math"],
        agents=["noop", "cli"],
        seeds=[0, 1],
        overrides=TINY_OVERRIDES,  # what is tested is the sweep: each bench as small as it gets
        runs_dir=str(tmp_path / "runs"),
        cache_dir=str(tmp_path / "cache"),
        dispatch="inline",  # benches as subflows here (tests/test_dispatch.py: as deployment runs)
    )
    out = run_sweep(cfg)
    states = sorted((b["run"].split("-")[1], b["state"]) for b in out["benches"])
    assert states == [("cli", "failed"), ("cli", "failed"), ("noop", "completed"), ("noop", "completed")]
    assert all("agent.command" in b["error"] for b in out["benches"] if b["state"] == "failed")
    runs = tmp_path / "runs"
    md = (runs / "leaderboard.md").read_text()
    assert "| math | noop | 2 |" in md and "| math | cli |" not in md
    results = [json.loads(p.read_text()) for p in runs.glob("*/result.json")]
    assert sorted(r["seed"] for r in results) == [0, 1]
    # compared scores: a hidden split (this installation's salt), one for every bench
    from vtb import salt

    splits = {json.dumps(r["test_split"], sort_keys=True) for r in results}
    assert len(splits) == 1 and results[0]["test_split"]["kind"] == "hidden"
    assert results[0]["test_split"]["salt_sha256"] != salt.PUBLIC_SHA256

    from prefect.client.orchestration import get_client

    async def artifacts() -> set[str]:
        async with get_client() as client:
            return {a.key for a in await client.read_artifacts() if a.key}

    keys = asyncio.run(artifacts())
    assert "leaderboard" in keys
    assert {f"report-{r['run_id'].lower()}" for r in results} <= keys
    assert {f"iterations-{r['run_id'].lower()}" for r in results} <= keys
    assert Path(out["leaderboard"]) == runs / "leaderboard.md"
