"""Issue 14, hole 1: no sandbox can import a generator or grader, or rebuild the hidden split.

A research command and a harness (the two kinds of untrusted code) try to import the
orchestrator-only modules of every domain; each import must fail while the kits, the protocol
and the trainer path import fine. Both sandbox backends.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

import vtb
from tests.conftest import BACKENDS, sandbox_backend
from vtb import runner
from vtb.config import TaskConfig
from vtb.domains.math.domain import MathDomain
from vtb.sandbox import Limits, Sandbox
from vtb.sandbox.runtime import SANDBOX_CODE, runtime_mounts

LIMITS = Limits(wall_seconds=120, cpu_seconds=120)
VTB_DIR = Path(vtb.__file__).resolve().parent

# What a hostile command would import to rebuild the test split or read its answers.
FORBIDDEN = [
    "vtb.config", "vtb.pipeline", "vtb.runner", "vtb.domains.registry", "vtb.domains.common",
    "vtb.domains.math.generator", "vtb.domains.math.grader", "vtb.domains.math.loaders", "vtb.domains.math.domain",
    "vtb.domains.tau.env", "vtb.domains.tau.user", "vtb.domains.tau.db", "vtb.domains.tau.tasks",
    "vtb.domains.tau.tools", "vtb.domains.tau.expert", "vtb.domains.tau.demos", "vtb.domains.tau.loaders",
    "vtb.domains.terminal.generator", "vtb.domains.terminal.grading", "vtb.domains.terminal.taskdir",
    "vtb.domains.swe.generator", "vtb.domains.swe.grading", "vtb.domains.swe.patching", "vtb.domains.swe.loaders",
]  # fmt: skip
ALLOWED = [
    "vtb.protocol", "vtb.engine.sft", "vtb.engine.ds_launch", "vtb.models.build", "vtb.engine.select",
    "vtb.sandbox.egress", "vtb.domains", "vtb.domains.kit.rowtools",
    *(f"vtb.domains.{d}.kit.datatools" for d in ("math", "tau", "terminal", "swe")),
    *(f"vtb.domains.{d}.kit.prompting" for d in ("tau", "terminal", "swe")),
]  # fmt: skip

PROBE = """
import importlib, json, sys
out = {}
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
    MathDomain().provision(TaskConfig(n_pool=50, n_val=10, n_test=10), out)
    return out


def _check(report: dict) -> None:
    assert {n: report[n] for n in FORBIDDEN} == dict.fromkeys(FORBIDDEN, "ModuleNotFoundError")
    assert {n: report[n] for n in ALLOWED} == dict.fromkeys(ALLOWED, "ok")


def test_layout_is_one_list_of_existing_paths():
    mounted = {m.target for m in runtime_mounts()}
    assert {str(VTB_DIR / rel) for rel in SANDBOX_CODE} <= mounted and str(VTB_DIR) not in mounted
    assert not any("generator" in rel or "grad" in rel or "loaders" in rel for rel in SANDBOX_CODE)


def test_research_command_cannot_import_generators_or_graders(backend, data_dir, tmp_path):
    ws, base = tmp_path / "ws", tmp_path / "base"
    ws.mkdir(), base.mkdir()
    (ws / "probe.py").write_text(PROBE)
    mounts = runner.research_mounts(ws, data_dir, base)
    result = backend.run([sys.executable, "/ws/probe.py", *FORBIDDEN, *ALLOWED], mounts=mounts, limits=LIMITS,
                         cwd="/ws")  # fmt: skip
    assert result.returncode == 0, result.stderr
    _check(json.loads(result.stdout))
    # The orchestrator-side files are not there at all (not just unimportable).
    listing = backend.run(["/bin/sh", "-c", f"ls -A {VTB_DIR} {VTB_DIR}/domains/math"], mounts=mounts,
                          limits=LIMITS).stdout.split()  # fmt: skip
    assert "config.py" not in listing and "generator.py" not in listing and "grader.py" not in listing
    assert "kit" in listing and "engine" in listing


def test_harness_cannot_import_generators_or_graders(backend, tmp_path):
    harness, model = tmp_path / "harness", tmp_path / "model"
    harness.mkdir(), model.mkdir()
    (harness / "harness.py").write_text(HARNESS)
    episodes = [{"type": "start", "episode": "e-0", "domain": "math", "observation": {"question": "1+1?"}}]
    out = runner.play(backend, harness, model, episodes, limits=LIMITS, round_timeout_s=60,
                      per_episode_timeout_s=1)  # fmt: skip
    action = out.actions.get("e-0")
    assert action is not None and action["type"] == "answer", out
    _check(json.loads(action["content"]))


def test_data_tools_run_in_the_sandbox(backend, data_dir, tmp_path):
    ws, base = tmp_path / "ws", tmp_path / "base"
    ws.mkdir(), base.mkdir()
    cmd = ("python -m vtb.domains.math.kit.datatools from-pool /data/pool.jsonl data/train.jsonl --n 5 && "
           "python -m vtb.domains.math.kit.datatools check data/train.jsonl")  # fmt: skip
    result = backend.run(["/bin/sh", "-c", cmd], mounts=runner.research_mounts(ws, data_dir, base),
                         limits=LIMITS, cwd="/ws")  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "rows: 5" in result.stdout and (ws / "data" / "train.jsonl").exists()
