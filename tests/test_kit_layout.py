"""Issue 14, hole 1: no sandbox can import a generator or grader, or rebuild the hidden split.

A research command and a harness (the two kinds of untrusted code) try to import the
orchestrator-only modules of every domain; each import must fail while the kits, the protocol
and the trainer path import fine, and no file a sandbox sees holds the test salt (both sandbox
backends). The test split is drawn with the salt: the public seed alone (the old scheme) does
not give it, another salt gives another test split and the same pool and val, and the run
record holds the salt's hash only.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import sys
from pathlib import Path

import pytest

import vtb
from tests.conftest import BACKENDS, sandbox_backend
from vtb import runner
from vtb.compose import task_config
from vtb.config import TaskConfig
from vtb.domains.math.domain import MathDomain
from vtb.sandbox import Limits, Sandbox
from vtb.sandbox.runtime import runtime_mounts

LIMITS = Limits(wall_seconds=120, cpu_seconds=120)
VTB_DIR = Path(vtb.__file__).resolve().parent

# What a hostile command would import to rebuild the test split or read its answers.
FORBIDDEN = [
    "vtb.config",
    "vtb.pipeline",
    "vtb.runner",
    "vtb.domains.registry",
    "vtb.domains.common",
    "vtb.domains.math.generator",
    "vtb.domains.math.grading",
    "vtb.domains.math.loaders",
    "vtb.domains.math.domain",
    "vtb.domains.tau.env",
    "vtb.domains.tau.user",
    "vtb.domains.tau.db",
    "vtb.domains.tau.generator",
    "vtb.domains.tau.grading",
    "vtb.domains.tau.tools",
    "vtb.domains.tau.expert",
    "vtb.domains.tau.demos",
    "vtb.domains.tau.loaders",
    "vtb.domains.terminal.generator",
    "vtb.domains.terminal.grading",
    "vtb.domains.terminal.loaders",
    "vtb.domains.swe.generator",
    "vtb.domains.swe.grading",
    "vtb.domains.swe.patching",
    "vtb.domains.swe.loaders",
]
ALLOWED = [
    "vtb.protocol",
    "vtb.engine.sft",
    "vtb.engine.ds_launch",
    "vtb.models.build",
    "vtb.engine.select",
    "vtb.sandbox.egress",
    "vtb.domains",
    "vtb.domains.kit.rowtools",
    *(f"vtb.domains.{d}.kit.datatools" for d in ("math", "tau", "terminal", "swe")),
    *(f"vtb.domains.{d}.kit.prompting" for d in ("tau", "terminal", "swe")),
]

# Each probe puts the package's parent first on sys.path, as an attacker could: then the result
# does not depend on how the venv maps `vtb` (an editable install of another checkout).
PROBE = f"""
import importlib, json, sys
sys.path.insert(0, {str(VTB_DIR.parent)!r})
out = {{}}
for name in sys.argv[1:]:
    try:
        importlib.import_module(name)
        out[name] = "ok"
    except Exception as e:
        out[name] = type(e).__name__
print(json.dumps(out))
"""

HARNESS = f"""
import json, subprocess, sys
sys.path.insert(0, {str(VTB_DIR.parent)!r})
from vtb.protocol import serve
PROBE = {PROBE!r}
NAMES = {json.dumps(FORBIDDEN + ALLOWED)}

def act(batch):
    done = subprocess.run([sys.executable, "-c", PROBE, *NAMES], capture_output=True, text=True)
    return [{{"type": "answer", "content": done.stdout}} for _ in batch]

