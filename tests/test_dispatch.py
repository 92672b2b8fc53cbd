"""Sweeps across machines for real: one Prefect server, the bench deployment (scripts/deploy.sh),
and two process workers standing in for two machines, each with its own runs dir and cache;
only the result storage is common (the stand-in for a bucket). The sweep dispatches each bench
as a flow run of the deployment and builds its leaderboard from the results read back from
that storage. Shared by the tests below: the server and the workers (module fixture), and the
first sweep's outcomes (the uninterrupted figures the killed-worker test compares with)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from tests.conftest import TINY_OVERRIDES, needs_bwrap, require_docker_engine, run_deploy_script
from tests.test_deploy import PREFECT, REPO, Proc, _descendants, _free_port, _wait_for

pytestmark = [pytest.mark.slow, needs_bwrap()]
POOL = "vtb-local"
MACHINES = ("machine-a", "machine-b")


class Cluster:
    """The server's address, the common result storage, and one worker per machine."""

    def __init__(self, tmp: Path):
        self.tmp = tmp
        self.api = ""
        self.storage = tmp / "result-storage"  # common to all machines: stands in for remote storage
        self.procs: list[Proc] = []
        self.workers: dict[str, Proc] = {}
        self.env: dict[str, str] = {}
        self.first: dict = {}  # the first sweep's outcome, by seed

    def dirs(self, name: str) -> tuple[Path, Path]:
        return self.tmp / name / "runs", self.tmp / name / "cache"

    def settings(self):
        """This process as a client of the cluster (the sweep reads results from the common storage)."""
        from prefect.settings import PREFECT_API_URL, PREFECT_RESULTS_LOCAL_STORAGE_PATH, temporary_settings

        return temporary_settings(
            {PREFECT_API_URL: self.api, PREFECT_RESULTS_LOCAL_STORAGE_PATH: self.storage}
        )

    def start_worker(self, name: str) -> None:
        runs, cache = self.dirs(name)
        env = {
            **self.env,
            "VTB_RUNS_DIR": str(runs),
            "VTB_CACHE_DIR": str(cache),
            "VTB_HOST": name,
            "PREFECT_RESULTS_LOCAL_STORAGE_PATH": str(self.storage),
            "PREFECT_WORKER_QUERY_SECONDS": "1",
            "PREFECT_WORKER_HEARTBEAT_SECONDS": "2",  # a lost machine shows within ~6 s
        }
        cmd = [str(PREFECT), "worker", "start", "--pool", POOL, "--name", name, "--limit", "1"]
        cmd += ["--work-queue", "default", "--work-queue", name]  # its own queue: tests place a bench
        proc = Proc(cmd, self.tmp / f"{name}.log", env)
        self.procs.append(proc)
        self.workers[name] = proc


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cluster")
    c = Cluster(tmp)
    port = _free_port()
    c.api = f"http://127.0.0.1:{port}/api"
    c.env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    c.env.update(
        PREFECT_HOME=str(tmp / "prefect-home"), PREFECT_SERVER_ANALYTICS_ENABLED="false", DO_NOT_TRACK="1"
    )
    t0 = time.monotonic()
    try:
        server = Proc(
            [str(REPO / "scripts" / "prefect_server.sh"), "--port", str(port)], tmp / "server.log", c.env
        )
        c.procs.append(server)
        _wait_for(server, f"export PREFECT_API_URL={c.api}", timeout=240)
        c.env["PREFECT_API_URL"] = c.api
        run_deploy_script(c.env, "--name", "bench")
        from prefect.client.orchestration import get_client

        with c.settings(), get_client(sync_client=True) as client:
            for name in MACHINES:  # `prefect work-queue create <name> --pool vtb-local`
                client.create_work_queue(name=name, work_pool_name=POOL)
        for name in MACHINES:
            c.start_worker(name)
        for name in MACHINES:
            _wait_for(c.workers[name], "started!", timeout=120)
        print(f"[cluster] server, deployment and workers up after {time.monotonic() - t0:.0f} s")
        yield c
    finally:
        for proc in reversed(c.procs):
            proc.stop()
        for proc in c.procs:
            print(f"----- {proc.log.name} (last 3000 chars)\n{proc.text()[-3000:]}")


def _sweep(cluster: Cluster, seeds: list[int], name: str, extra: list[str] = (), **kw):
    from flows.sweep import SweepConfig, run_sweep

    cfg = SweepConfig(
        tasks=["math"],
        agents=["noop"],
        seeds=seeds,
        overrides=[*TINY_OVERRIDES, *extra],
        runs_dir=str(cluster.tmp / name / "runs"),
        cache_dir=str(cluster.tmp / name / "cache"),  # the sweep's: never the benches' (VTB_CACHE_DIR)
        dispatch="deployment",
        poll_seconds=1.0,
        **kw,
    )
    with cluster.settings():
        return cfg, run_sweep(cfg)


