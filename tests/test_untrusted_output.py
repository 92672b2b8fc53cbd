"""Flooding and crashing the orchestrator (issue 14, hole 5): bad output costs its step, never the run.

For every step that runs untrusted code — the agent turn (a CLI agent), train (the trainer),
validate and grade (play of the harness on val / test) and the null-model check (play with
null_model=True) — a hostile program prints garbage numbers, an over-long line, non-UTF-8
bytes, binary junk and JSON with NaN / Infinity / 1e400, and forges its usage file with
{"flops": "not-a-number"}. The step returns a result (score 0, a failed train) with the bad
output counted, and memory stays bounded. On the old code (c34db53) the forged usage file made
play (and so grading) raise, and long lines were held whole.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.conftest import BACKENDS, cli_turn_env, play_request, sandbox_backend
from vtb.sandbox.output import MAX_LINE_BYTES

JUNK = r"""
import os, sys
open(os.environ["VTB_USAGE_FILE"], "w").write('{"flops": "not-a-number", "engine": "x"}')
out = sys.stdout.buffer
out.write(b"123abc -1e999 NaN nan inf\n")
out.write(b"x" * (3 * (1 << 20)) + b"\n")  # over the line bound: dropped unread
out.write(b"\xff\xfe\xfa non-utf8 \x80\x81\n")
out.write(bytes(range(256)) * 64 + b"\n")
out.flush()
"""

HOSTILE_HARNESS = (
    JUNK
    + r"""
first = sys.stdin.readline()
ep = json.loads(first)["episode"] if first.strip() else "none"
for value in ("NaN", "Infinity", "-Infinity", "1e400", "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]"):
    out.write(('{"episode": "%s", "action": {"type": "answer", "answer": %s}}\n' % (ep, value)).encode())