serve(act)
"""


@pytest.fixture(params=BACKENDS)
def backend(request) -> Sandbox:
    return sandbox_backend(request.param)


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("kit") / "data"
    MathDomain().provision(task_config("math", n_pool=50, n_val=10, n_test=10), out)
    return out


def _check(report: dict) -> None:
    assert {n: report[n] for n in FORBIDDEN} == dict.fromkeys(FORBIDDEN, "ModuleNotFoundError")
    assert {n: report[n] for n in ALLOWED} == dict.fromkeys(ALLOWED, "ok")


def test_layout_is_one_list_of_existing_paths():
    from vtb.sandbox.runtime import SANDBOX_CODE

    mounts = runtime_mounts()
    mounted = {m.target for m in mounts}
    assert {str(VTB_DIR / rel) for rel in SANDBOX_CODE} <= mounted
    # The package dir itself is only a read-only skeleton: empty folders and files under the binds.
    (skeleton,) = [m for m in mounts if m.target == str(VTB_DIR)]
    assert not skeleton.writable and skeleton.source.resolve() != VTB_DIR.resolve()
    files = [p for p in skeleton.source.rglob("*") if p.is_file()]
    assert files and all(p.stat().st_size == 0 for p in files)
    assert not any("generator" in rel or "grad" in rel or "loaders" in rel for rel in SANDBOX_CODE)


def test_research_command_cannot_import_generators_or_graders(backend, data_dir, tmp_path):
    ws, base = tmp_path / "ws", tmp_path / "base"
    ws.mkdir(), base.mkdir()
    (ws / "probe.py").write_text(PROBE)
    mounts = runner.research_mounts(ws, data_dir, base)
    result = backend.run(
        [sys.executable, "/ws/probe.py", *FORBIDDEN, *ALLOWED], mounts=mounts, limits=LIMITS, cwd="/ws"
    )
    assert result.returncode == 0, result.stderr
    _check(json.loads(result.stdout))
    # The orchestrator-side files are not there at all (not just unimportable).
    listing = backend.run(
        ["/bin/sh", "-c", f"ls -A {VTB_DIR} {VTB_DIR}/domains/math"], mounts=mounts, limits=LIMITS
    ).stdout.split()
    assert "config.py" not in listing and "generator.py" not in listing and "grading.py" not in listing
    assert "kit" in listing and "engine" in listing


def test_harness_cannot_import_generators_or_graders(backend, tmp_path):
    harness, model = tmp_path / "harness", tmp_path / "model"
    harness.mkdir(), model.mkdir()
    (harness / "harness.py").write_text(HARNESS)
    episodes = [{"type": "start", "episode": "e-0", "domain": "math", "observation": {"question": "1+1?"}}]
    out = runner.play(
        backend,
        harness,
        runner.NoModel(),
        episodes,
        limits=LIMITS,
        round_timeout_s=60,
        per_episode_timeout_s=1,
    )
    action = out.actions.get("e-0")
    assert action is not None and action["type"] == "answer", out
    _check(json.loads(action["content"]))


def test_data_tools_run_in_the_sandbox(backend, data_dir, tmp_path):
    ws, base = tmp_path / "ws", tmp_path / "base"
    ws.mkdir(), base.mkdir()
    cmd = (
        "python -m vtb.domains.math.kit.datatools from-pool /data/pool.jsonl data/train.jsonl --n 5 && "
        "python -m vtb.domains.math.kit.datatools check data/train.jsonl"
    )
    result = backend.run(
        ["/bin/sh", "-c", cmd],
        mounts=runner.research_mounts(ws, data_dir, base),
        limits=LIMITS,
        cwd="/ws",
        env={"PYTHONPATH": str(VTB_DIR.parent)},
    )
    assert result.returncode == 0, result.stderr
    assert "rows: 5" in result.stdout and (ws / "data" / "train.jsonl").exists()


SALT = "leaderboard-salt-" + hashlib.sha256(b"kit-layout").hexdigest()[:12]


def _default_salt() -> str:
    from vtb import salt

    return salt.DEFAULT_TEST_SALT


def test_no_sandbox_file_holds_the_salt(backend, data_dir, tmp_path):
    ws, base = tmp_path / "ws", tmp_path / "base"
    ws.mkdir(), base.mkdir()
    mounts = runner.research_mounts(ws, data_dir, base)
    code = [str(m.target) for m in mounts if m.target.startswith(str(VTB_DIR))]
    for secret in (_default_salt(), SALT):
        found = backend.run(
            ["grep", "-rlF", secret, *code, "/data", "/ws", "/base"], mounts=mounts, limits=LIMITS
        )
        assert found.returncode == 1 and found.stdout == "", found.stdout  # 1: searched, no match
    sanity = backend.run(["grep", "-rlF", "SANDBOX_CODE", *code], mounts=mounts, limits=LIMITS)
    assert sanity.returncode == 0 and "runtime.py" in sanity.stdout  # the grep did read the trees


def _splits(name: str, task: TaskConfig, out: Path) -> dict[str, list[dict]]:
    from vtb.domains.registry import get_domain

    domain = get_domain(name)
    domain.provision(task, out)
    return {split: domain.split(out, split) for split in ("pool", "val", "test")}


SMALL = {
    "math": task_config("math", n_pool=200, n_val=20, n_test=30),
    "tau": task_config("tau", n_users=20, n_pool=24, n_val=8, n_test=8),
    "terminal": task_config("terminal", n_pool=60, n_val=11, n_test=11),
    "swe": task_config("swe", n_pool=40, n_val=6, n_test=6),
}
TEXT = {"math": "question", "tau": "instruction", "terminal": "instruction", "swe": "problem_statement"}


def _public_seed_test(name: str, task: TaskConfig) -> list[str]:
    """The test split as the public seed alone produced it before the salt (the old scheme)."""
    if name == "math":
        from vtb.domains.math import generator

        return [p["question"] for p in generator.generate_problems(task.data_seed, task.n_test)]
    if name == "tau":
        from vtb.domains.tau import db, generator

        made = generator.make_tasks(
            db.make_db(task.data_seed, task.n_users), task.data_seed + 1, task.n_test, "test"
        )
        return [t["instruction"] for t in made]
    if name == "terminal":
        from vtb.domains.terminal import generator

        return [
            t["instruction"] for t in generator.make_tasks(task.data_seed + 1, task.n_test, "test", set())
        ]
    from vtb.domains.swe import generator

    return [i["problem_statement"] for i in generator.make_instances(task.data_seed + 1, task.n_test, "test")]


@pytest.mark.parametrize("name", list(SMALL))
def test_salted_test_split_is_not_the_public_seeds(name, tmp_path, monkeypatch):
    monkeypatch.delenv("VTB_TEST_SALT", raising=False)
    task = SMALL[name]
    default = _splits(name, task, tmp_path / "default")
    test = [t[TEXT[name]] for t in default["test"]]
    assert len(test) == task.n_test
    assert test != _public_seed_test(name, task)  # the generator + data_seed alone do not give it
    other = _splits(name, dataclasses.replace(task, test_salt=SALT), tmp_path / "other")
    assert other["pool"] == default["pool"] and other["val"] == default["val"]  # public seeds only
    assert [t[TEXT[name]] for t in other["test"]] != test
    texts = {split: {t[TEXT[name]] for t in rows} for split, rows in other.items()}
    assert not texts["test"] & (texts["pool"] | texts["val"])  # still disjoint


def test_salt_from_a_file_or_the_environment(tmp_path, monkeypatch):
    from vtb import salt

    monkeypatch.delenv("VTB_TEST_SALT", raising=False)
    (tmp_path / "salt").write_text(SALT + "\n")
    inline = TaskConfig(test_salt=SALT)
    from_file = TaskConfig(test_salt_file=str(tmp_path / "salt"))
    monkeypatch.setenv("VTB_TEST_SALT", SALT)
    from_env = TaskConfig()
    assert salt.hidden_seed(inline) == salt.hidden_seed(from_file) == salt.hidden_seed(from_env)
    monkeypatch.delenv("VTB_TEST_SALT")
    assert salt.hidden_seed(TaskConfig()) != salt.hidden_seed(inline)
    assert salt.salt_sha256(from_file) == hashlib.sha256(SALT.encode()).hexdigest()


def test_the_run_record_holds_the_salt_hash_only(tmp_path, monkeypatch):

    from vtb import pipeline
    from vtb.compose import compose_config
    from vtb.step_requests import DataRequest

    monkeypatch.delenv("VTB_TEST_SALT", raising=False)
    cfg = compose_config([f"task.test_salt={SALT}"])
    dumped = json.dumps(dataclasses.asdict(cfg))  # what config.json and every cache key are made of
    digest = hashlib.sha256(SALT.encode()).hexdigest()
    assert SALT not in dumped and f"sha256:{digest}" in dumped
    task = dataclasses.replace(cfg.task, n_pool=50, n_val=10, n_test=10)
    data = pipeline.provision_data(DataRequest(task, tmp_path))
    assert data.test_salt_sha256 == digest and SALT not in json.dumps(dataclasses.asdict(data))
    default = pipeline.provision_data(DataRequest(dataclasses.replace(task, test_salt=None), tmp_path))
    assert default.data_dir != data.data_dir and default.hashes["test"] != data.hashes["test"]
    assert default.hashes["pool"] == data.hashes["pool"]
    for path in Path(data.data_dir).rglob("*"):
        assert not path.is_file() or SALT.encode() not in path.read_bytes()


def test_the_installation_salt_is_private_made_once_and_per_installation(tmp_path, monkeypatch):
    from vtb import salt

    monkeypatch.setenv("VTB_STATE_DIR", str(tmp_path / "state"))
    path = salt.installation_salt()
    text = path.read_text().strip()
    assert len(text) == 64 and int(text, 16) and path.stat().st_mode & 0o777 == 0o600
    assert salt.installation_salt() == path and path.read_text().strip() == text  # made once
    monkeypatch.setenv("VTB_STATE_DIR", str(tmp_path / "other"))
    assert salt.installation_salt().read_text().strip() != text  # each installation its own
    task = TaskConfig(test_salt_file=str(path))
    assert salt.split_kind(salt.salt_sha256(task)) == "hidden"
    assert salt.split_kind(salt.salt_sha256(TaskConfig())) == "public"  # the published default
    with pytest.raises(ValueError, match="does not exist on this machine: copy the salt file there"):
        salt.resolve(TaskConfig(test_salt_file=str(tmp_path / "missing")))


def test_no_sandbox_sees_the_installation_salt(backend, data_dir, tmp_path):
    """The salt file lives in the user's state folder: no sandbox mounts it, nor holds its value."""
    from vtb import salt

    path = salt.installation_salt()  # the real default place (~/.local/state/vtb/test_salt)
    secret = path.read_text().strip()
    ws, base = tmp_path / "ws", tmp_path / "base"
    ws.mkdir(), base.mkdir()
    mounts = runner.research_mounts(ws, data_dir, base)
    read = backend.run(["cat", str(path)], mounts=mounts, limits=LIMITS)
    assert read.returncode != 0 and secret not in read.stdout
    found = backend.run(
        ["grep", "-rlF", secret, "/data", "/ws", "/base", "/etc"], mounts=mounts, limits=LIMITS
    )
    assert found.stdout == "" and secret not in found.stderr