def test_a_sweep_runs_its_benches_on_two_machines_and_gathers_results_from_storage(cluster) -> None:
    t0 = time.monotonic()
    cfg, out = _sweep(cluster, [0, 1, 2, 3], "sweep1")
    print(f"[test] sweep of 4 benches over 2 workers: {time.monotonic() - t0:.0f} s")
    benches = out["benches"]
    assert [b["state"] for b in benches] == ["completed"] * 4, benches
    assert {b["worker"] for b in benches} == set(MACHINES)  # both machines ran benches
    md = (Path(cfg.runs_dir) / "leaderboard.md").read_text()
    assert "| math | noop | 4 |" in md

    for b in benches:
        cluster.first[int(b["run"].split("-s")[1].split("-")[0])] = b
        host, path = b["location"].split(":", 1)
        runs, _ = cluster.dirs(host)
        assert host == b["worker"] and Path(path) == runs / b["run"]  # the record stays on its machine
        assert (Path(path) / "result.json").is_file()
        other = cluster.dirs(next(m for m in MACHINES if m != host))[0]
        assert not (other / b["run"]).exists()
        # the sweep's copy came through result storage: it carries `location`, which only the
        # flow run's result has (the record's own result.json, on the worker, does not)
        copy = json.loads((Path(cfg.runs_dir) / b["run"] / "result.json").read_text())
        assert copy["location"] == {"host": host, "path": path}
        assert "location" not in json.loads((Path(path) / "result.json").read_text())
        assert copy["submitted"]["test_score"] == b["submitted"]
    stored = [p for p in cluster.storage.rglob("*") if p.is_file()]
    assert len(stored) >= 4  # one persisted result per bench (task results live in each machine's cache)
    for name in MACHINES:  # each machine kept its own cache; nothing of it is shared
        assert (cluster.dirs(name)[1] / "snapshots").is_dir()
    assert not (Path(cfg.cache_dir) / "snapshots").exists()


def _flow_run_of(cluster: Cluster, run_name: str):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import (
        FlowRunFilter,
        FlowRunFilterName,
        FlowRunFilterState,
        FlowRunFilterStateName,
    )

    with cluster.settings(), get_client(sync_client=True) as client:
        runs = client.read_flow_runs(
            flow_run_filter=FlowRunFilter(
                name=FlowRunFilterName(any_=[run_name]),
                state=FlowRunFilterState(name=FlowRunFilterStateName(any_=["Completed"])),
            )
        )
        return runs[0]


def test_a_tampered_or_malformed_result_in_storage_is_a_failed_row(cluster) -> None:
    from prefect.serializers import PickleSerializer

    from flows.dispatch import Job, outcome_of

    assert cluster.first, "needs the first sweep"
    b = cluster.first[0]
    run = _flow_run_of(cluster, b["run"])
    key = Path(run.state.data.storage_key)
    assert key.is_relative_to(cluster.storage)
    original = key.read_bytes()
    expected = {"run_id": b["run"], "task": "math", "agent": "noop", "seed": 0}
    job = Job(b["run"], [], expected, [], tries=1)

    def row() -> dict:
        with cluster.settings():
            return outcome_of(run, job, b["worker"]).to_json()

    result = json.loads(original)
    assert row()["state"] == "completed"
    tampered = {
        "score 7": {**result, "submitted": {**result["submitted"], "test_score": 7.0}},
        "NaN FLOPs": {**result, "budget": {**result["budget"], "flops": float("nan")}},
        "another run": {**result, "seed": 1},
        "a string": {**result, "initial": {**result["initial"], "test_score": "0.9"}},
        "no location": {k: v for k, v in result.items() if k != "location"},
        "a path as run id": {**result, "run_id": "../../etc"},
    }
    try:
        for what, bad in tampered.items():
            key.write_text(json.dumps(bad))
            got = row()
            assert got["state"] == "failed" and got["error"].startswith("result rejected"), (what, got)
            assert "submitted" not in got
        key.write_text(json.dumps({"metadata": {}, "result": json.dumps(tampered["score 7"])}))
        assert "submitted.test_score" in row()["error"]  # the record form is checked the same way
        key.write_bytes(b"\x80garbage")
        assert "not valid JSON" in row()["error"]
        key.write_bytes(b" " * (9 << 20))
        assert "limit" in row()["error"]
        # a link in shared storage is never followed, even to a sound result
        sound = cluster.tmp / "elsewhere.json"
        sound.write_bytes(original)
        key.unlink()
        key.symlink_to(sound)
        assert "link" in row()["error"]
        key.unlink()
        assert row()["state"] == "failed"  # gone: a failed row, not a crash
        # a state whose result was pickled, or whose key points outside the storage, is not read
        meta = run.state.data
        for bad_meta in (
            meta.model_copy(update={"serializer": PickleSerializer()}),
            meta.model_copy(update={"storage_key": str(sound)}),
        ):
            key.write_bytes(original)
            run.state.data = bad_meta
            got = row()
            assert got["state"] == "failed" and ("only 'json'" in got["error"] or "outside" in got["error"])
        run.state.data = meta
    finally:
        if key.is_symlink() or key.exists():
            key.unlink()
        key.write_bytes(original)
    assert row()["state"] == "completed"


