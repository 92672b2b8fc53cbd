"""GPU slots of the inline sweep, on the CPU: a fake bench function stands in for the bench flow.

The slots are Prefect global concurrency limits (flows/gpu.py), so these tests need the test
server (`prefect_server`); the fake bench's own counters check that no two held one GPU."""

from __future__ import annotations

import threading
import time
from dataclasses import replace

import pytest

from flows.rows import BenchRow
from flows.sweep import SweepConfig, bench_configs, parallelism, run_benches, with_gpu
from vtb.build import default_run_id


class FakeBench:
    """Records which GPU each bench got and which slots were held at the same time."""

    def __init__(self, seconds: float = 0.2, fill: int = 0):
        self.seconds = seconds
        self.fill = fill  # the first benches wait (10 s at most) until this many run at once
        self.lock = threading.Lock()
        self.running: dict[str, str] = {}  # run id -> slot
        self.seen: list[tuple[str, str | None]] = []
        self.max_running = 0
        self.clashes: list[str] = []

    def __call__(self, cfg) -> BenchRow:
        gpu, run = cfg.sandbox.gpus, cfg.run_id or default_run_id(cfg)
        with self.lock:
            if gpu in self.running.values():
                self.clashes.append(f"{run} on {gpu}, held by {self.running}")
            self.running[run] = gpu
            self.seen.append((run, gpu))
            self.max_running = max(self.max_running, len(self.running))
        deadline = time.monotonic() + 10
        while self.max_running < self.fill and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(self.seconds)
        with self.lock:
            del self.running[run]
        if cfg.seed == 3:
            raise RuntimeError("bench crashed")
        return BenchRow(run, "failed", error="a fake bench has no result")


def configs_for(tmp, seeds=(0, 1, 2, 4, 5), agents=("noop", "greedy")) -> list:
    sweep = SweepConfig(
        tasks=["math"],
        agents=list(agents),
        seeds=list(seeds),
        runs_dir=str(tmp / "runs"),
        cache_dir=str(tmp / "cache"),
    )
    return bench_configs(sweep)


@pytest.fixture(scope="module")
def configs(tmp_path_factory):
    return configs_for(tmp_path_factory.mktemp("slots"))


@pytest.mark.parametrize(
    ("max_parallel", "gpus", "expected"),
    [
        (4, ["0", "1"], 2),
        (1, ["0", "1", "2"], 1),
        (3, ["0", "1", "2", "3"], 3),
        (3, [], 3),
        (0, [], 1),
        (8, ["0,1", "2,3"], 2),
    ],
)
def test_parallelism_is_bounded_by_the_gpu_slots(max_parallel, gpus, expected) -> None:
    assert parallelism(max_parallel, gpus) == expected


@pytest.fixture
def fast_slots(prefect_server, monkeypatch):
    """The test server's GPU slots, tried every 20 ms while busy (2 s in a real sweep)."""
    from flows import gpu

    monkeypatch.setattr(gpu, "POLL_SECONDS", 0.02)


@pytest.mark.parametrize(
    ("max_parallel", "gpus"), [(4, ["0", "1"]), (2, ["0", "1", "2"]), (3, ["0,1", "2,3", "4"])]
)
def test_each_bench_holds_its_own_gpu_slot(configs, max_parallel, gpus, fast_slots) -> None:
    fake = FakeBench(fill=parallelism(max_parallel, gpus))  # the slots are all taken at once, then freed
    outcomes = run_benches(configs, fake, max_parallel=max_parallel, gpus=gpus)
    assert fake.clashes == []
    assert fake.max_running == parallelism(max_parallel, gpus)  # the slots are used, never exceeded
    assert len(fake.seen) == len(configs) and all(gpu in gpus for _, gpu in fake.seen)
    assert [o.run for o in outcomes] == [default_run_id(c) for c in configs]  # in order, ids pinned
    assert all(o.gpu in gpus and o.to_json()["gpu"] == o.gpu for o in outcomes)
    assert all(c.sandbox.gpus is None and c.run_id is None for c in configs)  # the inputs are untouched


def test_a_failing_bench_gives_its_slot_back(configs, fast_slots) -> None:
    fake = FakeBench(seconds=0.01)
    crashing = [replace(c, seed=3) for c in configs[:2]]
    with pytest.raises(RuntimeError, match="bench crashed"):
        run_benches(crashing, fake, max_parallel=2, gpus=["0"])
    assert len(fake.seen) == 2 and fake.clashes == []  # the second bench got the slot after the crash


def test_without_gpus_no_slot_is_assigned(configs) -> None:
    fake = FakeBench(seconds=0.01)
    outcomes = run_benches(configs[:3], fake, max_parallel=2)
    assert [gpu for _, gpu in fake.seen] == [None, None, None]
    assert all(o.gpu is None and "gpu" not in o.to_json() for o in outcomes)


def test_the_slot_is_the_hydra_override_sandbox_gpus(tmp_path) -> None:
    """with_gpu gives the config Hydra composes with `sandbox.gpus=<id>`, with the run id of the config without it."""
    base = SweepConfig(
        tasks=["math"],
        agents=["noop"],
        seeds=[0],
        runs_dir=str(tmp_path / "r"),
        cache_dir=str(tmp_path / "c"),
        overrides=["budget.limit=5e12"],
    )
    [cfg] = bench_configs(base)
    [composed] = bench_configs(replace(base, overrides=[*base.overrides, "sandbox.gpus=1"]))
    slotted = with_gpu(cfg, "1")
    assert slotted.sandbox == composed.sandbox and slotted.sandbox.gpus == "1"
    assert replace(slotted, run_id=None) == composed
    assert slotted.run_id == default_run_id(cfg)  # the record and cache do not depend on the slot
