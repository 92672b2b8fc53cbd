"""Shared fixtures: a Prefect server for flow tests, a small, fast bench config, a host server
and scripted-harness play in bwrap sandboxes."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

os.environ.setdefault(
    "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120"
)  # a test server on a busy CI machine
import flows  # noqa: E402, F401  (the other Prefect process defaults: flows/__init__.py)
from vtb.config import BenchConfig  # noqa: E402

# Data in other projects' own layouts (tau-bench's tasks_test.py matches pytest's *_test.py): never collected.
collect_ignore = ["fixtures"]


@pytest.fixture(scope="session")
def prefect_server():
    """Reuse a running server when PREFECT_API_URL is set, else a temporary test server."""
    if os.environ.get("PREFECT_API_URL"):
        yield
        return
    with _temporary_prefect_server(startup_timeout=120, drain_timeout=30):
        yield


@contextlib.contextmanager
def _temporary_prefect_server(startup_timeout: float, drain_timeout: float):
    """What prefect.testing.utilities.prefect_test_harness sets up (a temporary database, a server
    subprocess, its URL as this process's API), torn down with BOUNDED drains of the log and
    event workers: the harness's own drain waited forever once in CI, after the last test."""
    import prefect.context
    import prefect.settings as ps
    from prefect.events.worker import EventsWorker
    from prefect.logging.handlers import APILogWorker
    from prefect.server.api.server import SubprocessASGIServer
    from prefect.server.database.dependencies import temporary_database_interface

    tmp = tempfile.mkdtemp(prefix="vtb-prefect-test-")
    with contextlib.ExitStack() as stack:  # undone last-in first-out
        stack.callback(shutil.rmtree, tmp, True)
        stack.enter_context(temporary_database_interface())
        db = f"sqlite+aiosqlite:///{tmp}/prefect-test.db"
        stack.enter_context(ps.temporary_settings(updates={ps.PREFECT_SERVER_DATABASE_CONNECTION_URL: db}))
        with socket.create_server(("127.0.0.1", 0)) as probe:
            port = probe.getsockname()[1]
        server = SubprocessASGIServer(port=port)
        prior = SubprocessASGIServer._instances.get(None)
        SubprocessASGIServer._instances[None] = server  # flows that ask for "the" server get this one

        def restore_default() -> None:
            SubprocessASGIServer._instances.pop(None, None)
            if prior is not None:
                SubprocessASGIServer._instances[None] = prior

        stack.callback(restore_default)
        server.start(timeout=startup_timeout)
        stack.callback(server.stop)
        stack.enter_context(ps.temporary_settings(updates={ps.PREFECT_API_URL: server.api_url}))
        stack.enter_context(
            prefect.context._temporary_global_settings_context(prefect.context.get_settings_context())
        )
        # bounded drains first at exit, while the server still runs
        stack.callback(EventsWorker.drain_all, timeout=drain_timeout)
        stack.callback(APILogWorker.drain_all, timeout=drain_timeout)
        yield


def sandbox_backend(name: str, **kwargs):
    """A sandbox of the named backend, or a skip when this machine lacks it.

    With VTB_REQUIRE_DOCKER=1 (set by .ci/run, which starts a Docker Engine) a missing engine
    or image fails the test instead: CI must never turn the docker suite green by skipping it.
    """
    from vtb.sandbox import make_sandbox

    if name == "bwrap" and shutil.which("bwrap") is None:
        pytest.skip("bubblewrap not installed (apt-get install bubblewrap)")
    try:
        return make_sandbox(name, **kwargs)
    except RuntimeError as e:
        if name == "docker" and os.environ.get("VTB_REQUIRE_DOCKER") != "1":
            pytest.skip(str(e))
        raise


BACKENDS = ["bwrap", pytest.param("docker", marks=pytest.mark.docker)]


def require_docker_engine() -> None:
    """Skip unless a Docker Engine answers; in CI (VTB_REQUIRE_DOCKER=1) fail instead."""
    docker = subprocess.run(["docker", "info"], capture_output=True, text=True)
    if docker.returncode != 0:
        if os.environ.get("VTB_REQUIRE_DOCKER") == "1":
            pytest.fail(f"no Docker Engine: {docker.stderr[-500:]}")
        pytest.skip("no Docker Engine (scripts/start_docker.sh)")


def needs_bwrap():
    return pytest.mark.skipif(
        shutil.which("bwrap") is None, reason="bubblewrap not installed (scripts/install.sh)"
    )


SMALL_OVERRIDES = [
    "task.n_pool=600",
    "task.n_val=40",
    "task.n_test=40",  # one val-sized shard per test play; the e2e greedy run plays 60 (decoys)
    "task.max_steps=2",
    "task.initial_data_size=120",
    "model.n_layer=2",
    "model.n_embd=64",
    "model.pretrain_steps=40",
    "model.pretrain_texts=2000",
    "budget.limit=5e12",
    "reference=false",
    "null_model_check=false",
    "provenance_check=false",  # one play fewer; the e2e greedy run and the hostile benches turn it on
    "base_model_check=false",  # one play per system fewer; the e2e greedy run turns it on and checks it
    "analysis.grid=false",  # up to 1 training and 6 plays more per bench; the e2e greedy run and the
    "analysis.path=false",  # hostile bench turn them on and check them
]

# The math bench shrunk below SMALL_OVERRIDES: every step still runs in its
# sandbox (provision, train, validate, grade), just on a few dozen rows and a 1-layer model.
# A whole bench at its smallest: a 1-layer, 32-wide model, one epoch, no reference, no analysis or
# base-model play, no FLOPs-floor calibration. The real-source benches add their task and sizes.
SHRUNK_BENCH = [
    "model.n_layer=1",
    "model.n_embd=32",
    "model.pretrain_steps=5",
    "trainer.epochs=1",
    "budget.limit=5e12",
    "reference=false",
    "base_model_check=false",
    "provenance_check=false",
    "analysis.grid=false",
    "analysis.path=false",
    "+budget.flops_per_cpu_second=1e9",  # no calibration for this shape: the floor is tested on math
]

TINY_OVERRIDES = [
    "task.n_pool=200",
    "task.n_val=10",
    "task.n_test=10",
    "task.max_steps=1",
    "task.initial_data_size=40",
    "model.n_layer=1",
    "model.n_embd=32",
    "model.pretrain_steps=5",
    "model.pretrain_texts=200",
    "trainer.epochs=1",
    "agent.max_iterations=0",
    "budget.limit=5e12",
    "reference=false",
    "null_model_check=false",
    "provenance_check=false",
    "base_model_check=false",
    "+budget.flops_per_cpu_second=1e9",  # no calibration for this shape: the test is the sweep or deployment
]


@pytest.fixture(scope="session")
def shared_bench_cache(tmp_path_factory):
    """One cache_dir for the small benches that test an agent, not the cache: the data, base
    model, calibration and the initial system's steps are then made once per session."""
    return tmp_path_factory.mktemp("shared-bench-cache")


def small_overrides(tmp_path, agent: str = "greedy", seed: int = 0, *extra: str) -> list[str]:
    """The embedded math bench shrunk to run in about a minute, as Hydra overrides."""
    iters = ["agent.max_iterations=3"] if agent == "greedy" else []
    paths = [f"runs_dir={tmp_path / 'runs'}", f"cache_dir={tmp_path / 'cache'}"]
    return [*SMALL_OVERRIDES, f"agent={agent}", f"seed={seed}", *iters, *paths, *extra]


GREEDY_EXTRA = (
    "task.n_test=60",  # two val-sized shards, the last one filled with decoys
    "reference=true",
    "null_model_check=true",
    "base_model_check=true",
    "provenance_check=true",
    "analysis.grid=true",
    "analysis.path=true",
)


@pytest.fixture(scope="session")
def greedy_run(tmp_path_factory, prefect_server):
    """One small greedy bench on bwrap, shared by the tests that read a whole run (e2e, backends)."""
    from flows.bench import run_bench

    tmp = tmp_path_factory.mktemp("greedy")
    cfg = small_config(tmp, "greedy", 0, *GREEDY_EXTRA)
    start = time.monotonic()
    result = run_bench(cfg).to_json()
    return cfg, result, time.monotonic() - start


def small_config(tmp_path, agent: str = "greedy", seed: int = 0, *extra: str) -> BenchConfig:

    from vtb.compose import compose_config

    return compose_config(small_overrides(tmp_path, agent, seed, *extra))


@pytest.fixture
def host_server():
    """A TCP server on the host's 127.0.0.1; `hits` records every connection it accepted."""
    srv = socket.create_server(("127.0.0.1", 0))
    srv.settimeout(0.1)
    hits: list[str] = []
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, addr = srv.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            hits.append(str(addr))
            conn.sendall(b"HOST-SERVER-DATA")
            conn.close()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    yield srv.getsockname()[1], hits
    stop.set()
    t.join()
    srv.close()


@pytest.fixture
def play_scripted(tmp_path):
    """Plays a domain's episodes with a test harness in sandboxes of one backend (bwrap by default).

    `play(domain, data_dir, task, code, files, split="test", backend="bwrap")` writes `code` as harness.py under
    tmp_path/harness beside `files` (name -> JSON value), gives it an empty model folder and
    returns (episodes, runner.play's outcome).
    """
    from vtb import runner
    from vtb.sandbox.base import Limits

    def play(domain, data_dir, task, code: str, files: dict, split: str = "test", backend: str = "bwrap"):
        harness = tmp_path / "harness"
        harness.mkdir()
        (harness / "harness.py").write_text(code)
        for name, value in files.items():
            (harness / name).write_text(json.dumps(value))
        model = tmp_path / "model"
        model.mkdir()
        sandbox = sandbox_backend(backend)
        episodes = domain.episodes(data_dir, split, task, sandbox=sandbox)
        out = runner.play(
            sandbox,
            harness,
            runner.NoModel(),
            episodes,
            limits=Limits(wall_seconds=300, cpu_seconds=300),
            round_timeout_s=60,
            per_episode_timeout_s=1,
        )
        return episodes, out

    return play


class _Hello(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802
        self.server.hits.append(self.path)
        body = f"hello {self.path}".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def web():
    """Two real HTTP servers on the host's 127.0.0.1: one the allowlist names, one it does not."""
    servers = []
    for _ in range(2):
        srv = ThreadingHTTPServer(("127.0.0.1", 0), _Hello)
        srv.hits = []
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        servers.append(srv)
    yield servers
    for srv in servers:
        srv.shutdown()
        srv.server_close()


def _toy_model(tmp_path_factory, name: str, steps: int, n_texts: int):
    from vtb.models.toy import build_toy_model

    out = tmp_path_factory.mktemp(name) / "model"
    shape = dict(n_layer=2, n_embd=64, n_head=2, n_positions=128)
    return build_toy_model(
        out, steps=steps, n_texts=n_texts, batch_size=16, lr=5e-3, progress=lambda s: None, **shape
    )


@pytest.fixture(scope="session")
def toy_model_dir(tmp_path_factory):
    """A small GPT-2 that writes GSM8K-style calculator answers (built once per test session; read-only)."""
    return _toy_model(tmp_path_factory, "toy", steps=40, n_texts=300)


@pytest.fixture(scope="session")
def copier_model_dir(tmp_path_factory):
    """The toy model trained longer: it copies a worked `<<a+0=a>>a` line's value into its
    `#### a`, so a harness's hand-over has a model that decodes it (tests/test_provenance.py)."""
    return _toy_model(tmp_path_factory, "copier", steps=300, n_texts=2000)


def play_request(
    harness,
    model,
    split: str,
    data_dir,
    task,
    sandbox,
    max_flops=None,
    cpu_seconds=None,
    gpu_seconds=None,
    **fields,
):
    """A play step's request outside a bench (its key's hashes left blank: nothing is cached).

    `fields` are PlayRequest's others: mode ("audit"), flops_per_episode, shard, engine."""
    from vtb.ledger import StepLimits
    from vtb.step_requests import PlayRequest

    return PlayRequest(
        harness_dir=harness,
        harness_hash="",
        model_dir=model,
        weights_key=None,
        split=split,
        split_hash="",
        data_dir=data_dir,
        task=task,
        sandbox=sandbox,
        limits=StepLimits(max_flops, cpu_seconds, gpu_seconds),
        **fields,
    )


def play_split(*args, **kwargs):
    """`pipeline.play` of `play_request(*args, **kwargs)`."""
    from vtb import pipeline

    return pipeline.play(play_request(*args, **kwargs))


def bare_research_env(tmp_path, backend: str, trainer: dict | None = None, limits: tuple = (60, 60)):
    """(SandboxResearchEnv, workspace) on a bare workspace: trainer/config.json (`trainer`, default
    {}), a one-line harness and its config, empty /data and /base; limits = (wall s, CPU s)."""
    from vtb.agents import Feedback
    from vtb.agents.env import SandboxResearchEnv
    from vtb.runner import research_mounts
    from vtb.sandbox.base import Limits

    ws, data, base = tmp_path / "ws", tmp_path / "data", tmp_path / "base"
    for d in (ws / "data", ws / "trainer", ws / "harness", data / "research", base):
        d.mkdir(parents=True)
    (ws / "trainer" / "config.json").write_text(json.dumps(trainer or {}, indent=2))
    (ws / "harness" / "harness.py").write_text("# harness\n")
    (ws / "harness" / "config.json").write_text("{}\n")
    wall, cpu = limits
    env = SandboxResearchEnv(
        ws,
        tmp_path / "store",
        Feedback("math", 1, 2, 0),
        sandbox_backend(backend),
        research_mounts(ws, data, base),
        Limits(wall_seconds=wall, cpu_seconds=cpu),
    )
    return env, ws


def cli_turn_env(tmp_path, backend: str, script_text: str, **agent: object):
    """(AgentConfig, SandboxResearchEnv) for one CLI-agent turn of a test script on a bare workspace.

    The script is written to tmp_path/cli/hostile-cli and mounted read-only; `agent` adds
    AgentConfig fields (usage, prices, ...).
    """
    from vtb.config import AgentConfig

    script = tmp_path / "cli" / "hostile-cli"
    script.parent.mkdir()
    script.write_text(script_text)
    script.chmod(0o755)
    cfg = AgentConfig(
        name="hostile",
        factory="cli",
        command=f"{script} {{prompt_file}}",
        mounts=[str(script.parent)],
        **agent,
    )
    return cfg, bare_research_env(tmp_path, backend)[0]


def run_deploy_script(env: dict, *args: str) -> subprocess.CompletedProcess:
    """scripts/deploy.sh with these arguments against env's PREFECT_API_URL; it must succeed."""
    repo = Path(__file__).resolve().parents[1]
    deploy = subprocess.run(
        [str(repo / "scripts" / "deploy.sh"), *args],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert deploy.returncode == 0, deploy.stdout[-3000:] + deploy.stderr[-3000:]
    return deploy


# The files that take minutes (CI's --durations), started first under pytest-xdist: a worker
# given one of them last would run alone while the other sits idle.
LONG_FILES = (
    "test_adversarial.py",
    "test_dispatch.py",
    "test_bench_e2e.py",
    "test_terminal_swe_bench.py",
    "test_tau_bench.py",
    "test_provenance_env.py",
    "test_smollm2.py",
    "test_tau_real.py",
    "test_math_real_bench.py",
    "test_provenance.py",
    "test_charge_integrity.py",
    "test_agent_bench.py",
)


def pytest_collection_modifyitems(config, items) -> None:
    if not hasattr(config, "workerinput"):  # not a pytest-xdist worker: the files' own order
        return
    rank = {name: i for i, name in enumerate(LONG_FILES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: a file keeps its order


_CONFIG: list = []  # this session's config: its terminal reporter writes between the progress dots


def pytest_configure(config) -> None:
    _CONFIG.append(config)


def pytest_runtest_logreport(report) -> None:
    """A failure named the moment it happens (CI's -q prints only dots until the very end, and a
    hang after a failure would otherwise hide which test failed). Under pytest-xdist the
    controller prints it; a worker's output is not shown."""
    if not report.failed or os.environ.get("PYTEST_XDIST_WORKER") is not None or not _CONFIG:
        return
    terminal = _CONFIG[-1].pluginmanager.get_plugin("terminalreporter")
    if terminal is not None:
        terminal.write_line(f"[failed] {report.nodeid} ({report.when})")