def _power_off(proc: Proc) -> None:
    """The machine dies: SIGKILL to its worker and every process below it (the bench's flow run
    and its sandboxes), so nothing reports anything to the server."""
    for pid in [proc.proc.pid, *_descendants(proc.proc.pid)]:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.proc.wait(timeout=30)


def _counted_flops(result: dict) -> float:
    """The budgeted steps' counted FLOPs (the record's ledger.jsonl, floor top-ups left out)."""
    lines = (Path(result["location"]["path"]) / "ledger.jsonl").read_text().splitlines()
    return sum(json.loads(line)["charge"]["flops_reported"] for line in lines)


def test_benches_no_worker_starts_fail_with_the_reason_instead_of_waiting_forever(cluster) -> None:
    """A bench on a queue no worker polls (as behind a single-slot worker the sweep itself holds):
    the sweep used to wait forever; it now ends such benches as failed rows that say why, and
    cancels their flow runs so no worker starts them later (issue 39)."""
    from prefect.client.orchestration import get_client

    with cluster.settings(), get_client(sync_client=True) as client:
        client.create_work_queue(name="nobody", work_pool_name=POOL)
    t0 = time.monotonic()
    _, out = _sweep(cluster, [7], "sweep-stalled", work_queue="nobody", start_timeout_s=4)
    [b] = out["benches"]
    assert b["state"] == "failed" and "no worker started this bench in 4 s" in b["error"], b
    assert "--limit 2 or more" in b["error"] and time.monotonic() - t0 < 60
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterName

    with cluster.settings(), get_client(sync_client=True) as client:
        [run] = client.read_flow_runs(flow_run_filter=FlowRunFilter(name=FlowRunFilterName(any_=[b["run"]])))
    assert run.state.is_cancelled(), run.state


def test_a_bench_whose_worker_dies_is_recomputed_on_the_other_one_with_the_same_figures(cluster) -> None:
    """The retry lands on a new machine with nothing of this bench in its cache (a cache miss):
    it recomputes every step and gets the same scores and the same counted FLOPs."""
    assert cluster.first, "needs the first sweep"
    seed = 3
    first = cluster.first[seed]
    victim = next(m for m in MACHINES if m != first["worker"])  # nothing of this bench in its cache
    survivor = first["worker"]
    before = json.loads((cluster.tmp / "sweep1" / "runs" / first["run"] / "result.json").read_text())
    counted = _counted_flops(before)  # read now: the retry writes its record where this one is
    for folder in (cluster.dirs(survivor)[1], cluster.dirs(survivor)[0] / first["run"]):
        shutil.rmtree(folder)  # the retry's machine has neither its cache nor its record: a new machine
    record = cluster.dirs(victim)[0] / first["run"]

    def kill_mid_bench() -> None:
        deadline = time.monotonic() + 300
        while not record.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(2)  # the bench is under way on the victim
        _power_off(cluster.workers[victim])

    killer = threading.Thread(target=kill_mid_bench, daemon=True)
    killer.start()
    t0 = time.monotonic()
    cfg, out = _sweep(cluster, [seed], "sweep2", work_queue=victim)  # first try placed on the victim
    killer.join(timeout=10)
    print(f"[test] sweep with a killed worker: {time.monotonic() - t0:.0f} s")
    [b] = out["benches"]
    assert record.exists(), "the bench never started on the victim"
    assert b["state"] == "completed", b
    assert b["tries"] == 2 and b["worker"] == survivor and victim in b["crashes"][0]
    again = json.loads((Path(cfg.runs_dir) / b["run"] / "result.json").read_text())
    for part in ("initial", "submitted"):
        assert again[part]["test_score"] == before[part]["test_score"]
        assert again[part]["val_score"] == before[part]["val_score"]
    assert (cluster.dirs(survivor)[1] / "snapshots").is_dir()  # recomputed there, into a new cache
    # The engines' counted FLOPs are the same to the unit; what the budget charged may differ by
    # the FLOPs floor's top-ups, which follow the CPU-seconds metered on this run.
    assert _counted_flops(again) == counted > 0


