"""tau episodes over the real protocol in a real bwrap sandbox: the grader proven both ways.

A test-only oracle harness replays the gold actions (handed to it in a file this test writes;
the pipeline never gives a harness gold actions) and must score 100% on the test split; a
harness that does nothing must score 0; a harness that misbehaves on some episodes costs only
those episodes.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from vtb import runner
from vtb.domains.tau import expert
from vtb.domains.tau.domain import TauConfig, TauDomain
from vtb.sandbox import make_sandbox
from vtb.sandbox.base import Limits

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap (scripts/install.sh)")

LIMITS = Limits(wall_seconds=300, cpu_seconds=300)
TASK = TauConfig(name="tau", n_users=20, n_pool=24, n_val=8, n_test=16, trials=2, pass_k=2)

ORACLE = """
import json
from pathlib import Path
from expert import plan  # a copy next to the harness: the sandbox does not mount vtb.domains.tau.expert
from vtb.protocol import serve

GOLD = {t["id"]: t for t in json.loads((Path(__file__).parent / "gold.json").read_text())}

def act(m):
    task = GOLD[m["episode"].rsplit(".", 1)[0]]
    messages = m["observation"]["messages"]
    turn = sum(1 for x in messages if x["role"] == "assistant")
    actions = plan(task, messages[0]["content"])
    return actions[turn] if turn < len(actions) else {"type": "message", "content": "Goodbye."}

serve(lambda batch: [act(m) for m in batch])
"""

NOTHING = """
from vtb.protocol import serve
serve(lambda batch: [{"type": "message", "content": ""} for m in batch])
"""

# Misbehaves on the episodes of two tasks, plays the oracle on the others.
HOSTILE = ORACLE.replace(
    "def act(m):",
    """BAD = sorted(GOLD)[:3]

def act(m):
    task_id = m["episode"].rsplit(".", 1)[0]
    if task_id == BAD[0]:
        return {"type": "tool_call", "name": "drop_all_tables", "arguments": {"x": 1}}  # unknown tool, forever
    if task_id == BAD[1]:
        return {"type": "tool_call", "name": "get_order_details", "arguments": "#W1"}  # malformed, forever
    if task_id == BAD[2]:
        print("{not json", flush=True)  # garbage on stdout, then no valid action at all
        return {"type": "launch_missiles"}
    return _act(m)

def _act(m):""",
)


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("tau-data") / "d"
    TauDomain().provision(TASK, out)
    return out


def _play(tmp_path: Path, data_dir: Path, code: str, round_timeout_s: float = 30):
    domain = TauDomain()
    harness = tmp_path / "harness"
    harness.mkdir()
    (harness / "harness.py").write_text(code)
    (harness / "gold.json").write_text(json.dumps(domain.split(data_dir, "test")))
    (harness / "expert.py").write_text(Path(expert.__file__).read_text())
    model = tmp_path / "model"
    model.mkdir()
    episodes = domain.episodes(data_dir, "test", TASK)
    out = runner.play(
        make_sandbox("bwrap"),
        harness,
        runner.NoModel(),
        episodes,
        limits=LIMITS,
        round_timeout_s=round_timeout_s,
        per_episode_timeout_s=0.5,
    )
    return episodes, out, domain.metrics(episodes, TASK)


def test_oracle_harness_scores_everything(tmp_path, data_dir):
    episodes, out, metrics = _play(tmp_path, data_dir, ORACLE)
    assert len(episodes) == TASK.n_test * TASK.trials
    assert [ep.reward() for ep in episodes] == [1.0] * len(episodes)
    assert metrics["pass^1"] == 1.0 and metrics["pass^2"] == 1.0
    assert set(metrics["by_template"].values()) == {1.0}
    assert out.crashes == 0 and out.rounds >= 4  # multi-turn: several rounds


def test_a_harness_that_does_nothing_scores_zero(tmp_path, data_dir):
    episodes, out, metrics = _play(tmp_path, data_dir, NOTHING)
    assert sum(ep.reward() for ep in episodes) == 0.0
    assert metrics["pass^1"] == 0.0
    assert all(ep.finished for ep in episodes)  # the user ended each conversation; nothing crashed


def test_a_misbehaving_harness_costs_only_those_episodes(tmp_path, data_dir):
    # Each round a hostile episode answers nothing valid costs a whole round timeout (twice: the
    # batch, then the episode alone): a shorter one keeps the test short, ample for the oracle.
    episodes, out, metrics = _play(tmp_path, data_dir, HOSTILE, round_timeout_s=10)
    bad = sorted({ep.task["id"] for ep in episodes})[:3]
    for ep in episodes:
        if ep.task["id"] in bad:
            assert ep.reward() == 0.0
        else:
            assert ep.reward() == 1.0, ep.record()
    looping = [ep for ep in episodes if ep.task["id"] in bad[:2]]
    assert all(ep.timeout and ep.steps == TASK.max_steps_per_episode for ep in looping)
    assert any("Error: unknown tool drop_all_tables" in (m.get("content") or "") for m in looping[0].messages)
    assert metrics["timeouts"] == 2 * TASK.trials
    assert any("not json" in g for g in out.garbage)