def test_a_sweep_draws_a_hidden_split_unless_told_otherwise(tmp_path, monkeypatch):
    from flows.sweep import SweepConfig, bench_configs, bench_overrides
    from vtb import salt

    monkeypatch.setenv("VTB_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.delenv("VTB_TEST_SALT", raising=False)
    where = {"runs_dir": str(tmp_path / "runs"), "cache_dir": str(tmp_path / "cache")}
    hidden = SweepConfig(tasks=["math", "tau"], agents=["noop"], seeds=[0, 1], **where)
    shas = {salt.salt_sha256(c.task) for c in bench_configs(hidden)}
    assert len(shas) == 1 and salt.split_kind(next(iter(shas))) == "hidden"  # one salt for every bench
    again = SweepConfig(
        tasks=["swe"], agents=["greedy"], seeds=[3], **where
    )  # a later sweep, same installation
    assert {salt.salt_sha256(c.task) for c in bench_configs(again)} == shas  # comparable with the first
    assert all(f"task.test_salt_file={salt.installation_salt()}" in o for o in bench_overrides(hidden))
    public = SweepConfig(test_split="public", **where)
    assert {salt.split_kind(salt.salt_sha256(c.task)) for c in bench_configs(public)} == {"public"}
    own = SweepConfig(overrides=[f"task.test_salt={SALT}"], **where)  # a leaderboard's own salt wins
    assert {salt.salt_sha256(c.task) for c in bench_configs(own)} == {
        hashlib.sha256(SALT.encode()).hexdigest()
    }
    with pytest.raises(ValueError, match="test_split='secret'"):
        bench_overrides(SweepConfig(test_split="secret", **where))


def test_the_summary_says_which_test_split_a_score_is_on():
    from vtb import salt
    from vtb.record import split_line
    from vtb.result_parts import TestSplit

    public = split_line(TestSplit("public", salt.PUBLIC_SHA256))
    assert public.startswith("public (the published default salt: anyone can rebuild it")
    assert split_line(TestSplit("hidden", "ab" * 32)) == "hidden (salt sha256 abababababab)"