def test_two_gpus_four_benches_never_more_than_one_bench_per_gpu(cluster, monkeypatch) -> None:
    """The GPU slots are the server's global concurrency limits: observed there while 4 fake
    benches share 2 fake GPUs of one machine."""
    from prefect.client.orchestration import get_client

    from flows import gpu as gpu_mod
    from flows.rows import BenchRow
    from flows.sweep import run_benches

    monkeypatch.setattr(gpu_mod, "POLL_SECONDS", 0.1)
    monkeypatch.setenv("VTB_HOST", "gpu-box")
    names = [gpu_mod.limit_name(g) for g in ("0", "1")]
    held: list[tuple[str, str]] = []

    seen: list[list[int]] = []

    def fake_bench(cfg) -> BenchRow:
        # Hold the GPU until the server has shown both slots taken (or 30 s): a fixed sleep let a
        # slow server on a loaded CI machine start the second bench after the first had ended.
        held.append((cfg.seed, cfg.sandbox.gpus))
        deadline = time.monotonic() + 30
        while [1, 1] not in seen and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.2)
        return BenchRow(str(cfg.seed), "failed", error="a fake bench has no result")

    stop = threading.Event()

    def watch() -> None:
        with cluster.settings(), get_client(sync_client=True) as client:
            while not stop.is_set():
                seen.append([client.read_global_concurrency_limit_by_name(n).active_slots for n in names])
                time.sleep(0.05)

    from tests.test_sweep_slots import configs_for

    configs = configs_for(cluster.tmp / "gpu", seeds=[0, 1, 2, 4], agents=["noop"])
    with cluster.settings():
        watcher = threading.Thread(target=watch)
        gpu_mod.ensure_limits(["0", "1"])
        watcher.start()
        try:
            outcomes = run_benches(configs, fake_bench, max_parallel=4, gpus=["0", "1"])
        finally:
            stop.set()
            watcher.join()
    assert len(outcomes) == 4 and {o.gpu for o in outcomes} == {"0", "1"}
    assert seen and max(max(s) for s in seen) == 1  # never two benches on one GPU
    assert [1, 1] in seen  # both GPUs busy at once: the slots were used, not just respected
    assert sorted(g for _, g in held).count("0") + sorted(g for _, g in held).count("1") == 4


def _orchestrator_image() -> None:
    """vtb/orchestrator of this checkout as it is now, at this path, built (offline) unless it
    already is; a missing engine skips the test, except in CI (VTB_REQUIRE_DOCKER=1)."""
    require_docker_engine()
    build = REPO / "scripts" / "build_images.sh"
    if subprocess.run([str(build), "orchestrator-check"], capture_output=True, cwd=REPO).returncode != 0:
        t0 = time.monotonic()
        subprocess.run([str(build), "orchestrator"], check=True, cwd=REPO, timeout=900)
        print(f"[test] built vtb/orchestrator in {time.monotonic() - t0:.0f} s")


@pytest.mark.docker
def test_a_bench_runs_on_the_docker_work_pool_in_the_orchestrator_image(cluster) -> None:
    """The docker pool for real: a docker worker starts the bench's flow run as a container of
    vtb/orchestrator, whose sandboxes (sandbox=docker) go through the host's Docker socket; the
    result comes back through the result storage the container wrote to."""
    _orchestrator_image()
    data = cluster.tmp / "docker-machine"
    env = {**cluster.env, "VTB_DOCKER_DATA": str(data), "VTB_RESULTS": str(data / "results")}
    run_deploy_script(env, "--name", "bench-docker", "--docker")
    worker = Proc(
        [str(PREFECT), "worker", "start", "--pool", "vtb-docker", "--type", "docker", "--name", "docker-a"],
        cluster.tmp / "docker-a.log",
        {**env, "PREFECT_WORKER_QUERY_SECONDS": "1"},
    )
    cluster.procs.append(worker)
    _wait_for(worker, "started!", timeout=120)
    t0 = time.monotonic()
    cluster.storage = data / "results"  # the sweep reads the storage this machine writes to
    cfg, out = _sweep(
        cluster, [0], "sweep-docker", deployment="vibetraining-bench/bench-docker", extra=["sandbox=docker"]
    )
    print(f"[test] one bench on the docker pool: {time.monotonic() - t0:.0f} s")
    [b] = out["benches"]
    assert b["state"] == "completed", (b, worker.text()[-3000:])
    assert b["worker"] == "docker-a"
    host, path = b["location"].split(":", 1)
    assert Path(path) == data / "runs" / b["run"] and (Path(path) / "result.json").is_file()
    copy = json.loads((Path(cfg.runs_dir) / b["run"] / "result.json").read_text())
    assert copy["location"]["path"] == path
    config = json.loads((Path(path) / "config.json").read_text())
    assert config["sandbox"]["backend"] == "docker"
