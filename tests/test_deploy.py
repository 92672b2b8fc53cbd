"""The nightly deployment for real: scripts/prefect_server.sh on a free port, scripts/deploy.sh
(prefect.yaml), a process worker, one triggered run of a tiny sweep, then the Prefect API's view
of it (flow runs, artifacts, the schedule)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import time
import urllib.request
from datetime import UTC
from pathlib import Path

import pytest
import yaml

from tests.conftest import TINY_OVERRIDES, needs_bwrap, require_docker_engine, run_deploy_script

pytestmark = [pytest.mark.slow, needs_bwrap()]

REPO = Path(__file__).resolve().parents[1]
PREFECT = REPO / ".venv" / "bin" / "prefect"  # the worker's flow runs use its Python: the venv's
DEPLOYMENT = "vibetraining-nightly-sweep/nightly-sweep"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _descendants(pid: int) -> list[int]:
    """All live descendants of `pid` (from /proc), children before grandchildren."""
    parents: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    out, todo = [], [pid]
    while todo:
        kids = parents.get(todo.pop(0), [])
        out += kids
        todo += kids
    return out


class Proc:
    """A command in its own session, logged to a file; stop() ends it, its group and every
    descendant's group (the worker starts each flow run in a session of its own)."""

    def __init__(self, cmd: list[str], log: Path, env: dict[str, str]):
        self.log = log
        self.proc = subprocess.Popen(
            cmd, cwd=REPO, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT, start_new_session=True
        )

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self) -> None:
        pids = [self.proc.pid, *_descendants(self.proc.pid)]
        groups = set()
        for pid in pids:
            try:
                groups.add(os.getpgid(pid))
            except ProcessLookupError:
                pass
        groups.discard(os.getpgrp())  # never this test's own group
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for group in groups:
                try:
                    os.killpg(group, sig)
                except ProcessLookupError:
                    pass
            deadline = time.monotonic() + (5 if sig == signal.SIGTERM else 15)
            while time.monotonic() < deadline and any(_alive(p) for p in pids):
                time.sleep(0.1)  # the whole tree, not only the leader: a worker's flow runs too
            try:
                self.proc.wait(timeout=1)
            except subprocess.TimeoutExpired:
                continue
            if not any(_alive(p) for p in pids):
                return


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def _wait_for(proc: Proc, text: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while text not in proc.text():
        assert proc.proc.poll() is None, f"{proc.log.name} exited:\n{proc.text()[-3000:]}"
        assert time.monotonic() < deadline, f"no {text!r} in {proc.log.name} after {timeout} s"
        time.sleep(0.5)


async def _api_view(flow_run_id):
    """The flow run, its bench subflow runs, the deployment and the artifacts, as the API sees them."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterParentFlowRunId

    async with get_client() as client:
        run = await client.read_flow_run(flow_run_id)
        benches = await client.read_flow_runs(
            flow_run_filter=FlowRunFilter(parent_flow_run_id=FlowRunFilterParentFlowRunId(any_=[flow_run_id]))
        )
        flows = {f.id: f.name for f in await client.read_flows()}
        deployment = await client.read_deployment_by_name(DEPLOYMENT)
        artifacts = {a.key: a for a in await client.read_artifacts() if a.key}
        return run, benches, flows, deployment, artifacts


def test_nightly_deployment_runs_a_sweep_through_a_worker(tmp_path) -> None:
    port = _free_port()
    api = f"http://127.0.0.1:{port}/api"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update(
        PREFECT_HOME=str(tmp_path / "prefect-home"),
        PREFECT_SERVER_ANALYTICS_ENABLED="false",
        DO_NOT_TRACK="1",
    )
    runs, cache = tmp_path / "runs", tmp_path / "cache"
    procs: list[Proc] = []
    t0 = time.monotonic()
    try:
        server = Proc(
            [str(REPO / "scripts" / "prefect_server.sh"), "--port", str(port)], tmp_path / "server.log", env
        )
        procs.append(server)
        _wait_for(server, f"export PREFECT_API_URL={api}", timeout=240)
        print(f"[test] server up after {time.monotonic() - t0:.0f} s")
        # the UI asks /ui-settings where the API is: this port, not the default 4200
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/ui-settings", timeout=10) as r:
            assert json.load(r)["api_url"] == api

        env["PREFECT_API_URL"] = api
        deploy = run_deploy_script(env)
        assert "prefect worker start --pool vtb-local" in deploy.stdout
        print(f"[test] deployed after {time.monotonic() - t0:.0f} s")

        worker = Proc(
            [str(PREFECT), "worker", "start", "--pool", "vtb-local"],
            tmp_path / "worker.log",
            {**env, "PREFECT_WORKER_QUERY_SECONDS": "2"},
        )
        procs.append(worker)

        from prefect.deployments import run_deployment
        from prefect.settings import PREFECT_API_URL, temporary_settings

        params = {
            "tasks": ["math"],
            "agents": ["noop"],
            "seeds": [0],
            "overrides": TINY_OVERRIDES,
            "runs_dir": str(runs),
            "cache_dir": str(cache),
            "max_parallel": 1,
        }
        with temporary_settings({PREFECT_API_URL: api}):
            flow_run = run_deployment(DEPLOYMENT, parameters=params, timeout=480, poll_interval=2)
            print(f"[test] flow run {flow_run.state_name} after {time.monotonic() - t0:.0f} s")
            run, benches, flows, deployment, artifacts = asyncio.run(_api_view(flow_run.id))
    finally:
        for proc in reversed(procs):
            proc.stop()
        for proc in procs:  # shown by pytest when the test fails
            print(f"----- {proc.log.name} (last 4000 chars)\n{proc.text()[-4000:]}")

    # the deployment, as prefect.yaml defines it: the nightly cron in an explicit timezone, the
    # process pool, and the flow runs starting in this checkout (offline: nothing cloned)
    spec = yaml.safe_load((REPO / "prefect.yaml").read_text())["deployments"][0]
    assert spec["schedules"][0]["timezone"]  # explicit, not the UTC default
    [schedule] = deployment.schedules
    assert schedule.active
    assert (schedule.schedule.cron, schedule.schedule.timezone) == ("0 2 * * *", "Europe/Berlin")
    assert (schedule.schedule.cron, schedule.schedule.timezone) == (
        spec["schedules"][0]["cron"],
        spec["schedules"][0]["timezone"],
    )
    assert deployment.work_pool_name == "vtb-local"
    assert deployment.pull_steps == [
        {"prefect.deployments.steps.set_working_directory": {"directory": str(REPO)}}
    ]

    # the sweep flow run and its bench subflow run, completed
    assert run.state.is_completed(), run.state
    assert run.deployment_id == deployment.id and flows[run.flow_id] == "vibetraining-nightly-sweep"
    assert [(flows[b.flow_id], b.state.type.value) for b in benches] == [("vibetraining-bench", "COMPLETED")]
    tags = {"task:math", "agent:noop", "seed:0", "model:tiny", "sandbox:bwrap", f"sweep:{run.name}"}
    assert set(benches[0].tags) == tags  # a sweep's bench: its own tags and the sweep's name
    assert benches[0].name.startswith("math-noop-s0-")  # named by task, agent, seed

    # the files: a dated folder (the scheduled date, UTC) with the leaderboard and the bench's record
    [day] = [p for p in runs.iterdir() if p.is_dir()]
    assert day.name == run.expected_start_time.astimezone(UTC).strftime("%Y-%m-%d")
    assert "| math | noop | 1 |" in (day / "leaderboard.md").read_text()
    [result_file] = day.glob("*/result.json")
    result = json.loads(result_file.read_text())
    assert result["run_id"] == benches[0].name
    assert (cache / "snapshots").is_dir()

    # the artifacts: the leaderboard of the sweep run, the report and iterations of the bench run
    key = result["run_id"].lower()
    assert artifacts["leaderboard"].flow_run_id == run.id
    assert artifacts[f"report-{key}"].flow_run_id == benches[0].id
    assert artifacts[f"iterations-{key}"].flow_run_id == benches[0].id
    assert "| math | noop | 1 |" in artifacts["leaderboard"].data


@pytest.mark.docker
def test_the_docker_deployment_is_refused_for_an_image_of_another_checkout(tmp_path) -> None:
    """A bench-docker flow run starts in vtb/orchestrator at the checkout's path: an image built
    from another folder fails every flow run at its first step (the sweep reads only "crashed"),
    one of other sources runs stale code. deploy.sh --docker says so before deploying, and before
    it even asks for the Prefect server (none runs here)."""
    require_docker_engine()
    build = REPO / "scripts" / "build_images.sh"
    source = subprocess.run(
        [str(build), "source-id"], capture_output=True, text=True, cwd=REPO
    ).stdout.strip()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env["PREFECT_API_URL"] = f"http://127.0.0.1:{_free_port()}/api"  # nothing listens
    tag = f"vtb-test/orchestrator-elsewhere:{os.getpid()}"

    def deploy_docker() -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(REPO / "scripts" / "deploy.sh"), "--docker"],
            cwd=REPO,
            env={**env, "ORCHESTRATOR_IMAGE": tag},
            capture_output=True,
            text=True,
            timeout=60,
        )

    cases = {
        "other folder": ("/srv/other-checkout", source),
        "other sources": (str(REPO), source + "0"),
    }
    try:
        for what, (checkout, labelled) in cases.items():
            imported = subprocess.run(
                [
                    "docker",
                    "import",
                    "-c",
                    f"LABEL vtb.checkout={checkout}",
                    "-c",
                    f"LABEL vtb.source={labelled}",
                    "-",
                    tag,
                ],
                input=b"",  # an empty tar stream: an image of no files is enough for its labels
                capture_output=True,
            )
            assert imported.returncode == 0, imported.stderr
            deploy = deploy_docker()
            assert deploy.returncode == 1, (what, deploy.stdout, deploy.stderr)
            assert (
                f"{tag} was built from {checkout} (sources {labelled}), not from this checkout"
                in deploy.stderr
            )
            assert f"{REPO} (sources {source})" in deploy.stderr
            assert (
                "scripts/build_images.sh orchestrator" in deploy.stderr
                and "nothing deployed" in deploy.stderr
            )
            assert "Prefect server" not in deploy.stderr + deploy.stdout, what
        subprocess.run(["docker", "rmi", "-f", tag], capture_output=True)
        deploy = deploy_docker()
        assert deploy.returncode == 1 and f"{tag} does not exist: build it here" in deploy.stderr
    finally:
        subprocess.run(["docker", "rmi", "-f", tag], capture_output=True)