out.write(b'{"episode": "%s", "action": {"type": "answer", "content": 1e400}}\n' % ep.encode())
out.flush()
""".replace("import os, sys", "import json, os, sys")
)


@pytest.fixture(scope="module")
def math_data(tmp_path_factory):
    from tests.conftest import small_config
    from vtb import pipeline
    from vtb.step_requests import DataRequest

    tmp = tmp_path_factory.mktemp("math")
    cfg = small_config(tmp, "noop", 0, "task.n_val=6", "task.n_test=6")
    (tmp / "cache").mkdir()
    return cfg, Path(pipeline.provision_data(DataRequest(cfg.task, tmp / "cache")).data_dir)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("split", ["val", "test"], ids=["validate", "grade"])  # the null check: a grade
def test_a_hostile_harness_costs_only_its_episodes(
    tmp_path, math_data, backend, split, toy_model_dir
) -> None:
    from dataclasses import replace

    from steps import play_step
    from vtb.config import SandboxConfig
    from vtb.ledger import Ledger

    sandbox_backend(backend)
    cfg, data_dir = math_data
    harness = tmp_path / "harness"
    harness.mkdir()
    (harness / "harness.py").write_text(HOSTILE_HARNESS)
    task = replace(cfg.task, round_timeout_s=20, per_episode_timeout_s=1)
    sandbox = SandboxConfig(backend=backend, step_wall_s=120, step_cpu_s=120)
    request = play_request(harness, toy_model_dir, split, data_dir, task, sandbox, cpu_seconds=120.0)
    out = play_step.fn(request)  # the null-model check is this very play with a null model's folder
    assert out.score == 0.0 and out.n == 6
    # Its forged usage file is not read: the FLOPs are the model server's (no request: none).
    assert out.charge.flops == 0.0 and not out.charge.errors
    assert any("lines over" in g and "dropped unread" in g for g in out.garbage), out.garbage
    assert all(len(g) <= 200 for g in out.garbage)
    booked = Ledger("flops", 1e13, 3600.0).charge(f"play-{split}", 1, out.charge)
    assert booked.flops == 0.0


HOSTILE_TRAINER = JUNK + "sys.exit(3)\n"


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_hostile_trainer_fails_its_train_step_only(tmp_path, backend) -> None:
    from vtb import runner
    from vtb.sandbox.base import Limits

    sandbox = sandbox_backend(backend)
    cand = tmp_path / "cand"
    for part in ("data", "trainer"):
        (cand / part).mkdir(parents=True)
    (cand / "data" / "train.jsonl").write_text("")
    (cand / "trainer" / "config.json").write_text("{}")
    (cand / "trainer" / "train.py").write_text(HOSTILE_TRAINER)
    base = tmp_path / "base"
    base.mkdir()
    out = runner.train(
        sandbox, cand, base, tmp_path / "out", seed=0, limits=Limits(wall_seconds=60, cpu_seconds=60)
    )
    assert not out.ok and out.returncode == 3
    assert out.charge.flops == 0.0 and out.charge.errors
    assert f"1 lines over {MAX_LINE_BYTES} bytes" in out.log and "non-utf8" in out.log
    assert len(out.log) < 100_000


HOSTILE_CLI = (
    "#!/bin/bash\n"
    "python3 - <<'EOF'\n" + JUNK + "EOF\n"
    """echo '{"type": "result", "usage": {"input_tokens": NaN, "output_tokens": 1e400}, "total_cost_usd": Infinity}'\n"""
    """echo '{"type": "result", "usage": {"input_tokens": "lots", "output_tokens": -3}}'\n"""
)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_hostile_cli_agent_costs_only_its_turn(tmp_path, backend) -> None:
    from vtb.agents import make_agent

    cfg, env = cli_turn_env(tmp_path, backend, HOSTILE_CLI, usage="claude")
    result = make_agent(cfg).turn(env)  # old code: OverflowError (int of 1e400) ends the run
    assert result.notes.startswith("hostile: exited 0")
    assert env.charge.agent_tokens == 0 and env.charge.agent_cost_usd == 0.0 and len(env.charge.errors) >= 4
    (run,) = [e for e in env.log if "agent_command" in e]
    assert run["output_stats"]["long_lines"] == 1
    assert max(len(line["line"]) for line in run["output"]) <= MAX_LINE_BYTES


# -- memory: the orchestrator's peak RSS while sandboxes flood it ---------------------------------

FLOOD = textwrap.dedent(
    """
    import json, resource, sys, tempfile
    from pathlib import Path
    from vtb import runner
    from vtb.sandbox import make_sandbox
    from vtb.sandbox.base import Limits

    def peak_mb():
        for line in open("/proc/self/status"):
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024

    sandbox = make_sandbox(sys.argv[1])
    limits = Limits(wall_seconds=120, cpu_seconds=120)
    tmp = Path(tempfile.mkdtemp())
    for part in ("harness", "model", "cand/data", "cand/trainer", "base"):
        (tmp / part).mkdir(parents=True)
    # warm up the code paths (threads, imports) before the baseline
    (tmp / "harness" / "harness.py").write_text("print('hi')")
    runner.play(sandbox, tmp / "harness", runner.NoModel(), [{"episode": "e0", "question": "q"}],
                limits=limits, round_timeout_s=5, per_episode_timeout_s=1)
    before = peak_mb()
    (tmp / "harness" / "harness.py").write_text(
        "import sys\\nfor _ in range(400):\\n    sys.stdout.buffer.write(b'x' * (1 << 20))\\nprint()\\n")
    out = runner.play(sandbox, tmp / "harness", runner.NoModel(), [{"episode": "e0", "question": "q"}],
                      limits=limits, round_timeout_s=60, per_episode_timeout_s=1)
    after_play = peak_mb()
    (tmp / "cand/data/train.jsonl").write_text("")
    (tmp / "cand/trainer/config.json").write_text("{}")
    (tmp / "cand/trainer/train.py").write_text(
        "import sys\\nline = b'y' * 999 + b'\\\\n'\\nfor _ in range(300 * 1024):\\n    sys.stdout.buffer.write(line)\\n")
    trained = runner.train(sandbox, tmp / "cand", tmp / "base", tmp / "out", seed=0, limits=limits)
    print(json.dumps({"before": before, "after_play": after_play, "after_train": peak_mb(),
                      "play_output": out.output, "log_chars": len(trained.log)}))
    """
)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_flood_of_output_leaves_the_orchestrator_memory_bounded(tmp_path, backend) -> None:
    sandbox_backend(backend)
    script = tmp_path / "flood.py"
    script.write_text(FLOOD)
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": f"{root}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    done = subprocess.run(
        [sys.executable, str(script), backend], capture_output=True, text=True, timeout=300, env=env, cwd=root
    )
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["play_output"]["long_lines"] == 1 and got["play_output"]["bytes"] >= 400 << 20
    assert got["after_play"] - got["before"] < 100, got  # old code: about +800 MB
    assert got["after_train"] - got["before"] < 100, got  # old code: about +600 MB
    assert got["log_chars"] < 2_200_000
